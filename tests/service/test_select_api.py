"""POST /v1/select and GET /v1/select through the real app over the shipped bundles: every catalog
device ranked (measured and transferred), constraints, an objective no device meets, spreadsheet
formats, and the refusals, each naming its field."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from service_helpers import assert_problem

from predictor.devices import DEVICES
from predictor.selection_csv import CSV_COLUMNS


def _select(client: Any, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/select", json={"model": "resnet50", "batch": 8, **body})
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return response.get_json()


def test_every_catalog_device_is_ranked_cheapest_first(client: Any) -> None:
    body = _select(client)
    ranked = body["ranked"]
    gpus = {d for d, spec in DEVICES.items() if spec.kind == "gpu"}  # a CPU runs no CUDA graph: skipped
    assert {d["device"] for d in ranked} == gpus
    assert [d["rank"] for d in ranked] == list(range(1, len(ranked) + 1))
    costs = [d["cost_per_million"] for d in ranked if d["cost_per_million"] is not None]
    assert costs == sorted(costs)
    assert body["best"] == ranked[0]["device"] and body["verdict"].startswith(ranked[0]["name"])
    provenance = {d["device"]: d["provenance"] for d in ranked}
    assert provenance["nvidia-h200"] == "measured" and provenance["nvidia-h200-sm72"] == "measured"
    assert provenance["nvidia-l4"] == "transferred"
    assert (body["model"], body["batch"], body["precision"], body["mode"]) == ("resnet50", 8, "fp16", "cudagraph")


def test_an_objective_changes_the_choice_and_one_none_meets_is_answered(client: Any) -> None:
    ranked = _select(client)["ranked"]
    quickest = min(d["p99_ms"] for d in ranked)
    tight = _select(client, slo_p99_ms=quickest * 1.01)
    assert tight["best"] == min(ranked, key=lambda d: d["p99_ms"])["device"]
    assert [d["meets"] for d in tight["ranked"]].count(True) >= 1
    none = _select(client, slo_p99_ms=quickest / 2)
    assert none["best"] is None and none["verdict"].startswith("none meets the constraints")
    assert all(d["reasons"] for d in none["ranked"])


def test_devices_narrow_the_choice(client: Any) -> None:
    body = _select(client, devices=["nvidia-h200", "nvidia-l4"], min_throughput_qps=1.0)
    assert [d["device"] for d in body["ranked"]] == sorted(["nvidia-h200", "nvidia-l4"],
                                                           key=lambda d: [x["device"] for x in body["ranked"]].index(d))
    assert {d["device"] for d in body["ranked"]} == {"nvidia-h200", "nvidia-l4"}


def test_devices_are_named_as_device_is_everywhere_else(client: Any) -> None:
    """By id or part of a name, as `device` and `latpred select --devices` take them ('h200' was a 404)."""
    body = _select(client, devices=["h200", "l4", "nvidia-h200"], min_throughput_qps=1.0)
    assert sorted(d["device"] for d in body["ranked"]) == ["nvidia-h200", "nvidia-l4"]
    got = client.get("/v1/select?model=resnet50&devices=h200,l4")
    assert got.status_code == 200 and {d["device"] for d in got.get_json()["ranked"]} == {"nvidia-h200", "nvidia-l4"}
    assert "ambiguous" in assert_problem(client.post("/v1/select", json={"model": "resnet50", "devices": ["a100"]}),
                                         404, "devices")["detail"]


def test_bf16_skips_a_device_without_bf16_tensor_cores(client: Any) -> None:
    body = _select(client, precision="bf16")
    assert "tesla-t4" in body["skipped"] and "tesla-t4" not in {d["device"] for d in body["ranked"]}


def test_the_spreadsheet_get_answers_csv_and_txt(client: Any) -> None:
    url = "/v1/select?model=resnet50&batch=8&precision=FP16&slo_p99_ms=50"
    as_json = client.get(url).get_json()
    response = client.get(url + "&format=csv")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert [r["device"] for r in rows] == [d["device"] for d in as_json["ranked"]]
    assert rows[0]["meets"] == "true" and float(rows[0]["latency_ms"]) == pytest.approx(
        as_json["ranked"][0]["latency_ms"], abs=1e-4)
    txt = client.get(url + "&format=txt")
    assert txt.mimetype == "text/plain" and txt.get_data(as_text=True) == as_json["best"]
    # each device's p99 at both ends of its interval, and whether the choice is settled
    assert [float(r["p99_high_ms"]) for r in rows] == pytest.approx(
        [d["p99_high_ms"] for d in as_json["ranked"]], abs=1e-4)
    assert all(float(r["p99_low_ms"]) < float(r["p99_ms"]) < float(r["p99_high_ms"]) for r in rows)
    assert {r["settled"] for r in rows} == {"true" if as_json["settled"] else "false"}
    none = client.get("/v1/select?model=resnet50&batch=8&slo_p99_ms=0.001&format=txt")
    assert none.get_data(as_text=True) == "none"


@pytest.mark.parametrize(("url", "field"), [
    ("/v1/select?model=resnet50&slo_p99_ms=-1", "slo_p99_ms"),
    ("/v1/select?model=resnet50&slo_p99_ms=1e3", "slo_p99_ms"),
    ("/v1/select?model=resnet50&min_throughput_qps=abc", "min_throughput_qps"),
    ("/v1/select?model=resnet50&devices=Not%20An%20Id", "devices"),
    ("/v1/select?model=resnet50&precision=fp8", "precision"),
    ("/v1/select?model=resnet50&batch=0", "batch"),
    ("/v1/select?model=resnet50&serving_path=../../etc/passwd", "serving_path"),
])
def test_bad_query_values_are_a_400_naming_the_field(client: Any, url: str, field: str) -> None:
    assert_problem(client.get(url), 400, field)


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"model": "no-such-model"}, 404, "model"),
    ({"model": "resnet50", "devices": ["nvidia-h900"]}, 404, "devices"),
    ({"model": "resnet50", "slo_p99_ms": "5"}, 422, "slo_p99_ms"),
    ({"model": "resnet50", "slo_p99_ms": 0}, 422, "slo_p99_ms"),
    ({"model": "resnet50", "min_throughput_qps": True}, 422, "min_throughput_qps"),
    ({"model": "resnet50", "batch": "8"}, 422, "batch"),
    ({"model": "resnet50", "mode": "eager", "host": "no-such-host"}, 404, "host"),
    ({"model": "resnet50", "graph_id": "0" * 64}, 422, ""),
    ({"model": "resnet50", "serving_path": "mine.json"}, 400, "serving_path"),
    ({"model": "resnet50", "serving_path": 5}, 422, "serving_path"),
])
def test_bad_bodies_are_refused_naming_the_field(client: Any, body: dict[str, Any], status: int, field: str) -> None:
    assert_problem(client.post("/v1/select", json=body), status, field or None)


def test_a_graph_that_runs_nothing_is_refused_naming_it(client: Any) -> None:
    """Every node free (a view): 0 ms on every device, so nothing to rank them by."""
    graph = {"name": "views-only", "batch": 1, "nodes": [{"name": "v", "op": "view", "kind": "free"}]}
    body = assert_problem(client.post("/v1/select", json={"graph": graph}), 422, "graph")
    assert "runs nothing" in body["detail"]


def test_an_objective_inside_the_choices_interval_is_answered_unsettled_with_its_doubts(client: Any) -> None:
    """Among the measured GPUs: no constraint, settled. An objective between the chosen device's p99
    and its p99 at the slow end of its interval: the same choice, said not to be settled, with the
    doubt naming it. (Among every GPU, those predicted from a datasheet leave the order by cost in
    doubt: tests/predictor/test_selection.py.)"""
    measured = ["nvidia-h200", "nvidia-h200-sm104", "nvidia-h200-sm72", "nvidia-h200-sm40", "nvidia-h100-80gb-hbm3",
                "nvidia-h100-80gb-hbm3-sm72"]
    free = client.post("/v1/select", json={"model": "resnet50", "batch": 8, "devices": measured}).get_json()
    assert free["settled"] is True and free["doubts"] == []
    best = free["ranked"][0]
    tight = client.post("/v1/select", json={"model": "resnet50", "batch": 8, "devices": measured,
                                            "slo_p99_ms": (best["p99_ms"] + best["p99_high_ms"]) / 2}).get_json()
    assert tight["best"] == best["device"] and tight["settled"] is False
    assert any(d.startswith(f"{best['device']} at the slow end of its interval: p99 ") for d in tight["doubts"])


def test_the_cli_writes_the_same_csv_as_the_spreadsheet_get(client: Any) -> None:
    """A sheet built on ``latpred select --format csv`` reads ``GET /v1/select?format=csv`` cell for
    cell: same columns, same order, same decimals (only the line ends differ: a terminal's '\\n')."""
    from click.testing import CliRunner

    from latpred import main

    cli = CliRunner().invoke(main, ["select", "resnet50", "--batch", "8", "--precision", "fp16",
                                    "--slo-p99-ms", "50", "--format", "csv"])
    assert cli.exit_code == 0, cli.output
    served = client.get("/v1/select?model=resnet50&batch=8&precision=fp16&slo_p99_ms=50&format=csv")
    assert served.status_code == 200
    cli_rows = list(csv.reader(io.StringIO(cli.output)))
    served_rows = list(csv.reader(io.StringIO(served.get_data(as_text=True))))
    assert cli_rows[0] == list(CSV_COLUMNS) and len(cli_rows) > 2
    assert cli_rows == served_rows


def test_a_named_serving_path_is_added_to_every_device_and_echoed(client: Any) -> None:
    """``serving_path`` adds the shipped path's time to every device's batch, in the JSON answer, the
    CSV (its name in the last column) and the header of every format; the CLI ranks alike."""
    from click.testing import CliRunner

    from latpred import main
    from predictor.capacity.serving_path import stored_serving_path

    path = stored_serving_path("pytriton-h100")
    alone = _select(client, batch=1)
    served = _select(client, batch=1, serving_path="pytriton-h100")
    assert alone["serving_path"] is None and served["serving_path"] == path.answer_dict()
    assert path.caution is not None and "fitted on other hosts" in path.caution
    gpu = {d["device"]: d["latency_ms"] for d in alone["ranked"]}
    for d in served["ranked"]:
        assert d["latency_ms"] == pytest.approx(gpu[d["device"]] + path.added_ms(1), rel=1e-9)
    url = "/v1/select?model=resnet50&batch=1&serving_path=%20pytriton-h100&format=csv"
    sheet = client.get(url)
    assert sheet.status_code == 200 and sheet.headers["Latpred-Serving-Path"] == "pytriton-h100"
    rows = list(csv.DictReader(io.StringIO(sheet.get_data(as_text=True))))
    assert [r["device"] for r in rows] == [d["device"] for d in served["ranked"]]
    assert {r["serving_path"] for r in rows} == {"pytriton-h100"}
    plain = client.get("/v1/select?model=resnet50&batch=1&format=txt")
    assert plain.headers["Latpred-Serving-Path"] == "none"
    cli = CliRunner().invoke(main, ["select", "resnet50", "--batch", "1", "--serving-path", "pytriton-h100",
                                    "--format", "csv"])
    assert cli.exit_code == 0, cli.output
    assert list(csv.reader(io.StringIO(cli.output))) == list(csv.reader(io.StringIO(sheet.get_data(as_text=True))))
    table = CliRunner().invoke(main, ["select", "resnet50", "--batch", "1", "--serving-path", "pytriton-h100"])
    assert table.exit_code == 0 and path.caution is not None and path.caution in table.output  # fitted: said
    as_json = CliRunner().invoke(main, ["select", "resnet50", "--batch", "1", "--serving-path", "pytriton-h100",
                                        "--format", "json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["serving_path"] == served["serving_path"]
    refused = CliRunner().invoke(main, ["select", "resnet50", "--serving-path", "nope"])
    assert refused.exit_code != 0 and "--serving-path" in refused.output and "pytriton-h100" in refused.output


def test_several_objectives_in_one_select_query_are_refused_naming_the_field(client: Any) -> None:
    # a comma list is capacity's grid; a selection answers one objective and must not keep the first silently
    for field in ("slo_p99_ms", "min_throughput_qps"):
        body = assert_problem(client.get(f"/v1/select?model=resnet50&{field}=1,0.5"), 400, field)
        assert "one value" in body["detail"]
