"""Composing per-layer times into a whole-model latency, per execution mode.

cudagraph: the GPU runs the captured kernels back to back, so the latency is the kernel times
(with what a kernel adds inside a model: short kernels and cold weights) plus a learned gap per
kernel and a learned cost per replay (14-21 us fitted on sequentially timed replays, none on
replays timed in interleaved rounds, where the gap is 0.1 us). eager: the host issues
operators one by one while the GPU runs them; kernel i starts once it has been issued *and*
kernel i-1 has finished. At small batch the host's issue time, not the kernels, sets the
latency, which summing kernels can never show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

MODES = ("eager", "cudagraph")


#: Families whose isolated kernel time is corrected by one shared, learned scale: a layer inside
#: a model differs from the same layer measured alone (no bias, other memory layouts, cache state).
FAMILY_GROUPS: dict[str, str] = {
    "conv2d": "conv", "linear": "gemm", "matmul": "gemm", "sdpa": "attention",
    "batch_norm": "norm", "layer_norm": "norm", "group_norm": "norm",
}
GROUPS = ("conv", "gemm", "attention", "norm", "elementwise", "fallback")


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
    #: the share of a kernel's first SHORT_KERNEL_CAP_US it runs longer inside a model (short_kernel_us)
    short_kernel_share: float = 0.0
    #: the multiple of its cold weight read (features.cold_weight_us) a layer adds inside a model
    #: (above 1 where HBM delivers less than its nominal bandwidth: 1.40 is 0.71 of it)
    cold_weight_share: float = 0.0
    host_scale: float = 1.0
    call_host_us: float = 2.0
    #: host time of a call that launches no kernel (a view, a reshape, a no-op cast): the Python
    #: around it, which the dispatch sweep never sees, is what it mostly stands for.
    view_host_us: float = 2.0
    #: host time of a kernel another call launches (Node.launched_by): cudaLaunchKernel alone.
    launch_host_us: float = 2.0
    fallback_host_us: float = 20.0
    sync_us: float = 20.0
    min_kernel_us: float = 2.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scale(self, family: str | None, kind: str) -> float:
        return self.group_scale.get(family_group(family, kind), 1.0)


#: Up to this time a kernel measured alone runs a share longer inside a model (short_kernel_us).
SHORT_KERNEL_CAP_US = 25.0


def short_kernel_us(kernel_us: float, c: CompositionConstants) -> float:
    """What a kernel adds inside a model to its scaled time measured alone: a learned share of
    its time up to SHORT_KERNEL_CAP_US. Alone, a kernel replays with its inputs and weights warm
    in L2; in a model they arrive cold from HBM, which a short kernel waits for and a long one
    streams anyway (on the H200 zoo the share is 0.13-0.16; with it 86% of the first lease's
    captured runs fell within +-10% leave-one-model-out, against 82% with a flat gap per kernel
    alone). A layer's weights, cold in a model too, are a term of their own
    (``cold_weight_share``, features.cold_weight_us)."""
    return c.short_kernel_share * min(kernel_us, SHORT_KERNEL_CAP_US)


def cudagraph_us(kernel_us: Sequence[float], c: CompositionConstants) -> float:
    """Replay time of a captured graph: kernel times plus a gap per launched kernel, plus the
    replay's own launch and synchronisation (none for a graph that launches nothing)."""
    launched = [k for k in kernel_us if k > 0]
    return sum(launched) + c.gap_us * len(launched) + (c.replay_us if launched else 0.0)


def eager_us(kernel_us: Sequence[float], host_us: Sequence[float], c: CompositionConstants) -> float:
    """Issue-and-overlap simulation of one eager forward, ending with the synchronisation.

    Kernel i starts at max(issued_i, end_{i-1}), so end_i = max over launched j <= i of
    (issued_j + kernels j..i): with K the running kernel sum, end = K_n + max_j(issued_j - K_{j-1}).
    That closed form is the same recurrence without a Python loop (training evaluates it for
    every run at every point of its grid).
    """
    kernel = np.asarray(kernel_us, dtype=float)
    issued = np.cumsum(np.asarray(host_us, dtype=float))
    if issued.size == 0:
        return c.sync_us
    launched = kernel > 0
    if not launched.any():
        return float(issued[-1]) + c.sync_us
    running = np.cumsum(kernel)
    gpu_end = running[-1] + float(np.max((issued - (running - kernel))[launched]))
    return max(float(issued[-1]), gpu_end) + c.sync_us
