"""Calls no export shows, put back for the modules their parameters' names tell
(onnx_module_calls): on graphs written here, and on the zoo's committed exports against the
zoo's torch traces."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from predictor.graph import Graph  # noqa: E402
from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402
from tests.predictor.parity_helpers import h200_predictor, variants_off, zoo_export  # noqa: E402

NO_OPS = ("dropout", "contiguous", "_assert")


def linears(biases: list[str]) -> bytes:
    """x -> a chain of linear layers (MatMul by a weight, Add of a bias), the i-th bias named biases[i]."""
    nodes, weights, x = [], {}, "x"
    for i, bias in enumerate(biases):
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", bias], [f"y{i}"])]
        weights[f"w{i}"] = np.ones((16, 16), np.float32)
        weights[bias] = np.zeros(16, np.float32)
        x = f"y{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 16])],
                              initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def no_ops(graph: Graph) -> Counter[str]:
    return Counter(n.op.lower() for n in graph.nodes if n.kind == "free" and n.op.lower() in NO_OPS)


def test_a_parameters_name_puts_its_modules_calls_after_its_node() -> None:
    """BertSelfAttention's two contiguous calls and BertSelfOutput's dropout after the attention's
    output dense, BertOutput's dropout after the output dense (not after the attention's, whose
    name ends the same), nothing after a linear of no known module."""
    graph = graph_from_onnx(linears(["bert.encoder.layer.0.attention.output.dense.bias",
                                     "bert.encoder.layer.0.output.dense.bias", "head.proj.bias"]))
    assert [(n.kind, n.op) for n in graph.nodes] == [
        ("kernel", "MatMul+Add"), ("free", "contiguous"), ("free", "contiguous"), ("free", "dropout"),
        ("kernel", "MatMul+Add"), ("free", "dropout"), ("kernel", "MatMul+Add")]
    said = [a for a in graph.meta["assumptions"] if "leave no node" in a]
    assert said and "4 call(s)" in said[0] and "BertOutput x1" in said[0]


def renamed_output(model: bytes, name: str) -> bytes:
    """``model`` with its one output, and what writes it, named ``name``."""
    m = onnx.load_from_string(model)
    old = m.graph.output[0].name
    for n in m.graph.node:
        n.output[:] = [name if o == old else o for o in n.output]
    m.graph.output[0].name = name
    return m.SerializeToString()


def test_a_cache_update_is_put_back_only_where_the_export_does_not_return_the_cache() -> None:
    """OPT's key projection: its cache copy follows it; an export returning the cache
    (``present.0.key``) shows the concat itself, and nothing is added."""
    bias = "model.decoder.layers.0.self_attn.k_proj.bias"
    plain = graph_from_onnx(linears([bias]))
    assert [(n.kind, n.op) for n in plain.nodes if n.op in ("tensor", "cat")] == [("free", "tensor"), ("kernel", "cat")]
    assert next(n for n in plain.nodes if n.op == "cat").layout == "strided"
    shown = graph_from_onnx(renamed_output(linears([bias]), "present.0.key"))
    assert not [n for n in shown.nodes if n.op in ("tensor", "cat")]


def test_a_model_of_no_known_module_gets_no_calls() -> None:
    graph = graph_from_onnx(linears(["fc1.bias", "fc2.bias"]))
    assert [n.kind for n in graph.nodes] == ["kernel", "kernel"]
    assert "assumptions" not in graph.meta


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return h200_predictor()



@pytest.mark.parametrize("exporter,model", [(e, m) for m in ("bert-base", "distilbert-base", "opt-125m", "vit_b_16",
                                                               "swin_t") for e in ("dynamo", "legacy")]
                         + [("legacy", "t5-small-encoder")])
def test_a_zoo_export_makes_the_no_op_calls_its_torch_trace_records(exporter: str, model: str) -> None:
    """The committed export of a zoo model (weights stripped, as if trained) has every dropout,
    contiguous and _assert call of the same model's torch trace back."""
    assert no_ops(zoo_export(exporter, model)) == no_ops(load_zoo_graph(model))


def test_a_position_bias_from_a_stripped_weight_is_no_unread_mask() -> None:
    """T5's attention adds a relative position bias gathered from a weight the committed export
    stripped: a float bias, no mask whose causality is unknown, so nothing is said of one."""
    graph = zoo_export("legacy", "t5-small-encoder")
    assert any(n.family == "sdpa" for n in graph.nodes)
    assert not any("is not read" in a for a in graph.meta.get("assumptions", []))


def test_t5s_float16_guard_runs_in_float16_only() -> None:
    """T5 clamps its hidden states after every residual add in float16 only: the export, traced
    in float32, has no node for it; the graph has the guard's kernels, marked as the torch trace
    marks them, so they cost nothing at another precision."""
    graph, trace = zoo_export("legacy", "t5-small-encoder"), load_zoo_graph("t5-small-encoder")

    def guards(g: Graph) -> Counter[tuple[str | None, str, int]]:
        return Counter((n.family, n.variant, n.params.get("elements", n.params.get("c", 0)))
                       for n in g.nodes if n.precisions == ["fp16"])

    assert guards(graph) == guards(trace) and sum(guards(graph).values()) == 60
    # (its norms' casts, onnx_decoder's, are calls at fp32 too: free there)
    assert graph.at_precision("fp32").nodes == [n for n in graph.nodes if not n.precisions or "fp32" in n.precisions]


@pytest.mark.parametrize("exporter,model", [("dynamo", "distilbert-base"), ("legacy", "distilbert-base"),
                                            ("dynamo", "electra-small"), ("legacy", "vit_b_32")])
def test_a_zoo_export_predicts_like_its_torch_trace(predictor: Predictor, exporter: str, model: str) -> None:
    """... and predicts within 3% of it in every variant (benchmarks/onnx_parity.py scores the
    whole zoo: Swin, OPT and the LLMs differ in more than these calls)."""
    assert not variants_off(predictor, zoo_export(exporter, model), load_zoo_graph(model))


def cache_copies(g: Graph) -> Counter[tuple[str, int]]:
    """A graph's concat kernels of one input (a cache update's copy), by layout and elements."""
    return Counter((n.layout, n.params["c"] * n.params["h"] * n.params["w"])
                   for n in g.nodes if n.family == "concat" and n.params.get("inputs") == 1)


@pytest.mark.parametrize("exporter,model,copies,module", [
    ("dynamo", "opt-125m", 24, "DynamicCache update (OPT) x24"),
    ("legacy", "opt-125m", 24, "DynamicCache update (OPT) x24"),
    ("dynamo", "llama-300m", 24, "DynamicCache update (Llama/Qwen2) x24"),  # 4 key/value heads of 16
    ("dynamo", "qwen2-0.5b", 48, "DynamicCache update (Llama/Qwen2) x48")])  # 2 of 14, q/k/v biases
def test_a_decoders_cache_update_is_put_back_as_its_torch_trace_records_it(exporter: str, model: str, copies: int,
                                                                           module: str) -> None:
    """A decoder's first forward appends each layer's keys and values to an empty DynamicCache:
    two empty tensors and two strided copies a layer in the torch trace, none in an export; the
    copies are the key and value projections' size (grouped heads), found by name (OPT) or as the
    second and third linear reading the layer's input norm (Llama, Qwen2: the dynamo exporter
    renames their projections)."""
    graph, trace = zoo_export(exporter, model), load_zoo_graph(model)
    assert cache_copies(graph) == cache_copies(trace) and sum(cache_copies(graph).values()) == copies
    assert Counter(n.op for n in graph.nodes if n.op == "tensor") == Counter(n.op for n in trace.nodes
                                                                             if n.op == "tensor")
    said = next(a for a in graph.meta["assumptions"] if "leave no node" in a)
    assert module in said


@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_opts_exports_predict_like_its_torch_trace(predictor: Predictor, exporter: str) -> None:
    """With its cache updates back, each OPT export predicts within 3% of the torch trace in every
    variant, its constant causal mask read as is_causal (the dynamo exporter stores it as a bool
    tensor, which the suite's stripping keeps since 2026-12-05: collectors.onnx_export)."""
    graph = zoo_export(exporter, "opt-125m")
    assert not variants_off(predictor, graph, load_zoo_graph("opt-125m"))
    assert any("constant causal mask" in a for a in graph.meta["assumptions"])
