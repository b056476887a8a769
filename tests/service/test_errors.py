"""Bad input and load: every case is a 4xx problem+json naming what is wrong, never a 5xx or a hang,
and the server keeps serving afterwards. An unexpected exception is a logged problem+json 500."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from service_helpers import assert_problem, small_onnx

from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.config import ServiceConfig

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def capped(registry: Any, tmp_path: Path) -> Any:
    """An app with small caps: 4 KB bodies, 10-node graphs (writes open, so uploads reach the caps)."""
    return create_app(ServiceConfig(data_dir=tmp_path, graph_store=tmp_path, max_body_bytes=4096, max_nodes=10,
                                    open_writes=True),
                      registry=registry).test_client()


def onnx_post(client: Any, data: bytes, path: str = "/v1/predict", **fields: str) -> Any:
    return client.post(path, data={"onnx": (io.BytesIO(data), "m.onnx"), **fields},
                       content_type="multipart/form-data")


def test_a_body_over_the_cap_is_413(capped: Any) -> None:
    ir = load_zoo_graph("resnet18").to_json()
    body = assert_problem(capped.post("/v1/predict", json={"graph": ir}), 413)
    assert "4096" in body["detail"]
    assert_problem(onnx_post(capped, b"\0" * 10_000), 413)
    assert_problem(capped.post("/v1/graphs", json=ir), 413)
    assert capped.post("/v1/predict", json={"model": "resnet18"}).status_code == 200


@pytest.mark.parametrize("query, field", [
    ("/v1/latency?model=resnet18&model=vgg11_bn&batch=1", "model"),
    ("/v1/latency?model=resnet18&batch=1&batch=32", "batch"),
    ("/v1/capacity?model=resnet18&device=h200&qps=500&qps=8000&slo_p99_ms=20", "qps"),
    ("/v1/select?model=resnet18&model=vgg11_bn&slo_p99_ms=20", "model"),
])
def test_a_query_parameter_given_twice_is_400_naming_it(client: Any, query: str, field: str) -> None:
    """Werkzeug keeps a repeated parameter's first value: a sheet asking for two models got one row."""
    body = assert_problem(client.get(query), 400, field)
    assert "given 2 times in the query string" in body["detail"]
    assert client.get("/v1/latency?model=resnet18&batch=1").status_code == 200


def test_a_form_field_or_file_given_twice_is_400_naming_it(client: Any) -> None:
    """A second ``onnx`` file was dropped without a word, and a second ``batch`` ignored."""
    def post(*fields: tuple[str, Any]) -> Any:
        from werkzeug.datastructures import MultiDict

        return client.post("/v1/predict", data=MultiDict(fields), content_type="multipart/form-data")

    def model() -> tuple[io.BytesIO, str]:
        return io.BytesIO(small_onnx()), "m.onnx"

    assert post(("onnx", model()), ("batch", "8")).status_code == 200
    assert "as a file" in assert_problem(post(("onnx", model()), ("onnx", model())), 400, "onnx")["detail"]
    assert "as a form field" in assert_problem(post(("onnx", model()), ("batch", "8"), ("batch", "1")), 400,
                                               "batch")["detail"]
    body = assert_problem(post(("onnx", model()), ("dims", '{"N": 2, "N": 3}')), 422, "dims")
    assert "given twice" in body["detail"]


def test_a_graph_over_the_node_cap_is_422(capped: Any) -> None:
    small = load_zoo_graph("resnet18").to_json()
    small["nodes"] = small["nodes"][:11]
    assert_problem(capped.post("/v1/predict", json={"graph": small}), 422, "graph.nodes")
    r = capped.post("/v1/predict/batch", json={"graphs": [{"graph": small}, {"model": "resnet18"}]})
    problem = r.get_json()["results"][0]["problem"]
    assert problem["field"] == "graphs[0].graph.nodes" and "at most 10" in problem["detail"]
    assert "prediction" in r.get_json()["results"][1]


def test_an_onnx_model_over_the_node_cap_is_refused_before_import(registry: Any, tmp_path: Path) -> None:
    client = create_app(ServiceConfig(data_dir=tmp_path, graph_store=tmp_path, max_nodes=3),
                        registry=registry).test_client()
    body = assert_problem(onnx_post(client, small_onnx()), 422, "onnx")
    assert "the graph has more than 3 nodes" in body["detail"]  # counted no further than the cap


@pytest.mark.parametrize("batch", [0, -1, 10**9, 1.5, "eight", None])
def test_bad_batches(client: Any, batch: Any) -> None:
    body: dict[str, Any] = {"model": "resnet18", "batch": batch}
    if batch is None:  # a graph whose own batch is absurd
        ir = load_zoo_graph("resnet18").to_json()
        ir["batch"] = 10**9
        body = {"graph": ir}
    assert_problem(client.post("/v1/predict", json=body), 422, "batch")


@pytest.mark.parametrize("field, value", [("device", ""), ("precision", "fp8"), ("mode", "jit"), ("graph_id", "abc"),
                                          ("layers", "perhaps"), ("layers", 1), ("colour", "red")])
def test_invalid_values_are_422_naming_the_field(client: Any, field: str, value: Any) -> None:
    body = {"model": "resnet18", field: value}
    assert_problem(client.post("/v1/predict", json=body), 422, field)


@pytest.mark.parametrize("body, field", [({"model": "resnet18", "device": "tpu-v9"}, "device"),
                                         ({"model": "no-such-net"}, "model"),
                                         ({"graph_id": "f" * 64}, "graph_id")])
def test_names_of_nothing_there_are_404_naming_the_field(client: Any, body: dict[str, Any], field: str) -> None:
    """Well-formed names of a device, zoo model or stored graph that does not exist: not found,
    as the document says of every well-formed value it cannot list (a stored graph's id, a host)."""
    assert_problem(client.post("/v1/predict", json=body), 404, field)


def test_a_source_is_exactly_one_of_graph_model_graph_id(client: Any) -> None:
    assert "exactly one" in assert_problem(client.post("/v1/predict", json={}), 422)["detail"]
    assert_problem(client.post("/v1/predict", json={"model": "resnet18", "graph_id": "a" * 64}), 422)
    null = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "graph": None}), 422)
    assert "'graph' is null" in null["detail"]


@pytest.mark.parametrize("path, data, key", [
    ("/v1/predict", '{"model": "resnet18", "batch": 8, "batch": 1}', "batch"),
    ("/v1/predict/batch", '{"graphs": [{"model": "resnet18", "model": "alexnet"}]}', "model"),
    ("/v1/graphs", '{"name": "g", "name": "h", "nodes": [{"name": "a", "op": "x", "kind": "free"}]}', "name"),
    ("/v1/hosts", '{"id": "a", "id": "b"}', "id"),
])
def test_a_key_given_twice_is_400_naming_it(client: Any, path: str, data: str, key: str) -> None:
    """Parsers keep the last value of a repeated key without a word; the client may have meant
    the first, so the service refuses to guess."""
    body = assert_problem(client.post(path, data=data, content_type="application/json",
                                      headers={"X-API-Key": "unused"}), 400, key)
    assert "twice" in body["detail"]


@pytest.mark.parametrize("data", ["{", '{"model": "resnet18"', "", "nul", '{"model": NaN}', '{"batch": Infinity}',
                                  '{"model": "\\ud800"}', "\xff\xfe"])
def test_malformed_json_is_400(client: Any, data: str) -> None:
    assert_problem(client.post("/v1/predict", data=data.encode("utf-8", "surrogatepass"),
                               content_type="application/json"), 400)


@pytest.mark.parametrize("path", ["/v1/predict", "/v1/predict/batch", "/v1/graphs"])
def test_deeply_nested_json_is_400_not_a_crash(client: Any, path: str) -> None:
    assert_problem(client.post(path, data="[" * 100_000 + "]" * 100_000, content_type="application/json"), 400)
    ir = load_zoo_graph("resnet18").to_json()
    ir["meta"] = {"deep": json.loads("[" * 150 + "]" * 150)}
    deep = "[" * 5_000 + "]" * 5_000
    text = json.dumps({"graph": ir}).replace('"deep": ' + json.dumps(ir["meta"]["deep"]), '"deep": ' + deep)
    assert_problem(client.post("/v1/predict", data=text, content_type="application/json"), 400)


def test_moderately_nested_meta_is_accepted_stored_and_served(client: Any) -> None:
    ir = load_zoo_graph("resnet18").to_json()
    ir["meta"] = {"deep": json.loads("[" * 150 + "]" * 150)}
    assert client.post("/v1/predict", json={"graph": ir}).status_code == 200
    stored = client.post("/v1/graphs", json=ir)
    assert stored.status_code == 201
    assert client.get(stored.get_json()["url"]).status_code == 200


@pytest.mark.parametrize("body, content_type", [("model=resnet18", "text/plain"), ("<m/>", "application/xml"),
                                                ("model=resnet18", "application/x-www-form-urlencoded"),
                                                ("{}", None)])
def test_a_non_json_content_type_is_415(client: Any, body: str, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/v1/predict", "/v1/predict/batch", "/v1/graphs"):
        assert_problem(client.post(path, data=body, headers=headers), 415, "Content-Type")


@pytest.mark.parametrize("payload", [[], [{"model": "resnet18"}], "resnet18", 42, None])
def test_a_json_body_that_is_not_an_object_is_422(client: Any, payload: Any) -> None:
    assert_problem(client.post("/v1/predict", data=json.dumps(payload), content_type="application/json"), 422)


@pytest.mark.parametrize("data", [b"", b"this is not an ONNX model at all", bytes(range(256)) * 4, b"\x08\x07"])
def test_garbage_onnx_is_422(client: Any, data: bytes) -> None:
    for path in ("/v1/predict", "/v1/graphs"):
        assert_problem(onnx_post(client, data, path), 422, "onnx")


def test_truncated_onnx_is_422(client: Any) -> None:
    data = small_onnx()
    for cut in (len(data) // 2, len(data) - 7, 20):
        assert_problem(onnx_post(client, data[:cut]), 422, "onnx")


_OPENED: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


@pytest.mark.parametrize("where", ["absolute", "relative", "missing"])
def test_onnx_with_external_data_is_predicted_without_reading_the_servers_disk(client: Any, tmp_path: Path,
                                                                              where: str) -> None:
    from onnx import TensorProto, helper

    secret = tmp_path / "server_secret.bin"
    secret.write_bytes(b"\x00" * 64)
    location = {"absolute": str(secret), "relative": f"../../{tmp_path.name}/server_secret.bin",
                "missing": "server_secret_missing.bin"}[where]
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], initializer=[w])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    if not getattr(sys, "_latpred_service_audit", False):
        sys.addaudithook(_audit)  # hooks cannot be removed: one, installed once
        sys._latpred_service_audit = True  # type: ignore[attr-defined]
    _OPENED.clear()
    predicted = onnx_post(client, data, "/v1/predict", precision="fp32")
    assert predicted.status_code == 200, predicted.get_json()
    assert [layer["family"] for layer in predicted.get_json()["layers"]] == ["linear"]
    stored = onnx_post(client, data, "/v1/graphs")
    assert stored.status_code in (200, 201) and stored.get_json()["nodes"] == 1
    assert not [p for p in _OPENED if "server_secret" in p]


def test_parameters_beyond_any_gpu_are_422_not_500(client: Any) -> None:
    def graph(value: int) -> dict[str, Any]:
        return {"name": "huge", "nodes": [{"name": "mm", "op": "matmul", "kind": "kernel", "family": "linear",
                                           "params": {"tokens": value, "k": value, "n": value}}]}

    assert_problem(client.post("/v1/predict", json={"graph": graph(10**400)}), 422)
    assert_problem(client.post("/v1/predict", json={"graph": graph(2**41)}), 422)
    r = client.post("/v1/predict", json={"graph": graph(2**40), "batch": 65536})
    assert r.status_code in (200, 422), r.get_json()
    if r.status_code == 200:
        assert r.get_json()["total_ms"] > 0


def test_unknown_routes_and_methods_are_problems(client: Any) -> None:
    assert_problem(client.get("/v1/nothing-here"), 404)
    r = client.get("/v1/predict")
    assert_problem(r, 405)
    assert "POST" in r.headers["Allow"]


def test_an_unexpected_exception_is_a_logged_problem_500(client: Any, registry: Any, monkeypatch: Any,
                                                        caplog: Any) -> None:
    predictor = registry.predictor("nvidia-h200")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(predictor, "predict", broken)
    with caplog.at_level(logging.ERROR, logger="latpred.service"):
        body = assert_problem(client.post("/v1/predict", json={"model": "resnet18"}), 500)
    assert "RuntimeError" in body["detail"] and "boom" not in body["detail"]
    assert any("unexpected error" in r.message for r in caplog.records)
    batch = client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}]})
    assert batch.status_code == 200 and batch.get_json()["results"][0]["problem"]["status"] == 500
    monkeypatch.undo()
    assert client.post("/v1/predict", json={"model": "resnet18"}).status_code == 200


def test_the_server_keeps_serving_after_bad_input(client: Any) -> None:
    for data, ct in (("[" * 50_000, "application/json"), ("{", "application/json"), ("x", "text/plain")):
        client.post("/v1/predict", data=data, content_type=ct)
    onnx_post(client, b"garbage")
    r = client.post("/v1/predict", json={"model": "resnet18", "layers": False})
    assert r.status_code == 200 and r.get_json()["total_ms"] > 0
