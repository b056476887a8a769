"""GET /v1/capacity with ``serving_path``: a shipped path put around the predictions (the planner's own
answer for it, as ``latpred capacity --serving-path`` gives), echoed in json, csv and the txt header,
cached apart from the GPU-only plan; anything but a shipped name (a file path too) refused naming
the field, with the names there are."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from service_helpers import DEVICE, assert_problem

from predictor.capacity.planner import plan
from predictor.capacity.service_time import predicted_service_time
from predictor.capacity.serving_path import stored_serving_path, stored_serving_paths
from predictor.zoo import load_zoo_graph
from service.schemas.capacity import CSV_COLUMNS

URL = "/v1/capacity?model=resnet50&device=h200&qps=2000&slo_p99_ms=10"
NAME = "pytriton-h100"


def test_a_named_serving_path_is_planned_around_the_predictions_and_echoed(client: Any, registry: Any) -> None:
    plain = client.get(URL)
    served = client.get(f"{URL}&serving_path={NAME}")
    assert plain.status_code == served.status_code == 200
    [gpu_only], [with_path] = plain.get_json(), served.get_json()
    path = stored_serving_path(NAME)
    assert gpu_only["serving_path"] is None and with_path["serving_path"] == path.answer_dict()
    # fitted on other hosts: the JSON says what `latpred capacity` prints, that it holds on a host like theirs
    assert path.label == "fitted" and "latpred serving-path FOLDER" in with_path["serving_path"]["caution"]
    assert (plain.headers["Latpred-Serving-Path"], served.headers["Latpred-Serving-Path"]) == ("none", NAME)
    assert with_path["meets"]
    assert with_path["gpus"] > gpu_only["gpus"] or (
        with_path["gpus"] == gpu_only["gpus"] and with_path["p99_ms"] > gpu_only["p99_ms"])
    # the planner's own answer for the same bundle's predictions with the path around them
    predicted = predicted_service_time(registry.predictor(DEVICE), load_zoo_graph("resnet50"), "fp16", "cudagraph")
    expected = plan(path.around(predicted), 2000, 10, stalls=path.stalls)  # the path's drift in every run
    assert (with_path["gpus"], with_path["max_batch"], with_path["max_queue_delay_us"]) == (
        expected.gpus, expected.max_batch, expected.max_queue_delay_us)
    assert with_path["p99_ms"] == pytest.approx(expected.p99_ms, rel=1e-9)
    assert (with_path["p99_low_ms"], with_path["p99_high_ms"]) == pytest.approx(
        (expected.p99_low_ms, expected.p99_high_ms), rel=1e-9)
    # cached apart: the serving path is part of what identifies the answer
    assert plain.headers["ETag"] != served.headers["ETag"]
    again = client.get(f"{URL}&serving_path= {NAME} ", headers={"If-None-Match": served.headers["ETag"]})
    assert again.status_code == 304
    assert client.get(URL, headers={"If-None-Match": served.headers["ETag"]}).status_code == 200


def test_csv_names_the_path_in_its_column_and_txt_in_its_header(client: Any) -> None:
    query = "/v1/capacity?model=resnet50&device=h200&qps=500,4000&slo_p99_ms=10,20"
    for suffix, name in (("", ""), (f"&serving_path={NAME}", NAME)):
        response = client.get(f"{query}{suffix}&format=csv")
        assert response.status_code == 200, response.get_data(as_text=True)[:500]
        rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
        assert list(rows[0]) == list(CSV_COLUMNS) and CSV_COLUMNS[-2:] == ("serving_path", "arrival_cv")
        assert len(rows) == 4 and {r["serving_path"] for r in rows} == {name}
        txt = client.get(f"{query}{suffix}&format=txt")
        assert txt.status_code == 200 and txt.headers["Latpred-Serving-Path"] == (name or "none")
        assert txt.get_data(as_text=True).split("\n") == [r["gpus"] for r in rows]  # numbers only, as before
    plain = list(csv.DictReader(io.StringIO(client.get(f"{query}&format=csv").get_data(as_text=True))))
    served = list(csv.DictReader(io.StringIO(client.get(f"{query}&serving_path={NAME}&format=csv").get_data(
        as_text=True))))
    # every cell of the grid plans for the server: never fewer GPUs, never a lower p99 on as many
    for p, s in zip(plain, served):
        assert int(s["gpus"]) > int(p["gpus"]) or float(s["p99_ms"]) > float(p["p99_ms"])


@pytest.mark.parametrize("value", ["nope", "/etc/passwd", "../serving_paths/pytriton-h100.json",
                                   "pytriton-h100.json", "PYTRITON-H100x", ""])
def test_anything_but_a_shipped_name_is_refused_naming_the_field_and_the_names(client: Any, value: str) -> None:
    body = assert_problem(client.get(f"{URL}&serving_path={value}"), 400, "serving_path")
    names = sorted(stored_serving_paths())
    assert all(name in body["detail"] for name in names) and body["serving_paths"] == names
    assert body["type"].endswith(":unknown-serving-path")
    assert "root:" not in body["detail"]  # nothing of a file was read


def test_the_document_lists_the_shipped_names(client: Any) -> None:
    spec = client.get("/openapi.json").get_json()
    [param] = [p for p in spec["paths"]["/v1/capacity"]["get"]["parameters"] if p["name"] == "serving_path"]
    assert NAME in param["schema"]["pattern"] and NAME in param["description"]
    ok = spec["paths"]["/v1/capacity"]["get"]["responses"]["200"]
    assert "Latpred-Serving-Path" in ok["headers"]
    plan_schema = spec["components"]["schemas"]["CapacityPlan"]
    assert "serving_path" in plan_schema["properties"]
