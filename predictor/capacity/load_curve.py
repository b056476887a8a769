"""Latency against load for one batching setting: what a plan's single point does not show.

A plan answers "p99 at this load"; the curve answers "how close to the knee is that?". Each
point simulates the same setting at one offered load (:func:`predictor.capacity.simulator.simulate`,
Poisson arrivals, or one GPU's share of a bursty load: ``arrival_cv``). Every point uses the same
seed: the arrival gaps are then one draw scaled by the rate, so neighbouring points differ by the
load and not by the luck of the draw (common random numbers), and the curve is smooth without
simulating millions of requests. With the planner's request count and seed (``DEFAULT_REQUESTS``,
``DEFAULT_SEED``) the point at a plan's per-GPU load is the plan's own simulation, so the curve
passes through the numbers the plan printed. A plan made for a host that pauses or drifts
(``plan(stalls=)``) passes through its curve when the curve is given the same ``stalls``; one made
for bursty arrivals (``plan(arrival_cv=)``) or a recorded trace (``plan(arrival_trace=)``), when it
is given the same ``arrival_cv`` or ``arrival_trace`` and the plan's ``gpus`` (each GPU's arrivals
are its share of the whole load: :mod:`predictor.capacity.gpu_arrivals`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from predictor.capacity.gpu_arrivals import gpu_arrivals
from predictor.capacity.host_stalls import HostStalls, serving_share
from predictor.capacity.instance_sharing import instances_capacity_qps
from predictor.capacity.load_trace import LoadTrace, checked_trace
from predictor.capacity.simulator import (
    MAX_RATE_QPS,
    MAX_SHARE,
    BatchingConfig,
    CachedLatency,
    LatencyFn,
    LatencyModel,
    checked_arrival_cv,
    checked_latency,
    host_ms,
    is_finite_number,
    is_int,
    p99_at_ends,
    simulate,
)

#: Simulated requests per point and the seed: the planner's defaults (``plan(requests=, seed=)``).
DEFAULT_REQUESTS = 20_000
DEFAULT_SEED = 0
#: Points on a curve from :func:`qps_range`: enough for a smooth knee, few enough for a few seconds.
DEFAULT_POINTS = 24
#: More points than this is a slow way to draw one line.
MAX_POINTS = 1_000


@dataclass(frozen=True)
class LoadPoint:
    """One offered load and what the simulated server did there (per the config's instances together)."""

    qps: float  # the offered rate asked for, per GPU (the simulation's measured rate varies around it)
    p50_ms: float
    p99_ms: float
    throughput_qps: float
    utilisation: float
    mean_batch_size: float
    #: for a predicted latency, the p99 with every batch at the low and at the high end of its
    #: prediction's interval (the same arrivals and draws), as a plan's p99 range; None without an
    #: interval, and at loads the slow end cannot serve (its queue never drains: its p99 would only
    #: say how many requests were simulated)
    p99_low_ms: float | None = None
    p99_high_ms: float | None = None


def capacity_qps(latency: LatencyModel | LatencyFn, config: BatchingConfig,
                 stalls: HostStalls | None = None) -> float:
    """The most requests per second ``config`` can serve: each instance sending its best batch
    (``max over b <= max_batch of b / median(b)``; as instances share the GPU where ``config.sharing``
    says, ``instance_sharing.capacity_qps``) back to back, except while the host is paused
    (``stalls``: their share of the time is taken off, as the planner does). Beyond it the queue
    grows without bound, so it is the natural right end of a latency-versus-load curve."""
    served = instances_capacity_qps(lambda b: checked_latency(latency, b)[0], config.max_batch, config.instances,
                                    config.sharing, lambda b: host_ms(latency, b))
    return served * serving_share(stalls)


def qps_range(capacity: float, *, points: int = DEFAULT_POINTS, low: float = 0.05, high: float = 0.98,
              include: Iterable[float] = ()) -> tuple[float, ...]:
    """``points`` loads evenly spaced from ``low`` to ``high`` of ``capacity`` (requests per second),
    with each load in ``include`` added (a plan's load, so the curve has a point exactly there;
    one beyond ``high`` extends the curve into overload rather than leaving the mark off it)."""
    if not is_finite_number(capacity) or capacity <= 0:
        raise ValueError(f"capacity: must be a positive number of requests per second, not {capacity!r}")
    if not is_int(points) or not 2 <= points <= MAX_POINTS:
        raise ValueError(f"points: must be an integer in [2, {MAX_POINTS}], not {points!r}")
    if not (is_finite_number(low) and is_finite_number(high) and 0 < low < high):
        raise ValueError(f"low, high: must be fractions of capacity with 0 < low < high, not {low!r}, {high!r}")
    step = (high - low) / (points - 1)
    values = {capacity * (low + i * step) for i in range(points)}
    for qps in include:
        values.add(_checked_qps(qps, "include"))
    return tuple(sorted(values))


def _checked_qps(qps: float, name: str) -> float:
    if not is_finite_number(qps) or not 0 < qps <= MAX_RATE_QPS:
        raise ValueError(f"{name}: each load must be a positive number of requests per second up to "
                         f"{MAX_RATE_QPS:g}, not {qps!r}")
    return float(qps)


def load_curve(latency: LatencyModel | LatencyFn, config: BatchingConfig, qps_values: Sequence[float], *,
               requests: int = DEFAULT_REQUESTS, seed: int = DEFAULT_SEED,
               stalls: HostStalls | None = None, arrival_cv: float = 1.0, gpus: int = 1,
               arrival_trace: LoadTrace | None = None) -> list[LoadPoint]:
    """Simulate ``config`` at each offered load in ``qps_values`` (``requests`` each, the same
    ``seed`` at every load: see the module docstring) and return one point per load,
    in the order given. ``latency`` is asked once per batch size for the whole curve. A predicted
    latency (a LatencyModel with an interval) is also simulated at both ends of its interval at
    each load the slow end can serve, for the points' p99 range: three runs a point (two for a
    slow-end model, whose own run is its range's high end). ``stalls``: the host's pauses and drift,
    replayed in every run (the same at every load, drawn from the seed). ``arrival_cv``: the
    coefficient of variation of the gaps between the whole load's requests, 1 (Poisson arrivals at
    each load) unless given; ``gpus``: how many GPUs that load is split over at random, each point
    being one GPU's share at its load (a bursty load's gaps are calmer on each of many GPUs; a
    Poisson load's are Poisson on any number), as the planner simulates them. ``arrival_trace``: a
    recorded load instead, at each point scaled to that load per GPU (its whole share replayed, at
    least ``requests`` requests: a plan's run). The first tenth of each run warms the server up."""
    arrival_cv = checked_arrival_cv(arrival_cv)
    arrival_trace = checked_trace(arrival_trace, arrival_cv)
    if not is_int(gpus) or not 1 <= gpus <= MAX_SHARE:
        raise ValueError(f"gpus: must be an integer in [1, {MAX_SHARE}], not {gpus!r}")
    values = [_checked_qps(q, "qps_values") for q in qps_values]
    if not values:
        raise ValueError("qps_values: must not be empty")
    if len(values) > MAX_POINTS:
        raise ValueError(f"qps_values: {len(values)} loads is more than {MAX_POINTS}")
    service = CachedLatency(latency)
    # the slow end's queue never drains past its capacity: no range there (LoadPoint)
    slow_capacity = (capacity_qps(latency.at_bound("high"), config, stalls)
                     if isinstance(latency, LatencyModel) and latency.interval_ms is not None else 0.0)
    points = []
    for qps in values:
        gpu = gpu_arrivals(qps * gpus, gpus, seed, requests, arrival_cv, arrival_trace)
        result = simulate(gpu.arrivals, config, service, requests=gpu.requests, warmup_fraction=gpu.warmup_fraction,
                          stalls=stalls)
        ends = p99_at_ends(gpu.arrivals, config, latency, requests=gpu.requests, warmup_fraction=gpu.warmup_fraction,
                           own_run=result, stalls=stalls) if qps < slow_capacity else None
        low, high = ends or (None, None)
        points.append(LoadPoint(qps=qps, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                                throughput_qps=result.throughput_qps, utilisation=result.utilisation,
                                mean_batch_size=result.mean_batch_size, p99_low_ms=low, p99_high_ms=high))
    return points


__all__: Sequence[str] = ["LoadPoint", "capacity_qps", "load_curve", "qps_range"]
