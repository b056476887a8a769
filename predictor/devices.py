"""Device specs: the size and ceilings of each GPU, which the roofline features and fallback use.

Specs come from the device catalog (``predictor.device_catalog``: a data file shipped beside this
module, with a user's file laid over it). A device with a dataset and bundle in the repository
('measured' provenance) carries ceilings measured on it (an H200's dense bf16 GEMM ran at about
790 TFLOP/s and a device-to-device copy at about 4.3 TB/s); the others ('transferred') carry
datasheet figures and have no bundle of their own yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import ClassVar

from predictor.device_catalog import CatalogEntry, DeviceKind, Provenance, load_catalog, user_catalog_path

#: Families whose arithmetic runs on tensor cores (in fp32 only where TF32 is allowed).
TENSOR_CORE_FAMILIES = frozenset({"conv2d", "linear", "matmul", "sdpa"})
#: Bytes the L2 delivers per clock per SM: the A100 whitepaper's 5,120 B/clk over its 108 SMs, the one
#: published figure, assumed for every architecture (no datasheet prints an L2's bandwidth).
L2_BYTES_PER_CLOCK_PER_SM = 5120 / 108


class PrecisionUnsupported(ValueError):
    """A precision the device's hardware lacks (a T4's bf16): a request's ``precision`` is at fault."""


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU model: identity, size, the ceilings that bound any kernel on it, what it costs
    and whether latpred has measured it."""

    device_id: str
    name: str
    sm_count: int
    l2_bytes: int
    memory_bandwidth: float  # bytes per second
    tensor_flops: dict[str, float]  # precision -> dense tensor-core FLOP/s; a precision without tensor cores is absent
    vector_flops: float  # fp32 FLOP/s on CUDA cores
    memory_bytes: int
    tdp_w: float  # the board's maximum power, watts
    price_per_hour: float | None = None  # on-demand USD per GPU-hour; None: unknown
    #: 'measured': a dataset and bundle of this device are in the repository; 'transferred': its
    #: specs are datasheet figures and its predictions are to come from a transfer model
    provenance: Provenance = "transferred"
    source: str = ""  # where the specs come from
    price_source: str | None = None  # where the price comes from
    #: the datasheet's (memory_bandwidth, tensor_flops, vector_flops) where the ceilings above were
    #: measured; None where they are the datasheet's already
    datasheet: tuple[float, dict[str, float], float] | None = None
    #: 'gpu', or 'cpu' (sm_count its cores, l2_bytes its last-level cache): torch on the CPU
    kind: DeviceKind = "gpu"
    #: the GPU's boost clock from its datasheet (None for a CPU)
    boost_clock_hz: float | None = None
    #: whether the roofline reads a call's bytes that fit in L2 at the L2's bandwidth: the transfer
    #: model's basis (``datasheet_spec(l2_roofline=True)``); a one-device bundle's features charge
    #: every byte the memory's bandwidth, as they were fitted
    l2_roofline: bool = False

    @property
    def l2_bandwidth(self) -> float | None:
        """The L2's bandwidth in bytes per second, from the SMs and the boost clock
        (``L2_BYTES_PER_CLOCK_PER_SM``); None for a CPU."""
        if self.boost_clock_hz is None:
            return None
        return L2_BYTES_PER_CLOCK_PER_SM * self.sm_count * self.boost_clock_hz

    def memory_seconds(self, bytes_moved: float) -> float:
        """Seconds the roofline charges for moving ``bytes_moved``: on the L2 roofline, a call
        whose bytes fit in L2 reads them there (a sweep replays each call on the same buffers, and
        a layer inside a model mostly reads what the one before it wrote); otherwise, and for
        every call on a one-device bundle's basis, at the memory's bandwidth. Without it, an H100
        (3.35 TB/s) was predicted 1.14x slower than it runs, though calls that fit in L2 run as
        fast as on the H200 (4.8 TB/s) with the same SMs and clock."""
        l2 = self.l2_bandwidth if self.l2_roofline else None
        if l2 is not None and bytes_moved <= self.l2_bytes:
            return bytes_moved / max(l2, self.memory_bandwidth)
        return bytes_moved / self.memory_bandwidth

    @property
    def modes(self) -> tuple[str, ...]:
        """The execution modes the device runs: a CPU runs eager only (no CUDA graph without a GPU)."""
        return ("eager",) if self.kind == "cpu" else ("eager", "cudagraph")

    #: the precisions a CPU was measured in (fp16 and bf16 on a CPU run other kernels, unmeasured)
    CPU_PRECISIONS: ClassVar[tuple[str, ...]] = ("fp32",)

    def refusal(self, precision: str, mode: str) -> str | None:
        """Why this device cannot be predicted at ``precision`` in ``mode`` (a field named
        first), or None: a CPU runs eager forwards in fp32 only."""
        if mode not in self.modes:
            return (f"mode: {self.name} ({self.device_id}) is a CPU and runs eager only: a CUDA graph needs a "
                    "GPU (ask mode eager)")
        if self.kind == "cpu" and precision not in self.CPU_PRECISIONS:
            return (f"precision: {self.name} ({self.device_id}) is a CPU measured in fp32 only, not {precision} "
                    "(ask precision fp32)")
        return None

    def planning_refusal(self) -> str | None:
        """Why capacity planning does not plan this device, or None: it plans GPUs (Triton instances
        of KIND_GPU, GPUs to buy) from batched latencies; a CPU's were measured at batch 1-32 only
        and no server on a CPU was checked."""
        if self.kind == "cpu":
            return (f"device: {self.name} ({self.device_id}) is a CPU: capacity planning plans GPUs; predict the "
                    "CPU's latency per batch instead (POST /v1/predict, latpred predict)")
        return None

    @classmethod
    def from_entry(cls, device_id: str, entry: CatalogEntry) -> DeviceSpec:
        """The spec a validated catalog entry states."""
        return cls(device_id=device_id, name=entry.name, sm_count=entry.sm_count, l2_bytes=entry.l2_bytes,
                   memory_bandwidth=entry.memory_bandwidth, tensor_flops=dict(entry.tensor_flops),
                   vector_flops=entry.vector_flops, price_per_hour=entry.price_per_hour,
                   memory_bytes=entry.memory_bytes, tdp_w=entry.tdp_w, provenance=entry.provenance,
                   source=entry.source, price_source=entry.price_source, kind=entry.kind,
                   boost_clock_hz=entry.boost_clock_hz,
                   datasheet=None if entry.datasheet is None else (
                       entry.datasheet.memory_bandwidth, dict(entry.datasheet.tensor_flops),
                       entry.datasheet.vector_flops))

    def datasheet_spec(self, l2_roofline: bool = False) -> DeviceSpec:
        """This device with its datasheet's ceilings in place of measured ones: the one basis on
        which every device can be compared (a device never measured has only its datasheet), as
        the transfer model compares them; with ``l2_roofline``, its roofline reads what fits in L2
        at the L2's bandwidth (transfer bundles since 2026-12-05; ``memory_seconds``)."""
        spec = self if self.datasheet is None else replace(
            self, memory_bandwidth=self.datasheet[0], tensor_flops=dict(self.datasheet[1]),
            vector_flops=self.datasheet[2], datasheet=None)
        return replace(spec, l2_roofline=l2_roofline) if l2_roofline != spec.l2_roofline else spec

    def peak_flops(self, family: str, precision: str, allow_tf32_cudnn: bool = True,
                   allow_tf32_matmul: bool = False) -> float:
        """The ceiling for one operator: tensor cores for GEMM-like families in the precision
        they run (PyTorch's fp32 runs convolutions in TF32 but matmuls in FP32)."""
        if family not in TENSOR_CORE_FAMILIES:
            return self.vector_flops
        if precision in ("fp16", "bf16"):
            if precision not in self.tensor_flops:
                raise PrecisionUnsupported(f"{self.name} has no {precision} tensor cores: choose another precision")
            return self.tensor_flops[precision]
        tf32 = allow_tf32_cudnn if family == "conv2d" else allow_tf32_matmul
        # a GPU without TF32 (Turing) runs fp32 on its CUDA cores whatever the flags say
        return self.tensor_flops.get("tf32", self.vector_flops) if tf32 else self.vector_flops


def devices_from_catalog(entries: dict[str, CatalogEntry]) -> dict[str, DeviceSpec]:
    """Device id -> spec, in catalog order."""
    return {device_id: DeviceSpec.from_entry(device_id, entry) for device_id, entry in entries.items()}


#: every known device, from the shipped catalog and ``$LATPRED_DEVICE_CATALOG`` over it, read once
#: at import (a catalog that does not validate stops the import, naming the device and field)
DEVICES: dict[str, DeviceSpec] = devices_from_catalog(load_catalog(user=user_catalog_path()))


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", text.lower()) if t]


def _has_words(words: list[str], text: str) -> bool:
    """Whether ``words`` occur in ``text`` as whole words, in a row ('l4' in 'NVIDIA L4', not in 'L40S')."""
    tokens = _tokens(text)
    return any(tokens[i:i + len(words)] == words for i in range(len(tokens) - len(words) + 1))


def resolve_device(query: str) -> DeviceSpec:
    """A device by id, or by a case-insensitive part of its name ('h200'), naming the choices.
    Whole words win over parts of words: 'l4' is the L4 even though 'L40S' contains it too, and
    'a10' the A10, while 'a100' matches both A100s and is refused as ambiguous; a name that is the
    query and no more wins over those that add to it ('h200' is the H200, not a partition of it)."""
    wanted = query.strip().lower()
    if wanted in DEVICES:
        return DEVICES[wanted]
    words = _tokens(wanted)
    whole = [d for d in DEVICES.values() if words and (_has_words(words, d.name) or _has_words(words, d.device_id))]
    if len(whole) == 1:
        return whole[0]
    # A name that is all the query says, but for the vendor, wins over names that say more: 'h200'
    # is the NVIDIA H200, not one of its partitions ('NVIDIA H200 (72 SMs)').
    exact = [d for d in whole if [t for t in _tokens(d.name) if t != "nvidia"] == [w for w in words if w != "nvidia"]]
    if len(exact) == 1:
        return exact[0]
    # likewise an id that is all the query says: 'NVIDIA H100 80GB HBM3' (what torch calls the GPU, as
    # a host profile records it) is nvidia-h100-80gb-hbm3, not its partition nvidia-h100-80gb-hbm3-sm72
    exact_id = [d for d in whole if [t for t in _tokens(d.device_id) if t != "nvidia"] == [w for w in words
                                                                                          if w != "nvidia"]]
    if len(exact_id) == 1:
        return exact_id[0]
    matches = whole or [d for d in DEVICES.values() if wanted and (wanted in d.name.lower() or wanted in d.device_id)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{d.device_id} ({d.name})" for d in DEVICES.values())
    if matches:
        choices = ", ".join(f"{d.device_id} ({d.name})" for d in matches)
        raise ValueError(f"device {query!r} is ambiguous: it matches {choices}")
    raise ValueError(f"unknown device {query!r}: expected one of {known}")
