"""The loaded model bundles: one shared Predictor per device, swapped whole on reload.

Bundles load in a background thread so ``/livez`` answers at once while the boosters load
(about 1.5 s); ``/readyz`` says 503 until then. Requests read one immutable snapshot, so a
reload never shows a half-loaded set: the new snapshot replaces the old in one assignment. A
device whose new bundle fails to load keeps its previous predictor and reports the error.

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

from predictor.bundle import Bundle, BundleError, bundle_dirs
from predictor.devices import DEVICES
from predictor.predict import Predictor

log = logging.getLogger("latpred.service")
MARKER_CHECK_S = 1.0


class NotReady(Exception):
    """No bundle has been loaded yet (or none could be)."""


@dataclass(frozen=True)
class Snapshot:
    """What one load produced: predictors by device id, and the bundles that failed."""

    predictors: dict[str, Predictor] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    loaded: bool = False

    def versions(self) -> dict[str, str]:
        return {device: p.bundle.version for device, p in self.predictors.items()}


class ModelRegistry:
    """Loads every bundle under ``root`` and hands out the predictor of a device."""

    def __init__(self, root: Path, marker: Path | None = None, load_wait_s: float = 30.0) -> None:
        self.root = Path(root)
        self.marker = marker
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
        """Load every bundle now and swap them in; failed devices keep their old predictor."""
        with self._lock:
            old = self._snapshot
            predictors: dict[str, Predictor] = {}
            errors: dict[str, str] = {}
            for device_id, directory in bundle_dirs(self.root).items():
                spec = DEVICES.get(device_id)
                if spec is None:
                    errors[device_id] = f"{directory}: no device spec named {device_id!r} in predictor.devices"
                    continue
                try:
                    predictors[device_id] = Predictor(Bundle.load(directory), spec)
                except (BundleError, ValueError, OSError) as exc:
                    errors[device_id] = str(exc)
                    log.error("bundle %s failed to load: %s", directory, exc)
                    if device_id in old.predictors:
                        predictors[device_id] = old.predictors[device_id]
            new = Snapshot(predictors, errors, loaded=True)
            self._snapshot = new
        log.info("model bundles loaded: %s", new.versions() or "none")
        for listener in list(self.listeners):
            listener(old, new)
        return new

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
