"""predictor.capacity.planner: batching where one GPU at batch 1 cannot keep up, GPU counts that never
fall as the load grows or the objective tightens, an objective out of reach, the Triton text, refusals."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import pytest

from predictor.capacity.planner import MAX_UTILISATION, Plan, plan, triton_config
from predictor.capacity.simulator import Arrivals, BatchingConfig, simulate

SLO_MS = 10.0


def batch_friendly(batch: int) -> tuple[float, float]:
    """2 ms plus 0.05 ms per sample: batch 1 serves 488 qps, batch 64 over 12,000."""
    return 2.0 + 0.05 * batch, 0.0


def quick(qps: float, slo_ms: float, max_gpus: int = 64) -> Plan:
    """A smaller search for the tests that plan many times (a default plan simulates up to 48 settings)."""
    return plan(batch_friendly, qps, slo_ms, max_batch_choices=(1, 4, 16, 64), delay_us_choices=(0, 1000),
                max_gpus=max_gpus, requests=5_000)


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
    ("latency", lambda: plan(lambda _b: (-1.0, 0.0), 100, SLO_MS)),
])
def test_bad_input_is_refused_naming_its_field(field: str, call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        call()
