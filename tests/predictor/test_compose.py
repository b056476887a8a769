"""predictor.compose, the one composition: the eager overlap, the captured-graph sum, the in-model
terms, the host time of each node from a host profile, and the forms training calls
(cudagraph_terms, eager_grid_us) against the plain one."""

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
    host_costs,
    layer_times,
)
from predictor.host_profile import HOST_KINDS, HostProfile

ELEMENTWISE, CONV, FALLBACK = (GROUPS.index(g) for g in ("elementwise", "conv", "fallback"))
KIND = {k: i for i, k in enumerate(HOST_KINDS)}
#: every kind costs 1 us: a kernel call's host time is its dispatch ratio
UNIT = np.ones(len(HOST_KINDS))
#: host time is the dispatch as given: the whole share, no module call around it
PLAIN = CompositionConstants(gap_us=1.5, sync_us=20.0, dispatch_share=1.0, call_share=0.0)
#: a host whose kinds all cost differently, so a node costed at the wrong kind shows
HOST = HostProfile.model_validate({
    "schema_version": 1, "id": "test-host", "label": "measured", "cpu_model": "test CPU", "cpu_cores": 8,
    "measured_at": "2026-01-01T00:00:00+00:00",
    "costs_us": {"elementwise": 7.0, "gemm": 11.5, "conv": 13.0, "norm": 10.25, "attention": 16.5, "view": 0.6,
                 "copy": 9.0, "module_call": 0.9}})


def arrays(kernels: list[float], host: list[float], group: int = ELEMENTWISE) -> LayerArrays:
    """Learned elementwise calls with the given kernel times and dispatch ratios (a kernel time of
    0 launches nothing): on UNIT with PLAIN, a ratio is the call's host time."""
    k = np.array(kernels, dtype=float)
    n = len(k)
    return LayerArrays(k, k * 0.9, k * 1.1, np.array(host, dtype=float), np.zeros(n), np.full(n, group),
                       np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool),
                       np.full(n, KIND["elementwise"], dtype=np.intp))


def test_eager_with_a_slow_host_is_the_host_time() -> None:
    kernels = [1.0, 2.0, 0.0, 1.0, 3.0]
    host = [100.0, 80.0, 50.0, 120.0, 90.0]
    # every kernel finishes long before the next is issued: the host sets the pace,
    # and only the last kernel runs after the last issue
    assert compose(arrays(kernels, host), PLAIN, "eager", UNIT) == pytest.approx(
        sum(host) + kernels[-1] + PLAIN.sync_us)


def test_eager_with_slow_kernels_is_the_kernel_time() -> None:
    kernels = [100.0, 250.0, 0.0, 80.0, 300.0]
    host = [5.0, 4.0, 3.0, 6.0, 2.0]
    # the GPU is always busy once the first call is issued
    assert compose(arrays(kernels, host), PLAIN, "eager", UNIT) == pytest.approx(
        host[0] + sum(kernels) + PLAIN.sync_us)


def test_eager_overlaps_host_and_gpu() -> None:
    # kernel 1 runs 10-20; kernel 2 is issued at 25 and runs 25-35
    assert compose(arrays([10.0, 10.0], [10.0, 15.0]), PLAIN, "eager", UNIT) == pytest.approx(35.0 + PLAIN.sync_us)
    # calls that launch nothing still cost host time
    assert compose(arrays([10.0, 0.0, 10.0], [10.0, 15.0, 15.0]), PLAIN, "eager", UNIT) == pytest.approx(
        50.0 + PLAIN.sync_us)


def test_the_host_scales_a_call_by_the_cost_of_its_kind() -> None:
    """A dispatch ratio is relative to its kind's cost on the host: the same layers on a host
    whose elementwise calls cost 3 us issue three times slower."""
    a = arrays([1.0, 1.0, 1.0], [2.0, 1.5, 1.0])
    slow = UNIT.copy()
    slow[KIND["elementwise"]] = 3.0
    assert compose(a, PLAIN, "eager", slow) == pytest.approx(3.0 * 4.5 + 1.0 + PLAIN.sync_us)
    # another kind's cost does not touch an elementwise call
    other = UNIT.copy()
    other[KIND["gemm"]] = 50.0
    assert compose(a, PLAIN, "eager", other) == pytest.approx(compose(a, PLAIN, "eager", UNIT))


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
        assert compose(arrays(kernels, host), PLAIN, "eager", UNIT) == pytest.approx(
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
    # no host issues a captured graph kernel by kernel: a host changes nothing
    assert compose(arrays(kernels, [1.0] * 5), PLAIN, "cudagraph", HOST) == base


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode 'jit'"):
        compose(arrays([1.0], [1.0]), PLAIN, "jit", UNIT)


def mixed(rng: np.random.Generator, n: int, log_longest: float = 6.0) -> LayerArrays:
    """Learned kernels of every host kind, launched-by kernels, views and fallbacks, in random order."""
    kind = rng.choice(["kernel", "launched", "view", "fallback"], size=n, p=[0.6, 0.1, 0.2, 0.1])
    kernel = np.where(kind == "view", 0.0, np.exp(rng.uniform(-1.0, log_longest, n)))
    group = np.where(kind == "fallback", FALLBACK, rng.choice([CONV, ELEMENTWISE], size=n))
    is_kernel = (kind == "kernel") | (kind == "launched")
    return LayerArrays(kernel, kernel * 0.8, kernel * 1.25, np.where(is_kernel, rng.uniform(0.5, 2.0, n), 0.0),
                       np.where(group == CONV, rng.uniform(0.0, 4.0, n), 0.0), group, is_kernel,
                       kind == "fallback", kind == "launched", rng.integers(0, len(HOST_KINDS), n))


CONSTANTS = CompositionConstants(
    group_scale={**dict.fromkeys(GROUPS, 1.0), "conv": 0.9, "elementwise": 1.2}, gap_us=0.7, replay_us=12.0,
    short_kernel_share=0.15, cold_weight_share=1.3, dispatch_share=1.1, call_share=2.5, view_share=7.5,
    launch_share=0.3, fallback_ratio=1.6, sync_us=60.0)


def _host_step_by_step(a: LayerArrays, c: CompositionConstants, costs: list[float]) -> list[float]:
    """Each node's host time as the design says, one node at a time."""
    out = []
    for i in range(len(a.kernel_us)):
        if a.is_kernel[i] and not a.is_launched[i]:  # its own call: its dispatch, the Python around it
            out.append(c.dispatch_share * a.dispatch_ratio[i] * costs[a.host_kind[i]]
                       + c.call_share * costs[KIND["module_call"]])
        elif a.is_kernel[i]:  # launched by another call: the launch only
            out.append(c.launch_share * costs[KIND["elementwise"]])
        elif a.is_fallback[i]:  # dispatched like an elementwise call, with the Python of a call
            out.append(c.fallback_ratio * costs[KIND["elementwise"]] + c.call_share * costs[KIND["module_call"]])
        else:  # a view
            out.append(c.view_share * costs[KIND["view"]])
    return out


def test_host_costs_are_the_profiles_in_host_kinds_order() -> None:
    assert list(host_costs(HOST)) == [HOST.costs_us[k] for k in HOST_KINDS]
    assert list(host_costs(UNIT * 2.0)) == [2.0] * len(HOST_KINDS)


def test_layer_times_apply_the_in_model_terms_and_the_host_of_each_kind() -> None:
    a = mixed(np.random.default_rng(1), 200)
    t = layer_times(a, CONSTANTS, HOST)
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
    assert t.host_us == pytest.approx(_host_step_by_step(a, CONSTANTS, HOST.costs()), rel=1e-12)
    # every node type is there, and each costs what its kind says
    own = learned & ~a.is_launched
    assert own.any() and a.is_launched.any() and a.is_view.any() and a.is_fallback.any()
    assert t.host_us[own] == pytest.approx(1.1 * a.dispatch_ratio[own] * host_costs(HOST)[a.host_kind[own]] + 2.5 * 0.9)
    assert t.host_us[a.is_launched] == pytest.approx(np.full(a.is_launched.sum(), 0.3 * 7.0))
    assert t.host_us[a.is_view] == pytest.approx(np.full(a.is_view.sum(), 7.5 * 0.6))
    assert t.host_us[a.is_fallback] == pytest.approx(np.full(a.is_fallback.sum(), 1.6 * 7.0 + 2.5 * 0.9))
    # a profile and its costs as an array are one host
    assert layer_times(a, CONSTANTS, host_costs(HOST)).host_us == pytest.approx(t.host_us, rel=1e-15)


def test_cudagraph_is_its_terms_times_its_weights_and_the_sum_of_its_layers() -> None:
    a = mixed(np.random.default_rng(2), 300)
    total = compose(a, CONSTANTS, "cudagraph")
    assert cudagraph_terms(a, CONSTANTS) @ cudagraph_weights(CONSTANTS) == pytest.approx(total, rel=1e-12)
    kernels = layer_times(a, CONSTANTS, HOST).kernel_us
    launched = kernels > 0
    assert total == pytest.approx(kernels.sum() + CONSTANTS.gap_us * launched.sum() + CONSTANTS.replay_us)


def test_eager_is_the_overlap_of_its_layers_host_and_kernel_times() -> None:
    a = mixed(np.random.default_rng(3), 300)
    t = layer_times(a, CONSTANTS, HOST)
    reference = _eager_step_by_step(list(t.kernel_us), _host_step_by_step(a, CONSTANTS, HOST.costs()), CONSTANTS)
    assert compose(a, CONSTANTS, "eager", HOST) == pytest.approx(reference, rel=1e-12)
    assert compose(a, CONSTANTS, "eager", host_costs(HOST)) == pytest.approx(reference, rel=1e-12)


def test_the_eager_grid_equals_one_composition_per_point() -> None:
    a = mixed(np.random.default_rng(5), 300)
    grid = np.array(list(itertools.product((0.75, 1.0, 1.25), (0.0, 2.5), (4.0, 10.0))))
    expected = [compose(a, CompositionConstants(**{**CONSTANTS.as_dict(), "dispatch_share": share,
                                                   "call_share": call, "view_share": view}), "eager", HOST)
                - CONSTANTS.sync_us for share, call, view in grid]
    assert eager_grid_us(a, CONSTANTS, grid, HOST) == pytest.approx(expected, rel=1e-12)
    assert len(set(np.round(expected, 6))) == len(grid)  # every grid constant moves the forward
    assert eager_grid_us(a, CONSTANTS, grid, host_costs(HOST)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("constant", ["dispatch_share", "call_share", "view_share", "launch_share",
                                      "fallback_ratio", "sync_us"])
def test_eager_grows_monotonically_in_each_host_constant(constant: str) -> None:
    a = mixed(np.random.default_rng(8), 150, log_longest=1.0)  # host-bound: every host cost shows
    totals = [compose(a, CompositionConstants(**{**CONSTANTS.as_dict(), constant: value}), "eager", HOST)
              for value in (0.0, 1.0, 4.0, 16.0, 64.0)]
    assert all(x < y for x, y in zip(totals, totals[1:]))
