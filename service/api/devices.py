"""``GET /v1/devices``: the GPUs latpred knows, and which have a model bundle loaded."""

from __future__ import annotations

from typing import Any

from flask_openapi3 import APIBlueprint, Tag

from predictor.devices import DEVICES
from service.schemas.catalog import DevicesResponse
from service.state import state

api = APIBlueprint("devices", __name__, url_prefix="/v1", abp_tags=[Tag(name="catalog")])


@api.get("/devices", responses={200: DevicesResponse})
def devices() -> dict[str, Any]:
    """Every known device with its ceilings, price where known, and the bundle version loaded."""
    versions = state().registry.snapshot.versions()
    return {"devices": [{
        "id": d.device_id, "name": d.name, "sm_count": d.sm_count, "l2_bytes": d.l2_bytes,
        "memory_bandwidth": d.memory_bandwidth, "tensor_flops": dict(d.tensor_flops), "vector_flops": d.vector_flops,
        "price_per_hour": d.price_per_hour, "bundle_loaded": d.device_id in versions,
        "model_version": versions.get(d.device_id),
    } for d in DEVICES.values()]}
