"""``GET /v1/devices``: the devices (GPUs and CPUs) latpred knows, and which bundle predicts each."""

from __future__ import annotations

from typing import Any

from flask_openapi3 import APIBlueprint, Tag

from predictor.device_bundles import TRANSFER_BUNDLE
from predictor.devices import DEVICES
from predictor.predict import Predictor
from service.schemas.catalog import DevicesResponse
from service.state import state

api = APIBlueprint("devices", __name__, url_prefix="/v1", abp_tags=[Tag(name="catalog")])


@api.get("/devices", responses={200: DevicesResponse})
def devices() -> dict[str, Any]:
    """Every known device with its size, ceilings, power, price where known, provenance (measured
    here, or datasheet figures the transfer model predicts from) and the bundle that predicts it."""
    predictors = state().registry.snapshot.predictors
    return {"devices": [{
        "id": d.device_id, "name": d.name, "provenance": d.provenance, "kind": d.kind, "modes": list(d.modes),
        "sm_count": d.sm_count,
        "l2_bytes": d.l2_bytes, "memory_bytes": d.memory_bytes, "memory_bandwidth": d.memory_bandwidth,
        "tensor_flops": dict(d.tensor_flops), "vector_flops": d.vector_flops, "tdp_w": d.tdp_w,
        "boost_clock_hz": d.boost_clock_hz, "l2_bandwidth": d.l2_bandwidth,
        "price_per_hour": d.price_per_hour, "source": d.source, "price_source": d.price_source,
        "bundle_loaded": d.device_id in predictors,
        "model_version": predictors[d.device_id].bundle.version if d.device_id in predictors else None,
        "predicted_by": _predicted_by(predictors.get(d.device_id)),
    } for d in DEVICES.values()]}


def _predicted_by(predictor: Predictor | None) -> str | None:
    if predictor is None:
        return None
    return TRANSFER_BUNDLE if predictor.bundle.transfer is not None else predictor.bundle.device_id
