"""The API key guards graph and host profile upload and model reload; with no key, writes are
refused unless the operator opened them (LATPRED_OPEN_WRITES); reads stay open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from service_helpers import assert_problem, host_profile

from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.config import ServiceConfig

KEY = "s3cret-key"


@pytest.fixture
def keyed(registry: Any, tmp_path: Any) -> Any:
    return create_app(ServiceConfig(data_dir=tmp_path, api_key=KEY), registry=registry).test_client()


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


WRITES = [("/v1/graphs", "graph"), ("/v1/hosts", "host"), ("/v1/models/reload", None)]


def _write(client: Any, path: str, what: str | None, **kwargs: Any) -> Any:
    body = {"graph": load_zoo_graph("resnet18").to_json(), "host": host_profile(id="auth-host")}.get(what or "")
    return client.post(path, json=body, **kwargs)


@pytest.mark.parametrize(("path", "what"), WRITES)
def test_with_neither_key_nor_open_writes_writes_are_refused_naming_both_settings(
        registry: Any, tmp_path: Path, path: str, what: str | None) -> None:
    closed = create_app(ServiceConfig(data_dir=tmp_path), registry=registry).test_client()
    body = assert_problem(_write(closed, path, what), 403)
    assert "LATPRED_API_KEY" in body["detail"] and "LATPRED_OPEN_WRITES=1" in body["detail"]
    assert body["type"].endswith("writes-disabled") and body["settings"] == ["LATPRED_API_KEY", "LATPRED_OPEN_WRITES"]
    assert_problem(_write(closed, path, what, headers={"X-API-Key": "anything"}), 403)  # no key to match
    assert not list(tmp_path.rglob("*.json"))  # nothing was stored
    assert closed.get("/v1/models").status_code == 200  # reads stay open


@pytest.mark.parametrize(("path", "what"), WRITES)
def test_open_writes_without_a_key_allow_writes(registry: Any, tmp_path: Path, path: str, what: str | None) -> None:
    opened = create_app(ServiceConfig(data_dir=tmp_path, open_writes=True), registry=registry).test_client()
    assert _write(opened, path, what).status_code in (200, 201)


def test_a_key_is_wanted_even_with_open_writes(registry: Any, tmp_path: Path) -> None:
    both = create_app(ServiceConfig(data_dir=tmp_path, api_key=KEY, open_writes=True), registry=registry).test_client()
    assert_problem(_write(both, "/v1/graphs", "graph"), 401)
    assert _write(both, "/v1/graphs", "graph", headers={"X-API-Key": KEY}).status_code == 201


@pytest.mark.parametrize(("value", "expected"), [(None, False), ("", False), ("0", False), ("off", False),
                                                 ("1", True), ("true", True), ("YES", True)])
def test_open_writes_is_off_unless_set(value: str | None, expected: bool) -> None:
    env = {} if value is None else {"LATPRED_OPEN_WRITES": value}
    assert ServiceConfig.from_env(env).open_writes is expected


def test_a_misspelt_open_writes_setting_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="LATPRED_OPEN_WRITES"):
        ServiceConfig.from_env({"LATPRED_OPEN_WRITES": "sure"})
