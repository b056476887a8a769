"""Capacity planning on top of the simulator: which dynamic-batching settings, and how many GPUs, serve
a load at a p99 objective.

Given a model's predicted latency per batch size (``latency(batch) -> (median ms, lognormal sigma)``),
a load in requests per second and a p99 objective in milliseconds, :func:`plan` weighs the
(``max_batch``, ``max_queue_delay_us``) pairs of the choices on G GPUs and recommends the fewest GPUs
that meet the objective; :func:`triton_config` writes the matching ``config.pbtxt`` lines.

The model of the fleet, and its simplifications:

- G GPUs, each with one model instance by default, or as many as ``instance_choices`` lets a plan
  weigh (Triton's ``instance_group`` count, 1-4): measured on an H100, fp16 CUDA graphs, k instances
  at batch b served 0.80-1.00x (k = 2) and 0.66-0.98x (k = 4) the samples a second of one instance at
  batch k x b (``benchmarks/instance_sharing.py``), so where a k-times larger batch is allowed one
  instance is enough; where the choices are limited below it (``limited_choices``) more instances
  serve more, up to 1.7x at batch 1 with two. Instances on one GPU slow each other's batches as
  :mod:`predictor.capacity.instance_sharing` measured (a batch beside others runs as their summed
  batch, 10-21% slower), which also gives a request arriving while one batch runs the chance to start
  at once on another instance. A setting of k instances is weighed only up to a summed batch k x
  max_batch of ``MAX_SUMMED_BATCH``, the largest batch a plan asks the latency model about. The GPUs
  sit behind a load balancer that sends each request to one of them at random, evenly and
  independently. The whole load's gaps between requests have a coefficient of variation
  ``arrival_cv``: 1 (the default) is Poisson, and each GPU then sees a Poisson process at ``qps / G``;
  otherwise the load is a gamma renewal process (above 1 bursty, below 1 steadier than Poisson), and
  each GPU sees exactly its random share of it (``Arrivals.share``: gaps of cv^2 = 1 + (arrival_cv^2 -
  1) / G, between the whole load's and Poisson's, so a bursty load spread over many GPUs looks calmer
  to each). Or the load is a recorded trace (``arrival_trace``, :mod:`predictor.capacity.load_trace`):
  its shape replayed at ``qps``, each GPU seeing its random share of it, the whole of it. A real
  balancer (round robin, least-loaded) gives each GPU steadier arrivals than a random one, so the
  predicted p99 is, if anything, pessimistic; a skewed balancer, and bursts that are not a renewal
  process (a load that rises for minutes, gaps that depend on each other), are not modelled.
- Every GPU behaves alike, so one GPU is simulated and its numbers stand for all.
- Each GPU's server batches as Triton's code does (``scheduler="triton"``): a batch sent after its
  queue delay waits, frozen, behind the running one, which makes a delay costlier than Triton's
  documented rule says (:mod:`predictor.capacity.triton_scheduler`).
- Everything :mod:`predictor.capacity.simulator` leaves out (network time, scheduler cost, one
  sample per request, ...) is left out here too. A server's own time per batch is in the latency
  model only where the caller put it there (``ServingPath.around``); the host's pauses, where the
  caller gives them (``stalls``), stop every GPU's server now and then in every run, and their
  share of the time is taken off each GPU's capacity; the host's drift, given with them, moves its
  batches' times together in time (:mod:`predictor.capacity.service_drift`).

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
GPUs, with ``meets=False`` and a reason. On the fewest feasible G the plan takes, among the settings
capacity does not rule out, the lowest p99, then the smallest ``max_batch``, then the shortest delay,
then the fewest instances. The same arguments and seed give the same plan.

What keeps a plan within a REST request (``benchmarks/capacity_planner.py`` measures it: 2 ms +
0.05 ms a sample at 5,000 qps and p99 4 ms, where 53 GPUs each run almost idle and every setting's
p99 is within a few percent of the objective, took 95 s before, 1.9 s now, on one quiet two-core machine):

- the simulator runs one instance as a plain loop rather than SimPy's events (``single_instance``);
- a run is given up as soon as enough of its requests were late for its p99 to be above the
  bound asked about (the objective while looking for G, the best p99 so far while picking the
  setting: branch and bound), which is the answer its whole run gives; so the plan is the one
  the exhaustive search gives (``exhaustive=True``, every run to its end, kept as the baseline);
- settings that capacity or the fastest batch rule out are never simulated;
- the plan's p99 range (``Plan.p99_low_ms``, ``p99_high_ms``) costs two more runs of the chosen
  setting alone, with every batch at either end of the latency prediction's interval (one for a
  slow-end model, whose own run is the high end's);
- ``budget`` caps the requests a plan simulates (default ``DEFAULT_BUDGET``, a few seconds of CPU).
  A search that reaches it stops and answers with what it has, saying so in ``reason``: the fewest
  GPUs among the finished runs that met the objective (fewer may do), or, with none, the lowest p99
  finished on ``max_gpus``. The budget counts requests, not seconds, so the answer stays the same
  on a slower or busier machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.instance_sharing import MAX_INSTANCES, MEASURED_SHARING, InstanceSharing, instance_choices
from predictor.capacity.load_trace import LoadTrace, checked_trace
from predictor.capacity.runs import OutOfBudget, Runs, Search, Setting, steady_as_none
from predictor.capacity.simulator import (
    DEFAULT_SCHEDULER,
    MAX_ARRIVAL_CV,
    MAX_RATE_QPS,
    MAX_REQUESTS,
    MIN_ARRIVAL_CV,
    SCHEDULERS,
    BatchingConfig,
    Engine,
    LatencyFn,
    LatencyModel,
    Scheduler,
    SimResult,
    checked_arrival_cv,
    is_finite_number,
    is_int,
)

#: A GPU kept busier than this is not a plan: a slightly burstier hour than the simulated one queues up.
MAX_UTILISATION = 0.95
#: Fewer simulated requests than this leave a p99 resting on a handful of samples.
MIN_REQUESTS = 1_000
#: More GPUs than this is a data centre, not a capacity question for one model.
MAX_GPUS = 100_000
#: Triton's ``max_queue_delay_microseconds`` above a minute is surely a unit mistake.
MAX_DELAY_US = 60_000_000
#: Requests one plan may simulate by default: 2 to 4 s of CPU on a quiet two-core machine, where the
#: slowest plans of ``benchmarks/capacity_planner.py`` simulated 3.0 and 3.5 million in 1.9 and 3.3 s;
#: typical plans simulate 0.1 to 0.9 million (0.1 to 0.6 s).
DEFAULT_BUDGET = 4_000_000
#: A budget above this is hours of CPU.
MAX_BUDGET = 10_000_000_000
#: What a plan weighs by default: Triton's maximum batch sizes in powers of two, and queue delays
#: from none (Triton's default) to 5 ms.
MAX_BATCH_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
DELAY_US_CHOICES = (0, 100, 500, 1000, 2000, 5000)
#: The largest batch whose latency a plan asks for: k instances' batches of max_batch run as one of k x max_batch.
MAX_SUMMED_BATCH = max(MAX_BATCH_CHOICES)


def limited_choices(batch_limit: int | None = None, delay_limit_us: int | None = None
                    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The maximum batches and queue delays a plan weighs (``MAX_BATCH_CHOICES``, ``DELAY_US_CHOICES``) up
    to what a deployment allows: a model exported with a fixed largest batch, a service that may not hold
    a request back for long. A limit is itself a choice (a model exported for batches of up to 24 is
    planned at 24, not only at 16); None leaves the defaults."""
    def limited(name: str, limit: int | None, choices: tuple[int, ...], low: int) -> tuple[int, ...]:
        if limit is None:
            return choices
        if not is_int(limit) or not low <= limit <= max(choices):
            raise ValueError(f"{name}: must be an integer in [{low}, {max(choices)}], not {limit!r}")
        return tuple(sorted({c for c in choices if c <= limit} | {int(limit)}))

    return (limited("batch_limit", batch_limit, MAX_BATCH_CHOICES, 1),
            limited("delay_limit_us", delay_limit_us, DELAY_US_CHOICES, 0))


def weighed_instances(max_instances: int | None = None, batch_limit: int | None = None,
                      fit: int | None = None) -> tuple[int, ...]:
    """The instance counts per GPU a plan weighs: up to ``max_instances`` (``instance_sharing.instance_choices``);
    by default one, or up to ``MAX_INSTANCES`` where the deployment limits the batch (``batch_limit`` below
    the largest choice). Without a limit one instance at k times the batch served at least as many
    samples a second as k instances (measured), and more instances would only be weighed on the sharing
    model's say-so at middle loads. None above ``fit``, the instances whose weights and activations the
    GPU's memory holds (``instance_memory.instances_that_fit``; one is always weighed)."""
    limited = batch_limit is not None and batch_limit < max(MAX_BATCH_CHOICES)
    choices = instance_choices(MAX_INSTANCES if limited else 1) if max_instances is None \
        else instance_choices(max_instances)
    return tuple(k for k in choices if fit is None or k <= max(1, fit))


def weighed_settings(max_batch_choices: Sequence[int], delay_us_choices: Sequence[int],
                     instance_choices: Sequence[int]) -> list[Setting]:
    """The (max_batch, delay, instances) settings a plan weighs, in the order it tries them when it asks
    whether anything is feasible: no delay first, the biggest batches first, the fewest instances
    first; several instances only where their summed batch is at most ``MAX_SUMMED_BATCH`` (one
    instance at any max_batch)."""
    return [(b, d, k) for d in delay_us_choices for b in sorted(max_batch_choices, reverse=True)
            for k in sorted(instance_choices) if k == 1 or k * b <= MAX_SUMMED_BATCH]


def largest_batch(max_batch_choices: Sequence[int], instance_choices: Sequence[int] = (1,)) -> int:
    """The largest batch size a plan over these choices asks the latency model about: the largest
    max_batch, or a summed batch of several instances' (``weighed_settings``)."""
    return max(b * k for b, _, k in weighed_settings(max_batch_choices, (0,), instance_choices))


#: Requests simulated per run, and the seed of their arrivals and service times.
REQUESTS = 20_000
SEED = 0


@dataclass(frozen=True)
class Plan:
    """A recommended deployment and what the simulation predicts for it (per GPU unless ``total``).

    ``candidates_evaluated`` counts the settings the search asked about (distinct ``max_batch``,
    delay and GPU count), ``simulated_requests`` the requests it simulated for them (fewer where
    runs were given up early, or shared with an earlier plan through ``runs``). When ``meets`` is
    False no setting met the objective on up to ``max_gpus`` GPUs: the plan is the lowest p99 found on
    ``max_gpus`` and ``reason`` says why it falls short. A search stopped by its budget
    (``budget_spent``) says so in ``reason`` whether or not the plan meets the objective.
    """

    gpus: int
    max_batch: int
    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...]
    #: model instances per GPU (Triton's ``instance_group`` count)
    instances: int
    qps: float
    slo_p99_ms: float
    per_gpu_qps: float
    p50_ms: float
    p99_ms: float
    throughput_qps: float  # all GPUs together
    utilisation: float
    mean_batch_size: float
    candidates_evaluated: int
    simulated_requests: int
    meets: bool
    reason: str = ""
    budget_spent: bool = False
    #: the plan's p99 with every batch at the low and at the high end of the latency prediction's
    #: ~90% interval (a predicted latency model's ``interval_ms``; None without one): how far the
    #: p99 may move if the model runs as far from its prediction as its interval allows. Where the
    #: per-GPU load is beyond what the slow end can serve, its queue never drains, and the high
    #: end's p99 says only that (it grows with the requests simulated)
    p99_low_ms: float | None = None
    p99_high_ms: float | None = None
    #: how the simulation batched (``BatchingConfig.scheduler``): ``triton``, as Triton's code does
    scheduler: Scheduler = DEFAULT_SCHEDULER
    #: the coefficient of variation of the gaps between the whole load's requests the plan was made
    #: for: 1, Poisson; above 1, bursty (each GPU seeing its random share: see the module docstring);
    #: for a trace, its own gaps' (``arrival_trace``)
    arrival_cv: float = 1.0
    #: the recorded load the plan replayed at ``qps`` (``LoadTrace.describe``: its name, size, span, own rate
    #: and gaps' cv), or None for generated arrivals
    arrival_trace: str | None = None
    #: where the sharing of a GPU by several instances was measured and how far to trust it
    #: (``InstanceSharing.describe``), for a plan with more than one; None for one
    instance_sharing: str | None = None


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


def plan(latency: LatencyModel | LatencyFn, qps: float, slo_p99_ms: float, *,
         max_batch_choices: Sequence[int] = MAX_BATCH_CHOICES, delay_us_choices: Sequence[int] = DELAY_US_CHOICES,
         max_gpus: int = 64, requests: int = REQUESTS, seed: int = SEED, budget: int | None = DEFAULT_BUDGET,
         exhaustive: bool = False, engine: Engine = "auto", runs: Runs | None = None,
         scheduler: Scheduler = DEFAULT_SCHEDULER, stalls: HostStalls | None = None,
         arrival_cv: float = 1.0, arrival_trace: LoadTrace | None = None,
         instance_choices: Sequence[int] = (1,)) -> Plan:
    """The fewest GPUs (the load split evenly at random) and the dynamic-batching settings and instances
    per GPU among the choices that serve ``qps`` with a simulated p99 of at most ``slo_p99_ms`` and each
    GPU's load below ``MAX_UTILISATION`` of its capacity; see the module's docstring for the model and
    the search.

    ``budget`` caps the requests this plan simulates (None: no cap). ``exhaustive`` runs every
    simulation to its end, the search as it was before runs were given up (the baseline of
    ``benchmarks/capacity_planner.py``: the same plan, slower, with no budget); ``engine="events"``
    runs them on SimPy's event loop, as before ``single_instance`` (the benchmark's "before"; a
    setting Triton's code batches otherwise than the rule keeps its own walk).
    ``runs`` shares simulations between the plans of a grid (one latency model, request count
    and seed; ``Runs(latency, requests, seed)``): the plan is the same, its simulations fewer.
    ``scheduler`` is how the simulated server forms batches: ``triton``, as Triton's code does (a
    batch sent after its queue delay waits frozen behind the running one), or ``rule``, Triton's
    documented rule; they differ only for settings with a delay.
    ``stalls`` are the serving host's pauses and drift (``ServingPath.stalls``), replayed in every run:
    the p99 a host that stops now and then, or slows for a while, serves (None, or a steady
    ``HostStalls``: one that does neither, as before).
    ``arrival_cv`` is the coefficient of variation of the gaps between the load's requests: 1,
    Poisson (as before it was asked); 2, bursty traffic, which needs more headroom for the same p99.
    ``arrival_trace``: a recorded load instead (``load_trace.LoadTrace``), its times scaled so that its
    mean rate is ``qps`` (``arrival_trace.rate_qps``: as recorded); each run then replays its GPU's whole
    share of it, at least ``requests`` requests, which a long trace makes costlier than a generated run.
    ``instance_choices``: the model instances per GPU a plan weighs (``instance_sharing.instance_choices``:
    1, 2 and 4 measured; one by default, as before they were weighed).
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
    instances = _choices("instance_choices", instance_choices, 1, MAX_INSTANCES)
    if not is_int(max_gpus) or not 1 <= max_gpus <= MAX_GPUS:
        raise ValueError(f"max_gpus: must be an integer in [1, {MAX_GPUS}], not {max_gpus!r}")
    if not is_int(requests) or not MIN_REQUESTS <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests: must be an integer in [{MIN_REQUESTS}, {MAX_REQUESTS}], not {requests!r}")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed: must be a non-negative integer, not {seed!r}")
    if budget is not None and (not is_int(budget) or not requests <= budget <= MAX_BUDGET):
        raise ValueError(f"budget: must be an integer in [requests={requests}, {MAX_BUDGET}] or None, not {budget!r}")
    if engine not in ("auto", "events"):
        raise ValueError(f"engine: must be 'auto' or 'events', not {engine!r}")
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler: must be one of {SCHEDULERS}, not {scheduler!r}")
    if stalls is not None and not isinstance(stalls, HostStalls):
        raise ValueError(f"stalls: must be a HostStalls or None, not {type(stalls).__name__}")
    stalls = steady_as_none(stalls)
    arrival_cv = checked_arrival_cv(arrival_cv)
    arrival_trace = checked_trace(arrival_trace, arrival_cv)
    if runs is None:
        runs = Runs(latency, requests, seed, engine, scheduler, stalls, arrival_cv, arrival_trace)
    elif (runs.latency, runs.requests, runs.seed, runs.engine, runs.scheduler, runs.stalls, runs.arrival_cv,
          runs.trace) != (latency, requests, seed, engine, scheduler, stalls, arrival_cv, arrival_trace):
        raise ValueError("runs: were made for another latency model, request count, seed, engine, scheduler, "
                         "host pauses and drift (stalls), arrival_cv or arrival_trace")

    search = Search(runs, float(qps), float(slo_p99_ms), None if exhaustive else budget)
    candidates = weighed_settings(batches, delays, instances)
    capacity = {(b, k): search.capacity_qps(b, k) for b, _, k in candidates}
    reachable = [c for c in candidates if search.fastest_ms(c[0]) <= slo_p99_ms]
    lower = max(1, math.ceil(qps / (MAX_UTILISATION * max(capacity.values()))))

    def viable(candidate: Setting, gpus: int) -> bool:  # not ruled out without simulating
        return qps / gpus < MAX_UTILISATION * capacity[(candidate[0], candidate[2])]

    def any_feasible(gpus: int) -> bool:
        if exhaustive:
            return any(viable(c, gpus) and search.simulate(c, gpus).p99_ms <= slo_p99_ms for c in reachable)
        return any(viable(c, gpus) and search.within(c, gpus, slo_p99_ms) is not None for c in reachable)

    def lowest(options: Sequence[Setting], gpus: int, bound_ms: float) -> tuple[Setting, SimResult]:
        if exhaustive:
            done = [(c, search.simulate(c, gpus)) for c in options]
            return min(((c, r) for c, r in done if r.p99_ms <= bound_ms), key=lambda o: (o[1].p99_ms, *o[0]))
        best = search.best(options, gpus, bound_ms)
        assert best is not None  # callers know that one is within the bound
        return best

    try:
        found = _fewest_gpus(any_feasible, lower, max_gpus) if reachable and lower <= max_gpus else None
        if found is not None:
            setting, result = lowest([c for c in reachable if viable(c, found)], found, slo_p99_ms)
            return _plan(search, found, setting, result, meets=True, reason="")
        # Best effort: the lowest p99 on every GPU allowed.
        setting, result = lowest(candidates, max_gpus, math.inf)
    except OutOfBudget:
        return _stopped_at_budget(search, max_gpus, candidates, reachable, viable)
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
    return _plan(search, max_gpus, setting, result, meets=False, reason=reason)


def _fewest_gpus(any_feasible: Callable[[int], bool], lower: int, max_gpus: int) -> int | None:
    """The fewest GPUs from ``lower`` to ``max_gpus`` on which ``any_feasible``, assuming that once
    true it stays true as GPUs are added: ``lower``, then ``max_gpus`` (false there: None, no
    galloping through hopeless counts), then galloping up from ``lower`` and bisecting down."""
    if any_feasible(lower):
        return lower
    if lower >= max_gpus or not any_feasible(max_gpus):
        return None
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
    return found


def _stopped_at_budget(search: Search, max_gpus: int, candidates: Sequence[Setting], reachable: Sequence[Setting],
                       viable: Callable[[Setting, int], bool]) -> Plan:
    """The plan when the budget ran out mid-search: the fewest GPUs among the finished runs that meet
    the objective (then the lowest p99, smallest max_batch, shortest delay, fewest instances), said to
    be possibly more than needed; else the lowest p99 finished on ``max_gpus`` (one more run if none
    is there), said not to meet it."""
    spent = f"the search stopped at its budget of {search.budget:,} simulated requests"
    finished = search.finished()
    meeting = [(gpus, result.p99_ms, (b, d, k)) for (b, d, k, gpus), result in finished.items()
               if result.p99_ms <= search.slo_ms and (b, d, k) in reachable and viable((b, d, k), gpus)]
    if meeting:
        gpus, _, setting = min(meeting)
        return _plan(search, gpus, setting, finished[(*setting, gpus)], meets=True, budget_spent=True,
                     reason=f"{spent}: this plan meets the objective, but fewer GPUs or other settings may too")
    on_max = [(result.p99_ms, (b, d, k)) for (b, d, k, gpus), result in finished.items() if gpus == max_gpus]
    _, setting = min(on_max) if on_max else (0.0, candidates[0])
    search.budget = None  # the one run past the budget that a plan needs numbers from
    result = search.simulate(setting, max_gpus)
    return _plan(search, max_gpus, setting, result, meets=False, budget_spent=True,
                 reason=f"{spent} before it found a setting that meets p99 <= {search.slo_ms:g} ms on up to "
                        f"max_gpus={max_gpus} GPUs; the lowest p99 it finished there is {result.p99_ms:.4g} ms")


def _plan(search: Search, gpus: int, setting: Setting, result: SimResult, *,
          meets: bool, reason: str, budget_spent: bool = False) -> Plan:
    low, high = search.p99_range(setting, gpus, result) or (None, None)
    trace = search.runs.trace
    max_batch, delay_us, instances = setting
    return Plan(
        gpus=gpus, max_batch=max_batch, max_queue_delay_us=delay_us, preferred_batch_sizes=(), instances=instances,
        qps=search.qps, slo_p99_ms=search.slo_ms, per_gpu_qps=search.qps / gpus,
        p50_ms=result.p50_ms, p99_ms=result.p99_ms, throughput_qps=result.throughput_qps * gpus,
        utilisation=result.utilisation, mean_batch_size=result.mean_batch_size,
        candidates_evaluated=search.evaluated, simulated_requests=search.simulated, meets=meets,
        reason=reason, budget_spent=budget_spent, p99_low_ms=low, p99_high_ms=high, scheduler=search.runs.scheduler,
        arrival_cv=search.runs.arrival_cv if trace is None else round(trace.gap_cv, 4),
        arrival_trace=None if trace is None else trace.describe(),
        instance_sharing=search.runs.sharing.describe() if instances > 1 else None)


def plan_config(plan: Plan, sharing: InstanceSharing = MEASURED_SHARING) -> BatchingConfig:
    """The simulator's config of the plan's setting on one GPU, as its runs simulated it (``Runs.sharing``,
    the measured one by default, where it has several instances): to draw its latency against load."""
    return BatchingConfig(max_batch=plan.max_batch, max_queue_delay_us=plan.max_queue_delay_us,
                          instances=plan.instances, scheduler=plan.scheduler,
                          sharing=sharing if plan.instances > 1 else None)


def triton_config(plan: Plan) -> str:
    """The plan's batching as Triton ``config.pbtxt`` text: ``max_batch_size``, the ``dynamic_batching``
    block (``preferred_batch_size`` only when the plan has preferred sizes) and, for more than one
    instance per GPU, the ``instance_group`` (one instance is Triton's default, so none is written)."""
    lines = [f"max_batch_size: {plan.max_batch}", "dynamic_batching {"]
    if plan.preferred_batch_sizes:
        lines.append(f"  preferred_batch_size: [ {', '.join(str(p) for p in plan.preferred_batch_sizes)} ]")
    lines.append(f"  max_queue_delay_microseconds: {plan.max_queue_delay_us}")
    lines.append("}")
    if plan.instances > 1:
        lines.append(f"instance_group [ {{ count: {plan.instances} kind: KIND_GPU }} ]")
    return "\n".join(lines) + "\n"


__all__: Sequence[str] = ["DEFAULT_BUDGET", "DELAY_US_CHOICES", "MAX_ARRIVAL_CV", "MAX_BATCH_CHOICES",
                          "MAX_SUMMED_BATCH", "MAX_UTILISATION", "MIN_ARRIVAL_CV", "Plan", "REQUESTS", "SEED",
                          "checked_arrival_cv", "largest_batch", "limited_choices", "plan", "plan_config",
                          "triton_config", "weighed_instances", "weighed_settings"]
