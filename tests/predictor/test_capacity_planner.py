"""predictor.capacity.planner: batching where one GPU at batch 1 cannot keep up, GPU counts that never
fall as the load grows or the objective tightens, an objective out of reach, the Triton text, refusals;
the bounded search (runs given up, a budget, runs shared by a grid) gives the exhaustive search's plans."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import pytest

from predictor.capacity.planner import DEFAULT_BUDGET, MAX_UTILISATION, REQUESTS, Plan, plan, triton_config
from predictor.capacity.runs import Runs
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate
from tests.predictor.planning_helpers import batch_friendly, quick, without_costs

SLO_MS = 10.0


@pytest.fixture(scope="module")
def busy() -> Plan:
    return plan(batch_friendly, 2_000, SLO_MS)


def test_a_load_one_gpu_cannot_serve_at_batch_one_gets_batching_and_meets_the_objective(busy: Plan) -> None:
    assert 2_000 > 1e3 / batch_friendly(1)[0]  # batch 1 on one GPU would fall behind
    assert busy.meets and busy.reason == ""
    assert busy.max_batch > 1 and busy.mean_batch_size > 1
    assert busy.p50_ms <= busy.p99_ms <= SLO_MS
    capacity = max(b / batch_friendly(b)[0] * 1e3 for b in range(1, busy.max_batch + 1))
    assert busy.per_gpu_qps < MAX_UTILISATION * capacity  # headroom against what a GPU can serve
    assert busy.per_gpu_qps == pytest.approx(2_000 / busy.gpus)
    assert busy.throughput_qps == pytest.approx(2_000, rel=0.05)
    assert busy.preferred_batch_sizes == ()
    assert busy.candidates_evaluated >= 1
    # the plan's numbers are the simulator's for its settings, and its p99 meets the objective
    again = simulate(Arrivals("poisson", rate_qps=busy.per_gpu_qps, seed=0),
                     BatchingConfig(max_batch=busy.max_batch, max_queue_delay_us=busy.max_queue_delay_us),
                     batch_friendly, requests=20_000)
    assert again.p99_ms == pytest.approx(busy.p99_ms) and again.p99_ms <= SLO_MS


def test_the_same_seed_gives_the_same_plan() -> None:
    assert quick(3_000, SLO_MS) == quick(3_000, SLO_MS)


def test_more_load_never_needs_fewer_gpus() -> None:
    plans = [quick(qps, SLO_MS) for qps in (300, 2_000, 10_000, 30_000, 60_000)]
    assert all(p.meets and p.p99_ms <= SLO_MS for p in plans)
    gpus = [p.gpus for p in plans]
    assert gpus == sorted(gpus) and gpus[-1] > gpus[0]


def test_a_tighter_objective_never_needs_fewer_gpus() -> None:
    plans = [quick(5_000, slo) for slo in (20.0, 10.0, 6.0, 4.0)]
    assert all(p.meets and p.p99_ms <= p.slo_p99_ms for p in plans)
    gpus = [p.gpus for p in plans]
    assert gpus == sorted(gpus) and gpus[-1] > gpus[0]


def test_an_objective_below_one_request_s_latency_is_out_of_reach_with_a_reason() -> None:
    result = quick(500, 1.5, max_gpus=4)
    assert not result.meets
    assert "2.05 ms" in result.reason and "1.5 ms" in result.reason
    assert result.gpus == 4 and result.p99_ms > 1.5  # the best effort on every GPU allowed
    assert math.isfinite(result.p99_ms)


def test_too_few_gpus_for_the_load_is_a_best_effort_with_a_reason() -> None:
    result = quick(100_000, SLO_MS, max_gpus=2)
    assert not result.meets and "max_gpus=2" in result.reason and result.gpus == 2


def test_triton_config_writes_the_plan_s_numbers(busy: Plan) -> None:
    text = triton_config(busy)
    assert text.splitlines() == [
        f"max_batch_size: {busy.max_batch}",
        "dynamic_batching {",
        f"  max_queue_delay_microseconds: {busy.max_queue_delay_us}",
        "}",
    ]
    found = re.search(r"^max_batch_size: (\d+)$", text, re.M)
    assert found is not None and int(found.group(1)) == busy.max_batch
    preferred = triton_config(dataclasses.replace(busy, max_batch=8, max_queue_delay_us=500,
                                                  preferred_batch_sizes=(4, 8)))
    assert preferred.splitlines() == [
        "max_batch_size: 8",
        "dynamic_batching {",
        "  preferred_batch_size: [ 4, 8 ]",
        "  max_queue_delay_microseconds: 500",
        "}",
    ]


@pytest.mark.parametrize(("field", "call"), [
    ("qps", lambda: plan(batch_friendly, 0, SLO_MS)),
    ("qps", lambda: plan(batch_friendly, -5, SLO_MS)),
    ("qps", lambda: plan(batch_friendly, math.nan, SLO_MS)),
    ("qps", lambda: plan(batch_friendly, 2e7, SLO_MS)),
    ("slo_p99_ms", lambda: plan(batch_friendly, 100, 0)),
    ("slo_p99_ms", lambda: plan(batch_friendly, 100, math.inf)),
    ("max_batch_choices", lambda: plan(batch_friendly, 100, SLO_MS, max_batch_choices=())),
    ("max_batch_choices", lambda: plan(batch_friendly, 100, SLO_MS, max_batch_choices=(0, 4))),
    ("delay_us_choices", lambda: plan(batch_friendly, 100, SLO_MS, delay_us_choices=())),
    ("delay_us_choices", lambda: plan(batch_friendly, 100, SLO_MS, delay_us_choices=(-1,))),
    ("max_gpus", lambda: plan(batch_friendly, 100, SLO_MS, max_gpus=0)),
    ("requests", lambda: plan(batch_friendly, 100, SLO_MS, requests=10)),
    ("seed", lambda: plan(batch_friendly, 100, SLO_MS, seed=-1)),
    ("budget", lambda: plan(batch_friendly, 100, SLO_MS, budget=19_999)),
    ("budget", lambda: plan(batch_friendly, 100, SLO_MS, budget=2.5e6)),
    ("engine", lambda: plan(batch_friendly, 100, SLO_MS, engine="fast")),  # type: ignore[arg-type]
    ("runs", lambda: plan(batch_friendly, 100, SLO_MS, runs=Runs(batch_friendly, 5_000, 0))),
    ("latency", lambda: plan(lambda _b: (-1.0, 0.0), 100, SLO_MS)),
])
def test_bad_input_is_refused_naming_its_field(field: str, call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        call()


# (qps, objective ms, max_gpus): one GPU; several; 54 GPUs each almost idle with every setting's p99 within a
# few percent of the objective (the slow case); nothing meets it up to max_gpus; a load beyond max_gpus
SEARCHES = [(2_000, 10.0, 64), (20_000, 5.0, 64), (5_000, 4.0, 64), (3_000, 3.0, 64), (100_000, SLO_MS, 2)]


@pytest.mark.parametrize(("qps", "slo_ms", "max_gpus"), SEARCHES)
def test_the_bounded_search_gives_the_exhaustive_plan_for_fewer_simulated_requests(
        qps: float, slo_ms: float, max_gpus: int) -> None:
    bounded = quick(qps, slo_ms, max_gpus)
    exhaustive = quick(qps, slo_ms, max_gpus, exhaustive=True)
    assert without_costs(bounded) == without_costs(exhaustive)
    assert exhaustive.simulated_requests == exhaustive.candidates_evaluated * 5_000  # every run to its end
    assert bounded.simulated_requests <= exhaustive.simulated_requests
    if bounded.gpus > 1:  # settings ruled out on the way, each after a part of its run
        assert bounded.simulated_requests < exhaustive.simulated_requests


def test_the_exhaustive_search_on_simpy_s_event_loop_gives_the_same_plan() -> None:
    """The search and simulator as they were before this bound, against both changes at once."""
    before = quick(20_000, 5.0, exhaustive=True, engine="events")
    assert without_costs(quick(20_000, 5.0)) == without_costs(before)
    assert before.gpus > 1


def test_the_slow_objective_at_the_default_settings_fits_the_default_budget() -> None:
    """2 ms + 0.05 ms a sample at 5,000 qps and p99 4 ms: 411 settings on 13 GPU counts, each run of 20,000
    requests; the exhaustive search ran all 8.2 million requests (95 s on SimPy's loop, two quiet cores) to
    this plan, which the bounded search must still find, within its budget, for under half of them."""
    result = plan(batch_friendly, 5_000, 4.0)
    assert (result.gpus, result.max_batch, result.max_queue_delay_us) == (53, 4, 0)
    assert result.meets and result.reason == "" and result.p99_ms <= 4.0
    assert result.candidates_evaluated == 411
    assert result.simulated_requests <= min(DEFAULT_BUDGET, 0.5 * 411 * 20_000)


def test_a_search_that_reaches_its_budget_stops_and_answers_with_what_it_has() -> None:
    full = quick(5_000, 4.0)
    # some settings met the objective (on more GPUs than needed) before the budget ran out
    stopped = quick(5_000, 4.0, budget=60_000)
    assert stopped.meets and stopped.p99_ms <= 4.0 and stopped.gpus >= full.gpus
    assert "budget of 60,000 simulated requests" in stopped.reason and "fewer GPUs" in stopped.reason
    assert stopped.simulated_requests <= 60_000 + 5_000 < full.simulated_requests
    assert stopped == quick(5_000, 4.0, budget=60_000)  # the budget counts requests, not seconds
    # nothing met it yet (nothing does: see test_the_bounded_search...): the lowest p99 finished on max_gpus,
    # said not to meet the objective, after at most one run past the budget and one for the answer
    early = quick(3_000, 3.0, budget=5_000)
    assert not early.meets and early.gpus == 64 and early.p99_ms > 3.0
    assert "budget of 5,000 simulated requests before it found a setting" in early.reason
    assert early.simulated_requests <= 5_000 + 2 * 5_000


def test_runs_shared_by_a_grid_give_the_same_plans_for_fewer_simulations() -> None:
    runs = Runs(batch_friendly, 5_000, 0)
    for slo_ms in (20.0, 6.0, 4.0, 6.0):
        alone = quick(5_000, slo_ms)
        shared = quick(5_000, slo_ms, runs=runs)
        assert without_costs(shared) == without_costs(alone)
        assert shared.simulated_requests <= alone.simulated_requests
    assert shared.simulated_requests == 0  # the same question twice: nothing left to simulate


def predicted(low: float, high: float) -> LatencyModel:
    """``batch_friendly`` as a prediction whose interval runs from ``low`` to ``high`` times its median."""
    return LatencyModel(lambda b: batch_friendly(b)[0], 0.05,
                        interval_ms=lambda b: (low * batch_friendly(b)[0], high * batch_friendly(b)[0]))


def test_a_predicted_latency_gives_the_plan_a_p99_range_from_the_ends_of_its_interval() -> None:
    """The chosen setting is simulated again with every batch at either end of the interval, on
    the same arrivals and draws: an interval of zero width gives the plan's own p99 exactly, a wider
    one brackets it, and the two runs are counted in what the plan simulated."""
    point = plan(predicted(1.0, 1.0), 2_000, SLO_MS)
    assert point.p99_low_ms == point.p99_ms == point.p99_high_ms
    wide = plan(predicted(0.9, 1.1), 2_000, SLO_MS)
    assert (wide.gpus, wide.max_batch, wide.max_queue_delay_us, wide.p99_ms) == (
        point.gpus, point.max_batch, point.max_queue_delay_us, point.p99_ms)  # the plan holds for the median
    assert wide.p99_low_ms is not None and wide.p99_high_ms is not None
    assert wide.p99_low_ms < wide.p99_ms < wide.p99_high_ms
    slow = simulate(Arrivals("poisson", rate_qps=wide.per_gpu_qps, seed=0),
                    BatchingConfig(max_batch=wide.max_batch, max_queue_delay_us=wide.max_queue_delay_us),
                    LatencyModel(lambda b: 1.1 * batch_friendly(b)[0], 0.05), requests=20_000)
    assert wide.p99_high_ms == pytest.approx(slow.p99_ms, rel=1e-12)
    unranged = plan(LatencyModel(lambda b: batch_friendly(b)[0], 0.05), 2_000, SLO_MS)
    assert unranged.p99_low_ms is None and unranged.p99_high_ms is None
    assert wide.simulated_requests == unranged.simulated_requests + 2 * 20_000


def test_the_p99_range_grows_with_the_interval_and_is_shared_by_a_grid() -> None:
    narrow, wide = plan(predicted(0.95, 1.05), 2_000, SLO_MS), plan(predicted(0.8, 1.25), 2_000, SLO_MS)
    assert wide.p99_low_ms < narrow.p99_low_ms and narrow.p99_high_ms < wide.p99_high_ms  # type: ignore[operator]
    latency = predicted(0.9, 1.1)
    runs = Runs(latency, 20_000, 0)
    first = plan(latency, 2_000, SLO_MS, runs=runs)
    again = plan(latency, 2_000, SLO_MS, runs=runs)
    assert (again.p99_low_ms, again.p99_high_ms) == (first.p99_low_ms, first.p99_high_ms)
    assert again.simulated_requests == 0  # its runs and its range were the first plan's


def test_a_latency_model_without_an_interval_has_no_bound_to_be_at() -> None:
    with pytest.raises(ValueError, match="no interval"):
        LatencyModel(lambda b: 1.0).at_bound("high")


def test_a_plan_stopped_by_its_budget_still_carries_its_p99_range() -> None:
    stopped = plan(predicted(0.9, 1.1), 2_000, SLO_MS, budget=20_000)
    assert stopped.budget_spent
    assert stopped.p99_low_ms is not None and stopped.p99_high_ms is not None
    assert stopped.p99_low_ms <= stopped.p99_ms <= stopped.p99_high_ms


def test_a_plan_for_the_slow_end_plans_on_the_high_ends_and_keeps_the_interval() -> None:
    """``for_plan('slow_end')`` moves each median to the high end of its interval: the plan then
    holds if the model runs that slowly (its p99 is its range's high end), and it never needs fewer
    GPUs than the plan for the medians."""
    latency = predicted(0.8, 1.25)
    slow = latency.for_plan("slow_end")
    assert slow(4) == (1.25 * batch_friendly(4)[0], 0.05) and slow.interval_ms is latency.interval_ms
    assert latency.for_plan("median") is latency
    median_plan, slow_plan = plan(latency, 9_000, 6.0), plan(slow, 9_000, 6.0)
    assert slow_plan.p99_high_ms == slow_plan.p99_ms <= 6.0
    assert slow_plan.gpus >= median_plan.gpus
    # the plan's own run is its range's high end: only the low end is simulated again for the range
    same_medians = LatencyModel(slow.median_ms, slow.sigma, interval_ms=slow.interval_ms)
    as_median = plan(same_medians, 9_000, 6.0)
    assert (as_median.gpus, as_median.p99_ms, as_median.p99_high_ms) == (slow_plan.gpus, slow_plan.p99_ms,
                                                                         slow_plan.p99_high_ms)
    assert as_median.simulated_requests - slow_plan.simulated_requests == REQUESTS
    with pytest.raises(ValueError, match="plan_for"):
        LatencyModel(lambda b: 1.0).for_plan("slow_end")
    with pytest.raises(ValueError, match="plan_for"):
        latency.for_plan("fast_end")  # type: ignore[arg-type]


def test_limits_on_the_choices_keep_the_defaults_below_them_and_add_themselves() -> None:
    """A model exported for batches up to 24 is planned at 24 too; a service that allows no queue delay, at 0."""
    from predictor.capacity.planner import DELAY_US_CHOICES, MAX_BATCH_CHOICES, limited_choices

    assert limited_choices() == (MAX_BATCH_CHOICES, DELAY_US_CHOICES)
    assert limited_choices(24, 0) == ((1, 2, 4, 8, 16, 24), (0,))
    assert limited_choices(16, 750) == ((1, 2, 4, 8, 16), (0, 100, 500, 750))
    for args, field in (((0, None), "batch_limit"), ((129, None), "batch_limit"), ((True, None), "batch_limit"),
                        ((None, -1), "delay_limit_us"), ((None, 5001), "delay_limit_us")):
        with pytest.raises(ValueError, match=f"^{field}: must be an integer"):
            limited_choices(*args)


def test_limited_choices_bound_every_plan_met_or_not_and_every_cell_of_a_grid() -> None:
    from predictor.capacity.grid import plan_grid
    from predictor.capacity.planner import limited_choices

    batches, delays = limited_choices(12, 750)
    for qps, slo_ms, max_gpus in ((2_000, 5.0, 64), (2_000, 1.0, 64), (50_000, 5.0, 2), (20_000, 2.3, 4)):
        result = plan(batch_friendly, qps, slo_ms, max_gpus=max_gpus, max_batch_choices=batches,
                      delay_us_choices=delays)
        assert result.max_batch in batches and result.max_queue_delay_us in delays
    stopped = plan(batch_friendly, 20_000, 2.3, max_gpus=4, max_batch_choices=batches, delay_us_choices=delays,
                   budget=REQUESTS)
    assert stopped.budget_spent and stopped.max_batch in batches and stopped.max_queue_delay_us in delays
    cells = plan_grid(batch_friendly, [500, 5_000], [4.0, 30.0], max_batch_choices=batches, delay_us_choices=delays)
    assert all(c.max_batch in batches and c.max_queue_delay_us in delays for c in cells)
    assert any(c.max_batch == 12 for c in cells)  # the limit itself is a choice
