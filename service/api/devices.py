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
    """Every known device with its size, ceilings, power, price where known, provenance (measured
    here, or datasheet figures awaiting a transfer model) and the bundle version loaded."""
    versions = state().registry.snapshot.versions()
    return {"devices": [{
        "id": d.device_id, "name": d.name, "provenance": d.provenance, "sm_count": d.sm_count,
        "l2_bytes": d.l2_bytes, "memory_bytes": d.memory_bytes, "memory_bandwidth": d.memory_bandwidth,
        "tensor_flops": dict(d.tensor_flops), "vector_flops": d.vector_flops, "tdp_w": d.tdp_w,
        "price_per_hour": d.price_per_hour, "source": d.source, "price_source": d.price_source,
        "bundle_loaded": d.device_id in versions, "model_version": versions.get(d.device_id),
    } for d in DEVICES.values()]}
