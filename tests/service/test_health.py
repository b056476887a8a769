"""/livez at once, /readyz once the bundles are in (naming the version), /metrics for Prometheus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from service_helpers import CPU, DEVICE, WORKPLACE_CPU, assert_problem, bundle_version, transfer_version

from predictor.bundle import DEFAULT_BUNDLE_DIR
from predictor.graph import Graph, Node
from service.app import create_app
from service.config import ServiceConfig
from service.registry import ModelRegistry


def samples(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.mimetype == "text/plain"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.get_data(as_text=True)) for s in family.samples}


def test_livez_answers_while_bundles_load_and_readyz_once_they_are_in(tmp_path: Path) -> None:
    registry = ModelRegistry(DEFAULT_BUNDLE_DIR)  # not loaded yet: the app must still answer
    app = create_app(ServiceConfig(graph_store=tmp_path), registry=registry, load=False)
    client = app.test_client()
    live = client.get("/livez")
    assert live.status_code == 200 and live.get_json() == {"status": "alive"}
    body = assert_problem(client.get("/readyz"), 503)
    assert "loading" in body["detail"]
    registry.load()
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.get_json()
    assert body["status"] == "ready" and body["model_version"] == bundle_version() and body["fallbacks"] == {}
    assert body["model_versions"] == {DEVICE: bundle_version(), CPU: bundle_version(CPU),
                                      WORKPLACE_CPU: bundle_version(WORKPLACE_CPU), "transfer": transfer_version()}


def test_not_ready_is_503_with_retry_after_and_predictions_wait(tmp_path: Path) -> None:
    client = create_app(ServiceConfig(graph_store=tmp_path), load=False).test_client()
    r = client.get("/readyz")
    assert_problem(r, 503)
    assert r.headers["Retry-After"]
    assert_problem(client.post("/v1/predict", json={"model": "resnet18"}), 503)
    assert_problem(client.get("/v1/latency?model=resnet18"), 503)
    assert client.get("/livez").status_code == 200


def test_no_bundle_at_all_stays_503_and_says_so(tmp_path: Path) -> None:
    app = create_app(ServiceConfig(bundle_dir=tmp_path / "empty", graph_store=tmp_path), load=False)
    app.extensions["latpred"].registry.load()
    body = assert_problem(app.test_client().get("/readyz"), 503)
    assert "no model bundle was found" in body["detail"]


def test_metrics_count_requests_predictions_unsupported_ops_and_the_version(client: Any) -> None:
    graph = Graph("odd", [Node("fc", "linear", "kernel", family="linear", params={"tokens": 4, "k": 64, "n": 64}),
                          Node("topk", "TopK", "fallback", elements_per_sample=1000)])
    client.post("/v1/predict", json={"model": "resnet18", "mode": "eager"})
    client.post("/v1/predict", json={"graph": graph.to_json()})
    client.post("/v1/predict", json={"model": "nope"})
    m = samples(client)
    assert m[("latpred_predictions_total", (("device", DEVICE), ("mode", "eager")))] == 1
    assert m[("latpred_predictions_total", (("device", DEVICE), ("mode", "cudagraph")))] == 1
    assert m[("latpred_unsupported_ops_total", (("op", "TopK"),))] == 1
    assert m[("latpred_http_requests_total", (("endpoint", "/v1/predict"), ("method", "POST"), ("status", "200")))] == 2
    assert m[("latpred_http_requests_total", (("endpoint", "/v1/predict"), ("method", "POST"), ("status", "404")))] == 1
    assert m[("latpred_http_request_duration_seconds_count", (("endpoint", "/v1/predict"),))] == 3
    assert m[("latpred_model_info", (("device", DEVICE), ("version", bundle_version())))] == 1
