"""GET /v1/latency: the spreadsheet formats, the grid of combinations, ETag and Cache-Control."""

from __future__ import annotations

import csv
import io
import itertools
from typing import Any

import pytest
from service_helpers import DEVICE, assert_problem, bundle_version

from predictor.zoo import load_zoo_graph
from service.schemas.latency import CSV_COLUMNS


def test_csv_is_a_header_and_one_row_per_combination(client: Any) -> None:
    r = client.get("/v1/latency?model=resnet50,bert-base&device=h200&batch=1,8,32&precision=fp16,bf16"
                   "&mode=cudagraph&format=csv")
    assert r.status_code == 200 and r.mimetype == "text/csv"
    rows = list(csv.reader(io.StringIO(r.get_data(as_text=True))))
    assert tuple(rows[0]) == CSV_COLUMNS
    expected = list(itertools.product(["resnet50", "bert-base"], [DEVICE], ["1", "8", "32"], ["fp16", "bf16"],
                                      ["cudagraph"]))
    assert [tuple(row[:5]) for row in rows[1:]] == expected
    for row in rows[1:]:
        total, low, high = float(row[5]), float(row[6]), float(row[7])
        assert 0 < low < total < high
        assert row[8] == bundle_version()
    by_batch = {int(row[2]): float(row[5]) for row in rows[1:] if row[0] == "resnet50" and row[3] == "fp16"}
    assert by_batch[1] < by_batch[8] < by_batch[32]


def test_txt_is_one_plain_number_equal_to_the_json_total(client: Any) -> None:
    r = client.get("/v1/latency?model=resnet50&device=h200&batch=8&precision=bf16&mode=eager&format=txt")
    assert r.status_code == 200 and r.mimetype == "text/plain"
    value = float(r.get_data(as_text=True))
    single = client.post("/v1/predict", json={"model": "resnet50", "batch": 8, "precision": "bf16",
                                              "mode": "eager", "layers": False}).get_json()
    assert value == pytest.approx(single["total_ms"], abs=1e-4)


def test_txt_answers_a_grid_one_number_per_line_in_the_csvs_order(client: Any) -> None:
    query = "model=resnet50,resnet18&batch=1,8"
    lines = client.get(f"/v1/latency?{query}&format=txt").get_data(as_text=True).split("\n")
    rows = list(csv.DictReader(io.StringIO(client.get(f"/v1/latency?{query}&format=csv").get_data(as_text=True))))
    assert [float(v) for v in lines] == pytest.approx([float(r["total_ms"]) for r in rows], abs=1e-4)
    assert len(lines) == 4


def test_json_is_a_list_of_predictions_without_layers_and_defaults_apply(client: Any) -> None:
    rows = client.get("/v1/latency?model=resnet18").get_json()
    assert rows == [{**rows[0], "model": "resnet18", "device": DEVICE, "batch": load_zoo_graph("resnet18").batch,
                     "precision": "fp16", "mode": "cudagraph", "model_version": bundle_version()}]
    assert set(rows[0]) == set(CSV_COLUMNS) | {"unsupported", "warnings"}  # a prediction, as POST answers it


def test_a_stored_graph_by_id_in_a_short_url(client: Any) -> None:
    ir = load_zoo_graph("mobilenet_v2").to_json()
    ir["name"] = "my_mobilenet"
    gid = client.post("/v1/graphs", json=ir).get_json()["id"]
    url = f"/v1/latency?graph={gid}&batch=4&format=txt"
    assert len(url) < 2048
    by_id = float(client.get(url).get_data(as_text=True))
    by_name = float(client.get("/v1/latency?model=mobilenet_v2&batch=4&format=txt").get_data(as_text=True))
    assert by_id == by_name
    rows = client.get(f"/v1/latency?model=resnet18&graph={gid}&format=json").get_json()
    assert [row["model"] for row in rows] == ["resnet18", "my_mobilenet"]


def test_etag_and_cache_control_and_304(client: Any) -> None:
    url = "/v1/latency?model=resnet50&batch=1,8&format=csv"
    first = client.get(url)
    etag = first.headers["ETag"]
    assert etag.startswith('"') and "max-age=" in first.headers["Cache-Control"]
    again = client.get(url)
    assert again.headers["ETag"] == etag and again.data == first.data
    cached = client.get(url, headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.data == b"" and cached.headers["ETag"] == etag
    assert client.get(url, headers={"If-None-Match": '"other", ' + etag}).status_code == 304
    assert client.get(url, headers={"If-None-Match": '"stale"'}).status_code == 200
    # Another query (or the same query spelt in another case) has its own tag.
    assert client.get("/v1/latency?model=resnet50&batch=1,16&format=csv").headers["ETag"] != etag
    assert client.get("/v1/latency?model=RESNET50&batch=1,8&format=csv&precision=FP16").headers["ETag"] == etag


@pytest.mark.parametrize("query, field", [
    ("model=resnet50&batch=0", "batch"),
    ("model=resnet50&batch=-1", "batch"),
    ("model=resnet50&batch=99999999", "batch"),
    ("model=resnet50&batch=1,,8", "batch"),
    ("model=resnet50&precision=fp8", "precision"),
    ("model=resnet50&mode=jit", "mode"),
    ("graph=../../etc/passwd", "graph"),
    ("model=resnet50&format=xml", "format"),
])
def test_bad_parameters_are_400_naming_the_field(client: Any, query: str, field: str) -> None:
    body = assert_problem(client.get("/v1/latency?" + query), 400, field)
    if query.endswith("batch=-1"):  # a number out of range, not 'not a valid integer'
        assert "greater than or equal to 1" in body["detail"], body["detail"]


def test_no_model_and_no_graph_is_the_empty_grid(client: Any) -> None:
    """Every combination of no graphs: nothing to predict, and a header that says which columns
    a filled grid would have (a query string cannot require one of two parameters)."""
    assert client.get("/v1/latency?batch=1,8").get_json() == []
    assert client.get("/v1/latency?format=csv").get_data(as_text=True).strip() == ",".join(
        f'"{c}"' for c in CSV_COLUMNS)


@pytest.mark.parametrize("query, field", [("model=resnet50&device=tpu", "device"), ("model=no-such-net", "model"),
                                          ("graph=" + "f" * 64, "graph")])
def test_names_of_nothing_there_are_404_naming_the_field(client: Any, query: str, field: str) -> None:
    assert_problem(client.get("/v1/latency?" + query), 404, field)


def test_grid_cap(registry: Any, tmp_path: Any) -> None:
    from service.app import create_app
    from service.config import ServiceConfig

    client = create_app(ServiceConfig(graph_store=tmp_path, max_results=3), registry=registry).test_client()
    assert_problem(client.get("/v1/latency?model=resnet18&batch=1,2,4,8"), 400)
    assert client.get("/v1/latency?model=resnet18&batch=1,2,4").status_code == 200


def test_named_graphs_are_predicted_once_then_served_from_the_cache(app: Any, client: Any) -> None:
    from service.state import state

    with app.app_context():
        cache = state().predictions
    url = "/v1/latency?model=resnet50,mobilenet_v2&batch=1,8&format=json"
    first = client.get(url).get_json()
    entries = dict(cache._entries)
    assert len(entries) == 4  # two graphs x two batches
    again = client.get(url).get_json()
    assert again == first and cache._entries.keys() == entries.keys()
    assert all(cache._entries[k][1] is v[1] for k, v in entries.items())  # hits: the same objects
    body = {"model": "resnet50", "batch": 8, "layers": False}
    single = client.post("/v1/predict", json=body).get_json()
    with_layers = client.post("/v1/predict", json={**body, "layers": True}).get_json()
    assert len(with_layers["layers"]) == len(load_zoo_graph("resnet50").nodes)  # never from the cache
    assert single["total_ms"] == next(r["total_ms"] for r in first if r["model"] == "resnet50" and r["batch"] == 8)
    inline = client.post("/v1/predict", json={"graph": load_zoo_graph("resnet50").to_json(), "batch": 8,
                                              "layers": False})
    assert inline.status_code == 200 and inline.get_json()["total_ms"] == single["total_ms"]
    assert len(cache._entries) == len(entries)  # inline graphs are never cached


@pytest.mark.parametrize("batch", ["%C2%B2", "%D9%A1", "1e3", "-1"])
def test_non_ascii_or_odd_batches_are_a_400(client: Any, batch: str) -> None:
    assert_problem(client.get(f"/v1/latency?model=resnet50&batch={batch}&format=txt"), 400, "batch")


def test_the_etag_follows_the_zoo_graphs_content(app: Any, client: Any) -> None:
    from service.state import state

    url = "/v1/latency?model=resnet50&batch=8&format=txt"
    etag = client.get(url).headers["ETag"]
    with app.app_context():
        resolver = state().resolver
    graph = resolver.from_zoo("resnet50")
    resolver._digests[id(graph)] = "re-traced"  # what a new trace of the same name would change
    assert client.get(url).headers["ETag"] != etag
