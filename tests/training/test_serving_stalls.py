"""Host pauses read off measured Triton loads (training/serving_stalls.py), on the committed sets."""

from __future__ import annotations

from pathlib import Path

from predictor.capacity.host_stalls import STALLED_OVER
from training.serving_check import ServingData, TableLatency, load_serving, measured_service
from training.serving_stalls import host_stalls, service_without_stalls

H100 = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h100-80gb-hbm3"


def timed(data: ServingData, model: str) -> TableLatency:
    return measured_service(data.service[data.service["model"] == model])


def test_the_host_that_stalled_pauses_far_more_often_than_the_first_sets() -> None:
    """The third set's host paused one to three times a second while serving resnet34 (its loads up
    to 0.8); the first set's paused under once every four seconds serving resnet101."""
    stalled = load_serving(H100 / "serving-triton-blind2")
    steady = load_serving(H100 / "serving-triton")
    resnet34 = host_stalls(stalled, "resnet34", timed(stalled, "resnet34"))
    resnet101 = host_stalls(steady, "resnet101", timed(steady, "resnet101"))
    assert 1.0 < resnet34.stalls.rate_per_s < 3.0
    assert max(resnet34.stalls.pauses_ms) > 20.0
    assert resnet101.stalls.rate_per_s < 0.25
    assert resnet34.stalled.mean() > 10 * resnet101.stalled.mean()


def test_loads_above_the_level_are_left_out() -> None:
    data = load_serving(H100 / "serving-triton")
    upto = host_stalls(data, "resnet101", timed(data, "resnet101"))
    every = host_stalls(data, "resnet101", timed(data, "resnet101"), max_level=1.0)
    assert len(every.stalls.pauses_ms) > len(upto.stalls.pauses_ms)  # it stalled most at 0.85 and 0.9


def test_the_batch_times_left_have_no_stalled_batch() -> None:
    data = load_serving(H100 / "serving-triton-blind2")
    service = data.service[data.service["model"] == "t5-small-encoder"]
    table = measured_service(service)
    kept = service_without_stalls(service, table)
    assert 0 < len(service) - len(kept) < 0.05 * len(service)
    medians = kept["batch"].map(lambda b: table.medians_ms[int(b)] * 1e-3)
    assert (kept["service_s"] <= STALLED_OVER * medians).all()
    assert max(measured_service(kept).sigmas.values()) < max(table.sigmas.values())
