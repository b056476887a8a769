"""A host's drift read off measured Triton loads (training/serving_drift.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from predictor.capacity.service_drift import DriftComponent, ServiceDrift
from training.serving_check import load_serving
from training.serving_drift import batch_scores, fit_drift, lag_correlation, models_drift

H100 = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h100-80gb-hbm3"


def synthetic_series(drift: ServiceDrift, loads: int = 6, batches: int = 1500, seed: int = 0
                     ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Loads of batches of sizes 1 and 8 a few ms apart, their times drawn with ``drift``: sigma 0.1
    around 2 ms (size 1) and 4 ms (size 8)."""
    rng = np.random.default_rng(seed)
    series = []
    for load in range(loads):
        normals = drift.normals(np.random.default_rng(seed + 1 + load))
        start = np.cumsum(rng.uniform(0.002, 0.005, batches))
        size = rng.choice([1, 8], batches)
        median = np.where(size == 1, 0.002, 0.004)
        took = median * np.exp(0.1 * np.array([normals.at(float(t)) for t in start]))
        series.append((start, took, size))
    return series


def test_the_fit_finds_the_drift_the_batches_were_drawn_with() -> None:
    truth = ServiceDrift((DriftComponent(0.3, 12.0), DriftComponent(0.4, 200.0)))
    measured = lag_correlation(batch_scores(synthetic_series(truth), {1: 0.002, 8: 0.004}))
    fitted = fit_drift(measured)
    assert fitted.persistent_share == pytest.approx(truth.persistent_share, abs=0.1)
    for lag_ms in (5.0, 20.0, 100.0, 400.0):
        assert fitted.correlation(lag_ms) == pytest.approx(truth.correlation(lag_ms), abs=0.06)


def test_independent_batches_fit_next_to_no_drift() -> None:
    measured = lag_correlation(batch_scores(synthetic_series(ServiceDrift(())), {1: 0.002, 8: 0.004}))
    assert fit_drift(measured).persistent_share < 0.05


def test_stalled_batches_are_left_out_of_the_scores() -> None:
    start, took, size = synthetic_series(ServiceDrift(()), loads=1)[0]
    took = took.copy()
    took[10] *= 5  # a pause: replayed apart, not drift
    scores = batch_scores([(start, took, size)], {1: 0.002, 8: 0.004})
    assert len(scores[0][0]) == len(start) - 1 and start[10] not in scores[0][0]


def test_every_measured_triton_host_drifts() -> None:
    """On the committed H100 sets a batch's time correlates with its neighbours': a third or more of
    its spread persists past 10 ms, and next to none past two seconds."""
    for folder in ("serving-triton-blind3", "serving-triton-blind4"):
        data = load_serving(H100 / folder)
        drift, measured = models_drift(data, data.models)
        assert drift.correlation(10.0) > 0.3, folder
        assert drift.correlation(2000.0) < 0.1, folder
        assert measured.correlation[0] > 0.4, folder  # the first bin, 2-5 ms apart
