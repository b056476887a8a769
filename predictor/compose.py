"""Composing per-layer times into a whole-model latency, per execution mode: the one formula.

``Predictor.layers`` gives a graph as ``LayerArrays``: what each node costs *alone* (learned
kernel and dispatch times, fallbacks' bytes at a bandwidth prior). Everything the composition
constants do to those arrays is here, vectorised, and nowhere else: ``layer_times`` (per node,
for the breakdown), ``compose`` (the whole model), ``cudagraph_terms`` (the linear terms each
captured-graph constant multiplies, which training fits by least squares) and
``eager_grid_us`` (an eager forward at many host constants at once, which training searches).

cudagraph: the GPU runs the captured kernels back to back, so the latency is the kernel times
(with what a kernel adds inside a model: short kernels and cold weights) plus a learned gap per
kernel and a learned cost per replay (14-21 us fitted on sequentially timed replays, none on
replays timed in interleaved rounds, where the gap is 0.1 us). eager: the host issues
operators one by one while the GPU runs them; kernel i starts once it has been issued *and*
kernel i-1 has finished. At small batch the host's issue time, not the kernels, sets the
latency, which summing kernels can never show.

serial (a CPU device's eager forward, ``CompositionConstants.serial``): there is no second
stream to overlap. Each call computes its kernels itself before it returns, so the forward is the
sum of its calls: the operators' measured time (on a CPU the sweep's timer is the call's wall time,
dispatch included) scaled per group, plus the Python around each call and each view, in units of
the host profile's module_call and view costs, and a fixed cost per forward. That sum is linear in
every constant, so training fits them by least squares (``serial_terms``), as for a CUDA graph.

The host's issue time comes from a host profile (predictor.host_profile): what one call of each
kind costs that host, probed in seconds. A kernel call costs its learned dispatch *relative to
its kind* times the profile's cost of that kind, so the same layers compose for any host; the
constants below say how a call inside a model relates to the probe's calls (the Python of the
module around it, views, launches), in units of the profile's own costs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from predictor.host_profile import HOST_KINDS, HostProfile

MODES = ("eager", "cudagraph")
#: indices of the profile kinds composition uses directly, in HOST_KINDS order
ELEMENTWISE_KIND, VIEW_KIND, MODULE_CALL_KIND = (HOST_KINDS.index(k) for k in ("elementwise", "view", "module_call"))


#: Families whose isolated kernel time is corrected by one shared, learned scale: a layer inside
#: a model differs from the same layer measured alone (no bias, other memory layouts, cache state).
#: Transposes are a group of their own: on the H200 nas-88's and nas-52's copies and adds across
#: a block swap ran inside the model within 5% of their time alone, where the zoo's vectorized
#: elementwise kernels run about 1.2x theirs, so one scale for both fitted neither.
FAMILY_GROUPS: dict[str, str] = {
    "conv2d": "conv", "linear": "gemm", "matmul": "gemm", "sdpa": "attention",
    "batch_norm": "norm", "layer_norm": "norm", "group_norm": "norm", "transpose": "transpose",
}
GROUPS = ("conv", "gemm", "attention", "norm", "elementwise", "transpose", "fallback")
FALLBACK_GROUP = GROUPS.index("fallback")


def family_group(family: str | None, kind: str) -> str:
    """The scale group of a node: its family's group, 'elementwise', or 'fallback'."""
    if kind == "fallback":
        return "fallback"
    return FAMILY_GROUPS.get(family or "", "elementwise")


@dataclass(frozen=True)
class CompositionConstants:
    """Constants learned from whole-model runs of the training models (training.composition)."""

    group_scale: dict[str, float] = field(default_factory=lambda: {g: 1.0 for g in GROUPS})
    gap_us: float = 1.0
    replay_us: float = 0.0
    #: the share of a kernel's first SHORT_KERNEL_CAP_US it runs longer inside a model
    short_kernel_share: float = 0.0
    #: the multiple of its cold weight read (features.cold_weight_us) a layer adds inside a model
    #: (above 1 where HBM delivers less than its nominal bandwidth: 1.40 is 0.71 of it)
    cold_weight_share: float = 0.0
    #: the share of its isolated dispatch (the dispatch model's ratio times the host's cost of the
    #: call's kind) a kernel call costs inside a model: relative to the probe, so no host is in it
    dispatch_share: float = 1.0
    #: the Python a model adds around each kernel call (its module's call, its attribute reads),
    #: in units of the host's module_call cost
    call_share: float = 1.0
    #: host time of a call that launches no kernel (a view, a reshape, a no-op cast), in units of
    #: the host's view cost: the Python around it, which the dispatch sweep never sees, is what
    #: it mostly stands for
    view_share: float = 4.0
    #: host time of a kernel another call launches (Node.launched_by): cudaLaunchKernel alone, in
    #: units of the host's elementwise cost (a quarter: about 2 us of the H200 host's 7-9 us)
    launch_share: float = 0.25
    #: a call no learned model covers dispatches like the median elementwise call of the
    #: training runs: this ratio to the host's elementwise cost
    fallback_ratio: float = 1.3
    sync_us: float = 20.0
    #: the floor of any launch, applied to fallbacks' bandwidth estimate
    min_kernel_us: float = 2.0
    #: an eager forward is the sum of its calls, not two overlapping streams: a CPU device, which
    #: runs each call's kernels inside the call (``serial_terms``)
    serial: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scale(self, family: str | None, kind: str) -> float:
        return self.group_scale.get(family_group(family, kind), 1.0)

    def group_scales(self) -> np.ndarray:
        """The kernel-time scale of each group, in GROUPS order (1 for a group not given)."""
        return np.array([self.group_scale.get(g, 1.0) for g in GROUPS])


#: Up to this time a kernel measured alone runs a share longer inside a model (_in_model_extra_us).
SHORT_KERNEL_CAP_US = 25.0


@dataclass(frozen=True)
class LayerArrays:
    """One graph at one (batch, precision, mode), node by node, as the per-layer models and the
    roofline see each node *alone*, before any composition constant. Training keeps these per
    measured run and refits constants on them without predicting a node again."""

    #: learned kernel time alone; for fallbacks their bytes at the bandwidth prior (before the
    #: launch floor); 0 where nothing launches (views, no-op casts)
    kernel_us: np.ndarray
    #: the learned kernel time's interval (fallbacks get theirs from the floored estimate)
    low_us: np.ndarray
    high_us: np.ndarray
    #: learned host dispatch of a kernel call relative to the host profile's cost of its kind
    #: (``host_kind``), 0 elsewhere
    dispatch_ratio: np.ndarray
    #: reading the layer's weights cold from HBM (features.cold_weight_us), 0 where none
    cold_weight_us: np.ndarray
    #: scale group (index into GROUPS)
    group: np.ndarray
    #: kernels a learned model predicts (not no-op casts, not fallbacks)
    is_kernel: np.ndarray
    #: kernels no model covers, costed by the roofline
    is_fallback: np.ndarray
    #: kernels another node's call launches (Node.launched_by): the host pays their launch only
    is_launched: np.ndarray
    #: the host profile kind each node's dispatch is relative to (index into HOST_KINDS)
    host_kind: np.ndarray

    @property
    def is_view(self) -> np.ndarray:
        """Calls that launch no kernel: views, shape arithmetic, no-op casts."""
        return ~(self.is_kernel | self.is_fallback)

    def short_us(self) -> np.ndarray:
        """Per node, the part of its time alone that the short-kernel share applies to."""
        return np.where(self.is_kernel, np.minimum(self.kernel_us, SHORT_KERNEL_CAP_US), 0.0)


@dataclass(frozen=True)
class LayerTimes:
    """Per node, in microseconds: kernel time inside the model with its interval, and host time."""

    kernel_us: np.ndarray
    low_us: np.ndarray
    high_us: np.ndarray
    host_us: np.ndarray


def _alone_us(a: LayerArrays, c: CompositionConstants) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernel time alone with its interval; a fallback's is floored at a launch and spans 0.5-2x."""
    floored = np.maximum(c.min_kernel_us, a.kernel_us)
    kernel = np.where(a.is_fallback, floored, a.kernel_us)
    low = np.where(a.is_fallback, floored * 0.5, a.low_us)
    high = np.where(a.is_fallback, floored * 2.0, a.high_us)
    return kernel, low, high


def _in_model_extra_us(a: LayerArrays, c: CompositionConstants) -> np.ndarray:
    """What a learned kernel adds inside a model to its scaled time alone.

    Short kernels: a learned share of its time up to SHORT_KERNEL_CAP_US. Alone, a kernel
    replays with its inputs and weights warm in L2; in a model they arrive cold from HBM, which
    a short kernel waits for and a long one streams anyway (on the H200 zoo the share is
    0.13-0.16; with it 86% of the first lease's captured runs fell within +-10%
    leave-one-model-out, against 82% with a flat gap per kernel alone). Weights: a learned
    multiple of reading them cold (``cold_weight_share``, features.cold_weight_us)."""
    return c.short_kernel_share * a.short_us() + np.where(a.is_kernel, c.cold_weight_share * a.cold_weight_us, 0.0)


def host_costs(host: HostProfile | np.ndarray) -> np.ndarray:
    """A profile's per-call costs in HOST_KINDS order (an array is taken as already that)."""
    return np.asarray(host.costs() if isinstance(host, HostProfile) else host, dtype=float)


def _host_terms(a: LayerArrays, c: CompositionConstants, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A node's host time is linear in (dispatch_share, call_share, view_share): the three
    coefficients per node (3, nodes), each a host cost, and the part that is fixed (launches,
    fallbacks' dispatch). Every term is a non-negative multiple of one of the host's costs, so
    a slower host never makes a forward faster."""
    own_call = a.is_kernel & ~a.is_launched
    coefficients = np.stack([np.where(own_call, a.dispatch_ratio * costs[a.host_kind], 0.0),
                             (own_call | a.is_fallback) * costs[MODULE_CALL_KIND],
                             a.is_view * costs[VIEW_KIND]])
    fixed = (np.where(a.is_kernel & a.is_launched, c.launch_share, 0.0)
             + np.where(a.is_fallback, c.fallback_ratio, 0.0)) * costs[ELEMENTWISE_KIND]
    return coefficients, fixed


def _host_point(c: CompositionConstants) -> np.ndarray:
    return np.array([[c.dispatch_share, c.call_share, c.view_share]])


def _in_model_us(a: LayerArrays, c: CompositionConstants) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernel time inside the model with its interval: group scale x alone, plus what a learned
    kernel adds there (short kernels' share, its weights' cold read)."""
    scale = c.group_scales()[a.group]
    extra = 0.0 if c.serial else _in_model_extra_us(a, c)  # (serial: serial_terms has no such term)
    kernel, low, high = _alone_us(a, c)
    return kernel * scale + extra, low * scale + extra, high * scale + extra


def layer_times(a: LayerArrays, c: CompositionConstants, host: HostProfile | np.ndarray) -> LayerTimes:
    """Per node, its kernel time inside the model with its interval, and its host issue time on
    ``host``: its share of the dispatch of its kind plus the Python of a call for a kernel, its
    launch for a kernel another call launches, the view cost for a call that launches nothing,
    the fallback dispatch plus a call's Python for a fallback."""
    coefficients, fixed = _host_terms(a, c, host_costs(host))
    if c.serial:  # a call's dispatch is inside its measured time: its host time is the Python around it
        coefficients[0] = 0.0
        fixed = np.zeros_like(fixed)
    return LayerTimes(*_in_model_us(a, c), (_host_point(c) @ coefficients)[0] + fixed)


#: cudagraph_terms' columns after the group sums, in order: the constants that multiply them.
CUDAGRAPH_TERMS = ("gap_us", "short_kernel_share", "replay_us", "cold_weight_share")


def cudagraph_terms(a: LayerArrays, c: CompositionConstants) -> np.ndarray:
    """A captured graph's replay time split into the terms each constant multiplies: the kernel
    time alone summed per group (GROUPS order), the kernels launched, the short-kernel time, one
    replay (none when nothing launches) and the cold weight reads. ``compose`` is these terms
    times ``cudagraph_weights``, and training fits the weights on them."""
    kernel, _, _ = _alone_us(a, c)
    launched = kernel > 0
    sums = np.bincount(a.group, weights=kernel, minlength=len(GROUPS))
    cold = float(np.where(a.is_kernel, a.cold_weight_us, 0.0).sum())
    return np.append(sums, [float(launched.sum()), float(a.short_us().sum()), float(launched.any()), cold])


def cudagraph_weights(c: CompositionConstants) -> np.ndarray:
    """The constants ``cudagraph_terms`` are multiplied by, in the same order."""
    return np.append(c.group_scales(), [getattr(c, name) for name in CUDAGRAPH_TERMS])


#: serial_terms' columns after the group sums, in order: the constants that multiply them.
SERIAL_TERMS = ("call_share", "view_share", "sync_us")


def serial_terms(a: LayerArrays, c: CompositionConstants, host: HostProfile | np.ndarray) -> np.ndarray:
    """A serial (CPU) forward split into the terms each constant multiplies: each group's
    operator time alone summed (GROUPS order), the host's module_call cost per call that computes
    (a kernel or a fallback; ``_host_terms``), its view cost per call that does not, and 1 for the
    cost of a forward. ``compose`` is these terms times ``serial_weights``; training fits the
    weights. (The short-kernel and cold-weight shares, what a GPU's L2 makes of a kernel inside a
    captured graph, do not apply to a serial forward, here or in ``layer_times``.)"""
    kernel, _, _ = _alone_us(a, c)
    sums = np.bincount(a.group, weights=kernel, minlength=len(GROUPS))
    coefficients, _ = _host_terms(a, c, host_costs(host))  # (a launch or a fallback's dispatch is inside its time)
    return np.append(sums, [float(coefficients[1].sum()), float(coefficients[2].sum()), 1.0])


def serial_weights(c: CompositionConstants) -> np.ndarray:
    """The constants ``serial_terms`` are multiplied by, in the same order."""
    return np.append(c.group_scales(), [getattr(c, name) for name in SERIAL_TERMS])


def eager_grid_us(a: LayerArrays, c: CompositionConstants, grid: np.ndarray,
                  host: HostProfile | np.ndarray) -> np.ndarray:
    """One eager forward on ``host``, without its final synchronisation, at every
    (dispatch_share, call_share, view_share) row of ``grid`` at once; ``c`` gives every other
    constant.

    A node's issue time is linear in the three, so the issue times of all grid points are one
    matrix product of running sums; the overlap of host and GPU is then ``_forward_end`` per
    row. Training evaluates every run at every grid point in every fold this way; a prediction
    is the one-row case.
    """
    grid = np.atleast_2d(np.asarray(grid, dtype=float))
    if not len(a.kernel_us):
        return np.zeros(len(grid))
    coefficients, fixed = _host_terms(a, c, host_costs(host))
    issued = grid @ np.cumsum(coefficients, axis=1) + np.cumsum(fixed)  # (points, nodes)
    return _forward_end(issued, _in_model_us(a, c)[0])


def _forward_end(issued: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """When the last of host and GPU finishes, per row of issue times (points, nodes).

    Kernel i starts at max(issued_i, end_{i-1}), so end_i = max over launched j <= i of
    (issued_j + kernels j..i): with K the running kernel sum, end = K_n + max_j(issued_j - K_{j-1}).
    That closed form is the recurrence without a Python loop.
    """
    launched = kernel > 0
    if not launched.any():
        return issued[:, -1]
    running = np.cumsum(kernel)
    gpu_end = running[-1] + np.max((issued - (running - kernel))[:, launched], axis=1)
    return np.maximum(issued[:, -1], gpu_end)


def compose(a: LayerArrays, c: CompositionConstants, mode: str, host: HostProfile | np.ndarray | None = None) -> float:
    """A whole model's latency in microseconds from its layers alone, in execution ``mode``; an
    eager forward is issued by ``host`` (a captured graph's replay needs no host)."""
    if mode == "cudagraph":
        return float(cudagraph_terms(a, c) @ cudagraph_weights(c))
    if mode == "eager":
        if host is None:
            raise ValueError("an eager prediction needs a host profile: the host issues every kernel")
        if c.serial:
            return float(serial_terms(a, c, host) @ serial_weights(c))
        return float(eager_grid_us(a, c, _host_point(c), host)[0]) + c.sync_us
    raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
