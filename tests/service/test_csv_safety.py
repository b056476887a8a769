"""Issue #13, item 4: no graph name comes back from ``GET /v1/latency`` as a cell a spreadsheet runs.

Names that start like a formula are refused wherever a graph is given to the service (422 naming
the field); a graph stored under one before that rule (put in the store directly here, as an
older server would have) comes back escaped in the CSV, and read back by the csv module."""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from typing import Any

import pytest
from service_helpers import assert_problem, small_onnx

from predictor.graph import Graph
from predictor.zoo import load_zoo_graph
from service.config import ServiceConfig
from service.schemas.latency import CSV_COLUMNS

#: the payloads of issue #13, and the other starts a spreadsheet reads as a formula
FORMULAS = ["+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", '=HYPERLINK("x")', "\t=1+1", "\r=1+1", "\n=1+1"]
#: names of every kind the service must keep taking: zoo, NAS suite, exporters', file stems, any script
SAFE_NAMES = ["resnet50", "qwen2-0.5b", "nas-112", "main_graph", "torch-jit-export", "my model (v2)",
              "org/model:fp16", "cand#48213 [b8] +relu", "_private", "модель"]


def small_graph(name: str) -> Graph:
    return replace(load_zoo_graph("resnet18"), name=name)


def stored_before_the_rule(client: Any, name: str) -> str:
    """The id of a graph named ``name`` put in the store without the upload check."""
    gid, _ = client.application.extensions["latpred"].store.put(small_graph(name))
    return str(gid)


def latency_csv(client: Any, gid: str) -> tuple[str, list[dict[str, str]]]:
    r = client.get(f"/v1/latency?graph={gid}&batch=1,8&format=csv")
    assert r.status_code == 200 and r.mimetype == "text/csv", r.get_data(as_text=True)
    text = r.get_data(as_text=True)
    return text, list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_name_is_refused_in_a_json_graph_upload(client: Any, config: ServiceConfig, name: str) -> None:
    body = assert_problem(client.post("/v1/graphs", json=small_graph(name).to_json()), 422, "graph.name")
    assert "= + - @" in body["detail"] and body["type"].endswith("unsafe-name")
    assert not list(config.graph_store.rglob("*.json"))


@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_name_is_refused_in_an_inline_prediction(client: Any, name: str) -> None:
    r = client.post("/v1/predict", json={"graph": small_graph(name).to_json(), "batch": 1})
    assert_problem(r, 422, "graph.name")


@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_name_refuses_the_whole_batch_naming_it(client: Any, name: str) -> None:
    """The name rule is in the OpenAPI document (a pattern), and a body that breaks the document
    anywhere is refused whole; only rules beyond it (the catalogue's) fail a single item."""
    graphs = [{"graph": small_graph("ok").to_json()}, {"graph": small_graph(name).to_json()}]
    assert_problem(client.post("/v1/predict/batch", json={"graphs": graphs}), 422, "graphs[1].graph.name")


@pytest.mark.parametrize("endpoint", ["/v1/graphs", "/v1/predict"])
@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_name_is_refused_in_an_onnx_upload(client: Any, endpoint: str, name: str) -> None:
    form = {"onnx": (io.BytesIO(small_onnx()), "m.onnx"), "name": name}
    assert_problem(client.post(endpoint, data=form, content_type="multipart/form-data"), 422, "name")


@pytest.mark.parametrize("name", FORMULAS)
def test_an_onnx_files_own_formula_name_is_refused_naming_the_name_field(client: Any, name: str) -> None:
    form: dict[str, Any] = {"onnx": (io.BytesIO(small_onnx(name=name)), "m.onnx")}
    body = assert_problem(client.post("/v1/graphs", data=form, content_type="multipart/form-data"), 422, "name")
    assert body["detail"].startswith("the ONNX file names its graph")
    # the same file with a name given is taken
    form = {"onnx": (io.BytesIO(small_onnx(name=name)), "m.onnx"), "name": "renamed"}
    r = client.post("/v1/graphs", data=form, content_type="multipart/form-data")
    assert r.status_code == 201 and r.get_json()["name"] == "renamed", r.get_json()


@pytest.mark.parametrize("name", SAFE_NAMES)
def test_ordinary_names_are_taken_and_come_back_as_they_are(client: Any, name: str) -> None:
    r = client.post("/v1/graphs", json=small_graph(name).to_json())
    assert r.status_code == 201 and r.get_json()["name"] == name, r.get_json()
    text, rows = latency_csv(client, r.get_json()["id"])
    assert [row["model"] for row in rows] == [name, name]
    form: dict[str, Any] = {"onnx": (io.BytesIO(small_onnx(name=name)), "m.onnx")}
    assert client.post("/v1/graphs", data=form, content_type="multipart/form-data").get_json()["name"] == name


@pytest.mark.parametrize("name", ["", " leading-space", "(v2)", "a,b", "a;b", "a'b", 'a"b', "a\nb", "a\u202eb",
                                  "\uff1d1+1", "ok\n"])
def test_other_unsafe_names_are_refused_too(client: Any, name: str) -> None:
    assert_problem(client.post("/v1/graphs", json=small_graph(name).to_json()), 422, "graph.name")


@pytest.mark.parametrize("name", FORMULAS)
def test_a_stored_formula_name_comes_back_escaped_from_latency_csv(client: Any, name: str) -> None:
    text, rows = latency_csv(client, stored_before_the_rule(client, name))
    escaped = "'" + name if name[0] not in "\r\n" else "'" + name[0] + "'" + name[1:]
    assert [row["model"] for row in rows] == [escaped, escaped]
    assert tuple(rows[0]) == CSV_COLUMNS
    for row in rows:  # the numbers are still numbers, written bare
        assert 0 < float(row["low_ms"]) < float(row["total_ms"]) < float(row["high_ms"])
        assert f',{row["total_ms"]},' in text
    # no line of the file (whatever reads it line by line) starts like a formula
    assert not any(line[:1] in ("=", "+", "-", "@", "\t") for line in text.replace("\r", "\n").split("\n"))


def test_a_stored_multiline_name_cannot_start_a_row_with_a_formula(client: Any) -> None:
    text, rows = latency_csv(client, stored_before_the_rule(client, "ok\r\n=HYPERLINK(\"x\"),@SUM(1)"))
    assert [row["model"] for row in rows] == ["ok\r\n'=HYPERLINK(\"x\"),@SUM(1)"] * 2
    assert len(rows) == 2 and all(row["device"] for row in rows)  # the comma did not start a cell
    assert "\r\n'=HYPERLINK" in text


def test_a_stored_name_that_is_a_number_stays_a_number(client: Any) -> None:
    _, rows = latency_csv(client, stored_before_the_rule(client, "-2.5"))
    assert [row["model"] for row in rows] == ["-2.5", "-2.5"]


def test_txt_is_a_number_for_a_stored_formula_name(client: Any) -> None:
    gid = stored_before_the_rule(client, "=1+1")
    r = client.get(f"/v1/latency?graph={gid}&batch=1&format=txt")
    assert r.status_code == 200 and r.mimetype == "text/plain"
    assert float(r.get_data(as_text=True)) > 0 and r.get_data(as_text=True)[0].isdigit()
