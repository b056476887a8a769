"""The OpenAPI 3.1 document: valid, generated from the models, and truthful about bodies and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from predictor.catalogue import FAMILIES
from service.app import create_app
from service.config import ServiceConfig
from service.problems import PROBLEM_JSON


@pytest.fixture
def spec(client: Any) -> dict[str, Any]:
    r = client.get("/openapi.json")
    assert r.status_code == 200 and r.mimetype == "application/json"
    return r.get_json()


def test_the_document_is_valid_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    validate(spec)  # raises on any violation of the 3.1 schema


def test_every_endpoint_is_documented(spec: dict[str, Any]) -> None:
    assert set(spec["paths"]) == {"/livez", "/readyz", "/metrics", "/v1/predict", "/v1/predict/batch",
                                  "/v1/latency", "/v1/capacity", "/v1/select", "/v1/graphs", "/v1/graphs/{graph_id}",
                                  "/v1/devices", "/v1/models", "/v1/models/reload", "/v1/hosts", "/v1/hosts/{host_id}"}
    ids = [op["operationId"] for item in spec["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)) and "predict_batch" in ids


def test_errors_are_documented_as_problem_json(spec: dict[str, Any]) -> None:
    problem = spec["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail", "field", "errors"} <= set(problem["properties"])
    assert "ValidationErrorModel" not in spec["components"]["schemas"]
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    # gunicorn's own parser answers a request line over its limit in HTML
                    html = ["text/html"] if status == "400" and op.get("parameters") else []
                    assert list(response["content"]) == [PROBLEM_JSON, *html], (path, method, status)


def test_predict_takes_json_or_a_multipart_onnx_upload(spec: dict[str, Any]) -> None:
    body = spec["paths"]["/v1/predict"]["post"]["requestBody"]["content"]
    assert body["application/json"]["schema"]["$ref"].endswith("/PredictRequest")
    assert body["multipart/form-data"]["schema"]["$ref"].endswith("/PredictForm")
    form = spec["components"]["schemas"]["PredictForm"]["properties"]["onnx"]
    assert form["format"] == "binary"
    request = spec["components"]["schemas"]["PredictRequest"]
    fields = {"graph", "model", "graph_id", "device", "batch", "precision", "mode", "layers"}
    assert fields <= set(request["properties"])


def test_the_graph_ir_schema_names_the_catalogue_families(spec: dict[str, Any]) -> None:
    node = spec["components"]["schemas"]["Node"]
    family = next(s for s in node["properties"]["family"]["anyOf"] if "enum" in s)
    assert family["enum"] == list(FAMILIES)
    assert set(node["required"]) == {"name", "op", "kind"}


WRITES = [("/v1/graphs", "post"), ("/v1/hosts", "post"), ("/v1/models/reload", "post")]


@pytest.mark.parametrize(("settings", "security", "refusals"), [
    ({"api_key": "k"}, True, {"401"}),            # the key is checked: 401 without it
    ({}, False, {"403"}),                         # no key, writes closed: every write is a 403, whatever it sends
    ({"open_writes": True}, False, set()),        # no key, writes open: nothing is asked for
    ({"api_key": "k", "open_writes": True}, True, {"401"}),  # a key wins over open writes
])
def test_writing_endpoints_declare_what_this_configuration_enforces(
        registry: Any, tmp_path: Path, settings: dict[str, Any], security: bool, refusals: set[str]) -> None:
    app = create_app(ServiceConfig(data_dir=tmp_path, **settings), registry=registry)
    spec = app.test_client().get("/openapi.json").get_json()
    validate(spec)
    assert set(spec["components"]["securitySchemes"]) == {"ApiKey", "Bearer"}
    for path, method in WRITES:
        op = spec["paths"][path][method]
        assert (op.get("security") == [{"ApiKey": []}, {"Bearer": []}]) is security, (path, op.get("security"))
        assert {s for s in op["responses"] if s in ("401", "403")} == refusals, path
    assert "security" not in spec["paths"]["/v1/predict"]["post"]
    assert not {"401", "403"} & set(spec["paths"]["/v1/predict"]["post"]["responses"])


def test_latency_documents_its_three_formats(spec: dict[str, Any]) -> None:
    op = spec["paths"]["/v1/latency"]["get"]
    assert set(op["responses"]["200"]["content"]) == {"application/json", "text/csv", "text/plain"}
    assert "304" in op["responses"] and "Prediction" in spec["components"]["schemas"]
    assert {p["name"] for p in op["parameters"]} == {"model", "graph", "device", "batch", "precision", "mode",
                                                     "host", "format"}


def test_the_docs_page_is_served_with_its_own_assets(client: Any) -> None:
    page = client.get("/docs/swagger")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert "https://" not in html and "http://" not in html  # nothing fetched from the internet
    for asset in ("swagger/js/swagger-ui-bundle.js", "swagger/css/swagger-ui.css"):
        assert asset in html
        r = client.get(f"/docs/{asset}")
        assert r.status_code == 200 and len(r.data) > 10_000
    assert client.get("/docs/openapi.json").get_json() == client.get("/openapi.json").get_json()


def test_the_request_and_response_schemas_are_predictors_own(spec: dict[str, Any]) -> None:
    """The graph IR and a prediction are declared once, in predictor: the document's components
    are generated from those declarations, not written again in the service."""
    from pydantic import TypeAdapter

    from predictor.graph import Graph, json_schema
    from predictor.prediction import Prediction
    from service.openapi import REF

    schemas = spec["components"]["schemas"]
    assert schemas["Node"] == json_schema()["$defs"]["Node"]
    generated = TypeAdapter(Prediction).json_schema(ref_template=REF)
    assert schemas["Prediction"] == {k: v for k, v in generated.items() if k != "$defs"}
    assert schemas["Graph"]["properties"]["nodes"]["items"] == {"$ref": REF.format(model="Node")}
    graph = spec["paths"]["/v1/predict"]["post"]["responses"]["200"]["content"]["application/json"]
    assert graph["schema"] == {"$ref": REF.format(model="Prediction")}
    assert TypeAdapter(Graph).json_schema(ref_template=REF)["required"] == schemas["Graph"]["required"]
