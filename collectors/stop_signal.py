"""A stop asked of a collection from outside, turned into an exception the collector can act on.

A serving collector holds a model's loads in memory until all its settings are served (one file per
model). Python's default for SIGTERM (coreutils ``timeout`` at its limit, a lease ending, ``kill``)
ends the process on the spot: no ``except``, no ``finally``, and every load measured for the model in
progress is lost. Under :func:`stop_on_sigterm` SIGTERM raises :class:`StopRequested` in the main
thread instead, so that the collector writes what it measured, says what it did not, and exits
non-zero (:func:`stop_exit_code`). Ctrl-C (``KeyboardInterrupt``) is the same kind of stop
(:data:`STOPS`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class StopRequested(BaseException):
    """SIGTERM arrived. A BaseException, as KeyboardInterrupt is: the ``except Exception`` and ``except
    RuntimeError`` that let a collector carry on past a dead server or client must not take a stop
    for one of those and serve on."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


#: what a stop from outside arrives as: SIGTERM under ``stop_on_sigterm``, and Ctrl-C
STOPS: tuple[type[BaseException], ...] = (StopRequested, KeyboardInterrupt)


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`StopRequested` in the main thread, once: a second
    SIGTERM while the first is being handled (the measurements being written) is ignored, so that the
    write finishes (SIGKILL still ends the process). The handler there before is restored on leaving.

    Off the main thread Python cannot set a signal handler: the block then runs with SIGTERM as it
    was (a collector run from a worker thread stops as it always has)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if raised:
            return
        raised = True
        raise StopRequested(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        # None: a handler not set from Python, which cannot be put back; the default is the nearest
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def stop_in(exc: BaseException) -> BaseException | None:
    """The stop (one of :data:`STOPS`) that ``exc`` is, or that was being handled when ``exc`` was
    raised (a server's shutdown that failed while a stop passed through it); None if no stop is in
    its chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, STOPS):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def stop_said(stop: BaseException) -> str:
    """A stop in words: ``stopped by SIGTERM``, ``stopped by Ctrl-C``."""
    return str(stop) if isinstance(stop, StopRequested) else "stopped by Ctrl-C"


def stop_exit_code(stop: BaseException) -> int:
    """The exit status of a process that a stop ended, as the shell reports one a signal ended: 128 +
    the signal's number (143 for SIGTERM, 130 for Ctrl-C)."""
    return 128 + (stop.signum if isinstance(stop, StopRequested) else int(signal.SIGINT))
