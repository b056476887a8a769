"""A discrete-event simulator of a dynamic-batching inference server, as Triton's ``dynamic_batching``.

Capacity planning asks "how many GPUs, and which batching settings, meet this QPS at this p99?".
A predicted latency per batch size answers half of it; queueing answers the rest, and queueing has
no closed form once batches form dynamically. So this module replays arrivals against a model of
the server, with SimPy (https://simpy.readthedocs.io) as the event loop; with one instance and no
preferred sizes the same rule runs as a plain loop (``single_instance``), many times faster.

What is simulated:

- **Arrivals**: Poisson (exponential gaps), gamma gaps with a coefficient of variation (cv 1 is
  Poisson, below 1 steadier, above 1 burstier), or a recorded trace of arrival times in seconds.
  A process may also be one server's share of one split at random over several (``share``): a
  planner's GPU behind a balancer that sends each request to one of G GPUs at random.
- **The batcher**: one FIFO queue; whenever a model instance is free and requests are queued,
  it decides (Triton's documented rule, https://docs.nvidia.com/deeplearning/triton-inference-server/
  user-guide/docs/batcher.html):

  1. if a preferred batch size can be formed (some preferred size <= queued requests), send the
     largest such size at once;
  2. without preferred sizes, if ``max_batch`` requests are queued, send ``max_batch`` at once;
  3. otherwise, if the oldest queued request has waited ``max_queue_delay_us``, send what is
     there, up to ``max_batch``;
  4. otherwise wait until one more request arrives, an instance frees, or that delay runs out.

  With ``max_queue_delay_us = 0`` and no preferred sizes (Triton's defaults) a free instance takes
  whatever is queued, up to ``max_batch``: batches form only while every instance is busy.

  That is ``BatchingConfig.scheduler="rule"``. Triton's code does otherwise while every instance
  is busy: it forms and stages batches ahead of them, and one sent after its queue delay stays
  frozen until an instance takes it (``scheduler="triton"``, :mod:`predictor.capacity.triton_scheduler`).
  Without a delay or preferred sizes the two form the same batches, and the rule's loops run both. Against Triton
  2.51 on an H100, on 34 loads measured after the code's model was written, it put p99 within 10%
  in 26 (28 after a second reading of the code, found on other loads), the rule in 7
  (``benchmarks/results/simulator_vs_triton_h100_blind.txt``).
- **Service**: a batch of ``b`` takes ``median_ms(b) * exp(sigma * Z)`` with ``Z`` standard normal:
  lognormal around the predicted median; ``sigma = 0`` is deterministic.
- **Host pauses** (``stalls``, optional): the host stops every instance now and then, in wall-clock
  time, and a batch that runs into a pause waits it out (:mod:`predictor.capacity.host_stalls`).
  A host measured to pause one to three times a second held whole loads' p99 that way, which no
  spread of independent batch times reproduces.
- **Host drift** (``stalls.drift``, optional): the ``Z`` of batches near each other in time are
  correlated as the host's drift says (:mod:`predictor.capacity.service_drift`), each batch's own
  spread unchanged; without it every batch draws its own.

Simplifications of Triton's batcher:

- every request carries one sample; there are no ragged shapes, no request of batch > 1, and no
  shape mismatch that ends a batch early;
- one queue: no priority levels, no queue policy (size limit, per-request timeout, rejection),
  no ``preserve_ordering``, no sequence batching;
- the scheduler costs no time: forming a batch, copying inputs and returning responses are in the
  latency model or nowhere; network time is not simulated;
- instances are identical; without ``BatchingConfig.sharing`` they are independent (a batch's time
  depends on its size alone, not on how many instances share the GPU); with it, a batch that starts
  beside others takes the sharing factor times the latency of their summed size
  (:mod:`predictor.capacity.instance_sharing`, measured on an H100), less the serving host's own
  work in it (``LatencyModel.host``: each instance does its own, in its own thread), which the
  batch takes for its own size, unshared;
- when preferred sizes are set, batches never exceed the largest preferred size that fits, as
  Triton's documentation describes; newer Triton releases may, after the queue delay runs out,
  send more than the largest preferred size, which is not modelled.

Statistics skip the first ``warmup_fraction`` of requests (the empty-server start). Throughput and
utilisation are measured over the window from the first measured arrival to the last arrival, so an
overloaded server shows its capacity rather than its drain; latencies, queue waits and batch sizes
cover every measured request (and every batch that served them), each run to completion.
Arrival and service randomness come from separate streams of one seed, so the same seed gives the
same arrivals whatever the latency model or batching (comparing two settings is then less noisy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, get_args, runtime_checkable

import numpy as np

from predictor.capacity.host_stalls import HostStalls, PauseSchedule
from predictor.capacity.instance_sharing import InstanceSharing
from predictor.capacity.service_drift import DriftNormals
from predictor.capacity.single_instance import GiveUp, Served, ServiceFn, serve, slack_s
from predictor.capacity.triton_scheduler import forms_the_rules_batches, serve_like_triton

if TYPE_CHECKING:  # SimPy is imported where it runs: the predictor package imports without it
    import simpy

#: An arrival rate above this is a unit mistake (10 million requests per second to one model).
MAX_RATE_QPS = 1e7
#: More requests than this would take minutes and gigabytes; split the question instead.
MAX_REQUESTS = 10_000_000
#: The steadiest gamma process simulated: its gaps' shape is 1 / cv^2 (a cv near 0 overflowed it to
#: infinity, and the gaps to a division by zero).
MIN_CV = 0.01
#: The burstiest load a plan takes (``arrival_cv``): gaps whose standard deviation is ten times their
#: mean already put most requests in a few bursts; beyond that the traffic wants a trace, not a number.
MAX_ARRIVAL_CV = 10.0
#: The steadiest: gaps within 1% of each other are a clock (as ``MIN_CV``).
MIN_ARRIVAL_CV = MIN_CV
#: What a run leaves out of its statistics by default: its first tenth, which starts from an empty server.
WARMUP_FRACTION = 0.1
#: The most servers a process may be split over (``Arrivals.share``): as many GPUs as a plan may have.
MAX_SHARE = 100_000

ArrivalKind = Literal["poisson", "gamma", "trace"]
#: A latency callable: batch size -> (median milliseconds, lognormal sigma).
LatencyFn = Callable[[int], tuple[float, float]]
#: what a capacity plan is made for: the predicted medians, or the slow end of their intervals
PlanFor = Literal["median", "slow_end"]
PLAN_FOR: tuple[str, ...] = get_args(PlanFor)
#: which of a serving path's times a latency model's medians include: its median or an end of its range
HostEnd = Literal["median", "low", "high"]
#: how the simulated server forms batches while its instances are busy (``BatchingConfig.scheduler``)
Scheduler = Literal["rule", "triton"]
SCHEDULERS: tuple[str, ...] = get_args(Scheduler)
#: how the planner's simulated servers batch unless told otherwise: as Triton's code does
#: (``BatchingConfig`` itself keeps ``rule``, the model of our own server and of the documented rule)
DEFAULT_SCHEDULER: Scheduler = "triton"


def is_int(value: object) -> bool:
    """An integer (numpy's too), not a bool: what a count or a size may be."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """A finite int or float (numpy's too), not a bool: what a rate or a time may be."""
    return isinstance(value, int | float | np.number) and not isinstance(value, bool) and math.isfinite(value)


def checked_latency(latency: LatencyModel | LatencyFn, batch: int) -> tuple[float, float]:
    """``latency(batch)`` as (median ms, sigma), or ValueError naming ``latency`` when the model
    gives a median that is not a positive number or a sigma outside [0, 5]."""
    median, sigma = latency(batch)
    if not is_finite_number(median) or median <= 0:
        raise ValueError(f"latency: median of batch {batch} must be a positive number of ms, not {median!r}")
    if not is_finite_number(sigma) or not 0 <= sigma <= 5:
        raise ValueError(f"latency: sigma of batch {batch} must be in [0, 5], not {sigma!r}")
    return float(median), float(sigma)


def checked_arrival_cv(arrival_cv: float) -> float:
    """``arrival_cv`` as a float, or ValueError naming it unless it is a number in [MIN_ARRIVAL_CV,
    MAX_ARRIVAL_CV]."""
    if not is_finite_number(arrival_cv) or not MIN_ARRIVAL_CV <= arrival_cv <= MAX_ARRIVAL_CV:
        raise ValueError(f"arrival_cv: the coefficient of variation of the gaps between requests must be in "
                         f"[{MIN_ARRIVAL_CV:g}, {MAX_ARRIVAL_CV:g}] (1 is Poisson, 2 bursty), not {arrival_cv!r}")
    return float(arrival_cv)


@dataclass(frozen=True)
class Arrivals:
    """Where requests come from: a Poisson or gamma process at ``rate_qps``, or a recorded trace.

    ``cv`` is the gamma gaps' coefficient of variation (standard deviation / mean; 1 is Poisson).
    ``times`` are a trace's arrival times in seconds, in order (ties are simultaneous arrivals).
    ``share``: this server's share of the process split at random over ``share`` servers, each
    request to one of them with probability 1 / share (``rate_qps`` is then the whole process's
    rate, and this server sees ``rate_qps / share``). Thinning a renewal process at random keeps it
    renewal, with each gap the sum of a geometric number of the process's gaps, so bursty traffic
    split over many GPUs is simulated as each GPU sees it (cv^2 = 1 + (cv^2 - 1) / share), not as
    bursty as the whole nor as calm as Poisson.
    """

    kind: ArrivalKind
    rate_qps: float | None = None
    cv: float = 1.0
    times: tuple[float, ...] | None = None
    seed: int = 0
    share: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("poisson", "gamma", "trace"):
            raise ValueError(f"kind: must be 'poisson', 'gamma' or 'trace', not {self.kind!r}")
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed: must be a non-negative integer, not {self.seed!r}")
        if not is_int(self.share) or not 1 <= self.share <= MAX_SHARE:
            raise ValueError(f"share: must be an integer in [1, {MAX_SHARE}], not {self.share!r}")
        if self.kind == "trace" and self.share != 1:
            raise ValueError("share: a trace is the arrivals one server saw; it is not split")
        if self.kind == "trace":
            self._check_trace()
            return
        if self.times is not None:
            raise ValueError("times: only a 'trace' takes arrival times")
        if self.rate_qps is None or not is_finite_number(self.rate_qps) or self.rate_qps <= 0:
            raise ValueError(f"rate_qps: must be a positive number of requests per second, not {self.rate_qps!r}")
        if self.rate_qps / self.share > MAX_RATE_QPS:  # (one server's: a fleet's whole load may be more)
            raise ValueError(f"rate_qps: {self.rate_qps / self.share:g} a server is above {MAX_RATE_QPS:g} "
                             "requests per second")
        if not is_finite_number(self.cv) or not MIN_CV <= self.cv <= 100:
            raise ValueError(f"cv: the coefficient of variation must be in [{MIN_CV:g}, 100], not {self.cv!r}")

    def _check_trace(self) -> None:
        if self.times is None or len(self.times) == 0:
            raise ValueError("times: a trace needs at least one arrival time")
        if len(self.times) > MAX_REQUESTS:
            raise ValueError(f"times: {len(self.times)} arrivals is more than {MAX_REQUESTS}")
        if not all(is_finite_number(t) and t >= 0 for t in self.times):
            raise ValueError("times: arrival times must be finite, non-negative seconds")
        times = np.asarray(self.times, dtype=float)
        if np.any(np.diff(times) < 0):
            first = int(np.argmax(np.diff(times) < 0)) + 1
            raise ValueError(f"times: must not decrease (times[{first}] = {times[first]} < times[{first - 1}])")
        object.__setattr__(self, "times", tuple(float(t) for t in times))

    @property
    def own_rate_qps(self) -> float:
        """The rate this server's arrivals come at: ``rate_qps`` over the ``share`` it is split into."""
        assert self.rate_qps is not None
        return self.rate_qps / self.share

    @property
    def own_cv(self) -> float:
        """The coefficient of variation of this server's gaps: ``cv`` thinned by its ``share``
        (``cv`` itself, to the bit, for a process not split)."""
        return self.cv if self.share == 1 else math.sqrt(1 + (self.cv**2 - 1) / self.share)

    def generate(self, requests: int | None, duration_s: float | None, rng: np.random.Generator) -> np.ndarray:
        """Arrival times in seconds: the first ``requests`` arrivals, or every arrival before ``duration_s``."""
        if self.kind == "trace":
            assert self.times is not None
            times = np.asarray(self.times, dtype=float)
            if duration_s is not None:
                times = times[times < duration_s]
            return times[:requests] if requests is not None else times
        assert self.rate_qps is not None
        if requests is not None:
            return np.cumsum(self._gaps(requests, rng))
        assert duration_s is not None
        chunks: list[np.ndarray] = []
        start = 0.0
        expected = self.own_rate_qps * duration_s
        while start < duration_s:  # a few chunks at most: each holds the expected count and some
            times = start + np.cumsum(self._gaps(int(expected + 6 * math.sqrt(expected) * self.own_cv) + 16, rng))
            chunks.append(times)
            start = float(times[-1])
        times = np.concatenate(chunks)
        return times[times < duration_s]

    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        assert self.rate_qps is not None
        if self.kind == "poisson":  # thinned at random, Poisson stays Poisson at the share's rate
            return rng.exponential(1.0 / self.own_rate_qps, n)
        mean = 1.0 / self.rate_qps  # of the whole process's gaps
        shape = 1.0 / self.cv**2  # gamma: cv^2 = 1 / shape, mean = shape * scale
        if self.share == 1:
            return rng.gamma(shape, mean / shape, n)
        # this server's gap spans N of the process's, N ~ Geometric(1 / share) (the requests up to
        # and including the next one sent here); a sum of N gamma(shape, scale) is gamma(N shape, scale)
        spans = rng.geometric(1.0 / self.share, n)
        return rng.gamma(spans * shape, mean / shape)


@dataclass(frozen=True)
class BatchingConfig:
    """Triton's ``dynamic_batching`` settings and the number of model instances (``instance_group``)."""

    max_batch: int = 1
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: float = 0.0
    instances: int = 1
    #: how batches form while every instance is busy: ``rule``, Triton's documented rule (a batch
    #: forms only when an instance frees); ``triton``, Triton's code (payloads formed and staged
    #: ahead of a busy instance, :mod:`predictor.capacity.triton_scheduler`)
    scheduler: Scheduler = "rule"
    #: how instances share one GPU (:mod:`predictor.capacity.instance_sharing`): None, independently,
    #: each batch as fast as alone; else a batch beside others runs as their summed batch, slowed
    sharing: InstanceSharing | None = None

    def __post_init__(self) -> None:
        if not is_int(self.max_batch) or self.max_batch < 1:
            raise ValueError(f"max_batch: must be an integer >= 1, not {self.max_batch!r}")
        sizes = tuple(self.preferred_batch_sizes)
        if not all(is_int(p) and 1 <= p <= self.max_batch for p in sizes):
            raise ValueError(f"preferred_batch_sizes: each must be an integer in [1, max_batch={self.max_batch}]")
        if len(set(sizes)) != len(sizes):
            raise ValueError("preferred_batch_sizes: a size is given twice")
        object.__setattr__(self, "preferred_batch_sizes", tuple(sorted(int(p) for p in sizes)))
        if not is_finite_number(self.max_queue_delay_us) or self.max_queue_delay_us < 0:
            raise ValueError(f"max_queue_delay_us: must be a finite number >= 0, not {self.max_queue_delay_us!r}")
        if not is_int(self.instances) or not 1 <= self.instances <= 10_000:
            raise ValueError(f"instances: must be an integer in [1, 10000], not {self.instances!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler: must be one of {SCHEDULERS}, not {self.scheduler!r}")
        if self.sharing is not None and not isinstance(self.sharing, InstanceSharing):
            raise ValueError(f"sharing: must be an InstanceSharing or None, not {type(self.sharing).__name__}")
        if self.sharing is not None and self.instances > self.sharing.max_batches:
            raise ValueError(f"instances: {self.instances} sharing one GPU is more than the {self.sharing.max_batches} "
                             "the sharing model was measured for")


class HostWork(Protocol):
    """The serving host's own time in each batch (``ServingPath``): the Python or C++ around the GPU's
    work, which each model instance does in its own thread while the GPU's work is shared."""

    def added_ms(self, requests: int, end: HostEnd = "median", /) -> float: ...


@dataclass(frozen=True)
class LatencyModel:
    """Service time of a batch: ``median_ms(batch) * exp(sigma * Z)``, lognormal around the median.

    A predicted model may also say how far its medians may be off: ``interval_ms(batch)``, the
    (low, high) ms of the prediction's ~90% interval. That error is not run-to-run spread: it moves
    every batch of a deployment the same way, so it is simulated apart (``at_bound``), not drawn.

    ``host``: the part of each median that is the serving host's own work (``ServingPath.around``
    puts it there, and adds the host's range to the interval's ends, so that each end's GPU part is the
    prediction's end), at ``host_end`` of its range. Several instances share the GPU's work, not that
    (``BatchingConfig.sharing``): through Triton (PyTriton) on an H100, with 2-4 instances, charging the
    sharing on the whole batch time made 0.8 of capacity look like overload (p99 up to 38x the measured),
    charging it on the GPU's part alone did not (0.60-1.04x, median 0.88; the loads this was chosen on,
    ``benchmarks/results/instances_vs_triton_h100.txt``)."""

    median_ms: Callable[[int], float]
    sigma: float = 0.0
    interval_ms: Callable[[int], tuple[float, float]] | None = None
    #: what the medians are: the prediction's (``median``) or its interval's high ends
    #: (``slow_end``, ``for_plan``), so that the model's own run is the high end of its range
    plan_for: PlanFor = "median"
    host: HostWork | None = None
    #: which of ``host``'s times the medians include: the model's ends include the path's ends
    host_end: HostEnd = "median"

    def __post_init__(self) -> None:
        if not is_finite_number(self.sigma) or not 0 <= self.sigma <= 5:
            raise ValueError(f"sigma: must be in [0, 5], not {self.sigma!r}")
        if self.host_end not in get_args(HostEnd):
            raise ValueError(f"host_end: must be one of {get_args(HostEnd)}, not {self.host_end!r}")

    def __call__(self, batch: int) -> tuple[float, float]:
        return float(self.median_ms(batch)), float(self.sigma)

    def host_ms(self, batch: int) -> float:
        """The serving host's own ms in a batch of ``batch`` requests: 0 without ``host``."""
        return 0.0 if self.host is None else float(self.host.added_ms(batch, self.host_end))

    def at_bound(self, side: Literal["low", "high"]) -> LatencyModel:
        """The same spread around the low or the high end of each batch's interval, as medians."""
        interval = self.interval_ms
        if interval is None:
            raise ValueError("this latency model has no interval: only a predicted one has")
        index = 0 if side == "low" else 1
        return LatencyModel(lambda batch: interval(batch)[index], self.sigma, host=self.host, host_end=side)

    def for_plan(self, plan_for: PlanFor) -> LatencyModel:
        """The model a plan is made for: as it is (``median``), or with each median moved to the
        high end of its interval, the interval kept (``slow_end``: a plan that holds if the model
        runs as slowly as its prediction's interval allows)."""
        if plan_for == "median":
            return self
        if plan_for != "slow_end":
            raise ValueError(f"plan_for: must be one of {PLAN_FOR}, not {plan_for!r}")
        interval = self.interval_ms
        if interval is None:
            raise ValueError("plan_for: 'slow_end' needs a predicted latency, with an interval")
        return LatencyModel(lambda batch: interval(batch)[1], self.sigma, interval_ms=interval, plan_for="slow_end",
                            host=self.host, host_end="high")


class CachedLatency:
    """``latency`` asked once per batch size (it may be a whole-model prediction), each answer checked
    as the simulator checks it (``checked_latency``), its serving host's part kept (``host_ms``): what
    a plan's or a load curve's many runs ask."""

    def __init__(self, latency: LatencyModel | LatencyFn) -> None:
        self.latency = latency
        self.answers: dict[int, tuple[float, float]] = {}

    def __call__(self, batch: int) -> tuple[float, float]:
        if batch not in self.answers:
            self.answers[batch] = checked_latency(self.latency, batch)
        return self.answers[batch]

    def host_ms(self, batch: int) -> float:
        """The cached latency's serving host's own ms (``host_ms``): what the instances' sharing leaves out."""
        return host_ms(self.latency, batch)


@runtime_checkable
class NamesHostWork(Protocol):
    """A latency that says how much of each batch's time is the serving host's own work
    (``LatencyModel``, ``CachedLatency``, a measured table such as ``training.serving_check.TableLatency``)."""

    def host_ms(self, batch: int) -> float: ...


def host_ms(latency: LatencyModel | LatencyFn, batch: int) -> float:
    """The serving host's own ms in ``latency``'s batch of ``batch`` (``NamesHostWork``; none for a
    bare callable)."""
    return float(latency.host_ms(batch)) if isinstance(latency, NamesHostWork) else 0.0


@dataclass(frozen=True)
class SimResult:
    """What the server did for the measured requests (after warm-up). Latencies run from arrival to
    completion; queue wait from arrival to the start of the request's batch."""

    requests: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_latency_ms: float
    mean_queue_wait_ms: float
    offered_qps: float
    throughput_qps: float
    utilisation: float
    mean_batch_size: float
    batch_histogram: dict[int, int]
    window_s: float
    #: per request, warm-up included: arrival, batch start and completion times in seconds
    arrival_s: np.ndarray = field(repr=False, compare=False)
    start_s: np.ndarray = field(repr=False, compare=False)
    finish_s: np.ndarray = field(repr=False, compare=False)


class _Server:
    """The batcher and its instances, driven by SimPy events. The queue is FIFO over requests that
    arrive in index order, so it is two counters: ``head`` (next to send) and ``tail`` (arrived)."""

    def __init__(self, env: simpy.Environment, arrival_s: np.ndarray, config: BatchingConfig,
                 service_s: ServiceFn) -> None:
        self.env = env
        self.arrival_s = arrival_s
        self.config = config
        self.service_s = service_s
        self.delay_s = config.max_queue_delay_us * 1e-6
        self.start_s = np.full(len(arrival_s), np.nan)
        self.finish_s = np.full(len(arrival_s), np.nan)
        self.head = 0
        self.tail = 0
        self.free = config.instances
        self.running: list[int] = []  # the sizes of the batches running, for the instances' sharing
        self.wake: simpy.Event | None = None
        self.timer_deadline = -math.inf
        self.batches: list[tuple[float, float, int, int]] = []  # (start s, service s, size, first request)

    def arrive(self) -> Generator[simpy.Event, object, None]:
        """SimPy process: release the arrivals at their times (ties together, before the batcher looks)."""
        env = self.env
        for t in self.arrival_s:
            if t > env.now:
                yield env.timeout(t - env.now)
            self.tail += 1
            if self.tail == len(self.arrival_s) or self.arrival_s[self.tail] > t:
                self._poke()

    def batcher(self) -> Generator[simpy.Event, object, None]:
        """SimPy process: whenever something changes, send as many batches as the rule allows."""
        env = self.env
        while True:
            while self.free and self.tail > self.head:
                size = self._batch_size()
                if size == 0:
                    self._arm_timer(self.arrival_s[self.head] + self.delay_s)
                    break
                self._send(size)
            self.wake = env.event()
            yield self.wake

    def _batch_size(self) -> int:
        queued = self.tail - self.head
        config = self.config
        if config.preferred_batch_sizes:
            fits = [p for p in config.preferred_batch_sizes if p <= queued]
            if fits:
                return fits[-1]
        elif queued >= config.max_batch:
            return config.max_batch
        if self.env.now + slack_s(self.env.now) >= self.arrival_s[self.head] + self.delay_s:
            return min(queued, config.max_batch)
        return 0

    def _send(self, size: int) -> None:
        now = self.env.now
        lo, hi = self.head, self.head + size
        self.head = hi
        self.free -= 1
        sharing = self.config.sharing
        if sharing is None or not self.running:
            service = self.service_s(size, now)
        else:
            summed, factor = sharing.batch_time_terms(size, self.running)
            service = self.service_s(summed, now, factor, size)
        self.running.append(size)
        self.start_s[lo:hi] = now
        self.batches.append((now, service, size, lo))
        done = self.env.timeout(service)
        done.callbacks.append(lambda _event: self._finish(lo, hi))

    def _finish(self, lo: int, hi: int) -> None:
        self.finish_s[lo:hi] = self.env.now
        self.running.remove(hi - lo)
        self.free += 1
        self._poke()

    def _arm_timer(self, deadline: float) -> None:
        if deadline == self.timer_deadline:
            return  # one timer per oldest request: the batcher re-arms when the oldest changes
        self.timer_deadline = deadline
        timer = self.env.timeout(max(0.0, deadline - self.env.now))
        timer.callbacks.append(lambda _event: self._poke())

    def _poke(self) -> None:
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()


def _service_sampler(latency: LatencyModel | LatencyFn, rng: np.random.Generator,
                     pauses: PauseSchedule | None = None, drift: DriftNormals | None = None) -> ServiceFn:
    """Service seconds of a batch starting at a time; the latency model is asked once per batch
    size (it may be a whole-model prediction), and normals are drawn in blocks (one numpy call per
    draw is slow). With ``pauses`` the batch also waits out the host's pauses it runs into; with
    ``drift`` its normal is the host's at the batch's start, not one of its own. Asked with the
    batch's ``own_batch`` (instances sharing the GPU, ``batch`` their summed size and ``scale`` the
    sharing factor), the factor applies to the GPU's part of the summed batch alone, and the batch adds
    its own size's serving-host work (``host_ms``)."""
    cache: dict[int, tuple[float, float]] = {}
    host_cache: dict[int, float] = {}
    normals: Iterator[float] = iter(())

    def host_s(batch: int) -> float:
        if batch not in host_cache:
            host_cache[batch] = host_ms(latency, batch) * 1e-3
        return host_cache[batch]

    def gpu_part_s(batch: int, median_s: float) -> float:
        gpu = median_s - host_s(batch)
        if gpu < 0:
            raise ValueError(f"latency: the serving host's work in a batch of {batch} ({host_s(batch) * 1e3:.4g} ms) "
                             f"is more than its median ({median_s * 1e3:.4g} ms): the host's part must be part of it")
        return gpu

    def sample(batch: int, start_s: float, scale: float = 1.0, own_batch: int | None = None, /) -> float:
        nonlocal normals
        if batch not in cache:
            median, sigma = checked_latency(latency, batch)
            cache[batch] = (median * 1e-3, sigma)
        median_s, sigma = cache[batch]
        if own_batch is not None:  # instances share the GPU's part of the summed batch, not the host's
            median_s = scale * gpu_part_s(batch, median_s) + host_s(own_batch)
            scale = 1.0
        if sigma == 0:
            work = median_s * scale
        elif drift is not None:
            work = float(median_s * math.exp(sigma * drift.at(start_s))) * scale
        else:
            z = next(normals, None)
            if z is None:
                normals = iter(rng.standard_normal(4096).tolist())
                z = next(normals)
            work = float(median_s * math.exp(sigma * z)) * scale
        return work if pauses is None else pauses.finish(start_s, work) - start_s

    return sample


Engine = Literal["auto", "events"]


def simulate(arrivals: Arrivals, config: BatchingConfig, latency: LatencyModel | LatencyFn, *,
             requests: int | None = None, duration_s: float | None = None,
             warmup_fraction: float = WARMUP_FRACTION, engine: Engine = "auto",
             stalls: HostStalls | None = None) -> SimResult:
    """Serve ``arrivals`` with ``config``'s batcher and instances, each batch taking ``latency(batch)``,
    and measure latency percentiles, queue wait, throughput, utilisation and batch sizes.

    Give ``requests`` (the first N arrivals) or ``duration_s`` (arrivals before that time) for a
    Poisson or gamma process; a trace replays in full unless either is given. Every request runs
    to completion; the first ``warmup_fraction`` of them are left out of the statistics.
    ``engine="events"`` runs SimPy's event loop even where the one-instance loop
    (``single_instance``, chosen by ``"auto"`` where it applies) would give the same run faster.
    Triton's code (``scheduler="triton"``, where it forms other batches than the rule) has its own
    walk, whatever ``engine`` says: SimPy's loop runs only the rule. ``stalls``: the host's pauses,
    which every batch running into one waits out (:mod:`predictor.capacity.host_stalls`; drawn
    from a third stream of the seed, so the arrivals and service draws stay those of a run without),
    and its drift (``stalls.drift``: the batches' normals from a fourth stream, correlated in time).
    """
    result = _run(arrivals, config, latency, requests, duration_s, warmup_fraction, engine, None, stalls).result
    assert result is not None  # nothing to give up on
    return result


def high_end_is_own_run(latency: LatencyModel | LatencyFn, own_run: SimResult | None) -> bool:
    """Whether ``p99_at_ends`` takes the high end's p99 from ``own_run`` instead of simulating it:
    a slow-end model's own run is its high end's (one run for the range, not two)."""
    return own_run is not None and isinstance(latency, LatencyModel) and latency.plan_for == "slow_end"


def p99_at_ends(arrivals: Arrivals, config: BatchingConfig, latency: LatencyModel | LatencyFn, *,
                requests: int | None = None, warmup_fraction: float = WARMUP_FRACTION, engine: Engine = "auto",
                own_run: SimResult | None = None, stalls: HostStalls | None = None) -> tuple[float, float] | None:
    """The p99 of ``arrivals`` served with every batch at the low, then at the high end of
    ``latency``'s interval (``LatencyModel.at_bound``), on the same arrivals and draws as
    ``simulate`` of ``latency`` itself: a prediction's p99 range. None for a latency without an
    interval (a measured one).

    ``own_run`` is that simulation of ``latency`` itself, where the caller has made it: a
    slow-end model's medians are its high ends, so its own run is the high end's, and only the
    low end is simulated."""
    if not isinstance(latency, LatencyModel) or latency.interval_ms is None:
        return None

    def at(end: Literal["low", "high"]) -> float:
        if end == "high" and high_end_is_own_run(latency, own_run):
            assert own_run is not None
            return own_run.p99_ms
        return simulate(arrivals, config, latency.at_bound(end), requests=requests, warmup_fraction=warmup_fraction,
                        engine=engine, stalls=stalls).p99_ms

    return at("low"), at("high")


@dataclass(frozen=True)
class BoundedRun:
    """A run of ``simulate_bounded``: its result (whatever its p99) when it ran to the end, None when
    it was given up with its p99 above the bound; and how many requests it sent (the work it cost)."""

    result: SimResult | None
    simulated: int


def simulate_bounded(arrivals: Arrivals, config: BatchingConfig, latency: LatencyModel | LatencyFn, *,
                     requests: int | None, p99_bound_ms: float, warmup_fraction: float = WARMUP_FRACTION,
                     engine: Engine = "auto", stalls: HostStalls | None = None) -> BoundedRun:
    """``simulate(...)``, given up once the run shows its p99 above ``p99_bound_ms``.

    For a caller that only wants runs whose p99 is within a bound (the planner, ruling settings
    out): where the one-instance loop applies it stops as soon as enough measured requests have
    taken longer than the bound for the p99 to be above it whatever the rest do (the run's
    percentile interpolates between two of its sorted latencies, so it is above the bound once
    the lower one is), which for a setting far from the bound is a fraction of the run; so does
    Triton's code (``scheduler="triton"``), at any number of instances. A run that is not given up
    is the very run ``simulate`` makes; a given-up run never had its p99 within the bound.
    Elsewhere (SimPy's event loop) the run always goes to the end.
    """
    if not is_finite_number(p99_bound_ms) or p99_bound_ms <= 0:
        raise ValueError(f"p99_bound_ms: must be a positive number of milliseconds, not {p99_bound_ms!r}")
    return _run(arrivals, config, latency, requests, None, warmup_fraction, engine, float(p99_bound_ms), stalls)


def _run(arrivals: Arrivals, config: BatchingConfig, latency: LatencyModel | LatencyFn, requests: int | None,
         duration_s: float | None, warmup_fraction: float, engine: Engine, bound_ms: float | None,
         stalls: HostStalls | None = None) -> BoundedRun:
    if engine not in ("auto", "events"):
        raise ValueError(f"engine: must be 'auto' or 'events', not {engine!r}")
    if requests is not None and (not is_int(requests) or not 1 <= requests <= MAX_REQUESTS):
        raise ValueError(f"requests: must be an integer in [1, {MAX_REQUESTS}], not {requests!r}")
    if duration_s is not None and (not is_finite_number(duration_s) or duration_s <= 0):
        raise ValueError(f"duration_s: must be a positive number of seconds, not {duration_s!r}")
    if requests is not None and duration_s is not None:
        raise ValueError("requests: give requests or duration_s, not both")
    if arrivals.kind != "trace":
        if requests is None and duration_s is None:
            raise ValueError("requests: a Poisson or gamma process needs requests or duration_s")
        assert arrivals.rate_qps is not None
        if duration_s is not None and arrivals.own_rate_qps * duration_s > MAX_REQUESTS:
            raise ValueError(f"duration_s: {duration_s:g} s at {arrivals.own_rate_qps:g} qps is more than "
                             f"{MAX_REQUESTS} requests")
    if not is_finite_number(warmup_fraction) or not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction: must be in [0, 1), not {warmup_fraction!r}")

    if stalls is not None and not isinstance(stalls, HostStalls):
        raise ValueError(f"stalls: must be a HostStalls, not {type(stalls).__name__}")
    # a fourth stream for the drift: the first three are those of a run without it, as before it was
    arrival_rng, service_rng, pause_rng, drift_rng = (np.random.default_rng(s)
                                                      for s in np.random.SeedSequence(arrivals.seed).spawn(4))
    arrival_s = arrivals.generate(requests, duration_s, arrival_rng)
    if len(arrival_s) == 0:
        raise ValueError("duration_s: no request arrives within it")
    pauses = stalls.schedule(pause_rng) if stalls is not None and stalls.rate_per_s > 0 else None
    drift = stalls.drift.normals(drift_rng) if stalls is not None and stalls.drift is not None \
        and stalls.drift.persistent_share > 0 else None
    service_s = _service_sampler(latency, service_rng, pauses, drift)
    first = _first_measured(len(arrival_s), warmup_fraction)

    give_up = None
    if bound_ms is not None:
        measured = len(arrival_s) - first
        # p99 >= the sorted latency at floor(0.99 (m - 1)): above the bound once m - that many are;
        # the bound is widened by a hair so that float rounding of finish - arrival never decides it
        count = measured - math.floor(0.99 * (measured - 1))
        give_up = GiveUp(first, bound_ms * 1e-3 * (1 + 1e-9), count)
    served: Served | None = None
    # (several instances under Triton's code: its own walk, which gives up early, where SimPy's would not)
    if config.scheduler == "triton" and (not forms_the_rules_batches(
            config.max_batch, config.preferred_batch_sizes, config.max_queue_delay_us * 1e-6)
            or (engine == "auto" and config.instances > 1)):
        served = serve_like_triton(arrival_s, config.max_batch, config.preferred_batch_sizes,
                                   config.max_queue_delay_us * 1e-6, config.instances, service_s, give_up,
                                   config.sharing)
    elif engine == "auto" and config.instances == 1 and not config.preferred_batch_sizes:
        served = serve(arrival_s, config.max_batch, config.max_queue_delay_us * 1e-6, service_s, give_up)
    if served is not None:
        if not served.complete:
            return BoundedRun(None, served.requests)
        return BoundedRun(_measure(arrival_s, served.start_s, served.finish_s, served.batches, config.instances,
                                   first), len(arrival_s))

    import simpy

    env = simpy.Environment()
    server = _Server(env, arrival_s, config, service_s)
    env.process(server.arrive())
    env.process(server.batcher())
    env.run()
    batches = np.asarray(server.batches, dtype=float).reshape(-1, 4)
    return BoundedRun(_measure(arrival_s, server.start_s, server.finish_s, batches, config.instances, first),
                      len(arrival_s))


def _first_measured(requests: int, warmup_fraction: float) -> int:
    """Index of the first request the statistics count (the ones before it warm the server up)."""
    return min(int(requests * warmup_fraction), requests - 1)


def _measure(arrival_s: np.ndarray, start_s: np.ndarray, finish_s: np.ndarray, batches: np.ndarray, instances: int,
             first: int) -> SimResult:
    """The statistics of a finished run, from each request's times and each batch's
    (start s, service s, size, first request) row."""
    latency_ms = (finish_s[first:] - arrival_s[first:]) * 1e3
    wait_ms = (start_s[first:] - arrival_s[first:]) * 1e3
    p50, p90, p99 = np.percentile(latency_ms, [50, 90, 99])

    t0, t1 = float(arrival_s[first]), float(arrival_s[-1])
    window = t1 - t0
    starts, services = batches[:, 0], batches[:, 1]
    busy = np.clip(starts + services, t0, t1) - np.clip(starts, t0, t1)
    measured_sizes = batches[batches[:, 3] >= first, 2].astype(int)  # batches that served measured requests
    if window > 0:
        offered = (len(arrival_s) - first) / window
        throughput = float(np.count_nonzero((finish_s >= t0) & (finish_s <= t1))) / window
        utilisation = float(busy.sum()) / (instances * window)
    else:  # one measured request, or all at one instant: no rate to speak of
        offered = throughput = utilisation = math.nan
    values, counts = np.unique(measured_sizes, return_counts=True)
    return SimResult(
        requests=len(latency_ms),
        p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99),
        mean_latency_ms=float(latency_ms.mean()),
        mean_queue_wait_ms=float(wait_ms.mean()),
        offered_qps=offered,
        throughput_qps=throughput,
        utilisation=utilisation,
        mean_batch_size=float(measured_sizes.mean()) if len(measured_sizes) else math.nan,
        batch_histogram={int(v): int(c) for v, c in zip(values, counts)},
        window_s=window,
        arrival_s=arrival_s, start_s=start_s, finish_s=finish_s,
    )


__all__: Sequence[str] = ["Arrivals", "BatchingConfig", "LatencyModel", "BoundedRun", "MAX_ARRIVAL_CV",
                        "MIN_ARRIVAL_CV", "SimResult", "checked_arrival_cv", "high_end_is_own_run", "p99_at_ends",
                        "simulate", "simulate_bounded"]
