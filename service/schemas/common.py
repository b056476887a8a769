"""Models shared by several resources: the request base, the problem object, the id types.

The variant's fields (device, batch, precision, mode) are predictor's (``predictor.variant``)
and a prediction's shape is predictor's ``Prediction``: neither is written again here.

Request models declare where they are read from (``LOCATION``): a failure in the query string
is a 400, in a body a 422, and the problem names the field either way.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from predictor.importers.onnx_dims import MAX_DIM, parse_dims

#: request model name -> where flask-openapi3 read it from ("query", "path", "body", "form").
LOCATIONS: dict[str, str] = {}

GraphId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="id of a stored graph (POST /v1/graphs)")]
ZooName = Annotated[str, Field(min_length=1, max_length=200, examples=["resnet50"],
                               description="a zoo graph name, e.g. 'resnet50' (GET /v1/models lists them)")]



def _dims_text(value: Any) -> Any:
    """A multipart form field is text: a JSON object or ``name=value,name=value``, read by the
    predictor's one parser (the CLI's ``--dim`` uses it too)."""
    return parse_dims(value) if isinstance(value, str) else value


#: symbolic dims of an uploaded ONNX model set by name; only ONNX uploads take them (a JSON graph's
#: shapes are numbers already, and a JSON body's ``dims`` is refused as an unknown field)
OnnxDims = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=200)], Annotated[int, Field(ge=1, le=MAX_DIM)]] | None,
    BeforeValidator(_dims_text),
    WithJsonSchema({"anyOf": [{"type": "string", "examples": ['{"sequence": 256}', "sequence=256,height=384"]},
                              {"type": "null"}],
                    "description": "symbolic dims of the ONNX model by name (its batch dim takes the "
                                   "'batch' field), as a JSON object or name=value pairs separated by commas"}),
]


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
        for LatencyQuery, which doubled a spreadsheet GET's cost). The call with no arguments is
        the one its request validation makes (``flask_openapi3.request``), which only reads the
        schema: it gets the cached object itself, since a deep copy of LatencyQuery's cost a
        spreadsheet GET a tenth of its time. Every other call (the OpenAPI document's, with
        ``ref_template`` and ``mode``) gets a copy it may edit."""
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _SCHEMAS:
            schema = super().model_json_schema(*args, **kwargs)
            _SCHEMAS[key] = without_null(schema) if cls.LOCATION in TEXT_LOCATIONS else schema
        return _SCHEMAS[key] if not args and not kwargs else copy.deepcopy(_SCHEMAS[key])


_SCHEMAS: dict[tuple, dict[str, Any]] = {}
#: where every value is text: an optional field is left out, never null, since the text "null" is
#: a string (a name) or no number at all (a batch)
TEXT_LOCATIONS = ("query", "form", "path")


def without_null(schema: dict[str, Any], fields: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A query or form model's schema with the null branch of each optional property (or of
    ``fields``) removed: the model takes None for a field left out, which the document says by
    not requiring it."""
    for name, prop in schema.get("properties", {}).items():
        if fields is not None and name not in fields:
            continue
        branches = prop.get("anyOf")
        if not branches or {"type": "null"} not in branches:
            continue
        rest = [b for b in branches if b != {"type": "null"}]
        del prop["anyOf"]
        if len(rest) == 1:
            prop.update({k: v for k, v in rest[0].items() if k not in prop})
        else:
            prop["anyOf"] = rest
        if prop.get("default", ...) is None:
            del prop["default"]
    return schema


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
