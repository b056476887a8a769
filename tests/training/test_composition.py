"""Composition constants: the captured-graph fit recovers the constants that made its runs, the
eager grid search finds the point that made its runs, each run composed on its own host profile,
and fallbacks keep their fixed prior instead of a scale fitted on a handful of calls. Runs are
composed by predictor.compose, the one formula prediction uses too."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from predictor.compose import GROUPS, CompositionConstants, LayerArrays, compose
from predictor.host_profile import HOST_KINDS, HostProfile
from training.composition import RunArrays, elementwise_dispatch_ratio, fit_constants, fit_graph_constants, predict_run

CONV, ELEMENTWISE, FALLBACK = (GROUPS.index(g) for g in ("conv", "elementwise", "fallback"))
#: the host kind a group's calls are costed relative to
GROUP_KIND = {CONV: HOST_KINDS.index("conv"), ELEMENTWISE: HOST_KINDS.index("elementwise"),
              FALLBACK: HOST_KINDS.index("elementwise")}


def profile(host_id: str, factor: float = 1.0) -> HostProfile:
    """A measured profile (an H200 host's costs), every cost times ``factor``."""
    costs = {"elementwise": 7.0, "gemm": 11.8, "conv": 12.7, "norm": 10.8, "attention": 16.4, "view": 0.57,
             "copy": 8.9, "module_call": 0.92}
    return HostProfile.model_validate({
        "schema_version": 1, "id": host_id, "label": "measured", "cpu_model": "test CPU", "cpu_cores": 16,
        "measured_at": "2026-01-01T00:00:00+00:00", "costs_us": {k: v * factor for k, v in costs.items()}})


HOST = profile("host-a")
SLOW_HOST = profile("host-b", 1.5)


def run(kernels: list[float], groups: list[int], measured: float = 1.0, dispatch: float | list[float] = 1.2,
        mode: str = "cudagraph", cold: np.ndarray | None = None, launched: np.ndarray | None = None,
        host: HostProfile | None = HOST) -> RunArrays:
    """A run whose nodes are learned kernels (fallbacks where the group says so, views where the
    kernel time is 0), with dispatch ratios ``dispatch`` (one for all, or one per node)."""
    k = np.array(kernels, dtype=float)
    g = np.array(groups)
    fallback = g == FALLBACK
    kernel = ~fallback & (k > 0)
    kinds = np.array([GROUP_KIND[int(x)] for x in g], dtype=np.intp)
    layers = LayerArrays(k, k, k, np.where(kernel, np.asarray(dispatch, dtype=float), 0.0),
                         np.zeros(len(k)) if cold is None else cold, g, kernel, fallback,
                         np.zeros(len(k), bool) if launched is None else launched, kinds)
    return RunArrays("m", 1, "fp16", mode, measured, layers, 0.0, 0.0, host)


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


def test_fallback_dispatch_is_the_median_elementwise_ratio_of_calls_that_launch() -> None:
    # the convolutions' ratio would move the median if they counted
    runs = [run([2.0, 3.0, 4.0], [ELEMENTWISE, ELEMENTWISE, CONV], dispatch=[d, d, 50.0]) for d in (0.9, 1.2, 4.0)]
    assert elementwise_dispatch_ratio(runs) == 1.2
    # a kernel another call launches costs its launch, not a dispatch: not counted
    launched = run([2.0, 3.0], [ELEMENTWISE, ELEMENTWISE], dispatch=100.0, launched=np.array([True, True]))
    assert elementwise_dispatch_ratio([*runs, launched]) == 1.2
    assert elementwise_dispatch_ratio([]) == CompositionConstants().fallback_ratio
    # what fit_constants gives fallbacks
    assert fit_constants(runs).fallback_ratio == 1.2


def test_a_run_is_composed_on_its_own_host_unless_another_is_given() -> None:
    r = run([5.0, 0.0, 3.0], [ELEMENTWISE, ELEMENTWISE, CONV], mode="eager")
    c = CompositionConstants()
    assert predict_run(r, c) == compose(r.layers, c, "eager", HOST)
    assert predict_run(r, c, SLOW_HOST) == compose(r.layers, c, "eager", SLOW_HOST) > predict_run(r, c)
    with pytest.raises(ValueError, match="host"):
        predict_run(replace(r, host=None), c)
    # a captured graph's replay needs no host
    captured = replace(r, mode="cudagraph", host=None)
    assert predict_run(captured, c) == compose(r.layers, c, "cudagraph")


def eager_runs(seed: int) -> list[RunArrays]:
    """Eager runs of random graphs (kernels, views, conv and elementwise calls), alternately on
    HOST and on SLOW_HOST (every cost x1.5)."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(40):
        n = int(rng.integers(20, 300))
        kernels = np.where(rng.random(n) < 0.75, np.exp(rng.uniform(0.0, 4.0, n)), 0.0)
        runs.append(run(list(kernels), list(rng.choice([CONV, ELEMENTWISE], size=n)),
                        dispatch=list(rng.uniform(0.8, 2.0, n)), mode="eager",
                        host=HOST if i % 2 else SLOW_HOST))
    return runs


TRUTH = {"dispatch_share": 1.1, "call_share": 2.0, "view_share": 8.0, "sync_us": 75.0}


def at_truth(c: CompositionConstants) -> CompositionConstants:
    """``c`` with the eager constants of TRUTH: every one a grid point, none the default."""
    return replace(c, dispatch_share=1.1, call_share=2.0, view_share=8.0, sync_us=75.0)


def test_the_eager_fit_recovers_the_grid_point_that_made_its_runs_on_their_own_hosts() -> None:
    runs = eager_runs(11)
    truth = at_truth(fit_constants(runs))
    for r in runs:
        r.measured_us = predict_run(r, truth)
    found = fit_constants(runs)
    assert (found.dispatch_share, found.call_share, found.view_share, found.sync_us) == tuple(TRUTH.values())
    # each run counts on its own host: told each run's host is the other one, the fit finds another point
    # (a fit that composed every run on one of the two hosts would still find the truth from its half)
    assert {r.host.id for r in runs if r.host} == {HOST.id, SLOW_HOST.id}
    swapped = fit_constants([replace(r, host=HOST if r.host is SLOW_HOST else SLOW_HOST) for r in runs])
    assert (swapped.dispatch_share, swapped.call_share, swapped.view_share,
            swapped.sync_us) != tuple(TRUTH.values())


def test_eager_runs_without_a_host_are_left_out_of_the_fit() -> None:
    runs = eager_runs(12)
    truth = at_truth(fit_constants(runs))
    for r in runs:
        r.measured_us = predict_run(r, truth)
    # runs measured before any probe, far off whatever host they ran on: they would pull the fit
    unprobed = [replace(r, host=None, measured_us=r.measured_us * 3.0) for r in runs]
    found = fit_constants(runs + unprobed)
    assert (found.dispatch_share, found.call_share, found.view_share, found.sync_us) == tuple(TRUTH.values())
    only_unprobed = fit_constants(unprobed)
    assert (only_unprobed.dispatch_share, only_unprobed.call_share, only_unprobed.view_share,
            only_unprobed.sync_us) == (1.0, 1.0, 4.0, 20.0)  # nothing to fit: the defaults


def test_the_interval_is_the_quantile_of_held_out_errors_of_the_zoo_and_the_calibration_runs() -> None:
    from training.composition import leave_one_model_out

    truth = CompositionConstants(group_scale={**dict.fromkeys(GROUPS, 1.0), "conv": 0.9})
    rng = np.random.default_rng(5)
    zoo = []
    for i in range(12):  # six models of two runs each, measured 2% off what the truth predicts
        kernels = np.exp(rng.uniform(0.0, 5.0, 30))
        r = replace(run(list(kernels), list(rng.choice([CONV, ELEMENTWISE], size=30))), model=f"m{i // 2}")
        r.measured_us = predict_run(r, truth) * (1.02 if i % 2 else 0.98)
        zoo.append(r)
    alone = leave_one_model_out(zoo)
    assert alone.calibrated_on == {"zoo_leave_one_model_out_runs": 12, "nas_dev_runs": 0}
    assert alone.interval_log["cudagraph"] < 0.05
    assert "eager" not in alone.interval_log  # no eager run to calibrate on: no width, not a guess (nor a NaN)
    # graphs from outside, 30% off: four of them in sixteen runs put the 90% quantile at their error
    outside = [replace(r, model=f"nas-{i}", measured_us=predict_run(r, alone.constants) / 1.3)
               for i, r in enumerate(zoo[:4])]
    both = leave_one_model_out(zoo, calibration=outside)
    assert both.calibrated_on == {"zoo_leave_one_model_out_runs": 12, "nas_dev_runs": 4}
    assert both.interval_log["cudagraph"] == pytest.approx(np.log(1.3), rel=1e-6)
    # they calibrate the interval and nothing else: never fitted on, never in the zoo's scores
    assert both.constants == alone.constants and both.predictions.equals(alone.predictions)
    # an eager run with no host profile is not predicted, so it calibrates nothing
    unhosted = replace(outside[0], mode="eager", host=None)
    assert leave_one_model_out(zoo, calibration=[unhosted]).calibrated_on["nas_dev_runs"] == 0
