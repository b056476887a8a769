"""The ONNX importer's folds and patterns, one at a time, on ONNX built here: by torch's TorchScript
exporter (``dynamo=False``), or written with ``onnx.helper`` the way the dynamo exporter writes it
(its exporter needs onnxscript, which is not installed here)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from predictor.graph import Graph  # noqa: E402
from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402
from tests.predictor.parity_helpers import export_named, torchscript_export  # noqa: E402


def export(module: nn.Module, *example: Any) -> bytes:
    """ONNX bytes of ``module`` from the TorchScript exporter, opset 17 as the zoo's exports."""
    return torchscript_export(module, *example)


def model(nodes: list[Any], inputs: dict[str, list[Any]], output: str, weights: dict[str, np.ndarray],
          producer: str = "pytorch", out_shape: list[Any] | None = None) -> bytes:
    """A model written with onnx.helper: float inputs, named initializers, one output (its type
    and shape as onnx infers them, or ``out_shape``)."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()], [],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name=producer)
    if out_shape is not None:
        m.graph.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape))
    else:
        inferred = onnx.shape_inference.infer_shapes(m)
        m.graph.output.append({vi.name: vi for vi in inferred.graph.value_info}[output])
    return m.SerializeToString()


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def calls(graph: Graph) -> list[tuple[str, str | None, str]]:
    """(kind, family, variant) of every node, in order."""
    return [(n.kind, n.family, n.variant) for n in graph.nodes]


def kernels(graph: Graph) -> list[tuple[str | None, str, dict[str, int]]]:
    return [(n.family, n.variant, n.params) for n in graph.nodes if n.kind == "kernel"]


# ---------------------------------------------------------------------------- folds


def test_shape_arithmetic_constants_and_identity_make_no_node() -> None:
    """Shape -> Gather -> Cast -> Range/ConstantOfShape/Equal/Where -> Unsqueeze -> Concat -> Reshape:
    only the Reshape (a view) and the Relu remain; nothing else reaches PyTorch's dispatcher."""
    nodes = [
        helper.make_node("Identity", ["x"], ["x1"]),
        helper.make_node("Shape", ["x1"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["cf"], ["ci"], to=TensorProto.INT64),
        helper.make_node("Div", ["ci", "two"], ["half"]),
        helper.make_node("Range", ["zero", "one", "one"], ["r"]),
        helper.make_node("ConstantOfShape", ["r_shape"], ["filled"], value=helper.make_tensor("v", TensorProto.INT64,
                                                                                             [1], [1])),
        helper.make_node("Shape", ["r"], ["r_shape"]),
        helper.make_node("Equal", ["filled", "one"], ["eq"]),
        helper.make_node("Where", ["eq", "minus_one", "half"], ["last"]),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(2, np.int64), "k")),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["bu"]),
        helper.make_node("Unsqueeze", ["k", "axes0"], ["ku"]),
        helper.make_node("Concat", ["bu", "ku", "last"], ["target"], axis=0),
        helper.make_node("Reshape", ["x1", "target"], ["y"]),
        helper.make_node("Relu", ["y"], ["out"]),
    ]
    nodes.insert(8, nodes.pop(9))  # Shape(r) before the ConstantOfShape that reads it
    weights = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "two": np.array(2, np.int64),
               "minus_one": ints(-1), "axes0": ints(0)}
    graph = graph_from_onnx(model(nodes, {"x": ["batch", 4, 6]}, "out", weights, out_shape=["batch", 2, 12]),
                            batch=3)
    assert [n.op for n in graph.nodes] == ["Reshape", "Relu"]
    assert calls(graph) == [("free", None, ""), ("kernel", "activation", "relu")]
    assert graph.nodes[0].outputs == [[3, 2, 12]]


def test_views_of_weights_make_no_node_and_views_of_activations_are_free() -> None:
    nodes = [helper.make_node("Unsqueeze", ["scale", "axes"], ["scale3"]),  # [C] -> [C, 1, 1]: a weight's view
             helper.make_node("Mul", ["x", "scale3"], ["y"]),
             helper.make_node("Transpose", ["y"], ["out"], perm=[0, 2, 3, 1])]
    graph = graph_from_onnx(model(nodes, {"x": [1, 8, 4, 4]}, "out", {"scale": f32(8), "axes": ints(1, 2)}))
    assert [(n.op, n.kind, n.family, n.layout) for n in graph.nodes] == [
        ("Mul", "kernel", "binary", "strided"),  # the scale broadcasts: PyTorch's generic kernel
        ("Transpose", "free", None, "contiguous")]


# ---------------------------------------------------------------------------- views and copies


def test_a_reshape_that_cannot_view_is_reshapes_copy() -> None:
    """x.permute(0, 2, 1, 3).reshape(b, t, -1): the permuted tensor cannot be viewed, so reshape
    copies (a strided copy of 12-element heads; the transpose family's where the run both sides
    share is shorter than 8 elements); a reshape of a contiguous tensor is a view."""
    def reshaped(head: int) -> Any:
        nodes = [helper.make_node("Reshape", ["x", "split"], ["x4"]),
                 helper.make_node("Transpose", ["x4"], ["xt"], perm=[0, 2, 1, 3]),
                 helper.make_node("Reshape", ["xt", "merge"], ["out"])]
        weights = {"split": ints(2, 4, 8, head), "merge": ints(2, 8, 4 * head)}
        return graph_from_onnx(model(nodes, {"x": [2, 4, 8 * head]}, "out", weights))

    graph = reshaped(12)
    assert calls(graph) == [("free", None, ""), ("free", None, ""), ("kernel", "activation", "relu")]
    assert graph.nodes[-1].layout == "strided" and graph.nodes[-1].params == {"elements": 8 * 48}
    graph = reshaped(6)
    assert calls(graph) == [("free", None, ""), ("free", None, ""), ("kernel", "transpose", "")]
    assert graph.nodes[-1].params == {"d1": 4, "d2": 8, "d3": 6}


def test_a_batched_matmul_copies_what_torch_matmul_cannot_fold() -> None:
    """q @ k.transpose(-2, -1) with q and k sliced from a packed [b, t, 3, h, d] projection:
    torch.matmul copies both (launched by the matmul's call), as the torch importer records."""
    nodes = [helper.make_node("Reshape", ["x", "shape5"], ["x5"]),
             helper.make_node("Transpose", ["x5"], ["p"], perm=[2, 0, 3, 1, 4]),
             helper.make_node("Gather", ["p", "zero"], ["q"], axis=0),
             helper.make_node("Gather", ["p", "one"], ["k"], axis=0),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["out"], name="scores")]
    weights = {"shape5": ints(2, 5, 3, 4, 8), "zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    graph = graph_from_onnx(model(nodes, {"x": [2, 5, 96]}, "out", weights))
    copies = [n for n in graph.nodes if n.launched_by]
    assert [n.launched_by for n in copies] == ["scores", "scores"]
    assert all(n.family == "activation" and n.layout == "strided" for n in copies)
    assert graph.nodes[-1].params == {"heads": 4, "m": 5, "k": 8, "n": 5}


def test_a_permuted_operand_makes_an_elementwise_kernel_strided() -> None:
    """Heads permuted above their contiguous 8 elements: the generic kernel, 'strided'."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3]),
             helper.make_node("Add", ["xt", "y"], ["out"])]
    graph = graph_from_onnx(model(nodes, {"x": [2, 6, 4, 8], "y": [2, 4, 6, 8]}, "out", {}))
    assert (graph.nodes[-1].family, graph.nodes[-1].layout) == ("binary", "strided")


def test_a_transposed_operand_makes_an_add_across_the_swap() -> None:
    """[b, 6, 4] transposed plus a contiguous [b, 4, 6]: the output follows the first operand,
    the second is read one element apart, the transpose family's 'add' (as the torch importer
    costs nas-88's residual adds)."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("Add", ["xt", "y"], ["out"])]
    graph = graph_from_onnx(model(nodes, {"x": [2, 6, 4], "y": [2, 4, 6]}, "out", {}))
    last = graph.nodes[-1]
    assert (last.family, last.variant, last.params) == ("transpose", "add", {"d1": 6, "d2": 4, "d3": 1})


def test_channels_last_stays_channels_last_through_a_block() -> None:
    """ConvNeXt's block: a permuted Linear back to NCHW leaves a channels-last tensor, so the next
    convolution runs in NHWC, as PyTorch runs it."""
    nodes = [helper.make_node("Transpose", ["x"], ["nhwc"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["nhwc", "w"], ["lin"]),
             helper.make_node("Transpose", ["lin"], ["back"], perm=[0, 3, 1, 2]),
             helper.make_node("Mul", ["back", "gamma"], ["scaled"]),
             helper.make_node("Conv", ["scaled", "cw", "cb"], ["out"], pads=[3, 3, 3, 3], group=8)]
    weights = {"w": f32(8, 8), "gamma": f32(8, 1, 1), "cw": f32(8, 1, 7, 7), "cb": f32(8)}
    graph = graph_from_onnx(model(nodes, {"x": [2, 8, 14, 14]}, "out", weights))
    conv = graph.nodes[-1]
    assert (conv.family, conv.variant, conv.layout) == ("conv2d", "", "nhwc")


# ---------------------------------------------------------------------------- BatchNorm folded or kept


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def test_a_batchnorm_the_torchscript_exporter_folded_is_run_after_its_conv() -> None:
    data = export(ConvBN(), torch.randn(2, 3, 8, 8))
    assert "BatchNormalization" not in {n.op_type for n in onnx.load_from_string(data).graph.node}
    graph = graph_from_onnx(data)
    assert kernels(graph) == [("conv2d", "nobias", dict(c_in=3, c_out=8, h=8, w=8, kernel=3, stride=1, groups=1)),
                              ("batch_norm", "", dict(c=8, h=8, w=8)), ("activation", "relu", dict(elements=512))]
    assert any("BatchNorm" in a and "folded" in a for a in graph.meta["assumptions"])


def test_a_batchnorm_the_dynamo_exporter_folded_shows_in_the_conv_value_name() -> None:
    """onnxscript's FuseBatchNormIntoConv leaves the Conv writing the BatchNorm's value, getitem_3."""
    def graph_for(value: str) -> Graph:
        nodes = [helper.make_node("Conv", ["x", "layer1.conv.weight"], [value], pads=[1, 1, 1, 1], name="node_Conv_4"),
                 helper.make_node("Relu", [value], ["out"], name="node_relu")]
        return graph_from_onnx(model(nodes, {"x": [1, 3, 8, 8]}, "out", {"layer1.conv.weight": f32(8, 3, 3, 3)}))

    assert [n.family for n in graph_for("getitem_3").nodes] == ["conv2d", "batch_norm", "activation"]
    assert [n.family for n in graph_for("conv2d_3").nodes] == ["conv2d", "activation"]


def test_a_dynamo_fold_tells_a_convolution_s_own_bias_from_the_one_it_made() -> None:
    """The fold names the bias it makes for a bias-free conv ``<weight>_bias`` (ResNet's); a conv with
    a bias of its own (VGG's) keeps that bias's name. PyTorch runs the second with its bias."""
    def conv_variant(bias: str) -> str | None:
        nodes = [helper.make_node("Conv", ["x", "features.0.weight", bias], ["getitem"], pads=[1, 1, 1, 1],
                                  name="node_Conv_0"),
                 helper.make_node("Relu", ["getitem"], ["out"], name="node_relu")]
        graph = graph_from_onnx(model(nodes, {"x": [1, 3, 8, 8]}, "out",
                                      {"features.0.weight": f32(8, 3, 3, 3), bias: f32(8)}))
        assert [n.family for n in graph.nodes] == ["conv2d", "batch_norm", "activation"]
        return graph.nodes[0].variant

    assert conv_variant("features.0.weight_bias") == "nobias"
    assert conv_variant("features.0.bias") == ""


def test_a_batchnorm_kept_in_the_export_is_its_own_kernel() -> None:
    """BatchNorm before a conv (DenseNet's pre-activation) cannot be folded: the export keeps it."""
    block = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 8, 1, bias=False))
    graph = graph_from_onnx(export(block, torch.randn(2, 3, 8, 8)))
    assert [n.family for n in graph.nodes] == ["batch_norm", "activation", "conv2d"]
    assert "assumptions" not in graph.meta


# ---------------------------------------------------------------------------- one call, one kernel


def layer_norm_nodes(x: str, out: str) -> list[Any]:
    """F.layer_norm over the last axis written out, as exporters before opset 17 write it."""
    return [helper.make_node("ReduceMean", [x], ["mu"], axes=[-1]),
            helper.make_node("Sub", [x, "mu"], ["d"]),
            helper.make_node("Pow", ["d", "two"], ["d2"]),
            helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
            helper.make_node("Add", ["var", "eps"], ["ve"]),
            helper.make_node("Sqrt", ["ve"], ["sd"]),
            helper.make_node("Div", ["d", "sd"], ["n"]),
            helper.make_node("Mul", ["n", "gamma"], ["ng"]),
            helper.make_node("Add", ["ng", "beta"], [out])]


def test_layer_norm_written_out_is_one_layer_norm() -> None:
    weights = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32), "gamma": f32(16), "beta": f32(16)}
    data = model(layer_norm_nodes("x", "out"), {"x": [2, 5, 16]}, "out", weights)
    m = onnx.load_from_string(data)
    m.opset_import[0].version = 13  # ReduceMean's axes are an attribute before opset 18
    graph = graph_from_onnx(m.SerializeToString())
    assert kernels(graph) == [("layer_norm", "", dict(tokens=5, c=16))]
    assert len(graph.nodes[0].merged) == 9


def test_an_rmsnorm_is_not_a_layer_norm() -> None:
    """T5's RMSNorm has no mean subtracted: PyTorch runs its calls one by one (pow, mean, add,
    rsqrt, mul), and so does the importer; rsqrt written as Sqrt then Div(1, .) is one kernel."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["x2"]),
             helper.make_node("ReduceMean", ["x2"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["one", "sd"], ["inv"]),
             helper.make_node("Mul", ["x", "inv"], ["out"])]
    weights = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32), "one": np.array(1.0, np.float32)}
    m = onnx.load_from_string(model(nodes, {"x": [2, 5, 16]}, "out", weights))
    m.opset_import[0].version = 13
    graph = graph_from_onnx(m.SerializeToString())
    assert [n.op for n in graph.nodes] == ["Pow", "ReduceMean", "Add", "rsqrt", "Mul"]
    assert [n.family for n in graph.nodes] == ["activation", "mean", "activation", "activation", "binary"]


def test_the_layer_normalization_op_is_a_layer_norm() -> None:
    graph = graph_from_onnx(export(nn.LayerNorm(16), torch.randn(2, 5, 16)))
    assert kernels(graph) == [("layer_norm", "", dict(tokens=5, c=16))]


@pytest.mark.parametrize("form", ["half_first", "half_last", "half_of_one_plus"])
def test_gelu_written_with_erf_is_one_gelu(form: str) -> None:
    """All three orders exporters write 0.5 * x * (1 + erf(x / sqrt 2)) in (the last is dynamo's)."""
    head = [helper.make_node("Div", ["x", "sqrt2"], ["xs"]), helper.make_node("Erf", ["xs"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"])]
    products = {"half_first": (("x", "half", "xh"), ("xh", "e1", "out")),
                "half_last": (("x", "e1", "xe"), ("xe", "half", "out")),
                "half_of_one_plus": (("half", "e1", "he"), ("x", "he", "out"))}[form]
    tail = [helper.make_node("Mul", [a, b], [c]) for a, b, c in products]
    weights = {"sqrt2": np.array(math.sqrt(2), np.float32), "one": np.array(1.0, np.float32),
               "half": np.array(0.5, np.float32)}
    graph = graph_from_onnx(model(head + tail, {"x": [2, 4, 16]}, "out", weights))
    assert kernels(graph) == [("activation", "gelu", dict(elements=64))]
    assert len(graph.nodes[0].merged) == 5


def test_gelu_tanh_is_one_gelu() -> None:
    graph = graph_from_onnx(export(nn.GELU(approximate="tanh"), torch.randn(2, 4, 16)))
    assert kernels(graph) == [("activation", "gelu", dict(elements=64))]


def test_silu_is_one_silu_and_the_graph_says_it_took_the_call() -> None:
    graph = graph_from_onnx(export(nn.SiLU(), torch.randn(2, 3, 8)))
    assert [(n.op, n.family, n.variant) for n in graph.nodes] == [("Silu", "activation", "silu")]
    assert any("1 x * Sigmoid(x) pair(s)" in a and "hand-written" in a for a in graph.meta["assumptions"])


def test_mish_written_out_is_one_mish_and_the_graph_says_so() -> None:
    """Opset 17 has no Mish: the TorchScript exporter writes nn.Mish as x * Tanh(Softplus(x)),
    one kernel in PyTorch, which the torch importer costs as an elementwise activation."""
    graph = graph_from_onnx(export(nn.Mish(), torch.randn(2, 3, 8)))
    assert [(n.op, n.kind) for n in graph.nodes] == [("Mish", "kernel")]
    assert kernels(graph) == [("activation", "relu", dict(elements=24))]
    assert len(graph.nodes[0].merged) == 3
    assert any("1 x * Tanh(Softplus(x)) chain(s)" in a for a in graph.meta["assumptions"])


def test_log_of_sigmoid_is_one_log_sigmoid_and_the_graph_says_so() -> None:
    graph = graph_from_onnx(export(nn.LogSigmoid(), torch.randn(2, 3, 8)))
    assert [(n.op, n.family, n.variant) for n in graph.nodes] == [("LogSigmoid", "activation", "relu")]
    assert any("1 Log(Sigmoid(x)) pair(s)" in a for a in graph.meta["assumptions"])


def test_a_softplus_read_twice_is_not_a_mish() -> None:
    """tanh(softplus(x)) * x whose softplus also feeds an output: three calls, as PyTorch runs them."""
    nodes = [helper.make_node("Softplus", ["x"], ["sp"]), helper.make_node("Tanh", ["sp"], ["th"]),
             helper.make_node("Mul", ["x", "th"], ["m"]), helper.make_node("Add", ["m", "sp"], ["out"])]
    graph = graph_from_onnx(model(nodes, {"x": [2, 4, 16]}, "out", {}))
    assert [n.op for n in graph.nodes if n.kind == "kernel"] == ["Softplus", "Tanh", "Mul", "Add"]
    assert not any("Softplus" in a for a in graph.meta.get("assumptions", []))


def test_linear_with_a_bias_is_one_linear_and_without_one_a_nobias_linear() -> None:
    block = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8, bias=False))
    graph = graph_from_onnx(export(block, torch.randn(2, 5, 16)))
    assert kernels(graph) == [("linear", "", dict(tokens=5, k=16, n=32)), ("activation", "relu", dict(elements=160)),
                              ("linear", "nobias", dict(tokens=5, k=32, n=8))]
    assert graph.nodes[0].op == "MatMul+Add"


def test_not_equal_is_one_ne() -> None:
    nodes = [helper.make_node("Equal", ["x", "y"], ["eq"]), helper.make_node("Not", ["eq"], ["ne"]),
             helper.make_node("Cast", ["ne"], ["out"], to=TensorProto.FLOAT)]
    graph = graph_from_onnx(model(nodes, {"x": [2, 8], "y": [2, 8]}, "out", {}))
    assert [(n.op, n.family) for n in graph.nodes] == [("ne", "binary"), ("Cast", "activation")]


def test_an_in_place_write_is_one_call() -> None:
    """mask[2:4, 1:3] = v as the dynamo exporter writes it: Slice the rows, Transpose, ScatterND the
    columns, Transpose back, ScatterND the rows: PyTorch's one __setitem__, a call without a kernel."""
    rows = ints(2, 3).reshape(2, 1)
    cols = ints(1, 2).reshape(2, 1)
    nodes = [helper.make_node("Relu", ["x"], ["m"]),
             helper.make_node("Slice", ["m", "r0", "r1", "ax0"], ["band"]),
             helper.make_node("Transpose", ["band"], ["bt"], perm=[1, 0]),
             helper.make_node("ScatterND", ["bt", "cols", "vals"], ["bt2"]),
             helper.make_node("Transpose", ["bt2"], ["band2"], perm=[1, 0]),
             helper.make_node("ScatterND", ["m", "rows", "band2"], ["out"])]
    weights = {"r0": ints(2), "r1": ints(4), "ax0": ints(0), "rows": rows, "cols": cols,
               "vals": np.full((2, 2), 3.0, np.float32)}
    graph = graph_from_onnx(model(nodes, {"x": [6, 6]}, "out", weights))
    assert [(n.op, n.kind) for n in graph.nodes] == [("Relu", "kernel"), ("__setitem__", "free")]


# ---------------------------------------------------------------------------- attention


class Attention(nn.Module):
    """q, k, v from separate projections into F.scaled_dot_product_attention, as transformers' encoders."""

    def __init__(self, mask: str = "none", causal: bool = False) -> None:
        super().__init__()
        self.mask, self.causal = mask, causal
        self.q, self.k, self.v, self.o = (nn.Linear(32, 32) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, e = x.shape
        q, k, v = (p(x).view(b, t, 4, 8).transpose(1, 2) for p in (self.q, self.k, self.v))
        mask = {"none": None, "all_pass": torch.ones(t, t, dtype=torch.bool),
                "causal": torch.ones(t, t, dtype=torch.bool).tril(),
                "padding": (torch.arange(t) < t - 2).view(1, 1, 1, t).expand(b, 1, t, t)}[self.mask]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.o(y.transpose(1, 2).reshape(b, t, e))


@pytest.mark.parametrize("mask,causal,variant,capture", [
    ("none", False, "", ""), ("none", True, "", ""), ("causal", False, "", ""),
    ("all_pass", False, "", "math"),  # transformers skips it eagerly and passes it under capture
    ("padding", False, "bool_padding", "")])  # a padding mask expanded over the queries
def test_scaled_dot_product_attention_is_one_sdpa(mask: str, causal: bool, variant: str, capture: str) -> None:
    graph = graph_from_onnx(export(Attention(mask, causal), torch.randn(2, 8, 32)))
    sdpa = [n for n in graph.nodes if n.family == "sdpa"]
    assert len(sdpa) == 1 and not [n for n in graph.nodes if n.family in ("matmul", "softmax")]
    node = sdpa[0]
    assert node.params == dict(heads=4, seq_q=8, seq_kv=8, head_dim=8, causal=int(causal or mask == "causal"))
    assert (node.variant, node.capture_variant) == (variant, capture)
    assert [n.params["n"] for n in graph.nodes if n.family == "linear"] == [32, 32, 32, 32]
    if mask in ("all_pass", "causal") or causal:
        assert any("attention" in a for a in graph.meta["assumptions"])


def seq_dynamic_export(module: nn.Module, seq: int, width: int) -> bytes:
    """TorchScript's export of ``module`` at sequence ``seq``, with the batch and sequence dims
    symbolic (``batch``, ``seq``), as a user exports a model to predict it at other lengths."""
    return export_named(module, (torch.randn(1, seq, width),), ["x"], {"x": {0: "batch", 1: "seq"}})


@pytest.mark.parametrize("exported,predicted", [(320, None), (16, 512)])
def test_is_causal_stays_causal_past_the_folding_limit(exported: int, predicted: int | None) -> None:
    # is_causal=True is exported as Expand(1, [L, S]) -> Trilu -> Equal(0) -> Where(-inf, 0); from
    # 256 x 256 on that mask is over the folding's 65,536 elements, and its chain is replayed on a
    # small square instead (onnx_mask_pattern): it stays is_causal, not a full boolean mask
    module = Attention("none", causal=True)
    graph = (graph_from_onnx(export(module, torch.randn(1, exported, 32))) if predicted is None
             else graph_from_onnx(seq_dynamic_export(module, exported, 32), batch=1, dims={"seq": predicted}))
    seq = predicted or exported
    [sdpa] = [n for n in graph.nodes if n.family == "sdpa"]
    assert sdpa.params == dict(heads=4, seq_q=seq, seq_kv=seq, head_dim=8, causal=1)
    assert (sdpa.variant, sdpa.capture_variant) == ("", "")
    assert not [n for n in graph.nodes if n.op in ("Trilu", "Where", "Expand", "Equal") and n.kind != "free"]


class SlidingWindow(nn.Module):
    """Attention through a banded mask (tril & triu(-16)): local attention, not causal."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        ones = torch.ones(t, t, dtype=torch.bool)
        q = x.view(1, t, 4, 8).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, q, q, attn_mask=ones.tril() & ones.triu(-16))
        return y.transpose(1, 2).reshape(1, t, 32)


def test_a_sliding_window_mask_too_large_to_fold_is_not_taken_for_causal() -> None:
    # replayed on a small square, the band triu(-16) would fill it and tril & it pass for causal
    for seq, dims in ((64, None), (16, {"seq": 512})):
        graph = (graph_from_onnx(export(SlidingWindow(), torch.randn(1, seq, 32))) if dims is None
                 else graph_from_onnx(seq_dynamic_export(SlidingWindow(), seq, 32), batch=1, dims=dims))
        assert [(n.variant, n.params["causal"]) for n in graph.nodes if n.family == "sdpa"] == [("bool_full", 0)]


def test_a_padding_mask_too_large_to_fold_stays_a_real_mask() -> None:
    graph = graph_from_onnx(export(Attention("padding"), torch.randn(1, 320, 32)))
    [sdpa] = [n for n in graph.nodes if n.family == "sdpa"]
    assert sdpa.params["causal"] == 0 and sdpa.variant == "bool_padding"


def dynamo_attention(mask: bool, unit_scale: bool = False) -> bytes:
    """What the dynamo exporter writes for F.scaled_dot_product_attention(q, k, v[, bool mask]):
    k transposed by Reshape -> Transpose -> Reshape, q and k each scaled by sqrt(scale), the bool
    mask made additive by a Where, a NaN guard after the Softmax. At ``scale=1.0`` (transformers'
    OPT) its optimizer drops the two products with 1."""
    scale = np.array(8 ** -0.25, np.float32)
    nodes = [helper.make_node("Reshape", ["k", "flat"], ["k3"]),
             helper.make_node("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["kt3", "unflat"], ["kt" if unit_scale else "ktr"])]
    nodes += [] if unit_scale else [helper.make_node("Mul", ["q", "s"], ["qs"]),
                                    helper.make_node("Mul", ["ktr", "s"], ["kt"])]
    nodes += [helper.make_node("MatMul", ["q" if unit_scale else "qs", "kt"], ["scores"])]
    if mask:
        nodes += [helper.make_node("Expand", ["keep", "mask_shape"], ["keep4"]),
                  helper.make_node("Where", ["keep4", "zero", "minus_inf"], ["additive"]),
                  helper.make_node("Add", ["scores", "additive"], ["masked"])]
    nodes += [helper.make_node("Softmax", ["masked" if mask else "scores"], ["p"], axis=-1),
              helper.make_node("IsNaN", ["p"], ["nan"]),
              helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
              helper.make_node("MatMul", ["pg", "v"], ["out"], name="node_scaled_dot_product_attention")]
    weights = {"flat": ints(8, 6, 8), "unflat": ints(2, 4, 8, 6), "s": scale, "zero": np.array(0.0, np.float32),
               "minus_inf": np.array(-np.inf, np.float32), "mask_shape": ints(2, 1, 6, 6),
               "keep": np.ones((1, 1, 1, 6), dtype=bool)}
    return model(nodes, {"q": [2, 4, 6, 8], "k": [2, 4, 6, 8], "v": [2, 4, 6, 8]}, "out", weights)


@pytest.mark.parametrize("mask,unit_scale", [(False, False), (True, False), (False, True), (True, True)])
def test_the_dynamo_exporters_attention_is_one_sdpa(mask: bool, unit_scale: bool) -> None:
    graph = graph_from_onnx(dynamo_attention(mask, unit_scale))
    assert calls(graph) == [("kernel", "sdpa", "")]
    node = graph.nodes[0]
    assert node.params == dict(heads=4, seq_q=6, seq_kv=6, head_dim=8, causal=0)
    assert node.capture_variant == ("math" if mask else "")  # the all-pass mask: see the test above
    # the mask's Expand and Where, built for it alone, are gone
    assert len(node.merged) == (11 if mask else 10) - (2 if unit_scale else 0)


def without_data(data: bytes, name: str) -> bytes:
    """``data`` (an ONNX model) with stored tensor ``name``'s data stripped, as a weight-stripped
    export leaves it: its dims and a reference to external data that is not there."""
    import onnx

    m = onnx.load_from_string(data)
    tensor = next(t for t in m.graph.initializer if t.name == name)
    for field in ("raw_data", "int32_data", "float_data", "int64_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "stripped-weights.bin"
    return m.SerializeToString()


def test_a_mask_built_from_stripped_data_is_costed_as_passed_and_says_so() -> None:
    """The dynamo exporter stores a decoder's causal mask as a bool tensor; stripped with the
    weights, what it masks cannot be read: costed as a mask PyTorch passes, and said."""
    stripped = graph_from_onnx(without_data(dynamo_attention(mask=True), "keep"))
    node = next(n for n in stripped.nodes if n.family == "sdpa")
    assert node.params["causal"] == 0 and node.variant in ("bool_padding", "bool_full") and not node.capture_variant
    assert any("whose data is not read" in a for a in stripped.meta["assumptions"])
    # the same mask with its data masks nothing (see above), and no unread data is said
    whole = graph_from_onnx(dynamo_attention(mask=True))
    assert not any("is not read" in a for a in whole.meta.get("assumptions", []))


def test_unscaled_attention_written_by_hand_stays_its_kernels() -> None:
    """softmax(q @ k.transpose(-2, -1)) @ v with no scale at all: k's transpose is one Transpose, as
    an export of hand-written code shows it, so it is the matmuls and softmax PyTorch runs."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["out"])]
    graph = graph_from_onnx(model(nodes, {"q": [2, 4, 6, 8], "k": [2, 4, 6, 8], "v": [2, 4, 6, 8]}, "out", {}))
    assert [n.family for n in graph.nodes if n.kind == "kernel"] == ["matmul", "softmax", "matmul"]


class HandAttention(nn.Module):
    """Attention written by hand (scores scaled once, after the product), as Swin and older models."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = k = v = x
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(x.shape[-1]))
        return scores.softmax(dim=-1) @ v


def test_attention_written_by_hand_is_the_kernels_pytorch_runs_for_it() -> None:
    graph = graph_from_onnx(export(HandAttention(), torch.randn(2, 4, 6, 8)))
    assert [n.family for n in graph.nodes if n.kind == "kernel" and not n.launched_by] == [
        "matmul", "activation", "softmax", "matmul"]
    assert not [n for n in graph.nodes if n.family == "sdpa"]


class SelfAttention(nn.Module):
    def __init__(self, embed: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def test_multi_head_attention_is_the_kernels_of_its_fast_path() -> None:
    """The export shows the slow path with its batch_first transposes; PyTorch runs the fast path
    in eval: the packed projection, attention and output projection, no transposes."""
    graph = graph_from_onnx(export(SelfAttention(), torch.randn(2, 8, 32)))
    assert [(n.kind, n.family, n.variant, n.params) for n in graph.nodes] == [
        ("kernel", "linear", "", dict(tokens=8, k=32, n=96)),
        ("kernel", "sdpa", "", dict(heads=4, seq_q=8, seq_kv=8, head_dim=8, causal=0)),
        ("kernel", "linear", "", dict(tokens=8, k=32, n=32))]
    assert any("MultiheadAttention" in a for a in graph.meta["assumptions"])


def test_multi_head_attention_with_a_head_dim_flash_cannot_take_runs_unfused() -> None:
    """Head dim 6 (not a multiple of 8): the fast path's unfused route, as the torch importer costs it."""
    graph = graph_from_onnx(export(SelfAttention(24, 4), torch.randn(2, 8, 24)))
    assert [n.family for n in graph.nodes] == ["linear", "activation", "matmul", "softmax", "matmul", "transpose",
                                               "linear"]


def test_an_exporters_as_strided_makes_no_node() -> None:
    """The dynamo exporter writes adaptive_avg_pool2d's channels-last output as a ReduceMean, a
    Reshape to one dim and a Gather by indices it computes from the shape (as_strided)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1, -2], keepdims=1),
             helper.make_node("Reshape", ["m", "flat"], ["f"]),
             helper.make_node("Range", ["zero", "c", "one"], ["r"]),
             helper.make_node("Mul", ["r", "one"], ["idx1"]),
             helper.make_node("Unsqueeze", ["idx1", "axes"], ["idx"]),
             helper.make_node("Gather", ["f", "idx"], ["out"], axis=0, name="node_as_strided")]
    weights = {"flat": ints(-1), "zero": np.array(0, np.int64), "c": np.array(96, np.int64),
               "one": np.array(1, np.int64), "axes": ints(0, 2, 3)}
    graph = graph_from_onnx(model(nodes, {"x": [1, 96, 7, 7]}, "out", weights))
    assert calls(graph) == [("kernel", "pool", "adaptive_avg")]


# ---------------------------------------------------------------------------- unbind


class Unbind(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = x.permute(2, 0, 1, 3).unbind(0)
        return q * k + v


class Select(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(2, 0, 1, 3)
        return x[0] * x[1] + x[2]


def test_unbind_is_one_view_call() -> None:
    """``unbind`` is one call; the TorchScript exporter writes it as a Split and a Squeeze each."""
    graph = graph_from_onnx(export(Unbind(), torch.randn(2, 5, 3, 8)))
    assert [(n.op, n.kind) for n in graph.nodes] == [("Transpose", "free"), ("unbind", "free"),
                                                     ("Mul", "kernel"), ("Add", "kernel")]


def test_selects_stay_a_call_each() -> None:
    graph = graph_from_onnx(export(Select(), torch.randn(2, 5, 3, 8)))
    assert [n.kind for n in graph.nodes].count("free") == 4  # the permute and three selects


@pytest.mark.parametrize("pieces,covered", [(3, True), (2, False)])
def test_the_dynamo_exporters_unbind_is_one_view_call(pieces: int, covered: bool) -> None:
    """The dynamo exporter writes ``unbind(0)`` as a Slice of one index and a Squeeze per index.
    Slices that leave an index out are no unbind: each stays a call, and so does each Squeeze."""
    nodes = []
    for j in range(pieces):
        nodes += [helper.make_node("Slice", ["x", f"s{j}", f"e{j}", "axis0", "one"], [f"sl{j}"]),
                  helper.make_node("Squeeze", [f"sl{j}", "axis0"], [f"q{j}"], name=f"node_unbind__{j}")]
    nodes += [helper.make_node("Mul", ["q0", "q1"], ["m"])] + (
        [helper.make_node("Add", ["m", "q2"], ["out"])] if pieces == 3 else [helper.make_node("Relu", ["m"], ["out"])])
    weights = {f"s{j}": ints(j) for j in range(pieces)} | {f"e{j}": ints(j + 1) for j in range(pieces)}
    weights |= {"axis0": ints(0), "one": ints(1)}
    graph = graph_from_onnx(model(nodes, {"x": [3, 1, 4, 8]}, "out", weights))
    free = [n.op for n in graph.nodes if n.kind == "free"]
    assert free == (["unbind"] if covered else ["Slice", "Squeeze", "Slice", "Squeeze"])


# ---------------------------------------------------------------------------- indexing


class Indexing(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x[:, :4, 2:, 0])


class TwoIndexings(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x[:, :4]).exp()[:, :, 2:]


def test_an_indexing_expression_is_one_call() -> None:
    """``x[:, :4, 2:, 0]`` is one __getitem__ call; the exporter writes two Slices and a Gather."""
    graph = graph_from_onnx(export(Indexing(), torch.randn(2, 6, 5, 3)))
    assert [(n.op, n.kind) for n in graph.nodes] == [("__getitem__", "free"), ("Relu", "kernel")]


def test_indexings_with_a_kernel_between_stay_two_calls() -> None:
    graph = graph_from_onnx(export(TwoIndexings(), torch.randn(2, 6, 5, 3)))
    assert [n.kind for n in graph.nodes] == ["free", "kernel", "kernel", "free"]
