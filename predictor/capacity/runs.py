"""The simulations a capacity plan asks for: given up as soon as they are out of the running,
charged to the plan's budget, and shared by the plans of one grid.

A plan (``planner.plan``) asks two questions of many (max_batch, delay, instances, GPUs) settings: "is the
p99 within the objective?" while it looks for the fewest GPUs, and "is the p99 below the best so
far?" while it picks the setting. Neither needs a run to its end once enough requests have been
late for the p99 to be above the bound (``simulator.simulate_bounded``), and a setting far from
the bound is out after a fraction of its requests: the answers are the ones whole runs give.

Runs are kept in :class:`Runs`, by (qps, max_batch, delay, instances, GPUs), for one latency model, request
count and seed: a run's outcome does not depend on which plan asked for it, so a spreadsheet's
grid of objectives at one load (or loads whose split over GPUs coincides) reuses what an earlier
cell simulated. A :class:`Search` is one plan's view of them: the requests it simulated itself
(what its ``budget`` caps) and the settings it asked about.

The host's pauses and drift (``stalls``, :mod:`predictor.capacity.host_stalls`) are part of what the
runs simulate, as the latency model is: every run of one :class:`Runs` replays the same processes,
so a run kept for one plan answers another only when both plan for the same host. So are the
arrivals (``arrival_cv``, or a recorded ``trace``): each GPU's are made by
``gpu_arrivals.gpu_arrivals``, the same for every plan of one :class:`Runs`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from predictor.capacity.gpu_arrivals import GpuArrivals, gpu_arrivals
from predictor.capacity.host_stalls import HostStalls, serving_share
from predictor.capacity.instance_sharing import MEASURED_SHARING, InstanceSharing, instances_capacity_qps
from predictor.capacity.load_trace import LoadTrace
from predictor.capacity.simulator import (
    DEFAULT_SCHEDULER,
    BatchingConfig,
    CachedLatency,
    Engine,
    LatencyFn,
    LatencyModel,
    Scheduler,
    SimResult,
    high_end_is_own_run,
    p99_at_ends,
    simulate,
    simulate_bounded,
)

#: (max_batch, max_queue_delay_us, instances per GPU)
Setting = tuple[int, int, int]


def steady_as_none(stalls: HostStalls | None) -> HostStalls | None:
    """``stalls``, or None for a host that neither pauses nor drifts (``HostStalls.steady``): the two
    simulate alike, and as one value they share runs (a serving path without either plans as no
    path's)."""
    return stalls if stalls is not None and not stalls.steady else None


#: what a kept run holds of its per-request times: nothing (``statistics_only``)
_NO_TIMES = np.empty(0)
_NO_TIMES.setflags(write=False)


def statistics_only(result: SimResult) -> SimResult:
    """``result`` without its per-request times: a plan reads a run's statistics only, and a grid keeps
    hundreds of runs (24 bytes a request each: a quarter of a gigabyte for a long trace's runs)."""
    return dataclasses.replace(result, arrival_s=_NO_TIMES, start_s=_NO_TIMES, finish_s=_NO_TIMES)


class OutOfBudget(Exception):
    """The plan has simulated as many requests as its budget allows."""


class Runs:
    """Simulations of one latency model at one request count and seed, by (qps, max_batch, delay,
    instances, GPUs): finished runs, and for runs given up the highest bound each p99 was shown to be above.
    The latency model is asked once per batch size. ``stalls``: the serving host's pauses and drift,
    which every run (its p99 range's too) replays; None, a steady host. ``arrival_cv``: the
    coefficient of variation of the gaps between the whole load's requests (1, Poisson); ``trace``, a
    recorded load replayed instead (``load_trace``: its shape, at each plan's qps), each run then
    simulating its GPU's whole share of it, at least ``requests`` of them. ``sharing``: how several
    instances on one GPU slow each other's batches (:mod:`predictor.capacity.instance_sharing`; the
    H100's measured factors by default), for the settings with more than one."""

    def __init__(self, latency: LatencyModel | LatencyFn, requests: int, seed: int, engine: Engine = "auto",
                 scheduler: Scheduler = DEFAULT_SCHEDULER, stalls: HostStalls | None = None,
                 arrival_cv: float = 1.0, trace: LoadTrace | None = None,
                 sharing: InstanceSharing = MEASURED_SHARING) -> None:
        self.latency, self.requests, self.seed, self.engine = latency, requests, seed, engine
        self.sharing = sharing
        #: how the simulated server batches (``BatchingConfig.scheduler``): Triton's code by default
        self.scheduler: Scheduler = scheduler
        #: the host's pauses and drift (``simulate(stalls=)``), the same in every run; None for a steady
        #: host (one whose HostStalls is ``steady`` too: it simulates exactly as None does)
        self.stalls = steady_as_none(stalls)
        #: how bursty the whole load is (``Search.arrivals``; ``plan`` checks it)
        self.arrival_cv = arrival_cv
        #: a recorded load, replayed at each plan's qps instead of generated arrivals (None: generated)
        self.trace = trace
        #: each (qps, GPUs)'s arrivals: a trace's share is made once, whatever the settings asked about
        self.arrivals: dict[tuple[float, int], GpuArrivals] = {}
        #: the latency asked once per batch size, its serving host's part kept for the instances' sharing
        self.cached = CachedLatency(latency)
        #: by (qps, max_batch, delay, instances, GPUs)
        self.results: dict[tuple[float, int, int, int, int], SimResult] = {}
        self.above: dict[tuple[float, int, int, int, int], float] = {}
        #: p99 with every batch at the low and at the high end of the latency model's interval
        self.ranges: dict[tuple[float, int, int, int, int], tuple[float, float]] = {}

    def cached_latency(self, batch: int) -> tuple[float, float]:
        return self.cached(batch)


class Search:
    """One plan's questions about the settings at ``qps``: answered from ``runs`` where they can be,
    else by simulating, which counts against ``budget`` (None: no cap). The budget is checked
    before each run, so a plan simulates at most one run's requests past it (a recorded load's run,
    as long as a GPU's share of its trace, is not started past it), and the runs of its p99 range
    (``p99_range``: two, one for a slow-end model); a plan stopped at its budget makes one more run,
    of the setting it answers (``planner._stopped_at_budget``)."""

    def __init__(self, runs: Runs, qps: float, slo_ms: float, budget: int | None) -> None:
        self.runs, self.qps, self.slo_ms, self.budget = runs, qps, slo_ms, budget
        self.simulated = 0
        self.asked: set[tuple[int, int, int, int]] = set()  # (max_batch, delay, instances, GPUs)

    def cached_latency(self, batch: int) -> tuple[float, float]:
        return self.runs.cached_latency(batch)

    def capacity_qps(self, max_batch: int, instances: int = 1) -> float:
        """The most requests per second ``instances`` instances on one GPU can serve with batches of at
        most ``max_batch`` (sharing it as ``Runs.sharing`` says): while the host is paused they serve
        none, so its pauses' share of the time is taken off."""
        best = instances_capacity_qps(lambda b: self.cached_latency(b)[0], max_batch, instances,
                                      self.runs.sharing if instances > 1 else None,
                                      self.runs.cached.host_ms)
        return best * serving_share(self.runs.stalls)

    def fastest_ms(self, max_batch: int) -> float:
        """The shortest median service time of any batch the setting can send: no p99 is below it
        (at least half of the batches of each size take their median or longer)."""
        return min(self.cached_latency(b)[0] for b in range(1, max_batch + 1))

    @property
    def evaluated(self) -> int:
        """Settings on a GPU count this plan asked about (the same with or without shared runs)."""
        return len(self.asked)

    def finished(self) -> dict[tuple[int, int, int, int], SimResult]:
        """The finished runs this plan asked about, by (max_batch, delay, instances, GPUs)."""
        results = self.runs.results
        return {key: results[(self.qps, *key)] for key in self.asked if (self.qps, *key) in results}

    def _charge(self, simulated: int) -> None:
        self.simulated += simulated

    def _check_budget(self, arrivals: GpuArrivals) -> None:
        """Before a run: out of budget once it is spent; for a recorded load, whose runs are as long as
        a GPU's share of the trace (a million requests, where a generated run has 20,000), also when
        the run would end past it."""
        if self.budget is None:
            return
        if self.simulated >= self.budget or (self.runs.trace is not None
                                             and self.simulated + arrivals.count > self.budget):
            raise OutOfBudget

    def arrivals(self, gpus: int) -> GpuArrivals:
        """One GPU's arrivals when the load is split at random over ``gpus`` (``gpu_arrivals``: Poisson
        at qps / G for an ``arrival_cv`` of 1, the plans made before ``arrival_cv`` was asked to the
        bit; that GPU's share of the gamma process, or of the trace), made once per (qps, GPUs)."""
        runs, key = self.runs, (self.qps, gpus)
        if key not in runs.arrivals:
            runs.arrivals[key] = gpu_arrivals(self.qps, gpus, runs.seed, runs.requests, runs.arrival_cv, runs.trace)
        return runs.arrivals[key]

    def _arrivals_and_config(self, setting: Setting, gpus: int) -> tuple[GpuArrivals, BatchingConfig]:
        max_batch, delay_us, instances = setting
        return (self.arrivals(gpus),
                BatchingConfig(max_batch=max_batch, max_queue_delay_us=delay_us, instances=instances,
                               scheduler=self.runs.scheduler, sharing=self.runs.sharing if instances > 1 else None))

    def simulate(self, setting: Setting, gpus: int) -> SimResult:
        """The setting's whole run on ``gpus`` (the exhaustive search's question)."""
        key = (self.qps, *setting, gpus)
        self.asked.add(key[1:])
        if key not in self.runs.results:
            arrivals, config = self._arrivals_and_config(setting, gpus)
            self._check_budget(arrivals)
            self.runs.results[key] = statistics_only(simulate(
                arrivals.arrivals, config, self.runs.cached, requests=arrivals.requests,
                warmup_fraction=arrivals.warmup_fraction, engine=self.runs.engine, stalls=self.runs.stalls))
            self._charge(arrivals.count)
        return self.runs.results[key]

    def p99_range(self, setting: Setting, gpus: int, own_run: SimResult | None = None) -> tuple[float, float] | None:
        """The setting's p99 on ``gpus`` with every batch's median at the low, then the high end of
        the latency model's interval (the same arrivals and draws as its own run, ``own_run``), or
        None for a model without one. Two whole runs, charged to the plan (one for a slow-end model
        whose own run is given: it is the high end's); never given up for the budget: a plan's
        range is part of its answer."""
        key = (self.qps, *setting, gpus)
        if key not in self.runs.ranges:
            arrivals, config = self._arrivals_and_config(setting, gpus)
            latency = self.runs.latency
            ends = p99_at_ends(arrivals.arrivals, config, latency, requests=arrivals.requests,
                               warmup_fraction=arrivals.warmup_fraction, engine=self.runs.engine,
                               own_run=own_run, stalls=self.runs.stalls)
            if ends is None:
                return None
            self.runs.ranges[key] = ends
            self._charge((1 if high_end_is_own_run(latency, own_run) else 2) * arrivals.count)
        return self.runs.ranges[key]

    def within(self, setting: Setting, gpus: int, bound_ms: float) -> SimResult | None:
        """The setting's run on ``gpus`` if its p99 is at most ``bound_ms``, else None; a run is
        given up as soon as it shows a p99 above the bound (an infinite bound: a whole run)."""
        key = (self.qps, *setting, gpus)
        self.asked.add(key[1:])
        runs = self.runs
        if key not in runs.results:
            if runs.above.get(key, -math.inf) >= bound_ms:
                return None
            if math.isinf(bound_ms):
                return self.simulate(setting, gpus)
            arrivals, config = self._arrivals_and_config(setting, gpus)
            self._check_budget(arrivals)
            run = simulate_bounded(arrivals.arrivals, config, self.runs.cached, requests=arrivals.requests,
                                   p99_bound_ms=bound_ms, warmup_fraction=arrivals.warmup_fraction,
                                   engine=runs.engine, stalls=runs.stalls)
            self._charge(run.simulated)
            if run.result is None:
                runs.above[key] = max(bound_ms, runs.above.get(key, -math.inf))
                return None
            runs.results[key] = statistics_only(run.result)
        result = runs.results[key]
        return result if result.p99_ms <= bound_ms else None

    def best(self, settings: Sequence[Setting], gpus: int, bound_ms: float) -> tuple[Setting, SimResult] | None:
        """The setting with the lowest p99 on ``gpus`` (then the smallest max_batch, the shortest delay,
        the fewest instances) among those within ``bound_ms``, or None: branch and bound, each run given up once its
        p99 is above the best so far, since it cannot win then. Settings with a finished run go
        first, best first, so that the bound is tight from the start."""

        def known_p99(setting: Setting) -> float:
            result = self.runs.results.get((self.qps, *setting, gpus))
            return result.p99_ms if result is not None else math.inf

        best: tuple[Setting, SimResult] | None = None
        for setting in sorted(settings, key=known_p99):  # stable: the others keep the caller's order
            bound = bound_ms if best is None else min(bound_ms, best[1].p99_ms)
            result = self.within(setting, gpus, bound)
            if result is not None and (best is None or (result.p99_ms, *setting) < (best[1].p99_ms, *best[0])):
                best = (setting, result)
        return best


__all__: Sequence[str] = ["OutOfBudget", "Runs", "Search", "Setting", "steady_as_none"]
