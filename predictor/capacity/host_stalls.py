"""Pauses of the host that runs a server: every instance stops for a while, at random moments.

A batch's time drawn batch by batch (a lognormal around its size's median) treats a slow batch as
bad luck of that batch alone. Measured Triton showed otherwise on one H100 host
(``datasets/nvidia-h100-80gb-hbm3/serving-triton-blind2/``): batches of every size slowed together
for 10-80 ms at a time, one to three times a second, whatever the load, and each such stretch held a
whole load's p99 (in resnet34's load at 0.3, three batches in a row took 17, 14 and 26 ms where
2.2-4.3 ms was usual, and every request over the p99 came in or right after them). The same stretch
drawn as independent slow batches spreads over the run and leaves the p99 a quarter of the measured
one. Hosts of the other sets paused under once every four seconds.

So a host's pauses are their own process, in wall-clock time: episodes start as a Poisson process
(``rate_per_s``), each one stopping the instances for one of the measured pause lengths; a batch
that is running, or would start, during a pause finishes that much later. ``stalls_of_batches``
reads the process off a server's own batch series: a batch over ``STALLED_OVER`` times its size's
median is stalled, a run of stalled batches in a row is one episode, and the episode's pause is
what its batches took over their medians. The batches left are the service time distribution
without the pauses, so the pauses are not counted twice.

A host also drifts: its speed wanders over tens to hundreds of ms, so that batches near each other
take alike (:mod:`predictor.capacity.service_drift`). ``HostStalls`` can carry that drift too
(``drift``), so that a plan replays both of the host's departures from independent batch times.

Simplification: a batch formed just before or during a pause keeps the requests it had; on the
host the batcher pauses too, and requests arriving meanwhile could join the batch after it. The
model so puts the requests behind a pause a batch later than the host may (a few ms at most).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.capacity.service_drift import ServiceDrift

#: a batch that took more than this many times its size's median was stalled
STALLED_OVER = 2.0
#: more pauses a second than this is no longer a host pausing now and then
MAX_RATE_PER_S = 1000.0
#: a pause longer than this (ms) is a host that stopped, not one that paused
MAX_PAUSE_MS = 60_000.0
#: a host paused this share of the time or more is not serving (and at 1 the pauses never end)
MAX_PAUSED_SHARE = 0.5


@dataclass(frozen=True)
class HostStalls:
    """A host's pauses: episodes at ``rate_per_s`` (Poisson, wall-clock time), each one of
    ``pauses_ms`` (drawn with equal chance), stopping every instance of the server; and its drift
    (``drift``, None: its batches' times are independent)."""

    rate_per_s: float
    pauses_ms: tuple[float, ...]
    drift: ServiceDrift | None = None

    def __post_init__(self) -> None:
        rate = self.rate_per_s
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= MAX_RATE_PER_S:
            raise ValueError(f"rate_per_s: must be a number of pauses a second in [0, {MAX_RATE_PER_S:g}], "
                             f"not {rate!r}")
        pauses = tuple(self.pauses_ms)
        if rate > 0 and not pauses:
            raise ValueError("pauses_ms: a host that pauses needs at least one pause length")
        if not all(isinstance(p, int | float) and not isinstance(p, bool) and math.isfinite(p)
                   and 0 < p <= MAX_PAUSE_MS for p in pauses):
            raise ValueError(f"pauses_ms: each must be a number of milliseconds in (0, {MAX_PAUSE_MS:g}]")
        object.__setattr__(self, "pauses_ms", tuple(float(p) for p in pauses))
        if self.paused_share >= MAX_PAUSED_SHARE:
            raise ValueError(f"rate_per_s, pauses_ms: {rate:g} pauses a second of {np.mean(pauses):g} ms on "
                             f"average pause the host {self.paused_share:.0%} of the time; a host paused "
                             f"{MAX_PAUSED_SHARE:.0%} of the time or more is not serving")
        if self.drift is not None and not isinstance(self.drift, ServiceDrift):
            raise ValueError(f"drift: must be a ServiceDrift or None, not {type(self.drift).__name__}")

    @property
    def steady(self) -> bool:
        """Whether the host neither pauses nor drifts: it simulates as no ``HostStalls`` at all."""
        return self.rate_per_s == 0 and (self.drift is None or self.drift.persistent_share == 0)

    @property
    def paused_share(self) -> float:
        """The share of wall-clock time the host spends paused (mean pause times rate)."""
        return self.rate_per_s * float(np.mean(self.pauses_ms)) * 1e-3 if self.pauses_ms else 0.0

    def schedule(self, rng: np.random.Generator) -> PauseSchedule:
        """The pauses of one run, drawn from ``rng`` as the run asks for them."""
        return PauseSchedule(self, rng)


def serving_share(stalls: HostStalls | None) -> float:
    """The share of wall-clock time a host serves (1 without pauses): what is left of a server's
    capacity, since while the host is paused it serves none."""
    return 1.0 - stalls.paused_share if stalls is not None else 1.0


class PauseSchedule:
    """One run's pauses, drawn forward in time as the run needs them, as (start s, end s) in order;
    a pause that starts inside the one before it waits for it to end (the host pauses once at a time)."""

    def __init__(self, stalls: HostStalls, rng: np.random.Generator) -> None:
        self._gap_s = 1.0 / stalls.rate_per_s if stalls.rate_per_s > 0 else math.inf
        self._pauses_s = np.asarray(stalls.pauses_ms) * 1e-3
        self._rng = rng
        self.starts: list[float] = []
        self.ends: list[float] = []
        self._next_start = self._draw_gap()

    def _draw_gap(self) -> float:
        return float(self._rng.exponential(self._gap_s)) if math.isfinite(self._gap_s) else math.inf

    def _extend_past(self, t: float) -> None:
        """Draw pauses until the next one starts after ``t``."""
        while self._next_start <= t:
            start = max(self._next_start, self.ends[-1] if self.ends else -math.inf)
            self.starts.append(start)
            self.ends.append(start + float(self._pauses_s[self._rng.integers(len(self._pauses_s))]))
            self._next_start += self._draw_gap()

    def finish(self, start_s: float, work_s: float) -> float:
        """When ``work_s`` seconds of a batch that may start at ``start_s`` are done, the pauses
        skipped: one starting inside a pause begins at its end."""
        t, left = start_s, work_s
        self._extend_past(t)
        i = bisect_right(self.ends, t)  # the first pause not over by t
        while True:
            if i == len(self.starts):
                self._extend_past(t + left)
                if i == len(self.starts):
                    return t + left
            pause_start, pause_end = self.starts[i], self.ends[i]
            if pause_start <= t:  # inside it: wait for its end
                t = pause_end
            elif t + left <= pause_start:
                return t + left
            else:
                left -= pause_start - t
                t = pause_end
            i += 1


@dataclass(frozen=True)
class StalledBatches:
    """What ``stalls_of_batches`` read: the host's pauses and which batches were stalled."""

    stalls: HostStalls
    stalled: np.ndarray  # bool per batch, in the order given


def stalls_of_batches(series: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                      medians_s: dict[int, float]) -> StalledBatches:
    """The pauses of a host from its servers' batch series: per series (one load), each batch's
    (start s, time s, size), in the order they ran; ``medians_s`` each size's median batch time.

    A batch that took over ``STALLED_OVER`` times its size's median was stalled; a run of stalled
    batches in a row is one episode, whose pause is the sum of what they took over their medians;
    the rate is the episodes over the series' time, each from its first batch's start to its last
    batch's end."""
    pauses: list[float] = []
    stalled_all: list[np.ndarray] = []
    span_s = 0.0
    for start, took, size in series:
        if len(start) == 0:
            continue
        median = np.asarray([medians_s[int(b)] for b in size])
        stalled = took > STALLED_OVER * median
        stalled_all.append(stalled)
        span_s += float(start[-1] - start[0]) + float(took[-1])
        excess = 0.0
        for is_stalled, t, m in zip(stalled.tolist(), took.tolist(), median.tolist()):
            if is_stalled:
                excess += t - m
            elif excess:
                pauses.append(excess * 1e3)
                excess = 0.0
        if excess:
            pauses.append(excess * 1e3)
    rate = len(pauses) / span_s if span_s > 0 else 0.0
    return StalledBatches(HostStalls(rate, tuple(pauses)),
                          np.concatenate(stalled_all) if stalled_all else np.zeros(0, dtype=bool))


__all__: Sequence[str] = ["MAX_PAUSED_SHARE", "STALLED_OVER", "HostStalls", "PauseSchedule", "StalledBatches",
                          "serving_share", "stalls_of_batches"]
