"""Symbolic dims of uploaded ONNX models (form field ``dims``), weight-stripped uploads, and ONNX
that explodes: each bad case is a 422 problem naming ``dims`` or ``onnx``, never a 5xx or a hang."""

from __future__ import annotations

import gzip
import io
import time
from pathlib import Path
from typing import Any

import pytest
from service_helpers import assert_problem

onnx = pytest.importorskip("onnx")
import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ZOO = Path(__file__).resolve().parents[2] / "datasets" / "suites" / "zoo" / "onnx"


def text_onnx() -> bytes:
    """token ids [batch, sequence] -> embedding Gather -> MatMul [32 -> 64]."""
    rng = np.random.default_rng(0)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 64])
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["h"], name="embed"),
             helper.make_node("MatMul", ["h", "W"], ["y"], name="proj")]
    weights = [numpy_helper.from_array(rng.standard_normal((100, 32)).astype(np.float32), "E"),
               numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "W")]
    graph = helper.make_graph(nodes, "text", [ids], [out], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def post(client: Any, data: bytes, path: str = "/v1/predict", **fields: str) -> Any:
    return client.post(path, data={"onnx": (io.BytesIO(data), "m.onnx"), **fields},
                       content_type="multipart/form-data")


@pytest.mark.parametrize("dims", ['{"sequence": 128}', "sequence=128", " sequence = 128 ,"])
def test_dims_as_json_or_name_value_text(client: Any, dims: str) -> None:
    from predictor.importers.onnx_graph import graph_from_onnx

    r = post(client, text_onnx(), dims=dims, batch="2", precision="fp32")
    assert r.status_code == 200, r.get_json()
    ir = graph_from_onnx(text_onnx(), name="text", batch=2, dims={"sequence": 128}).to_json()
    expected = client.post("/v1/predict", json={"graph": ir, "batch": 2, "precision": "fp32"}).get_json()
    assert r.get_json()["total_ms"] == pytest.approx(expected["total_ms"]) and r.get_json()["batch"] == 2
    shorter = post(client, text_onnx(), dims="sequence=8", batch="2", precision="fp32").get_json()
    assert shorter["total_ms"] < r.get_json()["total_ms"]


def test_dims_when_storing_a_graph(client: Any) -> None:
    r = post(client, text_onnx(), "/v1/graphs", dims="sequence=16")
    assert r.status_code == 201, r.get_json()
    stored = client.get(r.get_json()["url"]).get_json()
    proj = next(n for n in stored["nodes"] if n["name"] == "proj")
    assert proj["params"]["tokens"] == 16
    longer = post(client, text_onnx(), "/v1/graphs", dims="sequence=32")
    assert longer.get_json()["id"] != r.get_json()["id"]


@pytest.mark.parametrize(("fields", "detail"), [
    ({}, "input 'input_ids' has symbolic dim 'sequence' at axis 1: set it with --dim sequence=N "
         "(or dims in the request)"),
    ({"dims": "seq=8"}, "the model has no symbolic dim 'seq'; its symbolic dims are: 'batch', 'sequence'"),
    ({"dims": "sequence=2147483647", "batch": "65536"},
     "input 'input_ids' would have shape [65536, 2147483647] = 1.41e+14 elements, more than the 2**38"),
])
def test_unset_unknown_and_absurd_dims_are_422_naming_dims(client: Any, fields: dict[str, str], detail: str) -> None:
    for path in ("/v1/predict", "/v1/graphs"):
        body = assert_problem(post(client, text_onnx(), path, **fields), 422, "dims")
        assert detail in body["detail"]


def fixed_length_onnx() -> bytes:
    """x [batch, seq, 64] -> Reshape to a constant [1, 32, 64] (a length the export fixed) -> MatMul."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])
    nodes = [helper.make_node("Reshape", ["x", "fixed"], ["r"], name="keys"),
             helper.make_node("MatMul", ["r", "W"], ["y"], name="proj")]
    weights = [numpy_helper.from_array(np.array([1, 32, 64], dtype=np.int64), "fixed"),
               numpy_helper.from_array(np.zeros((64, 64), np.float32), "W")]
    graph = helper.make_graph(nodes, "fixed", [x], [out], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_dims_the_export_cannot_take_are_422_naming_dims_and_the_node(client: Any) -> None:
    assert post(client, fixed_length_onnx(), dims="seq=32", batch="1").status_code == 200
    body = assert_problem(post(client, fixed_length_onnx(), dims="seq=256", batch="1"), 422, "dims")
    assert "node 'keys' (Reshape) turns shape [1, 256, 64]" in body["detail"]
    assert "export fixed a size" in body["detail"]


@pytest.mark.parametrize("dims", ["sequence", "sequence=0", "sequence=-1", "sequence=1e12", "sequence=10000000000000",
                                  "{", '{"sequence": "8"}', '["sequence"]', "sequence=1,sequence=2"])
def test_malformed_dims_are_422_naming_dims(client: Any, dims: str) -> None:
    body = assert_problem(post(client, text_onnx(), dims=dims), 422, "dims")
    assert "dims" in body["detail"]


def test_a_json_body_takes_no_dims(client: Any) -> None:
    body = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "dims": {"sequence": 8}}), 422,
                          "dims")
    assert "extra" in body["detail"].lower() or "not permitted" in body["detail"].lower()


def test_a_weight_stripped_export_is_predicted(client: Any) -> None:
    # initializers over 1 KiB point at a missing external file
    data = gzip.decompress((ZOO / "legacy" / "resnet50.onnx.gz").read_bytes())
    r = post(client, data, batch="8", precision="fp16")
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["total_ms"] > 0 and r.get_json()["batch"] == 8


def test_an_expand_to_1e12_elements_is_422_quickly(client: Any) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    weights = [numpy_helper.from_array(np.ones((1, 1), np.float32), "one"),
               numpy_helper.from_array(np.array([10**6, 10**6], np.int64), "big")]
    nodes = [helper.make_node("Expand", ["one", "big"], ["t"], name="boom"), helper.make_node("Add", ["x", "t"], ["y"])]
    data = helper.make_model(helper.make_graph(nodes, "bomb", [x], [y], initializer=weights),
                             opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    started = time.perf_counter()
    body = assert_problem(post(client, data), 422, "onnx")
    assert time.perf_counter() - started < 5
    assert "node 'boom' (Expand)" in body["detail"] and "1e+12 elements" in body["detail"]
