"""Request and response models of ``POST /v1/predict`` and ``POST /v1/predict/batch``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, Strict, model_validator

from predictor.graph import Graph
from predictor.host_profile import HostId
from predictor.prediction import Prediction
from predictor.variant import Batch, Variant
from service.graph_names import NAME_PATTERN, RULE
from service.schemas.common import GraphId, OnnxDims, Problem, RequestModel, ResponseModel, ZooName, without_null

SOURCE_FIELDS = ("graph", "model", "graph_id")
#: a JSON body's flag is true or false, not 1 or "false" (a form's text field is parsed as text)
JsonBool = Annotated[bool, Strict()]


def _source_schema(schema: dict[str, Any]) -> None:
    """Exactly one source, and none of them null: the oneOf asks for one of the three fields to be
    present, which a null would satisfy, and ``_one_source`` refuses a null source as none at all."""
    schema["oneOf"] = [{"required": [f]} for f in SOURCE_FIELDS]
    without_null(schema, SOURCE_FIELDS)


class GraphSource(RequestModel):
    """Exactly one of: a graph as JSON IR, a zoo name, or the id of a stored graph."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), json_schema_extra=_source_schema)

    graph: Graph | None = Field(None, description="the graph as JSON IR (graph_ir.schema.json), parsed and "
                                                  "checked once, here")
    model: ZooName | None = None
    graph_id: GraphId | None = None

    @model_validator(mode="after")
    def _one_source(self) -> GraphSource:
        null = [f for f in SOURCE_FIELDS if f in self.model_fields_set and getattr(self, f) is None]
        if null:
            raise ValueError(f"'{null[0]}' is null: leave out the sources not given")
        given = [f for f in SOURCE_FIELDS if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of 'graph', 'model' or 'graph_id' (got "
                             f"{', '.join(repr(g) for g in given) or 'none'})")
        return self


class HostVariant(Variant):
    """A variant and the host profile its eager forward is issued by: eager latency is a
    function of the GPU *and* the host, so a request may name the host (by id only, never a
    file) instead of taking the one that measured the bundle."""

    # default= by keyword: mypy's pydantic plugin does not see a positional default beside HostId's Field
    host: HostId | None = Field(default=None, description="id of a host profile (GET /v1/hosts lists them; "
                                                          "POST /v1/hosts adds one); default: the one the bundle "
                                                          "names. Only eager predictions depend on it")


class PredictRequest(GraphSource, HostVariant):
    """One graph on one variant (JSON body)."""

    layers: JsonBool = Field(True, description="include the per-layer breakdown")


class PredictForm(RequestModel, HostVariant):
    """One ONNX model uploaded as multipart/form-data (file field 'onnx'), on one variant.

    Only the weights' dims are read, never their data: a weight-stripped export or one with
    external data works, and no file it names is opened. A symbolic batch dimension is fixed to
    ``batch`` (default 1) and other symbolic dims by name from ``dims``.
    """

    LOCATION = "form"

    onnx: Annotated[Any, Field(json_schema_extra={"type": "string", "format": "binary"},
                               description="the .onnx file")]
    name: Annotated[str, Field(max_length=200, json_schema_extra={"pattern": NAME_PATTERN})] | None = Field(
        None, description=(
        f"the graph's name (default: the ONNX graph's); {RULE}"))
    batch: Batch | None = Field(None, description="batch size (default: the graph's own); a form field is text, "
                                                  "read as a number")
    dims: OnnxDims = Field(None, description="symbolic dims by name, e.g. {\"sequence\": 256}")
    layers: bool = True


class BatchRequest(RequestModel):
    """Many graphs, each on every variant: one result per (graph, variant), graph-major."""

    graphs: list[GraphSource] = Field(min_length=1)
    variants: list[HostVariant] = Field(default_factory=lambda: [HostVariant()], min_length=1,
                                        description="default: one variant with every default")
    layers: JsonBool = Field(False, description="include each prediction's per-layer breakdown")


class BatchItem(ResponseModel):
    """One (graph, variant) result: a prediction, or the problem that stopped it."""

    graph: int = Field(description="index into 'graphs'")
    variant: int = Field(description="index into 'variants'")
    prediction: Prediction | None = None
    problem: Problem | None = None


class BatchResponse(ResponseModel):
    results: list[BatchItem]
    count: int
    failed: int = Field(description="results that carry a problem instead of a prediction")
