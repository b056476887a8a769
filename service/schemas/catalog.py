"""Devices, models and health: what the service knows and whether it is ready."""

from __future__ import annotations

from pydantic import Field

from predictor.device_catalog import DeviceKind, Provenance
from service.schemas.common import ResponseModel


class DeviceOut(ResponseModel):
    id: str
    name: str
    provenance: Provenance = Field(description=(
        "'measured': latpred has a dataset and model bundle of this device, and its ceilings were measured "
        "on it; 'transferred': its specs are datasheet figures and it has no bundle of its own"))
    kind: DeviceKind = Field(description="'gpu', or 'cpu': torch on the CPU, eager forwards in fp32 only (its "
                                         "sm_count is its cores, its l2_bytes its last-level cache)")
    modes: list[str] = Field(description="the execution modes it runs: a CPU runs eager only")
    sm_count: int
    l2_bytes: int
    memory_bytes: int = Field(description="device memory, bytes")
    memory_bandwidth: float = Field(description="bytes per second")
    tensor_flops: dict[str, float] = Field(description=(
        "precision (fp16, bf16, tf32) -> dense tensor-core FLOP/s; a precision the device has no tensor cores "
        "for is absent (a CPU: none)"))
    vector_flops: float = Field(description="fp32 FLOP/s on CUDA cores (a CPU: its fp32 rate)")
    tdp_w: float = Field(description="the board's maximum power, watts")
    boost_clock_hz: float | None = Field(description="a GPU's boost clock from its datasheet, Hz; null for a CPU")
    l2_bandwidth: float | None = Field(description=(
        "bytes per second at which the transfer model's roofline reads a call that fits in L2: SMs x boost clock x "
        "5,120/108 bytes per clock (the A100 whitepaper's, assumed for every architecture); null for a CPU"))
    price_per_hour: float | None = Field(description="on-demand USD per GPU-hour (editable: "
                                                     "LATPRED_DEVICE_CATALOG); null where unknown")
    source: str = Field(description="where the specs come from")
    price_source: str | None = Field(description="where the price comes from")
    bundle_loaded: bool = Field(description="whether a loaded bundle predicts it (its own, or the transfer bundle)")
    model_version: str | None
    predicted_by: str | None = Field(description="the bundle that predicts it: its own device id, 'transfer' (the "
                                                 "transfer model, from its datasheet), or null (none loaded)")


class DevicesResponse(ResponseModel):
    devices: list[DeviceOut]


class BundleOut(ResponseModel):
    device: str = Field(description="the device a one-device bundle was trained on, or 'transfer': the transfer "
                                    "bundle, which predicts every catalog GPU without a bundle of its own")
    version: str


class ModelsResponse(ResponseModel):
    zoo: list[str] = Field(description="graph names usable as 'model'")
    bundles: list[BundleOut] = Field(description="loaded model bundles: one per device trained alone, and the "
                                                 "transfer bundle")
    errors: dict[str, str] = Field(description="bundle folders that did not verify (checksums, load, a smoke "
                                               "prediction), and why")
    fallbacks: dict[str, str] = Field(default_factory=dict, description=(
        "devices whose bundle folder did not verify but which are served still, from their last good "
        "bundle: device -> what is served"))


class ReloadResponse(ModelsResponse):
    reloaded: bool = True


class Live(ResponseModel):
    status: str = "alive"


class Ready(ResponseModel):
    status: str = "ready"
    model_version: str = Field(description="the served bundle's version (the first device's, if several)")
    model_versions: dict[str, str] = Field(description="device -> bundle version")
    fallbacks: dict[str, str] = Field(default_factory=dict, description=(
        "devices served from their last good bundle because their bundle folder does not verify: "
        "device -> what is served and why (GET /v1/models has the error)"))
