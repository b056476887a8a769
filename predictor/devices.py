"""Device specs: the peak rates and bandwidth the roofline features and fallback use.

Rates are measured ceilings where we have them (an H200's dense bf16 GEMM ran at about
790 TFLOP/s and a device-to-device copy at about 4.3 TB/s), datasheet figures otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Families whose arithmetic runs on tensor cores (in fp32 only where TF32 is allowed).
TENSOR_CORE_FAMILIES = frozenset({"conv2d", "linear", "matmul", "sdpa"})


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU model: identity, size and the ceilings that bound any kernel on it."""

    device_id: str
    name: str
    sm_count: int
    l2_bytes: int
    memory_bandwidth: float  # bytes per second
    tensor_flops: dict[str, float]  # precision -> dense tensor-core FLOP/s
    vector_flops: float  # fp32 FLOP/s on CUDA cores
    price_per_hour: float | None = None

    def peak_flops(self, family: str, precision: str, allow_tf32_cudnn: bool = True,
                   allow_tf32_matmul: bool = False) -> float:
        """The ceiling for one operator: tensor cores for GEMM-like families in the precision
        they run (PyTorch's fp32 runs convolutions in TF32 but matmuls in FP32)."""
        if family not in TENSOR_CORE_FAMILIES:
            return self.vector_flops
        if precision in ("fp16", "bf16"):
            return self.tensor_flops[precision]
        tf32 = allow_tf32_cudnn if family == "conv2d" else allow_tf32_matmul
        return self.tensor_flops["tf32"] if tf32 else self.vector_flops


DEVICES: dict[str, DeviceSpec] = {
    d.device_id: d for d in (
        DeviceSpec(
            device_id="nvidia-h200", name="NVIDIA H200", sm_count=132, l2_bytes=62_914_560,
            memory_bandwidth=4.3e12,
            tensor_flops={"bf16": 790e12, "fp16": 790e12, "tf32": 395e12},
            vector_flops=60e12,
        ),
    )
}


def resolve_device(query: str) -> DeviceSpec:
    """A device by id, or by a case-insensitive part of its name ('h200'), naming the choices."""
    wanted = query.strip().lower()
    if wanted in DEVICES:
        return DEVICES[wanted]
    matches = [d for d in DEVICES.values() if wanted and (wanted in d.name.lower() or wanted in d.device_id)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{d.device_id} ({d.name})" for d in DEVICES.values())
    if matches:
        raise ValueError(f"device {query!r} is ambiguous: it matches {', '.join(d.device_id for d in matches)}")
    raise ValueError(f"unknown device {query!r}: expected one of {known}")
