"""The graph IR as pydantic types: the request schema in the OpenAPI document, and one fast check.

These follow ``predictor.graph`` (its ``Node`` dataclass and published ``json_schema``). They are
TypedDicts, so validating a request yields plain dicts that go straight to ``Graph.from_json``,
which then checks what only predictor knows (families' parameters, unique names): a graph's node
list is walked by pydantic once, in Rust, and never turned into model objects and back.
Validation is strict (an integer is an integer, not "3" or 3.0), as in the published schema.

The node type is built from ``Node``'s fields, so a field predictor adds to the IR is accepted
here without a change (typed from its annotation, documented from predictor's schema).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter
from typing_extensions import Required, TypedDict

from predictor.catalogue import FAMILIES, PARAMETERS
from predictor.graph import IR_VERSION, MAX_SIZE, NODE_KINDS, Node, json_schema
from predictor.precision import PRECISIONS

#: Parameters and sizes above this are refused (predictor.graph's bound, which says why).
MAX_PARAM = MAX_SIZE

Size = Annotated[int, Field(ge=0, le=MAX_PARAM)]
Name = Annotated[str, Field(max_length=1024)]

#: Node fields whose type says more than their annotation (enums, bounds).
_KNOWN: dict[str, Any] = {
    "name": Name,
    "op": Annotated[str, Field(max_length=256)],
    "kind": Literal[tuple(NODE_KINDS)],  # type: ignore[misc]
    "family": Literal[tuple(FAMILIES)] | None,  # type: ignore[misc]
    "params": dict[Literal[tuple(PARAMETERS)], Size],  # type: ignore[misc]
    "elements_per_sample": Size,
    "merged": list[str],
    "precisions": list[Literal[tuple(PRECISIONS)]],  # type: ignore[misc]
    "inputs": list[list[Size]],
    "outputs": list[list[Size]],
}
#: Annotations (as written in predictor.graph, a string under postponed evaluation) -> types.
_BY_ANNOTATION: dict[str, Any] = {"str": str, "int": Size, "float": float, "bool": bool, "list[str]": list[str],
                                  "list[int]": list[Size], "list[list[int]]": list[list[Size]],
                                  "dict[str, int]": dict[str, Size], "str | None": str | None}
_REQUIRED = {"name", "op", "kind"}


def _node_type() -> Any:
    described = json_schema()["properties"]["nodes"]["items"]["properties"]
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(Node):
        kind = _KNOWN.get(f.name) or _BY_ANNOTATION.get(str(f.type), Any)
        if f.name in described and "description" in described[f.name]:
            kind = Annotated[kind, Field(description=described[f.name]["description"])]
        fields[f.name] = Required[kind] if f.name in _REQUIRED else kind
    node = TypedDict("NodeIR", fields, total=False)  # type: ignore[operator]
    node.__doc__ = "One operator call (see predictor.graph.Node)."
    node.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[attr-defined]
    return node


NodeIR = _node_type()


class GraphIR(TypedDict, total=False):
    """A model as the ordered operator calls it makes, with per-sample parameters."""

    __pydantic_config__ = ConfigDict(extra="forbid", strict=True, title="GraphIR")  # type: ignore[misc]

    ir_version: Literal[IR_VERSION]  # type: ignore[valid-type]
    name: Required[Name]
    batch: Annotated[int, Field(ge=1)]
    source: str
    meta: dict[str, Any]
    nodes: Required[Annotated[list[NodeIR], Field(min_length=1)]]  # type: ignore[valid-type]


GRAPH_IR = TypeAdapter(GraphIR)
