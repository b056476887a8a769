"""The load generator that drives :mod:`collectors.batching_server`: open-loop arrivals, in its own process.

A separate process, as a real server's clients are: it shares no interpreter (and no GIL) with the
server. It is told a schedule (arrival offsets in seconds and a start time on the shared monotonic
clock, ``time.perf_counter``, which is CLOCK_MONOTONIC on Linux and so comparable across processes)
and sends each request at its time, one message per request; requests that fell due together (the
client woke late) go in one message. It sleeps until half a millisecond before an arrival and spins
the rest, since sleeping alone wakes tens of microseconds late.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection

import numpy as np

#: must match collectors.batching_server.REQUEST_DTYPE (not imported: that module imports torch)
REQUEST_DTYPE = np.dtype([("index", "<f8"), ("sent_s", "<f8")])
#: sleep until this long before an arrival, then spin
SPIN_S = 0.0005


def send_schedule(requests: Connection, offsets_s: np.ndarray, start_at: float) -> float:
    """Send request ``i`` at ``start_at + offsets_s[i]``; returns the largest lateness in seconds."""
    n = len(offsets_s)
    due_at = start_at + offsets_s
    i = 0
    worst = 0.0
    while i < n:
        now = time.perf_counter()
        wait = due_at[i] - now
        if wait > SPIN_S:
            time.sleep(wait - SPIN_S)
            continue
        if wait > 0:
            continue
        j = int(np.searchsorted(due_at, now, side="right"))
        j = max(j, i + 1)
        message = np.empty(j - i, dtype=REQUEST_DTYPE)
        message["index"] = np.arange(i, j)
        message["sent_s"] = time.perf_counter()
        requests.send_bytes(message.tobytes())
        worst = max(worst, now - due_at[i])
        i = j
    return worst


def client_main(requests: Connection, control: Connection) -> None:
    """Run schedules as the control pipe sends them ((offsets, start_at) pairs; None ends), answering
    each with its largest lateness."""
    while True:
        job = control.recv()
        if job is None:
            return
        offsets_s, start_at = job
        control.send(send_schedule(requests, np.asarray(offsets_s, dtype=float), float(start_at)))
