"""predictor.selection over the shipped bundles: the ranking, each constraint, an objective no device
meets, a precision a device lacks, and the refusals."""

from __future__ import annotations

import math

import pytest

from predictor import device_bundles
from predictor.devices import DEVICES
from predictor.predict import Predictor
from predictor.selection import Constraints, Selection, select
from predictor.zoo import load_zoo_graph


@pytest.fixture(scope="module")
def predictors() -> dict[str, Predictor]:
    return device_bundles.load_all()


@pytest.fixture(scope="module")
def resnet50(predictors: dict[str, Predictor]) -> Selection:
    return select(load_zoo_graph("resnet50"), predictors, 8, "fp16", "cudagraph")


def test_every_catalog_device_is_ranked_and_says_where_its_numbers_come_from(resnet50: Selection) -> None:
    ranked = {c.device: c for c in resnet50.ranked}
    gpus = {d for d, spec in DEVICES.items() if spec.kind == "gpu"}
    assert set(ranked) == gpus  # a CPU runs no CUDA graph: skipped, and why (tests/predictor/test_cpu_device.py)
    assert set(resnet50.skipped) == set(DEVICES) - gpus
    for device, choice in ranked.items():
        assert choice.provenance == DEVICES[device].provenance, device
        transferred = any(w.startswith("transferred:") for w in choice.warnings)
        assert transferred == (choice.provenance == "transferred"), device


def test_without_constraints_devices_come_cheapest_per_inference_first(resnet50: Selection) -> None:
    assert all(c.meets for c in resnet50.ranked)  # resnet50 at batch 8 fits every catalog GPU
    costs = [c.cost_per_million for c in resnet50.ranked]
    priced = [c for c in costs if c is not None]
    assert priced == sorted(priced) and costs[:len(priced)] == priced  # unpriced ones, if any, after
    best = resnet50.best
    assert best is resnet50.ranked[0] and resnet50.verdict.startswith(best.name)
    for c in resnet50.ranked:
        assert math.isclose(c.throughput_qps, 8 / c.latency_ms * 1e3)
        if c.price_per_hour is not None:
            assert math.isclose(c.cost_per_million, c.price_per_hour / (c.throughput_qps * 3600) * 1e6)
        assert c.low_ms < c.latency_ms < c.p99_ms < c.latency_ms * 1.03 and c.latency_ms < c.high_ms


def test_a_p99_objective_keeps_only_devices_fast_enough(predictors: dict[str, Predictor],
                                                        resnet50: Selection) -> None:
    latencies = sorted(c.p99_ms for c in resnet50.ranked)
    objective = latencies[len(latencies) // 2]  # about half the devices are fast enough
    tight = select(load_zoo_graph("resnet50"), predictors, 8, "fp16", "cudagraph", Constraints(slo_p99_ms=objective))
    meeting = [c for c in tight.ranked if c.meets]
    assert meeting and len(meeting) < len(tight.ranked)
    assert all(c.p99_ms <= objective for c in meeting)
    assert all(c.p99_ms > objective and "over the objective" in c.reasons[0] for c in tight.ranked if not c.meets)
    assert tight.ranked[:len(meeting)] == meeting  # meeting devices first
    assert tight.best is not None and tight.best.p99_ms <= objective
    cheaper_but_slow = [c for c in resnet50.ranked if c.cost_per_million is not None and c.p99_ms > objective
                        and c.cost_per_million < tight.best.cost_per_million]
    assert cheaper_but_slow  # the objective changed the choice: the cheapest devices were too slow


def test_a_throughput_floor_is_per_device(predictors: dict[str, Predictor], resnet50: Selection) -> None:
    fastest = max(c.throughput_qps for c in resnet50.ranked)
    result = select(load_zoo_graph("resnet50"), predictors, 8, "fp16", "cudagraph",
                    Constraints(min_throughput_qps=fastest * 0.99))
    assert [c.device for c in result.ranked if c.meets] == [max(resnet50.ranked, key=lambda c: c.throughput_qps).device]


def test_an_objective_no_device_meets_is_answered_with_the_nearest(predictors: dict[str, Predictor],
                                                                   resnet50: Selection) -> None:
    quickest = min(c.p99_ms for c in resnet50.ranked)
    result = select(load_zoo_graph("resnet50"), predictors, 8, "fp16", "cudagraph",
                    Constraints(slo_p99_ms=quickest / 2))
    assert result.best is None and not any(c.meets for c in result.ranked)
    nearest = result.ranked[0]
    assert nearest.p99_ms == quickest
    assert result.verdict.startswith("none meets the constraints; nearest: ") and nearest.device in result.verdict


def test_a_model_too_large_for_a_device_is_kept_off_it(predictors: dict[str, Predictor]) -> None:
    """qwen2-0.5b at batch 8192: about 54 GiB (predictor.memory), more than a 16-48 GiB card holds."""
    result = select(load_zoo_graph("qwen2-0.5b"), predictors, 8192, "fp16", "cudagraph")
    small = {d for d, spec in DEVICES.items() if spec.memory_bytes <= 48 * 2**30}
    for c in result.ranked:
        fits = c.memory_bytes <= c.device_memory_bytes
        assert c.meets == fits
        if not fits:
            assert "GiB" in c.reasons[0]
    assert small and all(not c.meets for c in result.ranked if c.device in small)
    assert any(c.meets for c in result.ranked)


def test_a_precision_a_device_lacks_skips_it_by_name(predictors: dict[str, Predictor]) -> None:
    result = select(load_zoo_graph("resnet18"), predictors, 1, "bf16", "cudagraph")
    assert "tesla-t4" in result.skipped and "bf16" in result.skipped["tesla-t4"]
    assert "tesla-t4" not in {c.device for c in result.ranked}


def test_eager_selection_names_its_host(predictors: dict[str, Predictor]) -> None:
    result = select(load_zoo_graph("resnet18"), predictors, 1, "fp16", "eager")
    assert result.host is not None and result.best is not None
    h200 = next(p for p in predictors.values() if p.device.device_id == "nvidia-h200")
    assert result.host == h200.host.id  # type: ignore[union-attr]


@pytest.mark.parametrize(("constraints", "field"), [
    (dict(slo_p99_ms=0.0), "slo_p99_ms"), (dict(slo_p99_ms=-1.0), "slo_p99_ms"),
    (dict(slo_p99_ms=math.nan), "slo_p99_ms"), (dict(slo_p99_ms=1e12), "slo_p99_ms"),
    (dict(min_throughput_qps=math.inf), "min_throughput_qps"), (dict(min_throughput_qps=True), "min_throughput_qps"),
])
def test_bad_constraints_are_refused_naming_the_field(constraints: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        Constraints(**constraints)  # type: ignore[arg-type]


def test_a_bad_variant_is_refused_before_anything_is_predicted(predictors: dict[str, Predictor]) -> None:
    with pytest.raises(ValueError, match="batch"):
        select(load_zoo_graph("resnet18"), predictors, 0, "fp16", "cudagraph")
    with pytest.raises(ValueError, match="precision"):
        select(load_zoo_graph("resnet18"), predictors, 1, "fp8", "cudagraph")


def test_each_device_carries_its_p99_at_both_ends_of_its_interval(resnet50: Selection) -> None:
    for c in resnet50.ranked:
        assert math.isclose(c.p99_low_ms / c.low_ms, c.p99_ms / c.latency_ms)
        assert math.isclose(c.p99_high_ms / c.high_ms, c.p99_ms / c.latency_ms)


def test_a_choice_is_settled_only_where_no_end_of_an_interval_could_change_it(predictors: dict[str, Predictor]) -> None:
    """Among measured devices, without constraints nothing can move a device across one: settled.
    An objective between the chosen device's p99 and the p99 at the slow end of its interval leaves
    it in doubt, naming it; one a cheaper device misses at its median but meets at the fast end of
    its interval names that device; an objective met by every device even at the slow end is
    settled again."""
    measured = {d: p for d, p in predictors.items() if DEVICES[d].provenance == "measured"}
    graph = load_zoo_graph("resnet50")
    base = select(graph, measured, 8, "fp16", "cudagraph")
    assert base.settled and base.doubts == ()
    best = base.ranked[0]
    predictors = measured
    tight = select(graph, predictors, 8, "fp16", "cudagraph",
                   Constraints(slo_p99_ms=(best.p99_ms + best.p99_high_ms) / 2))
    assert tight.best is not None and tight.best.device == best.device and not tight.settled
    assert any(d.startswith(f"{best.device} at the slow end of its interval: p99 ") for d in tight.doubts)
    # the cheapest device, just missed at its median: the next one is chosen, in doubt because of it
    missed = select(graph, predictors, 8, "fp16", "cudagraph",
                    Constraints(slo_p99_ms=(best.p99_ms + best.p99_low_ms) / 2))
    assert missed.best is not None and missed.best.device != best.device
    assert any(d.startswith(f"{best.device} meets them at the fast end") for d in missed.doubts)
    loose = select(graph, predictors, 8, "fp16", "cudagraph",
                   Constraints(slo_p99_ms=max(c.p99_high_ms for c in base.ranked) * 1.01))
    assert loose.settled and loose.best is not None and loose.best.device == best.device


def test_a_device_predicted_from_its_datasheet_that_could_cost_less_leaves_the_choice_in_doubt(
        resnet50: Selection) -> None:
    """The H100, predicted from its datasheet before it was measured, came out 1.14x too slow and
    lost on cost: where either device was transferred, one that could cost less at the fast end of
    its interval than the choice at the slow end of its own is named; one that could not is not."""
    best = resnet50.best
    assert best is not None and best.cost_per_million is not None and not resnet50.settled
    slowest = best.cost_per_million * best.high_ms / best.latency_ms
    named = {d.split()[0]: d for d in resnet50.doubts if " could cost less per inference " in d}
    assert named
    for c in resnet50.ranked[1:]:
        could = (c.meets and c.cost_per_million is not None and "transferred" in (c.provenance, best.provenance)
                 and c.cost_per_million * c.low_ms / c.latency_ms < slowest)
        assert (c.device in named) == could, c.device
        if could:
            assert named[c.device].endswith("predicted from a datasheet") and f"{slowest:.3g}" in named[c.device]
    assert resnet50.ranked[-1].device not in named  # the dearest is dearer even at the ends


def test_none_meeting_is_settled_only_when_none_would_at_the_fast_end(predictors: dict[str, Predictor],
                                                                      resnet50: Selection) -> None:
    graph = load_zoo_graph("resnet50")
    fastest = min(resnet50.ranked, key=lambda c: c.p99_ms)
    near = select(graph, predictors, 8, "fp16", "cudagraph",
                  Constraints(slo_p99_ms=(fastest.p99_ms + fastest.p99_low_ms) / 2))
    assert near.best is None and not near.settled
    assert any(d.startswith(f"{fastest.device} meets them at the fast end") for d in near.doubts)
    far = select(graph, predictors, 8, "fp16", "cudagraph", Constraints(slo_p99_ms=fastest.p99_low_ms * 0.5))
    assert far.best is None and far.settled


def test_a_doubt_names_the_constraint_it_is_about(predictors: dict[str, Predictor], resnet50: Selection) -> None:
    """With a throughput floor alone, a doubt names the throughput, not a p99 nobody asked about."""
    best = resnet50.ranked[0]
    slow_end, median = 8 / best.high_ms * 1e3, best.throughput_qps
    floor = select(load_zoo_graph("resnet50"), predictors, 8, "fp16", "cudagraph",
                   Constraints(min_throughput_qps=(slow_end + median) / 2))
    assert floor.best is not None and floor.best.device == best.device and not floor.settled
    said = next(d for d in floor.doubts if d.startswith(best.device))
    assert "/s asked" in said and "objective" not in said


def test_a_serving_path_adds_the_servers_time_to_every_device_and_narrows_a_fast_devices_lead(
        predictors: dict[str, Predictor]) -> None:
    """The server's own time is the same on every device: each batch takes it on top, the p99 spread
    is at least the path's, and cost per inference then favours devices the GPU time alone ranked
    below their speed (at batch 1, PyTriton's 1.6 ms a batch is more than resnet50's GPU time)."""
    from predictor.capacity.serving_path import stored_serving_path

    path = stored_serving_path("pytriton-h100")
    graph = load_zoo_graph("resnet50")
    alone = select(graph, predictors, 1, "fp16", "cudagraph")
    served = select(graph, predictors, 1, "fp16", "cudagraph", serving_path=path)
    assert served.serving_path == path and alone.serving_path is None
    before = {c.device: c for c in alone.ranked}
    for c in served.ranked:
        gpu = before[c.device]
        assert c.latency_ms == pytest.approx(gpu.latency_ms + path.added_ms(1))
        assert c.low_ms == pytest.approx(gpu.low_ms + path.added_ms(1, "low"))
        assert c.high_ms == pytest.approx(gpu.high_ms + path.added_ms(1, "high"))
        assert c.p99_ms == pytest.approx(c.latency_ms * math.exp(2.3263478740408408 * path.sigma))
        assert math.isclose(c.throughput_qps, 1 / c.latency_ms * 1e3)
    # the fastest device's lead over the slowest shrinks: a fixed cost per batch
    fastest, slowest = min(alone.ranked, key=lambda c: c.latency_ms), max(alone.ranked, key=lambda c: c.latency_ms)
    after = {c.device: c for c in served.ranked}
    assert (after[slowest.device].latency_ms / after[fastest.device].latency_ms
            < slowest.latency_ms / fastest.latency_ms)
    # an objective every device met on its GPU time alone is missed by some once the server is counted
    objective = max(c.p99_ms for c in alone.ranked) * 1.01
    tight = select(graph, predictors, 1, "fp16", "cudagraph", Constraints(slo_p99_ms=objective), serving_path=path)
    assert all(c.meets for c in select(graph, predictors, 1, "fp16", "cudagraph",
                                       Constraints(slo_p99_ms=objective)).ranked)
    assert not any(c.meets for c in tight.ranked)  # 1.6 ms a batch is more than any device's GPU time here
