"""POST /v1/graphs and GET /v1/graphs/{id}: content-addressed, atomic, shared across workers."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from service_helpers import assert_problem, sha256_of_canonical, small_onnx

from predictor.graph import Graph
from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.config import ServiceConfig


def test_json_ir_upload_is_stored_under_the_sha256_of_its_canonical_json(client: Any, config: ServiceConfig) -> None:
    graph = load_zoo_graph("resnet18")
    r = client.post("/v1/graphs", json=graph.to_json())
    assert r.status_code == 201, r.get_json()
    body = r.get_json()
    assert body["id"] == sha256_of_canonical(graph.to_json())
    assert body == {"id": body["id"], "name": "resnet18", "nodes": len(graph.nodes), "batch": graph.batch,
                    "created": True, "url": f"/v1/graphs/{body['id']}"}
    assert r.headers["Location"] == body["url"]
    stored = config.graph_store / body["id"][:2] / f"{body['id']}.json"
    assert Graph.from_json(json.loads(stored.read_text())).nodes == graph.nodes
    assert not [p for p in config.graph_store.rglob("*") if p.suffix == ".tmp"]


def test_the_same_graph_twice_is_one_id_and_200(client: Any) -> None:
    ir = load_zoo_graph("resnet18").to_json()
    first = client.post("/v1/graphs", json=ir).get_json()
    # Key order and spacing do not change the id: it hashes the canonical form.
    reordered = json.dumps(dict(reversed(list(ir.items()))), indent=2)
    again = client.post("/v1/graphs", data=reordered, content_type="application/json")
    assert again.status_code == 200 and again.get_json()["id"] == first["id"]
    assert again.get_json()["created"] is False


def test_get_returns_the_stored_ir(client: Any) -> None:
    ir = load_zoo_graph("squeezenet1_0").to_json()
    gid = client.post("/v1/graphs", json=ir).get_json()["id"]
    r = client.get(f"/v1/graphs/{gid}")
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert Graph.from_json(r.get_json()).nodes == Graph.from_json(ir).nodes
    assert_problem(client.get("/v1/graphs/" + "a" * 64), 404, "graph_id")
    assert_problem(client.get("/v1/graphs/not-an-id"), 400, "graph_id")


def test_onnx_upload_is_converted_to_ir(client: Any) -> None:
    r = client.post("/v1/graphs", data={"onnx": (io.BytesIO(small_onnx()), "m.onnx"), "name": "tiny"},
                    content_type="multipart/form-data")
    assert r.status_code == 201, r.get_json()
    body = r.get_json()
    assert body["name"] == "tiny" and body["nodes"] == 5
    stored = client.get(body["url"]).get_json()
    assert stored["source"] == "onnx" and [n["op"] for n in stored["nodes"]][0] == "Conv"


def test_a_stored_graph_is_served_by_another_worker(client: Any, config: ServiceConfig, registry: Any) -> None:
    """Workers share nothing but the folder: a second app on the same store finds the graph."""
    gid = client.post("/v1/graphs", json=load_zoo_graph("resnet34").to_json()).get_json()["id"]
    other = create_app(config, registry=registry).test_client()
    r = other.post("/v1/predict", json={"graph_id": gid, "layers": False})
    assert r.status_code == 200 and r.get_json()["model"] == "resnet34"


def test_invalid_graphs_are_refused_and_nothing_is_stored(client: Any, config: ServiceConfig) -> None:
    bad = {"name": "bad", "nodes": [{"name": "a", "op": "conv", "kind": "kernel", "family": "conv2d",
                                     "params": {"c_in": 3}}]}
    body = assert_problem(client.post("/v1/graphs", json=bad), 422, "nodes[0]")  # the body is the graph
    assert "missing parameter" in body["detail"]
    assert_problem(client.post("/v1/graphs", json={"name": "x", "nodes": []}), 422, "nodes")
    assert_problem(client.post("/v1/graphs", data={"name": "x"}, content_type="multipart/form-data"), 422, "onnx")
    assert not Path(config.graph_store).exists() or not list(Path(config.graph_store).rglob("*.json"))
