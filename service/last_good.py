"""The last good bundle of each device, kept under the data directory for workers that start later.

Why: a reload that fails leaves the old bundle in the memory of the workers that were running,
but a worker that starts afterwards (gunicorn respawns one after a crash, a timeout or a kill)
reads the bundle folder from disk. If that folder is broken, it has nothing to serve, and the
requests that land on it fail while the others succeed. So every bundle that passes verification
(``predictor.bundle_check``) is copied here, and a worker whose bundle folder does not verify
loads this copy instead: a broken folder never becomes what a new worker serves.

Layout, per device: ``<device>/<id>/``, whole bundle copies named by the start of the sha256 of
their metadata.json (which records the sha256 of every model file, so it names the whole bundle),
and ``<device>/current``, a one-line pointer to the copy to serve: the service's alias for its
last good bundle, as MLflow's ``@champion`` is training's for the model to ship. A new copy is
written under a temporary name, its checksums checked, then the pointer replaced with
``os.replace`` (atomic): a reader finds the old copy or the new one, never half of one. gunicorn's
workers share the folder, so a writer holds an exclusive ``flock`` on ``.lock`` and a reader a
shared one while it loads; older copies are deleted under the exclusive lock, never under a reader.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from predictor.bundle import BundleError, check_files
from predictor.durable_files import sync_directory

log = logging.getLogger("latpred.service")
LOCK_FILE = ".lock"
POINTER = "current"
STAGING_PREFIX = ".tmp-"


def bundle_id(directory: Path) -> str | None:
    """What names a bundle's content: the first 16 hex digits of its metadata.json's sha256
    (None if it has none). Equal ids mean equal bundles, since the metadata records every model
    file's sha256 and a load checks them."""
    try:
        return hashlib.sha256((Path(directory) / "metadata.json").read_bytes()).hexdigest()[:16]
    except OSError:
        return None


class LastGoodStore:
    """Verified bundle copies under ``root``, one alias (``current``) per device."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def devices(self) -> list[str]:
        """Devices that have a last good bundle."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / POINTER).is_file())

    def current_id(self, device: str) -> str | None:
        """The id of the device's last good bundle, None if it has none."""
        try:
            name = (self.root / device / POINTER).read_text().strip()
        except OSError:
            return None
        return name if name and (self.root / device / name).is_dir() else None

    @contextlib.contextmanager
    def reading(self, device: str) -> Iterator[Path | None]:
        """The device's last good bundle folder (None if it has none), not deleted while the
        caller reads it: a shared lock is held until the block ends."""
        with self._locked(fcntl.LOCK_SH):
            name = self.current_id(device)
            yield None if name is None else self.root / device / name

    def record(self, device: str, source: Path, expected_id: str) -> bool:
        """Make the bundle in ``source``, verified as ``expected_id``, the device's last good one;
        False if it is already. The copy must come out with that id and whole model files (a
        BundleError otherwise, and the alias is left as it was): ``source`` may have changed
        since it was verified, and a copy can run out of disk."""
        with self._locked(fcntl.LOCK_EX):
            if self.current_id(device) == expected_id:
                return False
            folder = self.root / device
            folder.mkdir(parents=True, exist_ok=True)
            staging = folder / f"{STAGING_PREFIX}{expected_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                shutil.copytree(source, staging)
                got = bundle_id(staging)
                if got != expected_id:
                    raise BundleError(f"bundle {source} changed after it was verified (its metadata.json is now "
                                      f"{got}, not {expected_id}); not kept as the last good one")
                check_files(staging)
                _sync_tree(staging)
                final = folder / expected_id
                if final.exists():  # left by a writer that died before it moved the alias
                    shutil.rmtree(final)
                os.replace(staging, final)
                _write_atomically(folder / POINTER, expected_id + "\n")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            for old in folder.iterdir():  # older copies, and staging left by a writer that died
                if old.is_dir() and old.name != expected_id:
                    shutil.rmtree(old, ignore_errors=True)
                elif old.name.startswith(STAGING_PREFIX):
                    old.unlink(missing_ok=True)
            log.info("bundle %s (%s) is now the last good bundle of %s", source, expected_id, device)
            return True

    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[None]:
        """The store's lock across processes (a fresh descriptor per holder, so the threads of one
        worker exclude each other too: flock locks belong to the open file, not the process)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_FILE, "a+b") as lock:
            fcntl.flock(lock.fileno(), how)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _sync_tree(folder: Path) -> None:
    """fsync every file in ``folder`` and the folder itself: the alias must never point at a
    copy whose data a power cut could still take back."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    sync_directory(folder)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{STAGING_PREFIX}{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    sync_directory(path.parent)
