"""service.client against a real HTTP server (Werkzeug's, in a thread, on a loopback port)."""

from __future__ import annotations

import csv
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import DEVICE, bundle_version, small_onnx
from werkzeug.serving import make_server

from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.client import LatpredClient, LatpredError
from service.config import ServiceConfig

KEY = "client-test-key"


@pytest.fixture(scope="module")
def base_url(registry: Any, tmp_path_factory: Any) -> Iterator[str]:
    app = create_app(ServiceConfig(data_dir=tmp_path_factory.mktemp("data"), api_key=KEY), registry=registry)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def api(base_url: str) -> LatpredClient:
    return LatpredClient(base_url, api_key=KEY, timeout=30)


def test_predict_by_name_ir_and_onnx(api: LatpredClient) -> None:
    by_name = api.predict("resnet18", device="h200", batch=4, layers=False)
    assert by_name["model"] == "resnet18" and by_name["batch"] == 4 and "layers" not in by_name
    by_ir = api.predict(graph=load_zoo_graph("resnet18").to_json(), batch=4, layers=False)
    assert by_ir["total_ms"] == by_name["total_ms"]
    onnx = api.predict(onnx=small_onnx(), precision="fp32", mode="eager")
    assert onnx["mode"] == "eager" and len(onnx["layers"]) == 5


def test_onnx_dims_are_sent_as_the_form_field(api: LatpredClient) -> None:
    from test_onnx_dims import text_onnx

    short, long = (api.predict(onnx=text_onnx(), dims={"sequence": n}, precision="fp32") for n in (8, 512))
    assert 0 < short["total_ms"] < long["total_ms"]
    stored = api.upload_graph(text_onnx(), name="text", dims={"sequence": 8})
    assert stored["name"] == "text" and stored["nodes"] >= 1
    with pytest.raises(LatpredError) as caught:
        api.predict(onnx=text_onnx())
    assert "sequence" in str(caught.value)


def test_predict_batch(api: LatpredClient) -> None:
    out = api.predict_batch(["resnet18", {"model": "nope"}], [{"batch": 1}, {"batch": 8}])
    assert out["count"] == 4 and out["failed"] == 2
    assert out["results"][1]["prediction"]["batch"] == 8
    assert out["results"][2]["problem"]["field"] == "graphs[1].model"


def test_latency_in_three_formats(api: LatpredClient) -> None:
    rows = api.latency("resnet50", batch=[1, 8])
    assert [r["batch"] for r in rows] == [1, 8] and rows[0]["model_version"] == bundle_version()
    table = list(csv.reader(io.StringIO(api.latency("resnet50", batch=[1, 8], format="csv"))))
    assert len(table) == 3 and float(table[2][5]) == pytest.approx(rows[1]["total_ms"], abs=1e-4)
    number = api.latency("resnet50", batch=8, format="txt")
    assert isinstance(number, float) and number == pytest.approx(rows[1]["total_ms"], abs=1e-4)


def test_upload_graph_then_use_its_id(api: LatpredClient, tmp_path: Path) -> None:
    stored = api.upload_graph(load_zoo_graph("resnet34").to_json())
    assert len(stored["id"]) == 64
    assert api.predict(graph_id=stored["id"], layers=False)["model"] == "resnet34"
    assert api.graph(stored["id"])["name"] == "resnet34"
    path = tmp_path / "tiny.onnx"
    path.write_bytes(small_onnx())
    from_onnx = api.upload_graph(path, name="tiny")
    assert from_onnx["name"] == "tiny" and from_onnx["nodes"] == 5
    assert api.latency(graph=from_onnx["id"], format="txt") > 0


def test_devices_models_reload_ready(api: LatpredClient) -> None:
    assert api.ready()
    assert any(d["id"] == DEVICE and d["bundle_loaded"] for d in api.devices())
    assert "resnet50" in api.models()["zoo"]
    bundles = api.reload()["bundles"]
    assert {"device": DEVICE, "version": bundle_version()} in bundles
    # each one-device bundle in catalog order (the H200, the CPUs), then the transfer bundle, once for all it predicts
    assert [b["device"] for b in bundles] == [DEVICE, "cpu-intel-r-xeon-r-processor", "cpu-amd-epyc", "transfer"]


def test_errors_are_raised_with_the_problem(api: LatpredClient, base_url: str) -> None:
    with pytest.raises(LatpredError) as caught:
        api.predict("resnet18", batch=0)
    assert caught.value.status == 422 and caught.value.problem["field"] == "batch"
    with pytest.raises(LatpredError) as caught:
        LatpredClient(base_url).upload_graph(load_zoo_graph("resnet18").to_json())  # no key
    assert caught.value.status == 401
    with pytest.raises(LatpredError) as caught:
        LatpredClient("http://127.0.0.1:9", timeout=5).devices()  # nothing listens on the discard port
    assert caught.value.status == 0
