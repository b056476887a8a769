"""Request and response models of ``POST /v1/predict`` and ``POST /v1/predict/batch``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from service.schemas.common import (
    DEFAULT_MODE, DEFAULT_PRECISION, Batch, DeviceName, GraphId, Mode, Precision, PredictionOut, Problem,
    RequestModel, ResponseModel, ZooName,
)
from service.schemas.graph_ir import GraphIR

SOURCE_FIELDS = ("graph", "model", "graph_id")


class GraphSource(RequestModel):
    """Exactly one of: a graph as JSON IR, a zoo name, or the id of a stored graph."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), json_schema_extra={
        "oneOf": [{"required": [f]} for f in SOURCE_FIELDS]})

    graph: GraphIR | None = Field(None, description="the graph as JSON IR (graph_ir.schema.json)")
    model: ZooName | None = None
    graph_id: GraphId | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "GraphSource":
        given = [f for f in SOURCE_FIELDS if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of 'graph', 'model' or 'graph_id' (got "
                             f"{', '.join(repr(g) for g in given) or 'none'})")
        return self


class Variant(RequestModel):
    """Where and how to run a graph; every field has a default."""

    device: DeviceName | None = None
    batch: Batch | None = None
    precision: Precision = DEFAULT_PRECISION
    mode: Mode = DEFAULT_MODE


class PredictRequest(GraphSource, Variant):
    """One graph on one variant (JSON body)."""

    layers: bool = Field(True, description="include the per-layer breakdown")


class PredictForm(RequestModel):
    """One ONNX model uploaded as multipart/form-data (file field 'onnx'), on one variant.

    The ONNX file's weights must be inside it (external data is refused). A symbolic batch
    dimension is fixed to ``batch`` (default 1) before shape inference.
    """

    LOCATION = "form"

    onnx: Annotated[Any, Field(json_schema_extra={"type": "string", "format": "binary"},
                               description="the .onnx file")]
    name: Annotated[str, Field(max_length=200)] | None = Field(None, description="the graph's name (default: the "
                                                                                 "ONNX graph's)")
    device: DeviceName | None = None
    batch: Batch | None = None
    precision: Precision = DEFAULT_PRECISION
    mode: Mode = DEFAULT_MODE
    layers: bool = True


class BatchRequest(RequestModel):
    """Many graphs, each on every variant: one result per (graph, variant), graph-major."""

    graphs: list[GraphSource] = Field(min_length=1)
    variants: list[Variant] = Field(default_factory=lambda: [Variant()], min_length=1,
                                    description="default: one variant with every default")
    layers: bool = Field(False, description="include each prediction's per-layer breakdown")


class BatchItem(ResponseModel):
    """One (graph, variant) result: a prediction, or the problem that stopped it."""

    graph: int = Field(description="index into 'graphs'")
    variant: int = Field(description="index into 'variants'")
    prediction: PredictionOut | None = None
    problem: Problem | None = None


class BatchResponse(ResponseModel):
    results: list[BatchItem]
    count: int
    failed: int = Field(description="results that carry a problem instead of a prediction")
