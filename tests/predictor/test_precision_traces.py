"""Graphs whose code branches on the model's dtype: merging two traces, and costing each precision."""

from __future__ import annotations

from dataclasses import replace

import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.devices import resolve_device
from predictor.graph import Graph, Node
from predictor.importers.precision_traces import merge_precision_traces
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph


def _linear(name: str, dtype: str) -> Node:
    return Node(name, "linear", "kernel", "linear", params={"tokens": 128, "k": 512, "n": 512}, dtype=dtype)


def _elementwise(name: str, op: str, dtype: str, launched_by: str = "") -> Node:
    return Node(name, op, "kernel", "activation", variant="relu", params={"elements": 65536}, dtype=dtype,
                launched_by=launched_by)


def traces() -> tuple[Graph, Graph]:
    """A block traced in bfloat16, and in float16 with T5's overflow guard after its projection."""
    base = Graph("block", [_linear("0:linear", "bfloat16"), _elementwise("1:relu", "relu", "bfloat16"),
                           _linear("2:linear", "bfloat16")])
    other = Graph("block", [_linear("0:linear", "float16"), _elementwise("1:isinf", "isinf", "bool"),
                            _elementwise("2:clamp", "clamp", "float16", launched_by="1:isinf"),
                            _elementwise("3:relu", "relu", "float16"), _linear("4:linear", "float16")])
    return base, other


def test_shared_calls_stay_once_and_each_trace_keeps_its_own_marked() -> None:
    base, other = traces()
    merged = merge_precision_traces(base, ["fp32", "tf32", "bf16"], other, ["fp16"])
    assert [(n.name, n.precisions) for n in merged.nodes] == [
        ("0:linear", []), ("1:isinf@fp16", ["fp16"]), ("2:clamp@fp16", ["fp16"]), ("1:relu", []),
        ("2:linear", [])]
    assert merged.nodes[2].launched_by == "1:isinf@fp16"  # follows the renaming
    assert [n.name for n in merged.at_precision("bf16").nodes] == [n.name for n in base.nodes]
    assert [n.op for n in merged.at_precision("fp16").nodes] == [n.op for n in other.nodes]
    assert Graph.from_json(merged.to_json()).nodes == merged.nodes  # the field survives JSON


def test_calls_only_the_base_trace_makes_are_marked_with_its_precisions() -> None:
    base, other = traces()
    merged = merge_precision_traces(other, ["fp16"], base, ["bf16"])
    assert [n.precisions for n in merged.nodes if n.op in ("isinf", "clamp")] == [["fp16"], ["fp16"]]
    assert len(merged.at_precision("fp16").nodes) == 5 and len(merged.at_precision("bf16").nodes) == 3


def test_a_graph_without_precision_marks_is_returned_as_it_is() -> None:
    base, _ = traces()
    assert base.at_precision("fp16") is base


def test_an_unknown_precision_in_a_node_is_refused_by_name() -> None:
    data = traces()[0].to_json()
    data["nodes"][1]["precisions"] = ["fp8"]
    with pytest.raises(ValueError,
                       match=r"nodes\[1\]\.precisions\[0\]: Input should be 'fp32', 'tf32', 'fp16' or 'bf16'"):
        Graph.from_json(data)


def test_t5_costs_its_float16_overflow_guard_only_in_fp16() -> None:
    """The zoo's T5 carries both traces; the guard's 60 calls cost time in fp16 alone."""
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    t5 = load_zoo_graph("t5-small-encoder")
    guard = [n for n in t5.nodes if n.precisions == ["fp16"]]
    assert {n.op for n in guard} >= {"isinf", "any", "clamp"}
    assert not [n for n in t5.nodes if n.precisions and n.precisions != ["fp16"]]
    for mode in ("cudagraph", "eager"):
        fp16 = predictor.predict(t5, 8, "fp16", mode)
        bf16 = predictor.predict(t5, 8, "bf16", mode)
        assert len(fp16.layers) == len(t5.nodes) == len(bf16.layers) + len(guard)
        assert not {layer.op for layer in bf16.layers} & {"isinf", "clamp"}
        assert fp16.total_ms > bf16.total_ms * 1.05


@pytest.mark.parametrize("base, other, message", [
    ([], ["fp16"], "each trace needs the precisions"),
    (["bf16"], [], "each trace needs the precisions"),
    (["bf16"], ["float16"], "unknown precision"),
    (["bf16", "fp16"], ["fp16"], "overlap"),
])
def test_merging_refuses_precision_lists_that_would_miscount(base: list[str], other: list[str], message: str) -> None:
    a, b = traces()
    with pytest.raises(ValueError, match=message):
        merge_precision_traces(a, base, b, other)


@pytest.mark.parametrize("value", [[["fp16"]], [{}], ["fp16", "fp16"], "fp16"])
def test_malformed_precisions_are_a_value_error_naming_the_field(value: object) -> None:
    data = traces()[0].to_json()
    data["nodes"][0]["precisions"] = value
    with pytest.raises(ValueError, match=r"nodes\[0\]\.precisions|node '0:\w+': 'precisions' lists a precision twice"):
        Graph.from_json(data)


def test_a_graph_with_no_node_at_the_asked_precision_is_refused() -> None:
    only_fp16 = Graph("g", [replace(_linear("0:linear", "float16"), precisions=["fp16"])])
    assert len(only_fp16.at_precision("FP16").nodes) == 1  # names as the predictor accepts them
    with pytest.raises(ValueError, match="no nodes at precision bf16"):
        only_fp16.at_precision("bf16")
    with pytest.raises(ValueError, match="unknown precision"):
        only_fp16.at_precision("float16")


def test_a_node_marked_keeps_float32_costs_fp32_in_a_half_precision_model_and_survives_json() -> None:
    """An importer's float32 island (an RMS norm's arithmetic in a float32 export) runs in fp32 when
    the model runs in fp16 or bf16, kernel and bytes, and at the precision asked otherwise; the
    model's other nodes keep the precision asked."""
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    plain = Graph("g", [_linear("0:linear", "float32"), _elementwise("1:pow", "pow", "float32")])
    marked = Graph("g", [plain.nodes[0], replace(plain.nodes[1], keeps_float32=True)])
    assert Graph.from_json(marked.to_json()).nodes == marked.nodes
    assert "keeps_float32" not in plain.to_json()["nodes"][1]
    for precision in ("fp16", "bf16"):
        assert [marked.precision_of(n, precision) for n in marked.nodes] == [precision, "fp32"]
        half = predictor.predict(marked, 32, precision, "cudagraph").layers
        fp32 = predictor.predict(plain, 32, "fp32", "cudagraph").layers
        assert half[1].kernel_us == pytest.approx(fp32[1].kernel_us, rel=1e-9)
        assert half[0].kernel_us == pytest.approx(predictor.predict(plain, 32, precision, "cudagraph")
                                                   .layers[0].kernel_us, rel=1e-9)
        assert half[1].kernel_us > predictor.predict(plain, 32, precision, "cudagraph").layers[1].kernel_us
    assert [marked.precision_of(n, "fp32") for n in marked.nodes] == ["fp32", "fp32"]
    assert predictor.predict(marked, 32, "fp32", "cudagraph").total_ms == \
        pytest.approx(predictor.predict(plain, 32, "fp32", "cudagraph").total_ms, rel=1e-9)


def test_keeps_float32_must_be_a_boolean() -> None:
    data = traces()[0].to_json()
    data["nodes"][1]["keeps_float32"] = "yes"
    with pytest.raises(ValueError, match=r"nodes\[1\]\.keeps_float32"):
        Graph.from_json(data)
