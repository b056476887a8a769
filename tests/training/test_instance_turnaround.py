"""The instance's turnaround after a Triton batch (training/instance_turnaround.py): read from batches
in a row, on frames worked out by hand and on the committed Triton trace, and what the simulator then
makes of Triton's loads (training/serving_check.py: its batching as Triton's code, its service plus
the turnaround) against Triton's documented rule."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.instance_turnaround import back_to_back, turnaround_ms, with_turnaround
from training.serving_check import (
    ServingData,
    load_serving,
    measure_load,
    measured_service,
    simulate_load,
    simulated_service,
)

TRITON = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h100-80gb-hbm3" / "serving-triton"
DELAYED = "mb32-pref16,32-delay1000us"


def frame(received: list[int], start: list[int], finish: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"received_us": received, "start_us": start, "finish_us": finish})


def test_only_batches_that_could_have_started_at_the_previous_end_count() -> None:
    # batch A (requests 0, 1) runs 100-200; batch B (request 2, there at 150) starts at 230: back to
    # back, gap 30. Batch C (request 3) arrives at 400, after B's end at 300: the instance was idle.
    rows = frame(received=[0, 10, 150, 400], start=[100, 100, 230, 410], finish=[200, 200, 300, 500])
    sizes, gaps = back_to_back(rows, max_queue_delay_us=0.0)
    assert sizes.tolist() == [2] and gaps.tolist() == [30]
    # with a 100 us queue delay B's request could not go before 250: not back to back either
    sizes, gaps = back_to_back(rows, max_queue_delay_us=100.0)
    assert sizes.tolist() == [] and gaps.tolist() == []


def test_sizes_seen_often_take_their_median_and_the_rest_the_line() -> None:
    pairs = [(np.array([1] * 5 + [3] * 5 + [2] * 4), np.array([50] * 5 + [90] * 5 + [1000] * 4))]
    turnaround = turnaround_ms(pairs, [1, 2, 3, 4])
    assert turnaround[1] == pytest.approx(0.050) and turnaround[3] == pytest.approx(0.090)
    assert turnaround[2] == pytest.approx(0.070)  # seen 4 times: the line through 1 and 3, not 1000 us
    assert turnaround[4] == pytest.approx(0.110)
    assert with_turnaround({1: 2.0, 3: 4.0}, turnaround) == pytest.approx({1: 2.05, 3: 4.09})


def test_one_size_seen_is_no_line() -> None:
    with pytest.raises(ValueError, match="two"):
        turnaround_ms([(np.array([8] * 9), np.array([100] * 9))], [1, 8])


@pytest.fixture(scope="module")
def triton() -> ServingData:
    return load_serving(TRITON)


def test_tritons_turnaround_grows_with_the_batch_and_is_added_to_its_service(triton: ServingData) -> None:
    assert triton.triton and {c.scheduler for c in triton.settings.values()} == {"triton"}
    for model in triton.models:
        timed = measured_service(triton.service[triton.service["model"] == model])
        given = simulated_service(triton, model)
        added = {b: given.medians_ms[b] - timed.medians_ms[b] for b in timed.medians_ms}
        assert 0.02 < added[1] < 0.15 and 0.3 < added[32] < 1.0  # ms: a response per request to hand back
        assert added[32] > 4 * added[1]
        assert given.sigmas == timed.sigmas


@pytest.mark.parametrize("model", ["densenet169", "roberta-large"])
def test_a_light_delayed_load_waits_as_tritons_code_batches_not_as_its_documented_rule(
        triton: ServingData, model: str) -> None:
    """At 0.3 of capacity with preferred sizes and a 1 ms delay, Triton's measured median is 12-17 ms;
    its code's model comes within 10%, its documented rule (a batch formed when the instance frees)
    is a quarter or more too low."""
    load = next(f for m, s, lv, f in triton.loads() if (m, s, lv) == (model, DELAYED, 0.3))
    config = triton.settings[DELAYED]
    service = simulated_service(triton, model)
    measured = measure_load(model, DELAYED, 0.3, load, config, {b: m * 1e-3 for b, m in service.medians_ms.items()})
    code = simulate_load(measured.offered_qps, config, service, requests=30_000)
    rule = simulate_load(measured.offered_qps, replace(config, scheduler="rule"), service, requests=30_000)
    assert code.p50_ms == pytest.approx(measured.stats.p50_ms, rel=0.10)
    assert rule.p50_ms < 0.75 * measured.stats.p50_ms
