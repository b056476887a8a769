"""predictor.compose, the one composition: the eager overlap, the captured-graph sum, the in-model
terms, and the forms training calls (cudagraph_terms, eager_grid_us) against the plain one."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from predictor.compose import (
    GROUPS,
    SHORT_KERNEL_CAP_US,
    CompositionConstants,
    LayerArrays,
    compose,
    cudagraph_terms,
    cudagraph_weights,
    eager_grid_us,
    layer_times,
)

ELEMENTWISE, CONV, FALLBACK = (GROUPS.index(g) for g in ("elementwise", "conv", "fallback"))
#: host time is the dispatch as given: no scale, no per-call cost
PLAIN = CompositionConstants(gap_us=1.5, sync_us=20.0, host_scale=1.0, call_host_us=0.0)


def arrays(kernels: list[float], host: list[float], group: int = ELEMENTWISE) -> LayerArrays:
    """Learned calls with the given kernel and host times (a kernel time of 0 launches nothing)."""
    k = np.array(kernels, dtype=float)
    n = len(k)
    return LayerArrays(k, k * 0.9, k * 1.1, np.array(host, dtype=float), np.zeros(n), np.full(n, group),
                       np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool))


def test_eager_with_a_slow_host_is_the_host_time() -> None:
    kernels = [1.0, 2.0, 0.0, 1.0, 3.0]
    host = [100.0, 80.0, 50.0, 120.0, 90.0]
    # every kernel finishes long before the next is issued: the host sets the pace,
    # and only the last kernel runs after the last issue
    assert compose(arrays(kernels, host), PLAIN, "eager") == pytest.approx(sum(host) + kernels[-1] + PLAIN.sync_us)


def test_eager_with_slow_kernels_is_the_kernel_time() -> None:
    kernels = [100.0, 250.0, 0.0, 80.0, 300.0]
    host = [5.0, 4.0, 3.0, 6.0, 2.0]
    # the GPU is always busy once the first call is issued
    assert compose(arrays(kernels, host), PLAIN, "eager") == pytest.approx(host[0] + sum(kernels) + PLAIN.sync_us)


def test_eager_overlaps_host_and_gpu() -> None:
    # kernel 1 runs 10-20; kernel 2 is issued at 25 and runs 25-35
    assert compose(arrays([10.0, 10.0], [10.0, 15.0]), PLAIN, "eager") == pytest.approx(35.0 + PLAIN.sync_us)
    # calls that launch nothing still cost host time
    assert compose(arrays([10.0, 0.0, 10.0], [10.0, 15.0, 15.0]), PLAIN, "eager") == pytest.approx(
        50.0 + PLAIN.sync_us)


def _eager_step_by_step(kernels: list[float], host: list[float], c: CompositionConstants) -> float:
    """The issue-and-overlap recurrence as written in the design: one node at a time."""
    t_host = t_gpu = 0.0
    for kernel, issue in zip(kernels, host):
        t_host += issue
        if kernel > 0:
            t_gpu = max(t_host, t_gpu) + kernel
    return max(t_host, t_gpu) + c.sync_us


def test_eager_closed_form_equals_the_step_by_step_recurrence() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(0, 40)
        kernels = [rng.choice([0.0, rng.uniform(0.5, 80.0)]) for _ in range(n)]
        host = [rng.uniform(0.0, 40.0) for _ in range(n)]
        assert compose(arrays(kernels, host), PLAIN, "eager") == pytest.approx(
            _eager_step_by_step(kernels, host, PLAIN))


def test_cudagraph_adds_a_gap_per_launched_kernel_and_one_replay() -> None:
    kernels = [10.0, 0.0, 5.0, 0.0, 7.5]
    base = compose(arrays(kernels, [1.0] * 5), PLAIN, "cudagraph")
    assert base == pytest.approx(22.5 + 3 * PLAIN.gap_us)
    assert compose(arrays([], []), PLAIN, "cudagraph") == 0.0
    wider = CompositionConstants(gap_us=4.0)
    assert compose(arrays(kernels, [1.0] * 5), wider, "cudagraph") - base == pytest.approx(3 * 2.5)
    replayed = CompositionConstants(gap_us=1.5, replay_us=25.0)
    assert compose(arrays(kernels, [1.0] * 5), replayed, "cudagraph") - base == pytest.approx(25.0)
    assert compose(arrays([0.0, 0.0], [1.0, 1.0]), replayed, "cudagraph") == 0.0  # nothing launched, no replay


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode 'jit'"):
        compose(arrays([1.0], [1.0]), PLAIN, "jit")


def mixed(rng: np.random.Generator, n: int, log_longest: float = 6.0) -> LayerArrays:
    """Learned kernels, launched-by kernels, views and fallbacks, in random order."""
    kind = rng.choice(["kernel", "launched", "view", "fallback"], size=n, p=[0.6, 0.1, 0.2, 0.1])
    kernel = np.where(kind == "view", 0.0, np.exp(rng.uniform(-1.0, log_longest, n)))
    group = np.where(kind == "fallback", FALLBACK, rng.choice([CONV, ELEMENTWISE], size=n))
    is_kernel = (kind == "kernel") | (kind == "launched")
    return LayerArrays(kernel, kernel * 0.8, kernel * 1.25, np.where(is_kernel, rng.uniform(3.0, 15.0, n), 0.0),
                       np.where(group == CONV, rng.uniform(0.0, 4.0, n), 0.0), group, is_kernel,
                       kind == "fallback", kind == "launched")


CONSTANTS = CompositionConstants(
    group_scale={**dict.fromkeys(GROUPS, 1.0), "conv": 0.9, "elementwise": 1.2}, gap_us=0.7, replay_us=12.0,
    short_kernel_share=0.15, cold_weight_share=1.3, host_scale=1.1, call_host_us=2.5, view_host_us=7.5,
    launch_host_us=2.0, fallback_host_us=11.0, sync_us=60.0)


def test_layer_times_apply_the_in_model_terms_and_the_host_of_each_kind() -> None:
    a = mixed(np.random.default_rng(1), 200)
    t = layer_times(a, CONSTANTS)
    scale = CONSTANTS.group_scales()[a.group]
    learned = a.is_kernel
    expected = a.kernel_us * scale + CONSTANTS.short_kernel_share * np.minimum(a.kernel_us, SHORT_KERNEL_CAP_US) \
        + CONSTANTS.cold_weight_share * a.cold_weight_us
    assert t.kernel_us[learned] == pytest.approx(expected[learned])
    floored = np.maximum(a.kernel_us, CONSTANTS.min_kernel_us)[a.is_fallback]
    assert t.kernel_us[a.is_fallback] == pytest.approx(floored)  # no short-kernel share, no weights
    assert t.low_us[a.is_fallback] == pytest.approx(floored * 0.5)
    assert t.high_us[a.is_fallback] == pytest.approx(floored * 2.0)
    assert np.all(t.kernel_us[a.is_view] == 0.0)
    own = learned & ~a.is_launched
    assert t.host_us[own] == pytest.approx(a.dispatch_us[own] * 1.1 + 2.5)
    assert np.all(t.host_us[a.is_launched] == 2.0)
    assert np.all(t.host_us[a.is_view] == 7.5)
    assert np.all(t.host_us[a.is_fallback] == 11.0 + 2.5)


def test_cudagraph_is_its_terms_times_its_weights_and_the_sum_of_its_layers() -> None:
    a = mixed(np.random.default_rng(2), 300)
    total = compose(a, CONSTANTS, "cudagraph")
    assert cudagraph_terms(a, CONSTANTS) @ cudagraph_weights(CONSTANTS) == pytest.approx(total, rel=1e-12)
    kernels = layer_times(a, CONSTANTS).kernel_us
    launched = kernels > 0
    assert total == pytest.approx(kernels.sum() + CONSTANTS.gap_us * launched.sum() + CONSTANTS.replay_us)


def test_eager_is_the_overlap_of_its_layers_host_and_kernel_times() -> None:
    a = mixed(np.random.default_rng(3), 300)
    t = layer_times(a, CONSTANTS)
    assert compose(a, CONSTANTS, "eager") == pytest.approx(
        _eager_step_by_step(list(t.kernel_us), list(t.host_us), CONSTANTS), rel=1e-12)


def test_the_eager_grid_equals_one_composition_per_point() -> None:
    a = mixed(np.random.default_rng(5), 300)
    grid = np.array(list(itertools.product((0.75, 1.0, 1.25), (0.0, 2.5), (5.0, 10.0))))
    expected = [compose(a, CompositionConstants(**{**CONSTANTS.as_dict(), "host_scale": hs, "call_host_us": call,
                                                   "view_host_us": view}), "eager") - CONSTANTS.sync_us
                for hs, call, view in grid]
    assert eager_grid_us(a, CONSTANTS, grid) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("constant", ["host_scale", "call_host_us", "view_host_us", "launch_host_us",
                                      "fallback_host_us", "sync_us"])
def test_eager_grows_monotonically_in_each_host_cost(constant: str) -> None:
    a = mixed(np.random.default_rng(8), 150, log_longest=1.0)  # host-bound: every host cost shows
    totals = [compose(a, CompositionConstants(**{**CONSTANTS.as_dict(), constant: value}), "eager")
              for value in (0.0, 1.0, 4.0, 16.0, 64.0)]
    assert all(x <= y for x, y in zip(totals, totals[1:]))
    assert totals[-1] > totals[0]
