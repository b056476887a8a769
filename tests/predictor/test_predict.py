"""Whole-model prediction with the committed H200 bundle, and the composition per mode."""

from __future__ import annotations

from dataclasses import replace

import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.compose import SHORT_KERNEL_CAP_US
from predictor.devices import resolve_device
from predictor.graph import CAST_OPS, Graph, Node
from predictor.host_profile import HostProfile
from predictor.predict import FALLBACK_BANDWIDTH_SHARE, Predictor
from predictor.variant import MAX_BATCH
from predictor.zoo import load_zoo_graph

#: a host whose kinds all cost differently, so a node costed at the wrong kind shows
TEST_HOST = HostProfile.model_validate({
    "schema_version": 1, "id": "test-host", "label": "measured", "cpu_model": "test CPU", "cpu_cores": 8,
    "measured_at": "2026-01-01T00:00:00+00:00",
    "costs_us": {"elementwise": 7.0, "gemm": 11.5, "conv": 13.0, "norm": 10.25, "attention": 16.5, "view": 0.6,
                 "copy": 9.0, "module_call": 0.9}})


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))


@pytest.fixture(scope="module")
def resnet50() -> Graph:
    return load_zoo_graph("resnet50")


@pytest.mark.parametrize("name", ["resnet50", "bert-base", "mobilenet_v2"])
@pytest.mark.parametrize("mode", ["cudagraph", "eager"])
def test_prediction_is_complete_and_consistent(predictor: Predictor, name: str, mode: str) -> None:
    graph = load_zoo_graph(name)
    result = predictor.predict(graph, 4, "fp16", mode)
    assert result.low_ms <= result.total_ms <= result.high_ms
    assert result.low_ms < result.high_ms
    assert (result.model, result.device, result.batch, result.precision, result.mode) == (
        name, "nvidia-h200", 4, "fp16", mode)
    assert result.model_version == predictor.bundle.version
    assert len(result.layers) == len(graph.nodes)
    assert [layer.name for layer in result.layers] == [n.name for n in graph.nodes]
    for layer in result.layers:
        if layer.kind == "kernel":
            assert 0 < layer.low_us <= layer.kernel_us <= layer.high_us
        elif layer.kind == "free":
            assert layer.kernel_us == layer.low_us == layer.high_us == 0.0
        assert layer.host_us >= 0
    kernels = [layer.kernel_us for layer in result.layers]
    if mode == "cudagraph":
        c = predictor.constants
        launched = [k for k in kernels if k > 0]
        assert result.total_ms * 1e3 == pytest.approx(sum(launched) + c.gap_us * len(launched) + c.replay_us)
    assert result.total_ms * 1e3 >= sum(kernels) * (1 - 1e-12)  # equal, summed in another order, where no gap is fitted


def test_graph_batch_is_the_default(predictor: Predictor, resnet50: Graph) -> None:
    assert resnet50.batch == 1
    assert predictor.predict(resnet50).total_ms == predictor.predict(resnet50, 1).total_ms
    assert predictor.predict(resnet50).batch == 1


def test_doubling_batch_costs_more_in_a_cuda_graph(predictor: Predictor, resnet50: Graph) -> None:
    b32 = predictor.predict(resnet50, 32, "fp16", "cudagraph").total_ms
    b64 = predictor.predict(resnet50, 64, "fp16", "cudagraph").total_ms
    assert b64 > 1.3 * b32
    assert b64 < 2.5 * b32


def test_repeated_predictions_are_identical(predictor: Predictor, resnet50: Graph) -> None:
    first = predictor.predict(resnet50, 16, "bf16", "eager")
    predictor.predict(resnet50, 8, "bf16", "eager")  # fills the cache with other entries
    again = predictor.predict(resnet50, 16, "bf16", "eager")
    assert again.to_json() == first.to_json()


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_eager_is_host_bound_at_batch_one(predictor: Predictor, resnet50: Graph, precision: str) -> None:
    eager = predictor.predict(resnet50, 1, precision, "eager")
    graph = predictor.predict(resnet50, 1, precision, "cudagraph")
    assert eager.total_ms >= graph.total_ms
    host = sum(layer.host_us for layer in eager.layers)
    assert eager.total_ms * 1e3 >= host  # eager can never beat issuing the calls


@pytest.mark.parametrize("kwargs,message", [
    ({"batch": 0}, "batch"),
    ({"batch": -1}, "batch"),
    ({"batch": 10**9}, "batch"),
    ({"batch": MAX_BATCH + 1}, "batch"),
    ({"batch": 2.5}, "batch"),
    ({"batch": True}, "batch"),
    ({"precision": "fp8"}, "precision: Input should be 'fp32', 'tf32', 'fp16' or 'bf16', got 'fp8'"),
    ({"precision": "FP16"}, "precision: .*got 'FP16'"),
    ({"mode": "jit"}, "mode: Input should be 'eager' or 'cudagraph', got 'jit'"),
])
def test_bad_requests_are_refused_naming_the_field(predictor: Predictor, resnet50: Graph,
                                                   kwargs: dict, message: str) -> None:
    args = {"batch": 2, "precision": "fp16", "mode": "cudagraph", **kwargs}
    with pytest.raises(ValueError, match=message):
        predictor.predict(resnet50, **args)


def hand_graph() -> Graph:
    graph = Graph(name="hand", batch=2, nodes=[
        Node(name="fc", op="linear", kind="kernel", family="linear", params={"tokens": 16, "k": 64, "n": 64}),
        Node(name="view", op="view", kind="free"),
        Node(name="roll", op="roll", kind="fallback", elements_per_sample=1 << 22),
        Node(name="roll2", op="roll", kind="fallback", elements_per_sample=8),
        Node(name="scan", op="cumsum", kind="fallback", elements_per_sample=4096),
        Node(name="act", op="gelu", kind="kernel", family="activation", variant="gelu",
             params={"elements": 1024}),
    ])
    return graph


def test_fallback_nodes_are_costed_and_listed_never_dropped(predictor: Predictor) -> None:
    graph = hand_graph()
    result = predictor.predict(graph, 2, "fp16", "cudagraph")
    assert len(result.layers) == len(graph.nodes)
    assert result.unsupported == [
        {"op": "roll", "count": 2, "costed_as": "roofline on bytes moved"},
        {"op": "cumsum", "count": 1, "costed_as": "roofline on bytes moved"},
    ]
    assert len(result.warnings) == 1 and "3 call(s) of 2 op type(s)" in result.warnings[0]
    layers = {layer.name: layer for layer in result.layers}
    c = predictor.constants
    scale = c.scale(None, "fallback")
    # a big fallback is the bytes at the device's bandwidth; a small one the floor
    big = (1 << 22) * 2 * 2 / (FALLBACK_BANDWIDTH_SHARE * predictor.device.memory_bandwidth) * 1e6
    assert layers["roll"].kernel_us == pytest.approx(max(big, c.min_kernel_us) * scale)
    assert layers["roll2"].kernel_us == pytest.approx(c.min_kernel_us * scale)
    assert layers["roll"].low_us < layers["roll"].kernel_us < layers["roll"].high_us
    assert layers["view"].kernel_us == 0.0
    # the total holds every layer's kernel time (equal to their sum, to rounding, with no gap fitted)
    assert result.total_ms * 1e3 >= sum(layer.kernel_us for layer in result.layers) * (1 - 1e-12)


def test_a_graph_without_fallbacks_has_no_warning(predictor: Predictor, resnet50: Graph) -> None:
    result = predictor.predict(resnet50, 2, "fp16")
    assert result.unsupported == [] and result.warnings == []


def test_to_json_without_layers(predictor: Predictor) -> None:
    data = predictor.predict(hand_graph(), 2).to_json(with_layers=False)
    assert "layers" not in data and data["unsupported"][0]["op"] == "roll"


def test_predictor_refuses_a_bundle_of_another_device() -> None:
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200")
    bundle.metadata = {**bundle.metadata, "device_id": "nvidia-a100"}
    with pytest.raises(ValueError, match="nvidia-a100"):
        Predictor(bundle, resolve_device("h200"))


def test_layers_apply_the_in_model_terms_and_the_host_of_each_kind(predictor: Predictor) -> None:
    """Kernel time inside a model is scale x alone + the short-kernel share; on the host asked for,
    a kernel another call launches costs its launch, a view the view cost, a fallback the
    fallback dispatch and a call's Python, each in units of that host's costs."""
    from dataclasses import replace

    c = replace(predictor.constants, short_kernel_share=0.25, launch_share=0.5, view_share=6.0,
                fallback_ratio=1.5, call_share=2.0)
    custom = Predictor(predictor.bundle, predictor.device, constants=c)
    plain = Predictor(predictor.bundle, predictor.device,
                      constants=replace(c, short_kernel_share=0.0, group_scale=dict.fromkeys(c.group_scale, 1.0)))
    node = dict(kind="kernel", family="activation", variant="relu", layout="strided", params={"elements": 4096})
    graph = Graph("g", [Node(name="0:mul/copy0", op="mul", launched_by="1:mul", **node),  # the mul copies an operand
                        Node(name="1:mul", op="mul", **node),
                        Node(name="2:view", op="view", kind="free"),
                        Node(name="3:cumsum", op="cumsum", kind="fallback", elements_per_sample=64)])
    result = custom.predict(graph, 4, "fp16", "eager", host=TEST_HOST)
    assert result.host == TEST_HOST.summary()
    copy, own, view, fallback = result.layers
    alone = plain.predict(graph, 4, "fp16", "eager", host=TEST_HOST).layers[1].kernel_us
    assert own.kernel_us == pytest.approx(alone * c.scale("activation", "kernel")
                                          + 0.25 * min(alone, SHORT_KERNEL_CAP_US))
    assert copy.kernel_us == pytest.approx(own.kernel_us)
    costs = TEST_HOST.costs_us
    assert copy.host_us == pytest.approx(0.5 * costs["elementwise"]) and own.host_us > copy.host_us
    assert view.host_us == pytest.approx(6.0 * costs["view"]) and view.kernel_us == 0.0
    assert fallback.host_us == pytest.approx(1.5 * costs["elementwise"] + 2.0 * costs["module_call"])
    # a host twice as slow issues every call in twice the time
    slow = TEST_HOST.model_copy(update={"id": "test-host-slow",
                                        "costs_us": {k: 2 * v for k, v in costs.items()}})
    doubled = custom.predict(graph, 4, "fp16", "eager", host=slow).layers
    assert [x.host_us for x in doubled] == pytest.approx([2 * x.host_us for x in result.layers])


def test_a_layer_with_weights_adds_their_cold_read_inside_a_model(predictor: Predictor) -> None:
    """Alone the sweep found a small layer's weights warm in L2; in a model they come from HBM."""
    from dataclasses import replace

    from predictor.features import cold_weight_us

    linear = Node(name="0:linear", op="linear", kind="kernel", family="linear", variant="nobias",
                  params={"tokens": 128, "k": 896, "n": 4864})
    relu = Node(name="1:relu", op="relu", kind="kernel", family="activation", variant="relu",
                params={"elements": 128 * 4864})
    graph = Graph("g", [linear, relu])
    base = replace(predictor.constants, cold_weight_share=0.0)
    cold = replace(base, cold_weight_share=1.5)
    warm_l, warm_r = Predictor(predictor.bundle, predictor.device, constants=base).predict(
        graph, 1, "bf16", "cudagraph").layers
    cold_l, cold_r = Predictor(predictor.bundle, predictor.device, constants=cold).predict(
        graph, 1, "bf16", "cudagraph").layers
    read = cold_weight_us("linear", linear.params, "nobias", 1, "bf16", predictor.device)
    assert read > 0
    assert cold_l.kernel_us == pytest.approx(warm_l.kernel_us + 1.5 * read)
    assert cold_r.kernel_us == pytest.approx(warm_r.kernel_us)  # no weights, nothing added


def test_captured_attention_is_costed_in_its_capture_variant(predictor: Predictor) -> None:
    bert = load_zoo_graph("bert-base")  # traced with transformers: attention runs the math path captured
    attention = [n for n in bert.nodes if n.family == "sdpa"]
    assert attention and all(n.variant == "" and n.capture_variant == "math" for n in attention)
    eager = [x for x in predictor.predict(bert, 8, "fp16", "eager").layers if x.family == "sdpa"]
    captured = [x for x in predictor.predict(bert, 8, "fp16", "cudagraph").layers if x.family == "sdpa"]
    # the math path (fp32 scores, separate GEMMs) is measured slower than flash attention
    assert captured[0].kernel_us > 1.5 * eager[0].kernel_us
    as_math = Graph("math", [replace(attention[0], variant="math", capture_variant="")])
    assert predictor.predict(as_math, 8, "fp16", "eager").layers[0].kernel_us == pytest.approx(captured[0].kernel_us)
    # nodes other than attention cost the same in both modes
    others = [(a.kernel_us, b.kernel_us) for a, b in zip(predictor.predict(bert, 8, "fp16", "eager").layers,
                                                          predictor.predict(bert, 8, "fp16", "cudagraph").layers)
              if a.family != "sdpa"]
    assert all(a == b for a, b in others)


def test_what_a_half_precision_model_keeps_in_fp32_is_costed_in_fp32(predictor: Predictor) -> None:
    llama = load_zoo_graph("llama-300m")  # traced in bfloat16: RMSNorm's upcasts are visible
    assert llama.traced_in_half
    upcast = [i for i, n in enumerate(llama.nodes) if n.kind == "kernel" and n.dtype == "float32"]
    casts = [i for i, n in enumerate(llama.nodes) if n.op in CAST_OPS and n.kind == "kernel"]
    assert upcast and casts
    half = predictor.predict(llama, 32, "bf16", "cudagraph").layers
    full = predictor.predict(llama, 32, "fp32", "cudagraph").layers
    for i in upcast:  # the same fp32 kernel whichever precision the model runs in
        if llama.nodes[i].op not in CAST_OPS:
            assert half[i].kernel_us == pytest.approx(full[i].kernel_us)
    assert all(half[i].kernel_us > 0 for i in casts)
    assert all(full[i].kernel_us == 0 for i in casts)  # an fp32 model's casts to fp32 do nothing
    bf16_node = next(i for i, n in enumerate(llama.nodes) if n.family == "linear")
    assert half[bf16_node].kernel_us < full[bf16_node].kernel_us  # the GEMMs do run in bf16


def test_prefetch_evaluates_a_whole_batch_once_with_identical_results() -> None:
    cold = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    graphs = [load_zoo_graph(name) for name in ("resnet50", "bert-base", "mobilenet_v2")]
    requests = [(g, b, p, m) for g in graphs for b, p, m in [(1, "fp16", "cudagraph"), (32, "bf16", "eager")]]
    requests.append((graphs[0], 0, "fp16", "eager"))  # invalid: skipped here, refused by predict
    cold.prefetch(requests)
    cached, dispatched = len(cold._cache), len(cold._dispatch)
    assert cached > 0 and dispatched > 0
    fresh = Predictor(cold.bundle, cold.device)
    for g, b, p, m in requests[:-1]:
        assert cold.predict(g, b, p, m).total_ms == fresh.predict(g, b, p, m).total_ms
    # everything the batch needed was already evaluated
    assert (len(cold._cache), len(cold._dispatch)) == (cached, dispatched)


def test_a_captured_graph_runs_no_dispatch_model_and_an_eager_prediction_after_it_is_unchanged() -> None:
    """A CUDA graph's replay issues no call: its prediction evaluates kernel times only and its
    layers show no host time. The same layers asked eagerly afterwards count as new work until
    their dispatch is evaluated, and answer what a predictor that never saw the captured graph does."""
    bundle, device = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200")
    first = Predictor(bundle, device)
    graph = load_zoo_graph("resnet50")
    captured = first.predict(graph, 8, "fp16", "cudagraph")
    assert first._cache and not first._dispatch
    assert [layer.host_us for layer in captured.layers] == [0.0] * len(graph.nodes)
    distinct, new = first.new_kernels([(graph, 8, "fp16", "eager")])
    assert distinct == new > 0  # the kernel times are known, the dispatch ratios are not
    eager = first.predict(graph, 8, "fp16", "eager")
    assert first.new_kernels([(graph, 8, "fp16", "eager")]) == (distinct, 0)
    alone = Predictor(bundle, device).predict(graph, 8, "fp16", "eager")
    assert eager.total_ms == alone.total_ms
    assert [layer.host_us for layer in eager.layers] == [layer.host_us for layer in alone.layers]
    assert sum(layer.host_us for layer in eager.layers) > 0


def test_an_importers_assumptions_are_warnings_and_change_nothing_else(predictor: Predictor, resnet50: Graph) -> None:
    said = "2 convolution(s) carry a folded BatchNorm: costed as conv then batch_norm"
    assuming = Graph(resnet50.name, list(resnet50.nodes), resnet50.batch, resnet50.source,
                     {**resnet50.meta, "assumptions": [said]})
    plain = predictor.predict(resnet50, 8, "fp16", "cudagraph")
    told = predictor.predict(assuming, 8, "fp16", "cudagraph")
    assert told.warnings == [*plain.warnings, f"assumed: {said}"]
    assert told.total_ms == plain.total_ms
