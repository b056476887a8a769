"""The published JSON Schema file matches the IR the code reads."""

from __future__ import annotations

import json

from predictor.graph import SCHEMA_FILE, json_schema


def test_published_schema_is_current() -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema(), (
        "predictor/graph_ir.schema.json is stale: regenerate it with python -m predictor.graph"
    )


def test_zoo_graph_validates_against_published_schema() -> None:
    import jsonschema as js

    from predictor.zoo import GRAPH_DIR

    schema = json.loads(SCHEMA_FILE.read_text())
    graph = json.loads((GRAPH_DIR / "resnet50.json").read_text())
    js.validate(graph, schema)
    graph["nodes"][0]["kind"] = "magic"
    try:
        js.validate(graph, schema)
    except js.ValidationError as exc:
        assert "magic" in str(exc)
    else:
        raise AssertionError("a node of unknown kind passed the published schema")
