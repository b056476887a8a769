"""POST /v1/predict and /v1/predict/batch through the real app and the shipped bundle."""

from __future__ import annotations

from typing import Any

import pytest
from service_helpers import DEVICE, assert_problem, bundle_version, small_onnx

from predictor.graph import Graph, Node
from predictor.zoo import load_zoo_graph


@pytest.fixture(scope="module")
def direct(registry: Any) -> Any:
    """The predictor the service should agree with, called directly."""
    return registry.predictor(DEVICE)


def test_zoo_model_matches_the_predictor_called_directly(client: Any, direct: Any) -> None:
    r = client.post("/v1/predict", json={"model": "resnet50", "device": "h200", "batch": 8,
                                         "precision": "bf16", "mode": "eager"})
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    expected = direct.predict(load_zoo_graph("resnet50"), 8, "bf16", "eager")
    assert body["total_ms"] == pytest.approx(expected.total_ms)
    assert body["low_ms"] < body["total_ms"] < body["high_ms"]
    assert (body["model"], body["device"], body["batch"], body["precision"], body["mode"]) == \
        ("resnet50", DEVICE, 8, "bf16", "eager")
    assert body["model_version"] == bundle_version()
    assert len(body["layers"]) == len(load_zoo_graph("resnet50").nodes)
    assert {"name", "op", "kind", "kernel_us", "low_us", "high_us", "host_us"} <= set(body["layers"][0])
    assert body["unsupported"] == [] and isinstance(body["warnings"], list)


def test_layers_false_leaves_the_breakdown_out(client: Any) -> None:
    body = client.post("/v1/predict", json={"model": "resnet18", "layers": False}).get_json()
    assert "layers" not in body and body["total_ms"] > 0


def test_defaults_are_the_only_device_fp16_cudagraph_and_the_graphs_own_batch(client: Any, direct: Any) -> None:
    body = client.post("/v1/predict", json={"model": "bert-base"}).get_json()
    graph = load_zoo_graph("bert-base")
    assert (body["device"], body["precision"], body["mode"], body["batch"]) == (DEVICE, "fp16", "cudagraph",
                                                                               graph.batch)
    assert body["total_ms"] == pytest.approx(direct.predict(graph, None, "fp16", "cudagraph").total_ms)


def test_device_by_case_insensitive_part_of_its_name(client: Any) -> None:
    a = client.post("/v1/predict", json={"model": "resnet18", "device": "NVIDIA H200"}).get_json()
    b = client.post("/v1/predict", json={"model": "resnet18", "device": DEVICE}).get_json()
    assert a["device"] == b["device"] == DEVICE and a["total_ms"] == b["total_ms"]


def test_inline_json_ir_predicts_like_its_zoo_name(client: Any) -> None:
    ir = load_zoo_graph("mobilenet_v2").to_json()
    by_ir = client.post("/v1/predict", json={"graph": ir, "batch": 4, "layers": False})
    by_name = client.post("/v1/predict", json={"model": "mobilenet_v2", "batch": 4, "layers": False})
    assert by_ir.status_code == 200, by_ir.get_json()
    assert by_ir.get_json()["total_ms"] == pytest.approx(by_name.get_json()["total_ms"])


def test_stored_graph_id_predicts_like_the_graph(client: Any) -> None:
    ir = load_zoo_graph("resnet18").to_json()
    gid = client.post("/v1/graphs", json=ir).get_json()["id"]
    by_id = client.post("/v1/predict", json={"graph_id": gid, "layers": False}).get_json()
    by_ir = client.post("/v1/predict", json={"graph": ir, "layers": False}).get_json()
    assert by_id["total_ms"] == by_ir["total_ms"] and by_id["model"] == "resnet18"


def test_onnx_upload_as_multipart(client: Any, direct: Any) -> None:
    from predictor.importers.onnx_graph import graph_from_onnx

    data = small_onnx(batch="N")
    r = client.post("/v1/predict", data={"onnx": (__import__("io").BytesIO(data), "tiny.onnx"), "batch": "4",
                                         "precision": "fp32", "mode": "eager", "name": "tiny"},
                    content_type="multipart/form-data")
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    expected = direct.predict(graph_from_onnx(data, name="tiny", batch=4), 4, "fp32", "eager")
    assert body["model"] == "tiny" and body["batch"] == 4
    assert body["total_ms"] == pytest.approx(expected.total_ms)
    assert [layer["op"] for layer in body["layers"]] == ["Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm"]


def test_unsupported_ops_and_warnings_are_reported(client: Any) -> None:
    graph = Graph("with_fallback", [
        Node("fc", "linear", "kernel", family="linear", params={"tokens": 16, "k": 256, "n": 256}),
        Node("sort", "Sort", "fallback", elements_per_sample=4096),
        Node("sort2", "Sort", "fallback", elements_per_sample=4096),
    ])
    body = client.post("/v1/predict", json={"graph": graph.to_json()}).get_json()
    assert body["unsupported"] == [{"op": "Sort", "count": 2, "costed_as": "roofline on bytes moved"}]
    assert body["warnings"] and "roofline" in body["warnings"][0]


def test_eager_and_cudagraph_differ_and_batch_scales(client: Any) -> None:
    def total(**kw: Any) -> float:
        return client.post("/v1/predict", json={"model": "resnet50", "layers": False, **kw}).get_json()["total_ms"]

    assert total(mode="eager", batch=1) > total(mode="cudagraph", batch=1)
    assert total(batch=64) > total(batch=1)


# ---------------------------------------------------------------------------- batch

def test_batch_is_graph_major_and_matches_single_predictions(client: Any) -> None:
    graphs = [{"model": "resnet18"}, {"model": "bert-base"}, {"graph": load_zoo_graph("mobilenet_v2").to_json()}]
    variants = [{"batch": 1}, {"batch": 16, "precision": "bf16", "mode": "eager"}]
    r = client.post("/v1/predict/batch", json={"graphs": graphs, "variants": variants})
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["count"] == 6 and body["failed"] == 0
    assert [(x["graph"], x["variant"]) for x in body["results"]] == [(i, j) for i in range(3) for j in range(2)]
    for item in body["results"]:
        single = client.post("/v1/predict", json={**graphs[item["graph"]], **variants[item["variant"]],
                                                  "layers": False}).get_json()
        assert item["prediction"] == single
        assert "layers" not in item["prediction"]


def test_a_bad_item_gets_a_problem_and_the_rest_still_run(client: Any) -> None:
    r = client.post("/v1/predict/batch", json={
        "graphs": [{"model": "resnet18"}, {"model": "no-such-net"}, {"graph_id": "0" * 64}],
        "variants": [{"batch": 2}, {"device": "tpu-v9"}],
    })
    assert r.status_code == 200
    body = r.get_json()
    assert body["count"] == 6 and body["failed"] == 5
    ok = body["results"][0]
    assert ok["prediction"]["batch"] == 2 and "problem" not in ok
    by_pos = {(x["graph"], x["variant"]): x.get("problem") for x in body["results"]}
    assert by_pos[(0, 1)]["field"] == "variants[1].device" and by_pos[(0, 1)]["status"] == 404
    assert by_pos[(1, 0)]["field"] == "graphs[1].model" and "no-such-net" in by_pos[(1, 0)]["detail"]
    assert by_pos[(2, 0)]["field"] == "graphs[2].graph_id"


def test_batch_layers_true_includes_the_breakdown(client: Any) -> None:
    body = client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}], "layers": True}).get_json()
    assert len(body["results"][0]["prediction"]["layers"]) == len(load_zoo_graph("resnet18").nodes)


def test_batch_result_cap(registry: Any, tmp_path: Any) -> None:
    from service.app import create_app
    from service.config import ServiceConfig

    client = create_app(ServiceConfig(graph_store=tmp_path, max_results=4), registry=registry).test_client()
    r = client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}] * 3,
                                               "variants": [{"batch": 1}, {"batch": 2}]})
    assert_problem(r, 422, "graphs")
    assert "at most 4" in r.get_json()["detail"]
    ok = client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}] * 2,
                                                "variants": [{"batch": 1}, {"batch": 2}]})
    assert ok.status_code == 200 and ok.get_json()["count"] == 4


def test_malformed_batch_requests_are_4xx(client: Any) -> None:
    assert_problem(client.post("/v1/predict/batch", json={"variants": [{}]}), 422, "graphs")
    assert_problem(client.post("/v1/predict/batch", json={"graphs": []}), 422, "graphs")
    assert_problem(client.post("/v1/predict/batch", json={"graphs": [{"model": "a", "graph_id": "b" * 64}]}),
                   422, "graphs[0]")
    assert_problem(client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}],
                                                          "variants": [{"batch": 0}]}), 422, "variants[0].batch")


def test_an_inline_graph_the_catalogue_refuses_is_its_items_problem_and_the_rest_run(client: Any) -> None:
    """Refused by the IR's own checks (a kernel's parameters, a name used twice), an inline graph
    fails its items only, as an unknown zoo name does; a graph that breaks the schema (a string
    where an integer goes) refuses the whole request."""
    fc = {"name": "fc", "op": "linear", "kind": "kernel", "family": "linear", "params": {"tokens": 4, "k": 64, "n": 64}}
    missing = {**fc, "params": {"tokens": 4, "k": 64}}
    r = client.post("/v1/predict/batch", json={"graphs": [
        {"graph": {"name": "bad", "nodes": [fc, missing | {"name": "fc2"}]}}, {"model": "resnet18"},
        {"graph": {"name": "twice", "nodes": [fc, fc]}}, {"graph": {"name": "good", "nodes": [fc]}}]})
    assert r.status_code == 200, r.get_data(as_text=True)
    results = r.get_json()["results"]
    assert [("problem" in x) for x in results] == [True, False, True, False]
    assert results[0]["problem"]["field"] == "graphs[0].graph.nodes[1]"
    assert "missing parameter(s) n" in results[0]["problem"]["detail"]
    assert "used twice" in results[2]["problem"]["detail"]
    assert results[3]["prediction"]["model"] == "good"
    as_text = {**fc, "params": {"tokens": 4, "k": 64, "n": "64"}}
    schema_broken = {"graphs": [{"graph": {"name": "g", "nodes": [as_text]}}, {"model": "resnet18"}]}
    assert_problem(client.post("/v1/predict/batch", json=schema_broken), 422, "graphs[0].graph.nodes[0].params.n")


def test_the_cpu_is_predicted_eagerly_in_fp32_and_refuses_the_rest_by_field(client: Any) -> None:
    """The measured CPU (the GPU machine's host): asked by name, never the default device."""
    ok = client.post("/v1/predict", json={"model": "resnet18", "device": "xeon", "batch": 1, "precision": "fp32",
                                          "mode": "eager"})
    assert ok.status_code == 200, ok.get_data(as_text=True)[:300]
    body = ok.get_json()
    assert body["device"] == "cpu-intel-r-xeon-r-processor" and body["total_ms"] > 1 and body["host"]
    captured = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "device": "xeon",
                                                               "precision": "fp32"}), 422, "mode")
    assert "eager only" in captured["detail"]
    half = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "device": "xeon", "mode": "eager"}),
                          422, "precision")
    assert "fp32 only" in half["detail"]
    sheet = client.get("/v1/latency?model=resnet18&device=xeon&mode=eager&precision=fp32&format=txt")
    assert sheet.status_code == 200 and float(sheet.get_data(as_text=True)) == pytest.approx(body["total_ms"], rel=1e-3)
    assert client.post("/v1/predict", json={"model": "resnet18"}).get_json()["device"] == DEVICE


def test_a_gpu_host_named_beside_the_cpu_is_found_and_the_cpu_keeps_its_own(client: Any) -> None:
    import json

    from predictor.bundle import DEFAULT_BUNDLE_DIR

    h200_host = json.loads((DEFAULT_BUNDLE_DIR / DEVICE / "metadata.json").read_text())["host_profile"]["id"]
    sheet = client.get(f"/v1/latency?model=resnet18&device=h200,xeon&mode=eager&precision=fp32&host={h200_host}"
                       "&format=json")
    assert sheet.status_code == 200, sheet.get_data(as_text=True)[:300]
    rows = {r["device"]: r for r in sheet.get_json()}
    assert rows[DEVICE]["host"].startswith(h200_host)
    assert rows["cpu-intel-r-xeon-r-processor"]["host"].startswith("cpu-")  # its own profile, with a warning
    chosen = client.post("/v1/select", json={"model": "resnet18", "batch": 1, "precision": "fp32", "mode": "eager",
                                             "devices": ["cpu-intel-r-xeon-r-processor", DEVICE], "host": h200_host})
    assert chosen.status_code == 200, chosen.get_data(as_text=True)[:300]
    assert {d["device"] for d in chosen.get_json()["ranked"]} == {DEVICE, "cpu-intel-r-xeon-r-processor"}
    plan = assert_problem(client.get("/v1/capacity?model=resnet18&device=xeon&qps=100&slo_p99_ms=50"), 400, "device")
    assert "capacity planning plans GPUs" in plan["detail"]
