"""Host pauses read off measured Triton loads (training/serving_stalls.py), on the committed sets."""

from __future__ import annotations

from pathlib import Path

from training.serving_check import ServingData, TableLatency, load_serving, measured_service
from training.serving_stalls import batch_series, host_stalls, service_without_stalls

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
    """resnet34's host paused at 0.85 and 0.9 too: counting those loads finds more pauses."""
    data = load_serving(H100 / "serving-triton-blind2")
    upto = host_stalls(data, "resnet34", timed(data, "resnet34"))
    every = host_stalls(data, "resnet34", timed(data, "resnet34"), max_level=1.0)
    assert len(every.stalls.pauses_ms) > len(upto.stalls.pauses_ms) > 0
    assert len(every.stalled) > len(upto.stalled)  # more batches read


def test_a_batch_whose_requests_are_not_consecutive_is_one_batch() -> None:
    """Triton can take a request before one sent just ahead of it: the batch is still one."""
    data = load_serving(H100 / "serving-triton")
    series = batch_series(data, "densenet169")
    loads = [frame for name, _, _, frame in data.loads() if name == "densenet169"]
    for (start, _, sizes), frame in zip(series, loads):
        assert len(start) == frame["start_us"].nunique()
        assert sizes.sum() == len(frame)
        assert (sizes == frame.groupby("start_us")["batch_size"].first().to_numpy()).all()


def test_the_batch_times_left_have_no_stalled_batch() -> None:
    data = load_serving(H100 / "serving-triton-blind2")
    service = data.service[data.service["model"] == "t5-small-encoder"]
    table = measured_service(service)
    kept = service_without_stalls(service, table)
    assert 0 < len(service) - len(kept) < 0.05 * len(service)
    assert max(measured_service(kept).sigmas.values()) < max(table.sigmas.values())
