"""Set PyTorch's TF32 switches for a precision, and restore them afterwards.

PyTorch's default fp32 already runs cuDNN convolutions in TF32 (``cudnn.allow_tf32`` is True)
while matmuls stay in full FP32; "tf32" allows both. Rows record the switches actually used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from predictor.precision import Precision


def torch_dtype(precision: Precision) -> torch.dtype:
    """The tensor dtype a precision computes in."""
    return getattr(torch, precision.torch_dtype)


@contextmanager
def precision_flags(precision: Precision) -> Iterator[tuple[bool, bool]]:
    """Within the block, TF32 switches are those of ``precision``; yields (cudnn, matmul)."""
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = precision.allow_tf32_cudnn
    torch.backends.cuda.matmul.allow_tf32 = precision.allow_tf32_matmul
    try:
        yield torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
