"""The work budget (issue #13): a request's work, nodes x variants with new kernels weighted, is
estimated before anything is predicted, and a request over ``LATPRED_MAX_WORK`` is refused with a
problem that names it, while every documented use fits under the default."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from service_helpers import DEVICE, assert_problem

import predictor.predict as predict_module
from predictor.graph import Graph
from predictor.predict import Predictor
from predictor.variant import Variant
from service import work_budget
from service.app import create_app
from service.config import DEFAULT_MAX_WORK, ServiceConfig
from service.predictions import resolve_variant
from service.registry import ModelRegistry
from service.work_budget import KERNEL_WEIGHT

#: kernel shapes no other test asks for, a fresh one per call: a test that needs kernels the
#: session's predictor has not evaluated yet takes them from here
_FRESH = itertools.count(10_007)


def linear_chain(nodes: int, distinct: bool = True, name: str = "chain") -> dict[str, Any]:
    """A chain of linear layers as JSON IR: every node a kernel configuration of its own (never
    asked before in this session), or, with ``distinct`` false, one configuration repeated."""
    first = next(_FRESH)
    widths = [next(_FRESH) for _ in range(nodes - 1)] if distinct else []
    return {"name": name, "nodes": [{"name": f"fc{i}", "op": "linear", "kind": "kernel", "family": "linear",
                                     "params": {"tokens": 3, "k": ([first] + widths)[i] if distinct else first,
                                                "n": 96}} for i in range(nodes)]}


def nas_cnn(rng: random.Random, nodes: int = 100) -> dict[str, Any]:
    """A NAS candidate of ``nodes`` nodes as JSON IR: conv, batch norm, ReLU blocks with widths,
    kernels and strides drawn anew, so most of its kernel configurations are new."""
    out: list[dict[str, Any]] = []
    c, size = 3, rng.choice((96, 128, 160, 224))

    def add(op: str, family: str, variant: str = "", layout: str = "contiguous", **params: int) -> None:
        out.append({"name": f"{len(out)}:{op}", "op": op, "kind": "kernel", "family": family, "variant": variant,
                    "layout": layout, "params": params})

    while len(out) < nodes:
        width, kernel = rng.randrange(2, 41) * 8, rng.choice((1, 3, 5))
        stride = 2 if size > 8 and rng.random() < 0.2 else 1
        add("conv2d", "conv2d", "nobias", "nchw", c_in=c, c_out=width, h=size, w=size, kernel=kernel,
            stride=stride, groups=1)
        c, size = width, (size + 2 * (kernel // 2) - kernel) // stride + 1
        add("batch_norm", "batch_norm", layout="nchw", c=c, h=size, w=size)
        add("relu", "activation", "relu", elements=c * size * size)
    return {"name": f"nas-{rng.random():.6f}", "nodes": out[:nodes]}


def variants(registry: ModelRegistry, *specs: tuple[int, str, str]) -> list[Any]:
    return [resolve_variant(registry, Variant(device=DEVICE, batch=b, precision=p, mode=m)) for b, p, m in specs]


def app_with(config: ServiceConfig, registry: ModelRegistry, **changes: Any) -> Any:
    fields = {k: getattr(config, k) for k in ("data_dir", "graph_store", "host_store", "open_writes")}
    return create_app(ServiceConfig(**{**fields, **changes}), registry=registry).test_client()


# ------------------------------------------------------------------------ what passes by default

def test_the_readmes_examples_fit_the_default_budget(client: Any) -> None:
    r = client.post("/v1/predict", json={"model": "resnet50", "batch": 8, "precision": "fp16", "mode": "cudagraph"})
    assert r.status_code == 200, r.get_json()
    r = client.get("/v1/latency?model=resnet50,bert-base&batch=1,8,32&mode=eager,cudagraph&format=csv")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    assert len(r.get_data(as_text=True).strip().splitlines()) == 1 + 12
    assert client.get("/v1/latency?model=resnet50&batch=8&format=txt").status_code == 200


def test_a_nas_batch_of_new_graphs_fits_the_default_budget(client: Any, registry: ModelRegistry) -> None:
    rng = random.Random(13)
    graphs = [nas_cnn(rng) for _ in range(100)]
    specs = [(1, "fp16", "cudagraph"), (8, "fp16", "cudagraph"), (1, "fp32", "eager"), (32, "bf16", "eager")]
    work = work_budget.estimate([Graph.from_json(g) for g in graphs], variants(registry, *specs))
    assert work.nodes == 100 * 100 * 4 and work.new_kernels > 10_000  # mostly new: a cold NAS batch
    r = client.post("/v1/predict/batch", json={
        "graphs": [{"graph": g} for g in graphs], "layers": False,
        "variants": [{"batch": b, "precision": p, "mode": m} for b, p, m in specs]})
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["count"] == 400 and r.get_json()["failed"] == 0


def test_one_graph_at_the_node_cap_fits_the_default_budget() -> None:
    """What LATPRED_MAX_NODES lets in can be predicted once, even with every kernel new."""
    config = ServiceConfig()
    assert config.max_work == DEFAULT_MAX_WORK
    assert config.max_nodes * (1 + KERNEL_WEIGHT) <= config.max_work


# ------------------------------------------------------------------------ what is refused

def test_distinct_nodes_times_many_batches_is_refused_before_any_prediction(client: Any,
                                                                            registry: ModelRegistry) -> None:
    ir = linear_chain(5_000, name="wide")
    r = client.post("/v1/predict/batch", json={"graphs": [{"graph": ir}],
                                               "variants": [{"batch": b} for b in range(1, 41)]})
    body = assert_problem(r, 422, "graphs")
    assert body["type"] == "urn:latpred:problem:work-budget"
    assert body["max_work"] == DEFAULT_MAX_WORK
    assert body["nodes"] == 200_000 and body["new_kernels"] == 200_000
    assert body["work"] == 200_000 + KERNEL_WEIGHT * 200_000 > body["max_work"]
    assert "LATPRED_MAX_WORK" in body["detail"] and "LATPRED_MAX_RESULTS" in body["detail"]
    assert "/v1/predict/batch" in body["detail"]
    # nothing was evaluated: every one of its kernels is still new to the predictor
    predictor = registry.predictor(DEVICE)
    assert predictor is not None
    assert predictor.new_kernels([(Graph.from_json(ir), b, "fp16", "cudagraph") for b in (1, 40)]) == \
        (10_000, 10_000)


def test_a_spreadsheet_grid_over_the_budget_is_a_bad_request(client: Any) -> None:
    gid = client.post("/v1/graphs", json=linear_chain(5_000, name="wide-stored")).get_json()["id"]
    r = client.get(f"/v1/latency?graph={gid}&batch={','.join(map(str, range(1, 41)))}&format=csv")
    body = assert_problem(r, 400, "batch")
    assert body["type"] == "urn:latpred:problem:work-budget" and body["work"] > body["max_work"]
    assert "LATPRED_MAX_WORK" in body["detail"]


def test_one_graph_over_the_budget_names_its_source(config: ServiceConfig, registry: ModelRegistry) -> None:
    client = app_with(config, registry, max_work=100)
    body = assert_problem(client.post("/v1/predict", json={"graph": linear_chain(50)}), 422, "graph")
    assert body["work"] == 50 * (1 + KERNEL_WEIGHT) and body["max_work"] == 100
    assert "one graph on one variant" in body["detail"] and "LATPRED_MAX_WORK" in body["detail"]


def test_just_under_the_budget_passes_and_just_over_is_refused(config: ServiceConfig,
                                                               registry: ModelRegistry) -> None:
    """Ten nodes sharing one configuration, at two batches: 20 nodes composed and 2 kernels new."""
    expected = 20 + KERNEL_WEIGHT * 2
    under = app_with(config, registry, max_work=expected)
    over = app_with(config, registry, max_work=expected - 1)
    for client, status in ((under, 200), (over, 422)):
        ir = linear_chain(10, distinct=False)  # fresh shapes each time: its kernels are new
        graph = Graph.from_json(ir)
        assert work_budget.estimate([graph], variants(registry, (1, "fp16", "cudagraph"),
                                                      (2, "fp16", "cudagraph"))).units == expected
        r = client.post("/v1/predict/batch", json={"graphs": [{"graph": ir}],
                                                   "variants": [{"batch": 1, "precision": "fp16"},
                                                                {"batch": 2, "precision": "fp16"}]})
        if status == 200:
            assert r.status_code == 200 and r.get_json()["failed"] == 0, r.get_json()
        else:
            body = assert_problem(r, 422, "graphs")
            assert body["work"] == expected and body["max_work"] == expected - 1


# ------------------------------------------------------------------------ the discount

def test_kernels_already_evaluated_are_discounted(config: ServiceConfig, registry: ModelRegistry) -> None:
    ir = linear_chain(30)
    graph = Graph.from_json(ir)
    variant = variants(registry, (4, "bf16", "cudagraph"))
    before = work_budget.estimate([graph], variant)
    assert (before.nodes, before.kernels, before.new_kernels) == (30, 30, 30)
    # a budget the request fits only once its kernels are known: refused, then answered
    small = app_with(config, registry, max_work=30)
    request = {"graph": ir, "batch": 4, "precision": "bf16", "layers": False}
    assert_problem(small.post("/v1/predict", json=request), 422, "graph")
    big = app_with(config, registry)
    assert big.post("/v1/predict", json=request).status_code == 200
    after = work_budget.estimate([graph], variant)
    assert (after.nodes, after.kernels, after.new_kernels) == (30, 30, 0)
    assert after.units == 30 < before.units
    assert small.post("/v1/predict", json=request).status_code == 200


def test_kernels_counted_as_evaluated_are_not_evaluated_again_near_the_cache_limit(
        registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """The discount holds only if the predictor keeps what it counted: a full cache starts again
    keeping the kernels the request uses, rather than evaluating them anew."""
    served = registry.predictor(DEVICE)
    assert served is not None
    predictor = Predictor(served.bundle, served.device)
    monkeypatch.setattr(predict_module, "CACHE_LIMIT", 100)
    evaluated: list[Any] = []
    features = predict_module.features_and_cold_weight
    monkeypatch.setattr(predict_module, "features_and_cold_weight",
                        lambda *args: evaluated.append(args) or features(*args))
    known, fresh = Graph.from_json(linear_chain(60)), Graph.from_json(linear_chain(50))
    predictor.prefetch([(known, 1, "fp16", "cudagraph")])
    assert len(evaluated) == 60 and predictor.new_kernels([(known, 1, "fp16", "cudagraph")]) == (60, 0)
    predictor.prefetch([(known, 1, "fp16", "cudagraph")])  # 60 cached + 60 asked: over the limit of 100
    assert len(evaluated) == 60
    both = [(known, 1, "fp16", "cudagraph"), (fresh, 1, "fp16", "cudagraph")]
    assert predictor.new_kernels(both) == (110, 50)
    predictor.prefetch(both)  # 60 cached + 50 new: the cache starts again with all 110
    predictor.predict(known, 1, "fp16", "cudagraph")
    predictor.predict(fresh, 1, "fp16", "cudagraph")
    assert len(evaluated) == 110


# ------------------------------------------------------------------------ configuration and document

def test_the_budget_is_read_from_the_environment() -> None:
    assert ServiceConfig.from_env({"LATPRED_MAX_WORK": "12345"}).max_work == 12_345
    assert ServiceConfig.from_env({}).max_work == DEFAULT_MAX_WORK
    with pytest.raises(ValueError, match="LATPRED_MAX_WORK"):
        ServiceConfig.from_env({"LATPRED_MAX_WORK": "0"})


def test_the_document_states_the_budget(config: ServiceConfig, registry: ModelRegistry) -> None:
    spec = app_with(config, registry, max_work=777_000).get("/openapi.json").get_json()
    for path, method, status in (("/v1/predict", "post", "422"), ("/v1/predict/batch", "post", "422"),
                                 ("/v1/latency", "get", "400")):
        op = spec["paths"][path][method]
        assert op["x-latpred-max-work"] == 777_000
        assert "777,000" in op["responses"][status]["description"]
        assert "LATPRED_MAX_WORK" in op["responses"][status]["description"]
