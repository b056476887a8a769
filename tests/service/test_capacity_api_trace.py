"""POST /v1/capacity: the GET's plans from a JSON body, and the one way to replay a recorded load over
REST (``arrival_times``): the planner's own plan for that trace, named in each plan; the trace's own
rate without a qps; each refusal names its field; a long trace is held to the simulation budget."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from service_helpers import DEVICE, assert_problem

from predictor.capacity.load_trace import MIN_TRACE_REQUESTS, trace_from_times
from predictor.capacity.planner import plan
from predictor.capacity.service_time import predicted_service_time
from predictor.zoo import load_zoo_graph

URL = "/v1/capacity"


def spiky_times(seconds: float = 10.0) -> list[float]:
    """A log's arrival times (epoch seconds to the millisecond): 1,500 qps, and one second at 6,000."""
    rng = np.random.default_rng(8)
    base = np.cumsum(rng.exponential(1 / 1_500, int(1_800 * seconds)))
    spike = 4 + np.cumsum(rng.exponential(1 / 4_500, 6_000))
    times = np.concatenate([base[base < seconds], spike[spike < 5]])
    return [round(1.7e9 + t, 3) for t in np.sort(times)]


def test_a_body_without_a_trace_is_planned_as_the_get_plans_it(client: Any) -> None:
    body = {"model": "resnet50", "device": "h200", "qps": [500, 2000], "slo_p99_ms": 10}
    posted = client.post(URL, json=body)
    got = client.get(f"{URL}?model=resnet50&device=h200&qps=500,2000&slo_p99_ms=10")
    assert posted.status_code == got.status_code == 200, posted.get_data(as_text=True)
    assert posted.get_json() == got.get_json()
    assert all(p["arrival_trace"] is None and p["arrival_cv"] == 1.0 for p in posted.get_json())


def test_a_recorded_load_is_the_planners_plan_for_that_trace_at_each_qps(client: Any, registry: Any) -> None:
    times = spiky_times()
    trace = trace_from_times(times)
    response = client.post(URL, json={"model": "resnet50", "arrival_times": times[::-1], "slo_p99_ms": 5})
    assert response.status_code == 200, response.get_data(as_text=True)
    (own,) = response.get_json()
    latency = predicted_service_time(registry.predictor(DEVICE), load_zoo_graph("resnet50"), "fp16", "cudagraph")
    expected = plan(latency, trace.rate_qps, 5, arrival_trace=trace)
    assert own["qps"] == pytest.approx(trace.rate_qps) and own["arrival_trace"] == trace.describe()
    assert own["arrival_cv"] == pytest.approx(trace.gap_cv, abs=1e-4)
    assert (own["gpus"], own["max_batch"], own["max_queue_delay_us"]) == (
        expected.gpus, expected.max_batch, expected.max_queue_delay_us)
    assert own["p99_ms"] == pytest.approx(expected.p99_ms, rel=1e-9) and own["meets"]
    # the same shape at other loads: never fewer GPUs as the load grows
    scaled = client.post(URL, json={"model": "resnet50", "arrival_times": times, "qps": [3_000, 12_000],
                                    "slo_p99_ms": [5]}).get_json()
    assert [p["qps"] for p in scaled] == [3_000, 12_000] and scaled[0]["gpus"] <= scaled[1]["gpus"]
    assert own["gpus"] <= scaled[0]["gpus"]


def test_a_graph_as_json_ir_is_planned_from_the_body_as_its_zoo_name_is(client: Any) -> None:
    inline = client.post(URL, json={"graph": load_zoo_graph("mobilenet_v3_small").to_json(), "qps": 1000,
                                    "slo_p99_ms": 5})
    named = client.post(URL, json={"model": "mobilenet_v3_small", "qps": 1000, "slo_p99_ms": 5})
    assert inline.status_code == named.status_code == 200, inline.get_data(as_text=True)
    assert inline.get_json() == named.get_json() and named.get_json()[0]["model"] == "mobilenet_v3_small"


@pytest.mark.parametrize("change, status, field, kind", [
    ({"qps": None}, 422, "qps", "missing-load"),
    ({"qps": "100"}, 422, "qps[0]", None),
    ({"qps": [100] * 17}, 422, "qps", None),
    ({"slo_p99_ms": 0}, 422, "slo_p99_ms[0]", None),
    ({"slo_p99_ms": 0.0005}, 422, "slo_p99_ms[0]", None),  # below the GET's 0.001, as the GET refuses it
    ({"qps": [1, 2, 3, 4, 5, 6, 7, 8, 9], "slo_p99_ms": [1, 2, 3, 4, 5, 6, 7, 8]}, 422, "qps", "too-many-combinations"),
    ({"arrival_times": [0.1] * MIN_TRACE_REQUESTS}, 422, "arrival_times", "invalid-trace"),
    ({"arrival_times": [0.1, 0.2]}, 422, "arrival_times", None),
    ({"arrival_times": [float(i) for i in range(99)] + ["soon"]}, 422, "arrival_times[99]", None),
    ({"arrival_times": [i * 1e9 for i in range(200)]}, 422, "arrival_times", "invalid-trace"),
    ({"arrival_times": [float(i) for i in range(200)], "arrival_cv": 2}, 422, "arrival_cv", "conflicting-arrivals"),
    ({"device": "xeon"}, 422, "device", "not-planned"),
    ({"model": "no-such-net"}, 404, "model", None),
    ({"serving_path": "mine.json"}, 422, "serving_path", None),
    ({"max_gpus": 0}, 422, "max_gpus", None),
])
def test_each_refusal_names_its_field(client: Any, change: dict[str, Any], status: int, field: str,
                                      kind: str | None) -> None:
    body = {"model": "resnet50", "qps": 100, "slo_p99_ms": 10, **change}
    body = {k: v for k, v in body.items() if v is not None}
    problem = assert_problem(client.post(URL, json=body), status, field)
    if kind is not None:
        assert problem["type"].endswith(f":{kind}"), problem


def test_a_long_trace_is_held_to_the_simulation_budget(registry: Any, tmp_path: Any) -> None:
    from service.app import create_app
    from service.config import ServiceConfig

    small = create_app(ServiceConfig(data_dir=tmp_path, max_simulated=200_000), registry=registry).test_client()
    times = spiky_times(seconds=60.0)  # about 95,000 requests: two runs of one GPU's share are past the budget
    problem = assert_problem(small.post(URL, json={"model": "resnet50", "arrival_times": times, "slo_p99_ms": 5}),
                             422, "arrival_times")
    assert problem["type"].endswith(":work-budget") and "LATPRED_MAX_SIMULATED" in problem["detail"]


def test_limits_on_the_choices_reach_the_plans_from_the_query_and_the_body(client: Any) -> None:
    query = "/v1/capacity?model=resnet50&qps=5000&slo_p99_ms=10"
    free, limited = client.get(query), client.get(query + "&batch_limit=12&delay_limit_us=0")
    assert free.status_code == limited.status_code == 200 and free.headers["ETag"] != limited.headers["ETag"]
    (plan_,) = limited.get_json()
    assert plan_["max_batch"] <= 12 and plan_["max_queue_delay_us"] == 0
    posted = client.post(URL, json={"model": "resnet50", "qps": 5000, "slo_p99_ms": 10, "batch_limit": 12,
                                    "delay_limit_us": 0})
    assert posted.get_json() == limited.get_json()
    # under a batch limit plans weigh more instances per GPU, up to max_instances (default 4)
    one, shared = (client.get(query + f"&batch_limit=1&max_instances={k}&format=csv").get_data(as_text=True)
                   for k in (1, 4))
    assert one != shared
    alone, = client.get(query + "&batch_limit=1&max_instances=1").get_json()
    several, = client.get(query + "&batch_limit=1").get_json()
    assert alone["instances_per_gpu"] == 1 and several["instances_per_gpu"] > 1 and several["gpus"] < alone["gpus"]
    assert f"count: {several['instances_per_gpu']}" in several["triton_config"]
    assert "H100" in several["instance_sharing"] and alone["instance_sharing"] is None
    assert client.get(query + "&batch_limit=1&format=txt&value=instances_per_gpu").get_data(as_text=True).strip() == \
        str(several["instances_per_gpu"])
    assert client.post(URL, json={"model": "resnet50", "qps": 5000, "slo_p99_ms": 10, "batch_limit": 1,
                                  "max_instances": 1}).get_json() == [alone]
    assert_problem(client.get(query + "&max_instances=5"), 400, "max_instances")
    assert_problem(client.post(URL, json={"model": "resnet50", "qps": 5000, "slo_p99_ms": 10, "max_instances": "2"}),
                   422, "max_instances")
    assert_problem(client.get(query + "&batch_limit=0"), 400, "batch_limit")
    assert_problem(client.get(query + "&delay_limit_us=9000"), 400, "delay_limit_us")
    assert_problem(client.post(URL, json={"model": "resnet50", "qps": 5000, "slo_p99_ms": 10, "batch_limit": "12"}),
                   422, "batch_limit")


def test_a_graph_that_cannot_run_at_the_precision_is_refused_by_name_under_a_batch_limit(client: Any) -> None:
    # the instances' memory is estimated only after the predictions, which name the graph's problem
    graph = load_zoo_graph("resnet18").to_json()
    for node in graph["nodes"]:
        node["precisions"] = ["fp32"]
    for limit in ({}, {"batch_limit": 4}):
        assert_problem(client.post(URL, json={"graph": graph, "precision": "fp16", "qps": 100, "slo_p99_ms": 10,
                                              **limit}), 422, "model")
