"""Composition constants: the captured-graph fit recovers the constants that made its runs, the
eager grid search finds the point that made its runs, and fallbacks keep their fixed prior
instead of a scale fitted on a handful of calls. Runs are composed by predictor.compose, the one
formula prediction uses too."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from predictor.compose import GROUPS, CompositionConstants, LayerArrays
from training.composition import RunArrays, elementwise_dispatch_us, fit_constants, fit_graph_constants, predict_run

CONV, ELEMENTWISE, FALLBACK = (GROUPS.index(g) for g in ("conv", "elementwise", "fallback"))


def run(kernels: list[float], groups: list[int], measured: float = 1.0, dispatch: float = 8.0,
        mode: str = "cudagraph", cold: np.ndarray | None = None, launched: np.ndarray | None = None) -> RunArrays:
    """A run whose nodes are learned kernels (fallbacks where the group says so, views where the
    kernel time is 0)."""
    k = np.array(kernels, dtype=float)
    g = np.array(groups)
    fallback = g == FALLBACK
    kernel = ~fallback & (k > 0)
    layers = LayerArrays(k, k, k, np.where(kernel, dispatch, 0.0), np.zeros(len(k)) if cold is None else cold,
                         g, kernel, fallback, np.zeros(len(k), bool) if launched is None else launched)
    return RunArrays("m", 1, "fp16", mode, measured, layers, 0.0, 0.0)


def test_graph_fit_recovers_scales_gap_short_share_replay_and_cold_weights() -> None:
    truth = CompositionConstants(group_scale={**dict.fromkeys(GROUPS, 1.0), "conv": 0.9, "elementwise": 1.2},
                                 gap_us=0.6, short_kernel_share=0.15, replay_us=22.0, cold_weight_share=1.2)
    rng = np.random.default_rng(3)
    runs = []
    for _ in range(60):
        n = int(rng.integers(5, 200))
        kernels = np.exp(rng.uniform(np.log(1.0), np.log(400.0), n))
        groups = rng.choice([CONV, ELEMENTWISE, FALLBACK], size=n, p=[0.5, 0.45, 0.05])
        r = run(list(kernels), list(groups), cold=np.where(groups == CONV, rng.uniform(0.0, 5.0, n), 0.0))
        r.measured_us = predict_run(r, truth)
        runs.append(r)
    fit = fit_graph_constants(runs)
    assert fit.group_scale["conv"] == pytest.approx(0.9, rel=1e-3)
    assert fit.group_scale["elementwise"] == pytest.approx(1.2, rel=1e-3)
    assert fit.group_scale["fallback"] == 1.0  # a fixed prior, never fitted
    assert (fit.gap_us, fit.short_kernel_share, fit.replay_us, fit.cold_weight_share) == pytest.approx(
        (0.6, 0.15, 22.0, 1.2), rel=1e-3)


def test_fallback_host_time_is_the_median_elementwise_dispatch_of_calls_that_launch() -> None:
    runs = [run([2.0, 3.0, 4.0], [ELEMENTWISE, ELEMENTWISE, CONV], dispatch=d) for d in (6.0, 8.0, 30.0)]
    assert elementwise_dispatch_us(runs) == 8.0
    # a kernel another call launches costs its launch, not a dispatch: not counted
    launched = run([2.0, 3.0], [ELEMENTWISE, ELEMENTWISE], dispatch=100.0, launched=np.array([True, True]))
    assert elementwise_dispatch_us([*runs, launched]) == 8.0
    assert elementwise_dispatch_us([]) == CompositionConstants().fallback_host_us


def test_the_eager_fit_recovers_the_grid_point_that_made_its_runs() -> None:
    rng = np.random.default_rng(11)
    runs = []
    for _ in range(40):
        n = int(rng.integers(20, 300))
        kernels = np.where(rng.random(n) < 0.75, np.exp(rng.uniform(0.0, 4.0, n)), 0.0)
        runs.append(run(list(kernels), list(rng.choice([CONV, ELEMENTWISE], size=n)),
                        dispatch=float(rng.uniform(6, 14)), mode="eager"))
    truth = replace(fit_constants(runs), host_scale=1.1, call_host_us=2.5, view_host_us=8.75, sync_us=75.0)
    for r in runs:
        r.measured_us = predict_run(r, truth)
    found = fit_constants(runs)
    assert (found.host_scale, found.call_host_us, found.view_host_us, found.sync_us) == (1.1, 2.5, 8.75, 75.0)
