"""Capacity planning on top of the simulator: which dynamic-batching settings, and how many GPUs, serve
a load at a p99 objective.

Given a model's predicted latency per batch size (``latency(batch) -> (median ms, lognormal sigma)``),
a load in requests per second and a p99 objective in milliseconds, :func:`plan` tries every
(``max_batch``, ``max_queue_delay_us``) pair of the choices on G GPUs and recommends the fewest GPUs
that meet the objective; :func:`triton_config` writes the matching ``config.pbtxt`` lines.

The model of the fleet, and its simplifications:

- G GPUs, each with **one** model instance (no ``instance_group`` count above 1), behind a load
  balancer that splits the requests evenly and independently, so each GPU sees a Poisson process at
  ``qps / G``. A real balancer (round robin, least-loaded) gives each GPU steadier arrivals than
  Poisson, so the predicted p99 is, if anything, pessimistic; a skewed balancer is not modelled.
- Every GPU behaves alike, so one GPU is simulated and its numbers stand for all.
- Everything :mod:`predictor.capacity.simulator` leaves out (network time, scheduler cost, one
  sample per request, ...) is left out here too.

A setting is feasible on G GPUs when the simulated p99 is at most the objective and each GPU's
load is below ``MAX_UTILISATION`` of what it can serve at that maximum batch (``max over b <=
max_batch of b / median(b)``): a fleet kept fuller than that has no headroom for a burst the
simulation did not draw. The headroom is judged against capacity, not the simulated busy time:
a dynamic batcher keeps a GPU busy at most loads above one batch-1 call at a time by growing its
batches (2 ms + 0.05 ms a sample at 2,000 qps: busy all the time at 35% of what max_batch 16 can
serve), which says nothing about overload. The search over G starts at a lower bound from
capacity (a GPU cannot serve more than ``max over b <= max_batch of b / median(b)`` requests per
second); when nothing is feasible there it asks ``max_gpus`` (nothing there either: the best effort), else gallops up
from the bound (+1, +2, +4, ...) until some setting is feasible and bisects down to the fewest GPUs
where one is. This assumes that "some setting is feasible" does not flip back as G grows (more GPUs
means less load on each: true of the queue, though a long queue delay alone can make one setting's
p99 grow as its load falls, which is why the question is asked of all settings together). The best
effort, when no G up to ``max_gpus`` is feasible, is the lowest p99 of every setting on ``max_gpus``
GPUs, with ``meets=False`` and a reason. On the fewest feasible G every setting that capacity
does not rule out is simulated and the plan takes the lowest p99, then the smallest ``max_batch``,
then the shortest delay. The same arguments and seed give the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from predictor.capacity.simulator import (
    MAX_RATE_QPS,
    MAX_REQUESTS,
    Arrivals,
    BatchingConfig,
    LatencyFn,
    LatencyModel,
    SimResult,
    checked_latency,
    is_finite_number,
    is_int,
    simulate,
)

#: A GPU kept busier than this is not a plan: a slightly burstier hour than the simulated one queues up.
MAX_UTILISATION = 0.95
#: Fewer simulated requests than this leave a p99 resting on a handful of samples.
MIN_REQUESTS = 1_000
#: More GPUs than this is a data centre, not a capacity question for one model.
MAX_GPUS = 100_000
#: Triton's ``max_queue_delay_microseconds`` above a minute is surely a unit mistake.
MAX_DELAY_US = 60_000_000


@dataclass(frozen=True)
class Plan:
    """A recommended deployment and what the simulation predicts for it (per GPU unless ``total``).

    ``candidates_evaluated`` counts the simulations the search ran (distinct ``max_batch``, delay and
    GPU count). When ``meets`` is False no setting met the objective on up to ``max_gpus`` GPUs: the
    plan is the lowest p99 found on ``max_gpus`` and ``reason`` says why it falls short.
    """

    gpus: int
    max_batch: int
    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...]
    qps: float
    slo_p99_ms: float
    per_gpu_qps: float
    p50_ms: float
    p99_ms: float
    throughput_qps: float  # all GPUs together
    utilisation: float
    mean_batch_size: float
    candidates_evaluated: int
    meets: bool
    reason: str = ""


def _choices(name: str, values: Sequence[int], low: int, high: int) -> tuple[int, ...]:
    try:
        items = tuple(values)
    except TypeError:
        raise ValueError(f"{name}: must be a sequence of integers, not {values!r}") from None
    if not items:
        raise ValueError(f"{name}: must not be empty")
    if not all(is_int(v) and low <= v <= high for v in items):
        raise ValueError(f"{name}: each must be an integer in [{low}, {high}], not {items!r}")
    return tuple(sorted(set(items)))


class _Search:
    """Simulations of one plan, cached by (max_batch, delay, gpus), and the latency asked once per batch."""

    def __init__(self, latency: LatencyModel | LatencyFn, qps: float, slo_ms: float, requests: int, seed: int) -> None:
        self.latency = latency
        self.qps, self.slo_ms, self.requests, self.seed = qps, slo_ms, requests, seed
        self.medians: dict[int, tuple[float, float]] = {}
        self.results: dict[tuple[int, int, int], SimResult] = {}

    def cached_latency(self, batch: int) -> tuple[float, float]:
        if batch not in self.medians:
            self.medians[batch] = checked_latency(self.latency, batch)
        return self.medians[batch]

    def capacity_qps(self, max_batch: int) -> float:
        """The most requests per second one instance can serve with batches of at most ``max_batch``."""
        return max(b / self.cached_latency(b)[0] * 1e3 for b in range(1, max_batch + 1))

    def fastest_ms(self, max_batch: int) -> float:
        """The shortest median service time of any batch the setting can send: no p99 is below it
        (at least half of the batches of each size take their median or longer)."""
        return min(self.cached_latency(b)[0] for b in range(1, max_batch + 1))

    def simulate(self, max_batch: int, delay_us: int, gpus: int) -> SimResult:
        key = (max_batch, delay_us, gpus)
        if key not in self.results:
            self.results[key] = simulate(
                Arrivals("poisson", rate_qps=self.qps / gpus, seed=self.seed),
                BatchingConfig(max_batch=max_batch, max_queue_delay_us=delay_us),
                self.cached_latency, requests=self.requests)
        return self.results[key]

    def feasible(self, result: SimResult) -> bool:
        """The objective met; headroom is checked before simulating (``viable`` in ``plan``)."""
        return result.p99_ms <= self.slo_ms


def plan(latency: LatencyModel | LatencyFn, qps: float, slo_p99_ms: float, *,
         max_batch_choices: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
         delay_us_choices: Sequence[int] = (0, 100, 500, 1000, 2000, 5000),
         max_gpus: int = 64, requests: int = 20_000, seed: int = 0) -> Plan:
    """The fewest GPUs (one instance each, Poisson arrivals split evenly) and the dynamic-batching
    settings among the choices that serve ``qps`` with a simulated p99 of at most ``slo_p99_ms`` and
    each GPU's load below ``MAX_UTILISATION`` of its capacity; see the module's docstring for the
    model and the search.

    Never raises for an objective out of reach: the plan then has ``meets=False`` and a ``reason``.
    """
    if not is_finite_number(qps) or qps <= 0:
        raise ValueError(f"qps: must be a positive number of requests per second, not {qps!r}")
    if qps > MAX_RATE_QPS:
        raise ValueError(f"qps: {qps:g} is above {MAX_RATE_QPS:g} requests per second")
    if not is_finite_number(slo_p99_ms) or slo_p99_ms <= 0:
        raise ValueError(f"slo_p99_ms: must be a positive number of milliseconds, not {slo_p99_ms!r}")
    batches = _choices("max_batch_choices", max_batch_choices, 1, 1 << 20)
    delays = _choices("delay_us_choices", delay_us_choices, 0, MAX_DELAY_US)
    if not is_int(max_gpus) or not 1 <= max_gpus <= MAX_GPUS:
        raise ValueError(f"max_gpus: must be an integer in [1, {MAX_GPUS}], not {max_gpus!r}")
    if not is_int(requests) or not MIN_REQUESTS <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests: must be an integer in [{MIN_REQUESTS}, {MAX_REQUESTS}], not {requests!r}")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed: must be a non-negative integer, not {seed!r}")

    search = _Search(latency, float(qps), float(slo_p99_ms), requests, seed)
    # Tried first when asking "is anything feasible on G GPUs?": no delay, then the biggest batches.
    candidates = [(b, d) for d in delays for b in sorted(batches, reverse=True)]
    capacity = {b: search.capacity_qps(b) for b in batches}
    reachable = [(b, d) for b, d in candidates if search.fastest_ms(b) <= slo_p99_ms]

    def viable(candidate: tuple[int, int], gpus: int) -> bool:  # not ruled out without simulating
        return qps / gpus < MAX_UTILISATION * capacity[candidate[0]]

    def any_feasible(gpus: int) -> bool:
        return any(viable(c, gpus) and search.feasible(search.simulate(*c, gpus)) for c in reachable)

    lower = max(1, math.ceil(qps / (MAX_UTILISATION * max(capacity.values()))))
    found: int | None = None
    if reachable and lower <= max_gpus:
        if any_feasible(lower):
            found = lower
        elif lower < max_gpus and any_feasible(max_gpus):  # else out of reach: no galloping through hopeless G
            last_bad, found = lower, max_gpus
            gpus, step = lower + 1, 1
            while gpus < found:
                if any_feasible(gpus):
                    found = gpus
                    break
                last_bad, gpus, step = gpus, gpus + step, step * 2
            while found - last_bad > 1:
                middle = (found + last_bad) // 2
                if any_feasible(middle):
                    found = middle
                else:
                    last_bad = middle

    if found is not None:
        options = [(c, search.simulate(*c, found)) for c in reachable if viable(c, found)]
        options = [(c, r) for c, r in options if search.feasible(r)]
        (max_batch, delay), result = min(options, key=lambda o: (o[1].p99_ms, o[0][0], o[0][1]))
        return _plan(search, found, max_batch, delay, result, meets=True, reason="")

    # Best effort: the lowest p99 on every GPU allowed.
    options = [(c, search.simulate(*c, max_gpus)) for c in candidates]
    (max_batch, delay), result = min(options, key=lambda o: (o[1].p99_ms, o[0][0], o[0][1]))
    if not reachable:
        fastest = min(range(1, max(batches) + 1), key=lambda b: search.cached_latency(b)[0])
        reason = (f"the fastest batch (size {fastest}) takes {search.cached_latency(fastest)[0]:.4g} ms, "
                  f"above the p99 objective of {slo_p99_ms:g} ms: no number of GPUs meets it")
    elif lower > max_gpus:
        reason = (f"{qps:g} qps needs at least {lower} GPUs at a load below {MAX_UTILISATION:g} of their capacity "
                  f"(one serves at most {max(capacity.values()):.4g} qps), more than max_gpus={max_gpus}")
    else:
        reason = (f"no setting meets p99 <= {slo_p99_ms:g} ms at a load below {MAX_UTILISATION:g} of their capacity "
                  f"on up to max_gpus={max_gpus} GPUs; the lowest p99 there is {result.p99_ms:.4g} ms")
    return _plan(search, max_gpus, max_batch, delay, result, meets=False, reason=reason)


def _plan(search: _Search, gpus: int, max_batch: int, delay_us: int, result: SimResult, *,
          meets: bool, reason: str) -> Plan:
    return Plan(
        gpus=gpus, max_batch=max_batch, max_queue_delay_us=delay_us, preferred_batch_sizes=(),
        qps=search.qps, slo_p99_ms=search.slo_ms, per_gpu_qps=search.qps / gpus,
        p50_ms=result.p50_ms, p99_ms=result.p99_ms, throughput_qps=result.throughput_qps * gpus,
        utilisation=result.utilisation, mean_batch_size=result.mean_batch_size,
        candidates_evaluated=len(search.results), meets=meets, reason=reason)


def triton_config(plan: Plan) -> str:
    """The plan's batching as Triton ``config.pbtxt`` text: ``max_batch_size`` and the
    ``dynamic_batching`` block (``preferred_batch_size`` only when the plan has preferred sizes).
    The instance count per GPU is one, Triton's default ``instance_group``, so none is written."""
    lines = [f"max_batch_size: {plan.max_batch}", "dynamic_batching {"]
    if plan.preferred_batch_sizes:
        lines.append(f"  preferred_batch_size: [ {', '.join(str(p) for p in plan.preferred_batch_sizes)} ]")
    lines.append(f"  max_queue_delay_microseconds: {plan.max_queue_delay_us}")
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__: Sequence[str] = ["MAX_UTILISATION", "Plan", "plan", "triton_config"]
