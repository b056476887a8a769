"""Precisions latpred predicts for, and what each one means on a GPU.

PyTorch's default "fp32" is mixed: cuDNN convolutions run in TF32 while matmuls stay in full
FP32. So "fp32" here means *PyTorch defaults* and "tf32" means TF32 allowed for both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """One precision: its element size and the TF32 flags PyTorch runs it with."""

    name: str
    element_bytes: int
    torch_dtype: str
    allow_tf32_cudnn: bool
    allow_tf32_matmul: bool


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", 4, "float32", allow_tf32_cudnn=True, allow_tf32_matmul=False),
        Precision("tf32", 4, "float32", allow_tf32_cudnn=True, allow_tf32_matmul=True),
        Precision("fp16", 2, "float16", allow_tf32_cudnn=True, allow_tf32_matmul=False),
        Precision("bf16", 2, "bfloat16", allow_tf32_cudnn=True, allow_tf32_matmul=False),
    )
}


def get_precision(name: str) -> Precision:
    """Look a precision up by name, with an error that lists the valid ones."""
    try:
        return PRECISIONS[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown precision {name!r}: expected one of {', '.join(PRECISIONS)}"
        ) from None
