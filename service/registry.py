"""The loaded model bundles: one shared Predictor per device, swapped whole on reload.

Bundles load in a background thread so ``/livez`` answers at once while the boosters load
(about 1.5 s); ``/readyz`` says 503 until then. Requests read one immutable snapshot, so a
reload never shows a half-loaded set: the new snapshot replaces the old in one assignment.

A bundle is served only once it verifies (``predictor.bundle_check``: checksums, load, a smoke
prediction in each mode), and each one that does is kept as its device's last good bundle under
the data directory (``service.last_good``). A device whose bundle folder does not verify keeps
the bundle it was serving and reports the error; a worker that starts with such a folder loads
the last good copy instead, so a broken folder plus a worker restart is not an outage.

Under gunicorn each worker holds its own registry. A reload through the API also touches a
marker file; every worker checks the marker (at most once a second, on a request) and reloads
in the background when it has moved, so all workers follow within about a second.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from predictor.bundle import Bundle, BundleError, bundle_dirs, read_metadata
from predictor.bundle_check import load_verified
from predictor.device_bundles import TRANSFER_BUNDLE, expand_transfer, is_transfer, verification_device
from predictor.devices import DeviceSpec
from predictor.predict import Predictor
from service.last_good import LastGoodStore, bundle_id

log = logging.getLogger("latpred.service")
MARKER_CHECK_S = 1.0


class NotReady(Exception):
    """No bundle has been loaded yet (or none could be)."""


@dataclass(frozen=True)
class Snapshot:
    """What one load produced: predictors by device id (over their own bundles, and over the
    transfer bundle for every other catalog device), and the bundles that failed. ``errors``,
    ``fallbacks`` and ``ids`` are keyed by bundle folder: a device id, or ``transfer``."""

    predictors: dict[str, Predictor] = field(default_factory=dict)
    #: device -> why its bundle folder was not loaded (it may still be served, see ``fallbacks``)
    errors: dict[str, str] = field(default_factory=dict)
    loaded: bool = False
    #: device -> what is served instead of its bundle folder, which did not verify
    fallbacks: dict[str, str] = field(default_factory=dict)
    #: device -> the served bundle's id (``service.last_good.bundle_id``)
    ids: dict[str, str] = field(default_factory=dict)

    def versions(self) -> dict[str, str]:
        """Bundle folder -> the version it serves (a device id, or ``transfer`` once for every
        device the transfer bundle predicts)."""
        versions = {}
        for device, p in self.predictors.items():
            versions[TRANSFER_BUNDLE if p.bundle.transfer is not None else device] = p.bundle.version
        return versions


def _metadata_only(directory: Path) -> Bundle | None:
    """A bundle folder's metadata as a Bundle without models (which device to verify it on); None
    where it cannot be read, which the verification then reports."""
    try:
        return Bundle(directory, read_metadata(directory), {})
    except BundleError:
        return None


class ModelRegistry:
    """Loads every bundle under ``root`` and hands out the predictor of a device."""

    def __init__(self, root: Path, marker: Path | None = None, load_wait_s: float = 30.0,
                 last_good: LastGoodStore | None = None) -> None:
        self.root = Path(root)
        self.marker = marker
        #: where verified bundles are kept for the workers that start later (none: not kept)
        self.last_good = last_good
        self.load_wait_s = load_wait_s
        #: called with (old, new) after every load, e.g. to update the served-version metric.
        self.listeners: list[Callable[[Snapshot, Snapshot], None]] = []
        self._snapshot = Snapshot()
        self._lock = threading.Lock()
        self._marker_lock = threading.Lock()
        self._marker_seen = self._marker_mtime()
        self._marker_checked = time.monotonic()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ reading
    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def ready(self) -> bool:
        return bool(self._snapshot.predictors)

    def predictor(self, device_id: str) -> Predictor | None:
        """The device's predictor, None if it has no bundle; NotReady while nothing is loaded."""
        self.wait_first_load(self.load_wait_s)
        snap = self._snapshot
        if not snap.predictors:
            raise NotReady(self.state_detail())
        return snap.predictors.get(device_id)

    def state_detail(self) -> str:
        snap = self._snapshot
        if not snap.loaded:
            return "the model bundles are still loading"
        if snap.errors:
            return "no model bundle could be loaded: " + "; ".join(f"{d}: {e}" for d, e in snap.errors.items())
        return f"no model bundle was found under {self.root}"

    # ------------------------------------------------------------------ loading
    def load(self) -> Snapshot:
        """Verify every bundle folder now and swap in those that pass. A device whose folder does
        not verify keeps the bundle it served, or gets its last good one (a worker that has none
        yet, or one that lags behind the last good); ``errors`` says why either way."""
        with self._lock:
            old = self._snapshot
            predictors: dict[str, Predictor] = {}
            errors: dict[str, str] = {}
            fallbacks: dict[str, str] = {}
            ids: dict[str, str] = {}
            folders = self._device_dirs()
            for device_id, directory in folders.items():
                spec = verification_device(device_id, _metadata_only(directory) if is_transfer(device_id) else None)
                if spec is None:
                    errors[device_id] = f"{directory}: no device spec named {device_id!r} in predictor.devices"
                    continue
                try:
                    predictors[device_id], ids[device_id] = self._verified(device_id, directory, spec)
                except BundleError as exc:
                    errors[device_id] = str(exc)
                    log.error("bundle %s does not verify: %s", directory, exc)
                    instead = self._fallback(device_id, spec, old, errors)
                    if instead is not None:
                        predictors[device_id], ids[device_id], fallbacks[device_id] = instead
                        log.warning("%s: %s", device_id, fallbacks[device_id])
            own = [key for key in folders if not is_transfer(key)]
            new = Snapshot(expand_transfer(predictors, own), errors, loaded=True, fallbacks=fallbacks, ids=ids)
            self._snapshot = new
        log.info("model bundles loaded: %s", new.versions() or "none")
        for listener in list(self.listeners):
            listener(old, new)
        return new

    def _device_dirs(self) -> dict[str, Path]:
        """Device id -> bundle folder: each folder with a metadata.json, and a folder without one
        where the device has a last good bundle (a copy under way, or a broken one: a device
        taken away has no folder at all)."""
        found = bundle_dirs(self.root)
        if self.last_good is not None:
            for device_id in self.last_good.devices():
                if device_id not in found and (self.root / device_id).is_dir():
                    found[device_id] = self.root / device_id
        return dict(sorted(found.items()))

    def _verified(self, device_id: str, directory: Path, spec: DeviceSpec) -> tuple[Predictor, str]:
        """The bundle in ``directory`` verified, and its id; kept as the device's last good one."""
        before = bundle_id(directory)
        predictor = load_verified(directory, spec)
        after = bundle_id(directory)
        if after is None or before != after:
            raise BundleError(f"bundle {directory} changed while it was verified: reload once it is fully written")
        if self.last_good is not None:
            try:
                self.last_good.record(device_id, directory, after)
            except (BundleError, OSError) as exc:  # it still verified: serve it, but say it was not kept
                log.error("bundle %s verified, but was not kept as the last good bundle of %s: %s",
                          directory, device_id, exc)
        return predictor, after

    def _fallback(self, device_id: str, spec: DeviceSpec, old: Snapshot,
                  errors: dict[str, str]) -> tuple[Predictor, str, str] | None:
        """What to serve for a device whose folder did not verify, with its id and a sentence
        saying so: the last good bundle, from memory when this worker serves it already, else
        loaded (and verified) from its copy; the bundle this worker served where there is none."""
        kept, kept_id = old.predictors.get(device_id), old.ids.get(device_id)
        if is_transfer(device_id):  # served under every device it predicts: any of them holds the bundle
            kept = next((p for p in old.predictors.values() if p.bundle.transfer is not None), None)
        good_id = self.last_good.current_id(device_id) if self.last_good is not None else None
        if kept is not None and kept_id is not None and good_id in (None, kept_id):
            what = "its last good bundle" if good_id else "the bundle it served before"
            return kept, kept_id, f"serving {what} {kept.bundle.version} instead (the bundle folder does not verify)"
        if self.last_good is not None and good_id is not None:
            try:
                with self.last_good.reading(device_id) as folder:
                    if folder is not None:
                        predictor = load_verified(folder, spec)
                        return predictor, folder.name, (f"serving its last good bundle {predictor.bundle.version} "
                                                        f"from {folder} (the bundle folder does not verify)")
            except BundleError as exc:
                errors[device_id] += f"; its last good bundle does not verify either: {exc}"
                log.error("the last good bundle of %s does not verify: %s", device_id, exc)
        if kept is not None and kept_id is not None:
            return kept, kept_id, (f"serving the bundle it served before, {kept.bundle.version}, instead "
                                   "(the bundle folder does not verify)")
        return None

    def start(self) -> threading.Thread:
        """Load in a background thread (daemon: it never holds the process open)."""
        self._thread = threading.Thread(target=self._load_logged, name="latpred-bundle-load", daemon=True)
        self._thread.start()
        return self._thread

    def wait_first_load(self, timeout: float) -> None:
        """While the first load is running, wait for it (at most ``timeout`` seconds): under
        gunicorn one worker may be ready while another still loads, and a request that lands on
        the slower one should be answered a second late rather than refused."""
        if not self._snapshot.loaded and self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a background load; True once it is done."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _load_logged(self) -> None:
        try:
            self.load()
        except Exception:  # a background thread's exception would otherwise vanish
            log.exception("loading the model bundles failed")

    # ------------------------------------------------------------------ other workers
    def _marker_mtime(self) -> int:
        try:
            return self.marker.stat().st_mtime_ns if self.marker else 0
        except OSError:
            return 0

    def announce_reload(self) -> None:
        """Tell the other workers to reload: move the marker (written atomically)."""
        if self.marker is None:
            return
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.marker.with_name(f"{self.marker.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{time.time_ns()} {os.getpid()}\n")
        os.replace(tmp, self.marker)
        self._marker_seen = self._marker_mtime()

    def follow_marker(self) -> bool:
        """Start a background reload if another worker announced one; cheap, call per request."""
        now = time.monotonic()
        if self.marker is None or now - self._marker_checked < MARKER_CHECK_S:
            return False
        if not self._marker_lock.acquire(blocking=False):
            return False  # another request thread of this worker is looking already
        try:
            self._marker_checked = now
            seen = self._marker_mtime()
            if seen == self._marker_seen or (self._thread is not None and self._thread.is_alive()):
                return False
            self._marker_seen = seen
            self.start()
            return True
        finally:
            self._marker_lock.release()
