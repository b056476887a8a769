"""Planning for bursty arrivals (``arrival_cv``): through the planner, its shared runs, its grid and
its load curve. A cv of 1 plans exactly as before it could be asked; a burstier load never looks
easier; each GPU is simulated with its random share of the load; bad values name ``arrival_cv``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from predictor.capacity.grid import plan_grid
from predictor.capacity.load_curve import load_curve
from predictor.capacity.planner import plan
from predictor.capacity.runs import Runs
from predictor.capacity.simulator import Arrivals, BatchingConfig, simulate
from tests.predictor.planning_helpers import batch_friendly, quick, without_costs


def test_a_cv_of_one_is_the_poisson_plan_made_before_arrival_cv_was_asked() -> None:
    for qps, slo_ms in ((2_000, 5.0), (9_000, 6.0)):
        before = quick(qps, slo_ms)
        assert before.arrival_cv == 1.0
        assert quick(qps, slo_ms, arrival_cv=1.0) == quick(qps, slo_ms, arrival_cv=1) == before
    # and its numbers are the Poisson simulation's of its setting at qps / G
    result = plan(batch_friendly, 2_000, 5.0)
    again = simulate(Arrivals("poisson", rate_qps=result.per_gpu_qps, seed=0),
                     BatchingConfig(max_batch=result.max_batch, max_queue_delay_us=result.max_queue_delay_us,
                                    scheduler=result.scheduler), batch_friendly, requests=20_000)
    assert again.p99_ms == result.p99_ms


@pytest.mark.parametrize("qps, slo_ms", [(2_000, 5.0), (5_000, 5.0), (9_000, 6.0), (2_000, 4.0)])
def test_bursty_arrivals_never_look_easier(qps: float, slo_ms: float) -> None:
    """At a cv of 3 the same load and objective take more GPUs (each of these does: 1 -> 2, 2 -> 3,
    2 -> 3, 22 -> 37 GPUs), never fewer, or a higher p99 on as many."""
    poisson, bursty = quick(qps, slo_ms), quick(qps, slo_ms, arrival_cv=3.0)
    assert poisson.meets and bursty.meets and bursty.arrival_cv == 3.0
    assert bursty.gpus > poisson.gpus or (bursty.gpus == poisson.gpus and bursty.p99_ms > poisson.p99_ms)


def test_each_gpu_is_simulated_with_its_random_share_of_the_bursty_load() -> None:
    """The plan's numbers are one GPU's run on its share of the whole gamma process (``share=G``),
    calmer than the whole process on one GPU would be."""
    result = plan(batch_friendly, 5_000, 5.0, arrival_cv=3.0)
    assert result.meets and result.gpus > 1
    config = BatchingConfig(max_batch=result.max_batch, max_queue_delay_us=result.max_queue_delay_us,
                            scheduler=result.scheduler)
    share = simulate(Arrivals("gamma", rate_qps=5_000, cv=3.0, share=result.gpus, seed=0), config, batch_friendly,
                     requests=20_000)
    assert share.p99_ms == result.p99_ms and result.per_gpu_qps == pytest.approx(5_000 / result.gpus)
    whole = simulate(Arrivals("gamma", rate_qps=result.per_gpu_qps, cv=3.0, seed=0), config, batch_friendly,
                     requests=20_000)
    assert whole.p99_ms > result.p99_ms


def test_runs_are_shared_only_between_plans_for_the_same_arrivals() -> None:
    bursty = Runs(batch_friendly, 5_000, 0, arrival_cv=3.0)
    first = quick(2_000, 5.0, arrival_cv=3.0, runs=bursty)
    again = quick(2_000, 5.0, arrival_cv=3.0, runs=bursty)
    assert without_costs(again) == without_costs(first) and again.simulated_requests == 0
    with pytest.raises(ValueError, match="^runs:.*arrival_cv"):
        quick(2_000, 5.0, runs=bursty)
    with pytest.raises(ValueError, match="^runs:.*arrival_cv"):
        quick(2_000, 5.0, arrival_cv=3.0, runs=Runs(batch_friendly, 5_000, 0))


def test_a_grid_of_bursty_plans_is_each_cells_plan_alone() -> None:
    grid = plan_grid(batch_friendly, [1_000, 3_000], [8.0], arrival_cv=2.0)
    alone = [plan(batch_friendly, qps, 8.0, arrival_cv=2.0) for qps in (1_000, 3_000)]
    assert [without_costs(p) for p in grid] == [without_costs(p) for p in alone]
    assert all(p.arrival_cv == 2.0 for p in grid)


def test_the_load_curve_of_a_bursty_plan_passes_through_it_given_its_gpus() -> None:
    chosen = plan(batch_friendly, 5_000, 5.0, arrival_cv=3.0)
    config = BatchingConfig(max_batch=chosen.max_batch, max_queue_delay_us=chosen.max_queue_delay_us,
                            scheduler=chosen.scheduler)
    (point,) = load_curve(batch_friendly, config, [chosen.per_gpu_qps], arrival_cv=3.0, gpus=chosen.gpus)
    assert point.p99_ms == pytest.approx(chosen.p99_ms, rel=1e-9)
    (whole,) = load_curve(batch_friendly, config, [chosen.per_gpu_qps], arrival_cv=3.0)  # one GPU takes it all
    (calm,) = load_curve(batch_friendly, config, [chosen.per_gpu_qps], gpus=chosen.gpus)  # Poisson on any count
    assert calm.p99_ms < point.p99_ms < whole.p99_ms


def test_a_fleets_whole_load_may_exceed_one_servers_rate_limit() -> None:
    """The rate limit (a unit mistake's guard) is one server's: a bursty load split over many GPUs
    has a whole rate above it near the top of a plan's load curve, which the --plot of a plan at
    9 million qps on 815 GPUs once stopped at."""
    config = BatchingConfig(max_batch=64)
    (point,) = load_curve(batch_friendly, config, [13_000], arrival_cv=2.0, gpus=815, requests=2_000)
    assert point.throughput_qps > 0
    with pytest.raises(ValueError, match="rate_qps"):
        Arrivals("gamma", rate_qps=2e7, cv=2.0, share=1)


BAD_CVS = [0, -1.0, math.nan, math.inf, 11, 0.001, "2"]
REFUSALS: list[tuple[str, Callable[[Any], object]]] = [
    ("plan", lambda cv: plan(batch_friendly, 100, 10.0, arrival_cv=cv)),
    ("plan_grid", lambda cv: plan_grid(batch_friendly, [100], [10.0], arrival_cv=cv)),
    ("load_curve", lambda cv: load_curve(batch_friendly, BatchingConfig(), [100], arrival_cv=cv)),
]


@pytest.mark.parametrize("cv", BAD_CVS, ids=repr)
@pytest.mark.parametrize(("name", "make"), REFUSALS, ids=[name for name, _ in REFUSALS])
def test_an_arrival_cv_out_of_range_is_refused_naming_it(name: str, make: Callable[[Any], object], cv: Any) -> None:
    with pytest.raises(ValueError, match=r"^arrival_cv:"):
        make(cv)


def test_a_load_curve_split_over_no_gpus_is_refused_naming_gpus() -> None:
    with pytest.raises(ValueError, match=r"^gpus:"):
        load_curve(batch_friendly, BatchingConfig(), [100], arrival_cv=2.0, gpus=0)
