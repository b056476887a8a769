"""Devices, models and health: what the service knows and whether it is ready."""

from __future__ import annotations

from pydantic import Field

from service.schemas.common import ResponseModel


class DeviceOut(ResponseModel):
    id: str
    name: str
    sm_count: int
    l2_bytes: int
    memory_bandwidth: float = Field(description="bytes per second")
    tensor_flops: dict[str, float]
    vector_flops: float
    price_per_hour: float | None
    bundle_loaded: bool
    model_version: str | None


class DevicesResponse(ResponseModel):
    devices: list[DeviceOut]


class BundleOut(ResponseModel):
    device: str
    version: str


class ModelsResponse(ResponseModel):
    zoo: list[str] = Field(description="graph names usable as 'model'")
    bundles: list[BundleOut] = Field(description="loaded model bundles, one per device")
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
