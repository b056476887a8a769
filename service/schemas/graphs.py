"""``/v1/graphs``: storing a graph once and naming it by id in short URLs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, RootModel

from predictor.graph import Graph
from predictor.variant import Batch
from service.graph_names import NAME_PATTERN, RULE
from service.schemas.common import GraphId, OnnxDims, RequestModel, ResponseModel


class GraphPath(RequestModel):
    LOCATION = "path"

    graph_id: GraphId


class GraphIRBody(RootModel[Graph]):
    """The JSON body of POST /v1/graphs: the graph IR itself (a graph.json file as it is)."""


class GraphUploadForm(RequestModel):
    """An ONNX model uploaded as multipart/form-data (file field 'onnx'), converted to IR on upload."""

    LOCATION = "form"

    onnx: Annotated[Any, Field(json_schema_extra={"type": "string", "format": "binary"},
                               description="the .onnx file (only its weights' dims are read; external "
                                           "data is never opened)")]
    name: Annotated[str, Field(max_length=200, json_schema_extra={"pattern": NAME_PATTERN})] | None = Field(
        None, description=(
        f"the graph's name (default: the ONNX graph's); {RULE}"))
    batch: Batch | None = Field(None, description="fixes a symbolic batch dimension (default 1)")
    dims: OnnxDims = Field(None, description="other symbolic dims by name, e.g. {\"sequence\": 256}")


class GraphStored(ResponseModel):
    """Where a stored graph can be found again: its id is the sha256 of its canonical IR JSON."""

    id: str
    name: str
    nodes: int
    batch: int
    created: bool = Field(description="false when the same graph was already stored")
    url: str
