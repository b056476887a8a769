"""A model built and run as a user builds and runs one: what whole-model runs
(collectors.model_runs), the host probe's reference forwards (collectors.reference_forwards), the
serving check and the kernel profiles share.

It needs torch and the precisions' switches only, no dataframe library: ``latpred host probe``
builds its reference forwards from here within issue #12's 15 s, where importing pandas took a
second on a contended core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from collectors.precision_flags import precision_flags
from predictor.precision import Precision


class ModelSource(Protocol):
    """What the protocol needs of a model: its kind (the rows' ``model_kind``), how to build it
    and one input batch. ``collectors.zoo_models.ZooModel`` and ``collectors.nas_space.NasModel``
    are such sources."""

    @property
    def kind(self) -> str: ...

    def build(self) -> Any: ...

    def example_input(self, batch: int, device: Any, dtype: Any) -> Any: ...


def build_model(source: ModelSource, device: Any, dtype: Any) -> Any:
    """``source``'s model on ``device`` in ``dtype``, in eval mode, built and cast as a user builds
    one: outside inference mode, even when called inside it. Parameters made inside it are
    inference tensors, and torch.matmul then multiplies a linear layer's non-contiguous 3-d input
    (MLP-Mixer's token mixing, attention's batch-first input on its slow path) by a batched GEMM
    of one small matrix per token instead of copying it and running one GEMM, as PyTorch does for
    a model built the usual way (and the importer records: predictor.importers.torch_calls.
    linear_plan). The NAS runs before 2026-12-02 were measured so (datasets/nvidia-h200/notes.md)."""
    import torch

    with torch.inference_mode(False):
        with torch.device(device):
            model = source.build()
        return model.to(device=device, dtype=dtype).eval()


def bound_forward(model: Any, x: Any) -> Callable[[], Any]:
    """One forward of ``model`` on ``x``, as a call with no arguments (bound now, not at call time)."""
    return lambda: model(x)


def under_precision(precision: Precision, forward: Callable[[], Any]) -> Callable[[], Any]:
    """``forward`` run under ``precision``'s TF32 switches (restored afterwards)."""
    def run() -> Any:
        with precision_flags(precision):
            return forward()
    return run
