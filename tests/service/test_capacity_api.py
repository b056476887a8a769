"""GET /v1/capacity: a real plan for resnet50 on the H200 (the planner's own answer for the bundle's
predictions), the csv grid and txt numbers, GPUs and p99 that grow with the load, an objective out of
reach answered with 200, each refusal naming its field, the grid's simulation budget, ETags."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from service_helpers import DEVICE, assert_problem, bundle_version

from predictor.capacity.planner import DELAY_US_CHOICES, MAX_BATCH_CHOICES, plan
from predictor.capacity.service_time import predicted_service_time
from predictor.zoo import load_zoo_graph
from service.schemas.capacity import CSV_COLUMNS

URL = "/v1/capacity?model=resnet50&device=h200"


def rows_of(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200 and response.mimetype == "text/csv", response.get_data(as_text=True)[:500]
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))


def test_a_real_plan_for_resnet50_on_the_h200_is_the_planners_answer_for_the_predicted_latency(
        client: Any, registry: Any) -> None:
    response = client.get(f"{URL}&qps=2000&slo_p99_ms=10")
    assert response.status_code == 200 and response.mimetype == "application/json"
    [served] = response.get_json()
    assert served["meets"] is True and served["reason"] == ""
    assert (served["model"], served["device"], served["precision"], served["mode"]) == (
        "resnet50", DEVICE, "fp16", "cudagraph")
    assert served["model_version"] == bundle_version() and served["host"] is None
    assert served["instances_per_gpu"] == 1 and served["gpus"] >= 1
    assert served["max_batch"] in MAX_BATCH_CHOICES and served["max_queue_delay_us"] in DELAY_US_CHOICES
    assert 0 < served["p50_ms"] <= served["p99_ms"] <= 10
    assert served["throughput_qps"] == pytest.approx(2000, rel=0.05)
    assert 0 < served["utilisation"] <= 1
    assert served["triton_config"].splitlines() == [
        f"max_batch_size: {served['max_batch']}", "dynamic_batching {",
        f"  max_queue_delay_microseconds: {served['max_queue_delay_us']}", "}"]
    # the same plan in process, from the same bundle's predictions: the service adds nothing to it
    latency = predicted_service_time(registry.predictor(DEVICE), load_zoo_graph("resnet50"), "fp16", "cudagraph")
    expected = plan(latency, 2000, 10)
    assert (served["gpus"], served["max_batch"], served["max_queue_delay_us"]) == (
        expected.gpus, expected.max_batch, expected.max_queue_delay_us)
    assert served["p99_ms"] == pytest.approx(expected.p99_ms, rel=1e-9)
    assert served["simulated_requests"] == expected.simulated_requests
    # and its p99 range, from the ends of the predictions' intervals
    assert served["p99_low_ms"] < served["p99_ms"] < served["p99_high_ms"]
    assert (served["p99_low_ms"], served["p99_high_ms"]) == pytest.approx(
        (expected.p99_low_ms, expected.p99_high_ms), rel=1e-9)


def test_csv_is_a_header_and_one_row_per_qps_and_objective_in_order(client: Any) -> None:
    rows = rows_of(client.get(f"{URL}&qps=500, 5000&slo_p99_ms=5,20&format=csv"))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert [(float(r["qps"]), float(r["slo_p99_ms"])) for r in rows] == [(500, 5), (500, 20), (5000, 5), (5000, 20)]
    for row in rows:
        assert row["meets"] == "true" and row["reason"] == "" and row["host"] == ""
        assert float(row["p50_ms"]) <= float(row["p99_ms"]) <= float(row["slo_p99_ms"])
        assert row["triton_config"] == (f"max_batch_size: {row['max_batch']} dynamic_batching {{ "
                                        f"max_queue_delay_microseconds: {row['max_queue_delay_us']} }}")
        assert int(row["instances_per_gpu"]) == 1 and row["model_version"] == bundle_version()
    # a looser objective at the same load never needs more GPUs
    assert int(rows[1]["gpus"]) <= int(rows[0]["gpus"]) and int(rows[3]["gpus"]) <= int(rows[2]["gpus"])


def test_txt_is_one_number_per_combination_in_the_csvs_order(client: Any) -> None:
    query = f"{URL}&qps=500,5000&slo_p99_ms=5,20"
    rows = rows_of(client.get(f"{query}&format=csv"))
    gpus = client.get(f"{query}&format=txt")
    assert gpus.status_code == 200 and gpus.mimetype == "text/plain"
    assert gpus.get_data(as_text=True).split("\n") == [r["gpus"] for r in rows]
    batches = client.get(f"{query}&format=txt&value=max_batch").get_data(as_text=True).split("\n")
    assert batches == [r["max_batch"] for r in rows]
    p99 = client.get(f"{query}&format=txt&value=p99_ms").get_data(as_text=True).split("\n")
    assert [float(v) for v in p99] == pytest.approx([float(r["p99_ms"]) for r in rows], abs=1e-4)
    assert client.get(f"{query}&format=txt&value=meets").get_data(as_text=True).split("\n") == ["1"] * 4
    high = client.get(f"{query}&format=txt&value=p99_high_ms").get_data(as_text=True).split("\n")
    assert [float(v) for v in high] == pytest.approx([float(r["p99_high_ms"]) for r in rows], abs=1e-4)
    assert all(float(r["p99_low_ms"]) <= float(r["p99_ms"]) <= float(r["p99_high_ms"]) for r in rows)


def test_gpus_and_p99_never_fall_as_the_load_grows_at_one_objective(client: Any) -> None:
    loads = [250, 1000, 4000, 16000, 64000]
    rows = rows_of(client.get(f"{URL}&qps={','.join(map(str, loads))}&slo_p99_ms=10&format=csv"))
    assert [float(r["qps"]) for r in rows] == loads
    assert all(r["meets"] == "true" for r in rows)
    gpus = [int(r["gpus"]) for r in rows]
    p99 = [float(r["p99_ms"]) for r in rows]
    assert gpus == sorted(gpus) and gpus[-1] > gpus[0]
    assert p99 == sorted(p99) and p99[-1] > p99[0]
    assert [float(r["throughput_qps"]) for r in rows] == pytest.approx(loads, rel=0.05)


def test_an_objective_nobody_meets_is_answered_with_the_reason_and_the_nearest_plan(client: Any) -> None:
    # resnet50 takes about 0.9 ms at batch 1: no number of GPUs gets a p99 of 0.5 ms
    response = client.get(f"{URL}&qps=1000&slo_p99_ms=0.5&max_gpus=4")
    assert response.status_code == 200
    [best] = response.get_json()
    assert best["meets"] is False and "fastest batch" in best["reason"] and "0.5 ms" in best["reason"]
    assert best["gpus"] == 4 and best["p99_ms"] > 0.5 and "max_batch_size" in best["triton_config"]
    # a load more GPUs than max_gpus could serve
    [short] = client.get(f"{URL}&qps=1000000&slo_p99_ms=10&max_gpus=2").get_json()
    assert short["meets"] is False and "max_gpus=2" in short["reason"] and short["gpus"] == 2
    assert client.get(f"{URL}&qps=1000&slo_p99_ms=0.5&max_gpus=4&format=txt&value=meets").get_data(
        as_text=True) == "0"


def test_an_eager_plan_names_its_host_and_a_stored_graph_is_planned_by_its_id(client: Any) -> None:
    [eager] = client.get(f"{URL}&qps=300&slo_p99_ms=20&mode=EAGER").get_json()
    assert eager["mode"] == "eager" and eager["host"] and eager["meets"] is True
    ir = load_zoo_graph("mobilenet_v2").to_json()
    ir["name"] = "my_mobilenet"
    gid = client.post("/v1/graphs", json=ir).get_json()["id"]
    by_id = rows_of(client.get(f"/v1/capacity?model={gid}&qps=1000&slo_p99_ms=10&format=csv"))
    by_name = rows_of(client.get("/v1/capacity?model=mobilenet_v2&qps=1000&slo_p99_ms=10&format=csv"))
    assert by_id[0]["model"] == "my_mobilenet"
    assert {k: v for k, v in by_id[0].items() if k != "model"} == {k: v for k, v in by_name[0].items() if k != "model"}


@pytest.mark.parametrize("query, status, field", [
    ("qps=0&slo_p99_ms=10", 400, "qps"),
    ("qps=-5&slo_p99_ms=10", 400, "qps"),
    ("qps=nan&slo_p99_ms=10", 400, "qps"),
    ("qps=20000000&slo_p99_ms=10", 400, "qps"),  # above the simulator's MAX_RATE_QPS
    ("qps=1e3&slo_p99_ms=10", 400, "qps"),  # not a plain decimal
    ("qps=100,,200&slo_p99_ms=10", 400, "qps"),
    ("qps=" + ",".join(["100"] * 17) + "&slo_p99_ms=10", 400, "qps"),
    ("qps=" + ",".join(["100"] * 9) + "&slo_p99_ms=" + ",".join(["10"] * 8), 400, "qps"),  # 72 combinations
    ("qps=100&slo_p99_ms=" + ",".join(["10"] * 9) + "&max_gpus=2&model=resnet50", 200, None),  # 9: within
    ("qps=100&slo_p99_ms=0", 400, "slo_p99_ms"),
    ("qps=100&slo_p99_ms=-1", 400, "slo_p99_ms"),
    ("qps=100&slo_p99_ms=inf", 400, "slo_p99_ms"),
    ("qps=100&slo_p99_ms=5000000", 400, "slo_p99_ms"),  # over an hour: a unit mistake
    ("slo_p99_ms=10", 400, "qps"),
    ("qps=100", 400, "slo_p99_ms"),
    ("qps=100&slo_p99_ms=10&max_gpus=0", 400, "max_gpus"),
    ("qps=100&slo_p99_ms=10&max_gpus=100001", 400, "max_gpus"),
    ("qps=100&slo_p99_ms=10&arrival_cv=0", 400, "arrival_cv"),
    ("qps=100&slo_p99_ms=10&arrival_cv=-1", 400, "arrival_cv"),
    ("qps=100&slo_p99_ms=10&arrival_cv=abc", 400, "arrival_cv"),
    ("qps=100&slo_p99_ms=10&arrival_cv=nan", 400, "arrival_cv"),
    ("qps=100&slo_p99_ms=10&arrival_cv=11", 400, "arrival_cv"),
    ("qps=100&slo_p99_ms=10&precision=fp8", 400, "precision"),
    ("qps=100&slo_p99_ms=10&mode=jit", 400, "mode"),
    ("qps=100&slo_p99_ms=10&format=xml", 400, "format"),
    ("qps=100&slo_p99_ms=10&value=cost", 400, "value"),
    ("qps=100&slo_p99_ms=10&model=no-such-net", 404, "model"),
    ("qps=100&slo_p99_ms=10&model=" + "f" * 64, 404, "model"),
    ("qps=100&slo_p99_ms=10&device=tpu", 404, "device"),
    ("qps=100&slo_p99_ms=10&mode=eager&host=no-such-host-1", 404, "host"),
])
def test_each_refusal_names_its_field(client: Any, query: str, status: int, field: str | None) -> None:
    if "model=" not in query:
        query += "&model=resnet50"
    response = client.get(f"/v1/capacity?{query}")
    if status == 200:
        assert response.status_code == 200 and len(response.get_json()) == 9
        return
    assert_problem(response, status, field)


def test_a_grid_over_the_simulation_budget_is_refused_naming_the_budget(registry: Any, tmp_path: Any) -> None:
    from service.app import create_app
    from service.config import ServiceConfig

    small = create_app(ServiceConfig(data_dir=tmp_path, max_simulated=200_000), registry=registry).test_client()
    body = assert_problem(small.get(f"{URL}&qps=500,2000&slo_p99_ms=10"), 400, "qps")
    assert body["type"].endswith(":work-budget") and body["max_simulated"] == 200_000
    assert "LATPRED_MAX_SIMULATED" in body["detail"] and body["simulated"] >= 200_000


def test_etag_and_cache_control_and_304(client: Any) -> None:
    url = f"{URL}&qps=800&slo_p99_ms=10&format=csv"
    first = client.get(url)
    etag = first.headers["ETag"]
    assert etag.startswith('"') and "max-age=" in first.headers["Cache-Control"]
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert client.get(f"{URL}&qps=800&slo_p99_ms=20&format=csv").headers["ETag"] != etag


def test_a_plan_for_the_slow_end_holds_at_the_high_end_of_the_intervals(client: Any) -> None:
    """plan_for=slow_end: each plan is made for the high ends of the predictions' intervals (its
    p99 is its range's high end, within the objective), never on fewer GPUs, says so in its row,
    and is cached apart from the plan for the medians."""
    query = f"{URL}&qps=2000,6000&slo_p99_ms=2.5"
    median = client.get(query)
    slow = client.get(query + "&plan_for=slow_end")
    assert slow.status_code == 200 and slow.headers["ETag"] != median.headers["ETag"]
    for m, s in zip(median.get_json(), slow.get_json()):
        assert (m["plan_for"], s["plan_for"]) == ("median", "slow_end")
        assert s["meets"] and s["p99_ms"] == pytest.approx(s["p99_high_ms"], rel=1e-12) and s["p99_ms"] <= 2.5
        assert s["gpus"] >= m["gpus"]
    rows = rows_of(client.get(query + "&plan_for=slow_end&format=csv"))
    assert {r["plan_for"] for r in rows} == {"slow_end"}
    bad = client.get(query + "&plan_for=fast_end")
    assert bad.status_code == 400 and "plan_for" in bad.get_data(as_text=True)


def test_a_plan_simulates_tritons_code_unless_the_documented_rule_is_asked_for(client: Any) -> None:
    """The default (scheduler=triton) models a batch sent after its queue delay waiting behind the
    running one, which makes a delay cost more than Triton's documented rule says: at 3,000 qps and
    p99 5 ms the rule's plan takes a 1 ms delay and Triton's code's none (the planner benchmark's
    resnet50 row). Each says which it is, and the two are cached apart."""
    query = f"{URL}&qps=3000&slo_p99_ms=5"
    code, rule = client.get(query), client.get(query + "&scheduler=rule")
    assert code.status_code == rule.status_code == 200 and code.headers["ETag"] != rule.headers["ETag"]
    (c,), (r,) = code.get_json(), rule.get_json()
    assert (c["scheduler"], r["scheduler"]) == ("triton", "rule")
    assert c["max_queue_delay_us"] == 0 < r["max_queue_delay_us"]
    assert rows_of(client.get(query + "&scheduler=rule&format=csv"))[0]["scheduler"] == "rule"
    bad = client.get(query + "&scheduler=fifo")
    assert bad.status_code == 400 and "scheduler" in bad.get_data(as_text=True)


def test_a_precision_the_device_lacks_is_refused_naming_precision(client: Any) -> None:
    # a T4 has no bf16 tensor cores: the request's precision is at fault, not its model
    for url in ("/v1/capacity?model=resnet50&device=t4&precision=bf16&qps=10&slo_p99_ms=100",
                "/v1/latency?model=resnet50&device=t4&precision=bf16"):
        body = assert_problem(client.get(url), 400, "precision")
        assert "no bf16 tensor cores" in body["detail"]


def test_bursty_arrivals_are_planned_named_in_each_plan_and_cached_apart(client: Any, registry: Any) -> None:
    """arrival_cv=3: the planner's own plan for that cv (2 GPUs where Poisson takes 1 at 2,000 qps and
    p99 5 ms), each plan saying the cv it was made for, in the json and in the csv's last column (new
    columns go last: sheets read them by position); 1 is the default and Poisson's plan."""
    query = f"{URL}&qps=2000&slo_p99_ms=5"
    poisson, one, bursty = client.get(query), client.get(query + "&arrival_cv=1"), client.get(query + "&arrival_cv=3")
    assert poisson.status_code == one.status_code == bursty.status_code == 200
    assert one.headers["ETag"] == poisson.headers["ETag"] != bursty.headers["ETag"]
    (p,), (b,) = poisson.get_json(), bursty.get_json()
    assert (p["arrival_cv"], b["arrival_cv"]) == (1.0, 3.0) and one.get_json() == poisson.get_json()
    assert b["meets"] and (b["gpus"] > p["gpus"] or (b["gpus"] == p["gpus"] and b["p99_ms"] > p["p99_ms"]))
    latency = predicted_service_time(registry.predictor(DEVICE), load_zoo_graph("resnet50"), "fp16", "cudagraph")
    expected = plan(latency, 2000, 5, arrival_cv=3)
    assert (b["gpus"], b["max_batch"], b["max_queue_delay_us"]) == (
        expected.gpus, expected.max_batch, expected.max_queue_delay_us)
    assert b["p99_ms"] == pytest.approx(expected.p99_ms, rel=1e-9)
    assert CSV_COLUMNS[-1] == "arrival_cv" and CSV_COLUMNS[:-1][-3:] == ("plan_for", "scheduler", "serving_path")
    header, row = csv.reader(io.StringIO(client.get(query + "&arrival_cv=3&format=csv").get_data(as_text=True)))
    assert header == list(CSV_COLUMNS) and row[-1] == "3.0000"
    assert rows_of(client.get(query + "&format=csv"))[0]["arrival_cv"] == "1.0000"
