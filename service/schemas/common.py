"""Models shared by several resources: the problem object, a prediction, the variant fields.

Request models declare where they are read from (``LOCATION``): a failure in the query string
is a 400, in a body a 422, and the problem names the field either way.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from predictor.compose import MODES
from predictor.precision import PRECISIONS
from predictor.predict import MAX_BATCH

#: request model name -> where flask-openapi3 read it from ("query", "path", "body", "form").
LOCATIONS: dict[str, str] = {}

Precision = Literal[tuple(PRECISIONS)]  # type: ignore[valid-type]
Mode = Literal[tuple(MODES)]  # type: ignore[valid-type]
Batch = Annotated[int, Field(ge=1, le=MAX_BATCH, description="batch size (default: the graph's own)")]
DeviceName = Annotated[str, Field(min_length=1, max_length=100,
                                  description="device id or a case-insensitive part of its name, e.g. 'h200' "
                                              "(default: the one device with a bundle, if only one)",
                                  examples=["h200"])]
GraphId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="id of a stored graph (POST /v1/graphs)")]
ZooName = Annotated[str, Field(min_length=1, max_length=200, examples=["resnet50"],
                               description="a zoo graph name, e.g. 'resnet50' (GET /v1/models lists them)")]
DEFAULT_PRECISION = "fp16"
DEFAULT_MODE = "cudagraph"


class RequestModel(BaseModel):
    """Base of request models: unknown fields are refused (a typo should not pass silently)."""

    LOCATION: ClassVar[str] = "body"
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        LOCATIONS[cls.__name__] = cls.LOCATION

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Cached: flask-openapi3 regenerates a query model's schema on every request (0.65 ms
        for LatencyQuery, which doubled a spreadsheet GET's cost). A copy, so callers may edit it."""
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _SCHEMAS:
            _SCHEMAS[key] = super().model_json_schema(*args, **kwargs)
        return copy.deepcopy(_SCHEMAS[key])


_SCHEMAS: dict[tuple, dict[str, Any]] = {}


class ResponseModel(BaseModel):
    model_config = ConfigDict(protected_namespaces=())


class FieldError(ResponseModel):
    field: str | None = None
    message: str
    type: str


class Problem(ResponseModel):
    """RFC 9457 problem details, with the offending field where there is one."""

    model_config = ConfigDict(protected_namespaces=(), extra="allow")

    type: str = Field(description="a URI naming the kind of problem (urn:latpred:problem:...)")
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = Field(None, description="path of the offending field, e.g. 'graphs[2].device'")
    errors: list[FieldError] | None = Field(None, description="every failing field, when validation failed")


class LayerOut(ResponseModel):
    """One node's share of the latency (microseconds); merged nodes were fused into this one."""

    name: str
    op: str
    kind: str
    family: str | None
    kernel_us: float
    low_us: float
    high_us: float
    host_us: float
    merged: list[str]


class UnsupportedOp(ResponseModel):
    op: str
    count: int
    costed_as: str


class PredictionOut(ResponseModel):
    """A whole-model prediction, the inputs that produced it and what it could not model."""

    model: str = Field(description="the graph's name")
    device: str
    batch: int
    precision: str
    mode: str
    total_ms: float
    low_ms: float = Field(description="lower end of the ~90% interval")
    high_ms: float = Field(description="upper end of the ~90% interval")
    model_version: str = Field(description="version of the model bundle that predicted it")
    layers: list[LayerOut] | None = Field(None, description="per-layer breakdown (absent with layers=false)")
    unsupported: list[UnsupportedOp] = Field(description="operators no model covers, costed by the roofline")
    warnings: list[str]
