"""The batcher of :mod:`predictor.capacity.simulator` with one model instance, as a plain loop.

The capacity planner asks the simulator hundreds of questions per plan, each about one instance
without preferred batch sizes (one instance per GPU), and SimPy's event loop spends 8 to 30 us per
request on events that, with one instance, follow from each other in a fixed order: the instance
frees, the batcher waits for the queue to fill or the oldest request's delay to run out, a batch
goes. This module walks that order directly (a few us per *batch*), so that a plan fits in a REST
request. It is the same rule, not a second model of the server: ``simulate`` picks it only where
the two agree (one instance, no preferred sizes), and ``tests/predictor/test_capacity_single_instance.py``
holds them to the same numbers, for generated arrivals and for a log's trace whose requests arrive
many at once. (It was kept from traces until 2026-12-07, in case SimPy's event queue ordered a
finish and an arrival at the very same instant otherwise; the committed servers' loads replayed as
traces, ``benchmarks/simulator_vs_server.py``, came out the same to the last digit either way. On
arrivals contrived to fall on batches' finishing instants, with a queue delay, a batch's start can
differ by a unit in the last place, 1e-16 s; its batches and p99 do not.)

For one instance and no preferred sizes, Triton's rule (see the simulator's docstring) reads:
when the instance is free at ``t`` and the oldest queued request arrived at ``a``, the batch goes
at ``t`` if ``max_batch`` requests are queued or ``a + delay`` has passed; otherwise at whichever
comes first of ``a + delay`` and the arrival that makes the queue ``max_batch`` long. It takes
every request queued by then, up to ``max_batch``.

A caller that only needs to know whether the p99 stays within a bound (the planner ruling a
setting out) can ask the loop to give up as soon as enough measured requests have exceeded it:
with one instance batches finish in order, so that count is known batch by batch.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: Seconds of slack when comparing a clock with a deadline: the simulator's (float sums of times are not exact).
EPS_S = 1e-12


def slack_s(now: float) -> float:
    """The slack at clock ``now``: EPS_S, or four units in the last place of ``now`` once the clock is
    past about 8,000 s, where adding EPS_S no longer moves it. A wait of EPS_S there left the clock
    where it was, and a batcher waiting out the last picoseconds of its queue delay asked again
    forever (a GPU at 0.2 qps, whose simulated runs reach hours: ``latpred capacity`` hung)."""
    return max(EPS_S, 4 * math.ulp(now))


class ServiceFn(Protocol):
    """A batch's service seconds from its size and its start (s), its work times ``scale``: the start
    matters where the host pauses (:mod:`predictor.capacity.host_stalls`), the scale where instances
    share the GPU (:mod:`predictor.capacity.instance_sharing`: the size is then the running batches'
    sum, the scale their sharing factor, and ``own_batch`` the batch's own size, whose serving-host
    work is its own and unscaled, ``LatencyModel.host``; a pause is waited out unscaled)."""

    def __call__(self, batch: int, start_s: float, scale: float = 1.0, own_batch: int | None = None, /) -> float: ...


@dataclass(frozen=True)
class GiveUp:
    """Stop once ``count`` requests from index ``first`` on have taken longer than ``bound_s``."""

    first: int
    bound_s: float
    count: int

    def late_in(self, arrivals: list[float], lo: int, hi: int, finish: float) -> int:
        """How many measured requests of the batch ``lo..hi`` (arrival order), all finishing at
        ``finish``, took longer than the bound: the earliest arrivals of a batch wait longest, so
        they are a prefix of it, found by bisection."""
        lo = max(lo, self.first)
        cutoff = finish - self.bound_s
        if lo >= hi or arrivals[lo] >= cutoff:
            return 0
        return bisect_left(arrivals, cutoff, lo + 1, hi) - lo


@dataclass(frozen=True)
class Served:
    """Per request (in arrival order) the start and finish of its batch, in seconds, and per batch a
    row of (start s, service s, size, index of its first request), as the simulator records them;
    all empty when the run was given up (``complete`` False) after sending ``requests`` requests."""

    start_s: np.ndarray
    finish_s: np.ndarray
    batches: np.ndarray
    requests: int
    complete: bool = False

    @classmethod
    def given_up(cls, requests: int) -> Served:
        """A run given up after sending ``requests`` requests: no times kept."""
        return cls(np.empty(0), np.empty(0), np.empty((0, 4)), requests=requests)


def serve(arrival_s: np.ndarray, max_batch: int, delay_s: float, service_s: ServiceFn,
          give_up: GiveUp | None = None) -> Served:
    """Serve ``arrival_s`` (sorted seconds) with one instance, or stop once ``give_up`` is met.

    ``service_s(size, start)`` is asked once per batch, in the order the batches start (the order in which
    the simulator's event loop asks it, so a seeded sampler draws the same service times).
    """
    arrivals: list[float] = arrival_s.tolist()  # indexing and bisect on a list: no numpy call per batch
    n = len(arrivals)
    starts: list[float] = []
    services: list[float] = []
    sizes: list[int] = []
    free_at = 0.0
    head = 0
    late = 0
    first, count = (give_up.first, give_up.count) if give_up else (n, 0)
    while head < n:
        oldest = arrivals[head]
        now = free_at if free_at > oldest else oldest
        full = head + max_batch - 1  # the request that makes the queue max_batch long
        if (full < n and arrivals[full] <= now) or now + slack_s(now) >= oldest + delay_s:
            send = now
        else:
            send = oldest + delay_s
            if full < n and arrivals[full] < send:
                send = arrivals[full]
        end = head + 1  # one past the batch's last request: every arrival by `send`, up to max_batch
        if end < n and arrivals[end] <= send:  # (at light load the next request comes later: no search)
            end = bisect_right(arrivals, send, end, full + 1 if full < n else n)
        service = service_s(end - head, send)
        starts.append(send)
        services.append(service)
        sizes.append(end - head)
        free_at = send + service
        if give_up is not None and end > first:
            late += give_up.late_in(arrivals, head, end, free_at)
            if late >= count:
                return Served.given_up(end)
        head = end
    start = np.asarray(starts)
    counts = np.asarray(sizes)
    finish = start + np.asarray(services)  # send + service, as free_at was
    firsts = np.cumsum(counts) - counts
    batches = np.column_stack([start, np.asarray(services), counts, firsts]).astype(float).reshape(-1, 4)
    return Served(np.repeat(start, counts), np.repeat(finish, counts), batches, requests=n, complete=True)


__all__: Sequence[str] = ["EPS_S", "GiveUp", "ServiceFn", "Served", "serve", "slack_s"]
