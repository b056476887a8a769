"""The API key guards graph upload and model reload; reads stay open."""

from __future__ import annotations

from typing import Any

import pytest
from service_helpers import assert_problem

from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.config import ServiceConfig

KEY = "s3cret-key"


@pytest.fixture
def keyed(registry: Any, tmp_path: Any) -> Any:
    return create_app(ServiceConfig(graph_store=tmp_path, api_key=KEY), registry=registry).test_client()


@pytest.mark.parametrize("path", ["/v1/graphs", "/v1/models/reload"])
def test_writes_need_the_key(keyed: Any, path: str) -> None:
    ir = load_zoo_graph("resnet18").to_json()
    body = assert_problem(keyed.post(path, json=ir), 401)
    assert "X-API-Key" in body["detail"]
    assert_problem(keyed.post(path, json=ir, headers={"X-API-Key": "wrong"}), 401)
    assert_problem(keyed.post(path, json=ir, headers={"Authorization": "Bearer wrong"}), 401)
    assert_problem(keyed.post(path, json=ir, headers={"Authorization": "Basic " + KEY}), 401)
    assert keyed.post(path, json=ir, headers={"X-API-Key": KEY}).status_code in (200, 201)
    assert keyed.post(path, json=ir, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_the_key_is_checked_before_the_body(keyed: Any) -> None:
    assert_problem(keyed.post("/v1/graphs", data="{not json", content_type="application/json"), 401)


def test_reads_stay_open(keyed: Any) -> None:
    assert keyed.post("/v1/predict", json={"model": "resnet18"}).status_code == 200
    assert keyed.get("/v1/latency?model=resnet18&format=txt").status_code == 200
    assert keyed.get("/v1/models").status_code == 200


def test_without_a_key_configured_writes_are_open(client: Any) -> None:
    assert client.post("/v1/graphs", json=load_zoo_graph("resnet18").to_json()).status_code == 201
