"""Who measured a row: the GPU (or CPU), its clocks and limits, and the software stack.

The fingerprint is read once per sweep; clock-event reasons are read around every timing window
so that rows measured while the GPU was slowed down (power cap, thermal, power brake) are flagged.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from collectors.partition import active_partition


@dataclass(frozen=True)
class DeviceFingerprint:
    """Everything that identifies the measuring device and stack; ``digest`` names it in rows."""

    device_id: str
    kind: str  # "cuda" or "cpu"
    name: str
    sm_count: int | None
    memory_gib: float | None
    l2_bytes: int | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    mem_clock_max_mhz: int | None
    power_limit_w: float | None
    driver_version: str | None
    cuda_version: str | None
    cudnn_version: str | None
    torch_version: str | None
    cpu_model: str
    cpu_cores: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def digest(self) -> str:
        """A short hash of the stable fields (the current clock is left out: it moves)."""
        stable = {k: v for k, v in asdict(self).items() if k not in ("sm_clock_mhz", "notes")}
        return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary, with the digest, for JSON and the dataset card."""
        return {**asdict(self), "fingerprint": self.digest}


def slugify(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the device id used in paths and rows."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def cpu_model() -> str:
    """The host CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Nvml:
    """A thin, failure-tolerant handle on NVML for one GPU (pynvml from nvidia-ml-py)."""

    def __init__(self, index: int = 0) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(self.handle, *args)
        except Exception:  # an NVML query a driver lacks must not stop a sweep
            return None

    def clock_event_reasons(self) -> int | None:
        """Bitmask of why clocks are what they are (newer name first, older as fallback)."""
        reasons = self._call("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:
            reasons = self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        return None if reasons is None else int(reasons)

    def sm_clock_mhz(self) -> int | None:
        value = self._call("nvmlDeviceGetClockInfo", self._nvml.NVML_CLOCK_SM)
        return None if value is None else int(value)

    def max_clock_mhz(self, which: str) -> int | None:
        value = self._call("nvmlDeviceGetMaxClockInfo", getattr(self._nvml, which))
        return None if value is None else int(value)

    def power_limit_w(self) -> float | None:
        value = self._call("nvmlDeviceGetPowerManagementLimit")
        return None if value is None else value / 1000.0

    def driver_version(self) -> str | None:
        try:
            value = self._nvml.nvmlSystemGetDriverVersion()
        except Exception:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml(index: int = 0) -> Nvml | None:
    """NVML for GPU ``index``, or None where there is no driver or no nvidia-ml-py."""
    try:
        return Nvml(index)
    except Exception:
        return None


def read_fingerprint(device: str = "auto") -> DeviceFingerprint:
    """Fingerprint the device a sweep would measure: ``auto`` takes CUDA GPU 0 if there is one.

    Works without a GPU (and without torch), and says so in ``notes`` instead of failing.
    """
    notes: list[str] = []
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
        notes.append("torch is not installed: install latpred[collect] to measure")
    cuda = torch is not None and torch.cuda.is_available()
    if device == "cuda" and not cuda:
        raise RuntimeError("no CUDA GPU is visible to torch: use --device cpu, or check the driver")
    common: dict[str, Any] = dict(  # the fields both kinds of device share
        torch_version=None if torch is None else torch.__version__,
        cpu_model=cpu_model(),
        cpu_cores=os.cpu_count() or 1,
    )
    if device == "cpu" or not cuda:
        if device == "auto" and torch is not None and not cuda:
            notes.append("no CUDA GPU visible: measuring the CPU")
        return DeviceFingerprint(
            device_id="cpu-" + slugify(common["cpu_model"])[:40], kind="cpu",
            name=str(common["cpu_model"]), sm_count=None, memory_gib=None, l2_bytes=None,
            sm_clock_mhz=None, sm_clock_max_mhz=None, mem_clock_max_mhz=None, power_limit_w=None,
            driver_version=None, cuda_version=None, cudnn_version=None, notes=tuple(notes), **common,
        )
    props = torch.cuda.get_device_properties(0)
    partition = active_partition()
    if partition is not None:
        notes.append(f"green context: {partition.sms} of {partition.total_sms} SMs ({partition.requested_sms} "
                     f"asked for; {partition.counted_by}); memory, bandwidth and L2 are the whole GPU's; a 4096^2 fp16 "
                     f"GEMM {partition.gemm_eager_us} us eager, {partition.gemm_graph_us} us from a graph"
                     + (f"; {partition.note}" if partition.note else ""))
    nvml = open_nvml(0)
    if nvml is None:
        notes.append("NVML unavailable: clocks, power limit and throttling are not recorded")
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return DeviceFingerprint(
        device_id=slugify(props.name) + (partition.suffix if partition else ""),
        kind="cuda",
        name=props.name + (f" ({partition.sms} SMs)" if partition else ""),
        sm_count=partition.sms if partition else props.multi_processor_count,
        memory_gib=round(props.total_memory / 2**30, 2),
        l2_bytes=getattr(props, "L2_cache_size", None),
        sm_clock_mhz=nvml.sm_clock_mhz() if nvml else None,
        sm_clock_max_mhz=nvml.max_clock_mhz("NVML_CLOCK_SM") if nvml else None,
        mem_clock_max_mhz=nvml.max_clock_mhz("NVML_CLOCK_MEM") if nvml else None,
        power_limit_w=nvml.power_limit_w() if nvml else None,
        driver_version=nvml.driver_version() if nvml else None,
        cuda_version=torch.version.cuda,
        cudnn_version=None if cudnn is None else str(cudnn),
        notes=tuple(notes),
        **common,
    )
