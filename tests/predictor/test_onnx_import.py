"""The ONNX importer: small torch modules exported to ONNX bytes here, then read back as graphs."""

from __future__ import annotations

import io
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from predictor.graph import Graph  # noqa: E402
from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402


def export(module: nn.Module, *example: Any, dynamic: dict[int, str] | None = None) -> bytes:
    """ONNX bytes of ``module`` from the TorchScript exporter (which needs no onnxscript)."""
    names = [f"in{i}" for i in range(len(example))]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(module.eval(), example, buf, dynamo=False, input_names=names,
                          dynamic_axes={n: dynamic for n in names} if dynamic else None)
    return buf.getvalue()


def kernels(graph: Graph) -> list[tuple[str | None, str, dict[str, int]]]:
    return [(n.family, n.variant, n.params) for n in graph.nodes if n.kind == "kernel"]


def onnx_ops(data: bytes) -> dict[str, str]:
    """ONNX node name -> op type, to check what a merged node absorbed."""
    return {n.name: n.op_type for n in onnx.load_from_string(data).graph.node}


# ---------------------------------------------------------------------------- CNN

def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.BatchNorm2d(3),  # on the input: the exporter cannot fold it into a conv
        nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Hardswish(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def test_cnn_maps_to_families_with_exact_per_sample_params() -> None:
    data = export(small_cnn(), torch.randn(2, 3, 32, 32))
    graph = graph_from_onnx(data, name="cnn")
    assert graph.name == "cnn" and graph.batch == 2 and graph.source == "onnx"
    # The exporter folds an eval-mode BatchNorm that follows a conv into the conv's weights; PyTorch
    # runs both, and so does the graph: the conv without a bias of its own, then the batch norm.
    assert kernels(graph) == [
        ("batch_norm", "", dict(c=3, h=32, w=32)),
        ("conv2d", "nobias", dict(c_in=3, c_out=16, h=32, w=32, kernel=3, stride=2, groups=1)),
        ("batch_norm", "", dict(c=16, h=16, w=16)),
        ("activation", "relu", dict(elements=16 * 16 * 16)),
        ("pool", "max", dict(c=16, h=16, w=16, kernel=3, stride=2)),
        ("conv2d", "", dict(c_in=16, c_out=16, h=8, w=8, kernel=3, stride=1, groups=16)),
        ("activation", "hardswish", dict(elements=16 * 8 * 8)),
        ("pool", "adaptive_avg", dict(c=16, h=8, w=8, kernel=1, stride=1)),
        ("linear", "", dict(tokens=1, k=16, n=10)),
    ]
    by_op = {n.op: n for n in graph.nodes}
    assert by_op["Flatten"].kind == "free"
    assert by_op["Conv"].layout == "nchw" and by_op["Conv"].dtype == "float32"
    assert by_op["Gemm"].outputs == [[2, 10]]  # full shapes, batch included
    assert not [n for n in graph.nodes if n.kind == "fallback"]
    assert len(graph.meta["assumptions"]) == 1 and "folded" in graph.meta["assumptions"][0]
    assert Graph.from_json(graph.to_json()).nodes == graph.nodes


def test_a_path_is_read_like_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny_cnn.onnx"
    path.write_bytes(export(small_cnn(), torch.randn(1, 3, 16, 16)))
    graph = graph_from_onnx(path)
    assert graph.name == "tiny_cnn"
    assert kernels(graph)[1] == ("conv2d", "nobias", dict(c_in=3, c_out=16, h=16, w=16, kernel=3, stride=2, groups=1))
    with pytest.raises(ValueError, match="no such ONNX file"):
        graph_from_onnx(tmp_path / "absent.onnx")


class Mixed(nn.Module):
    """One of each remaining family, as PyTorch exports them."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.ln, self.gn = nn.Embedding(50, 16), nn.LayerNorm(16), nn.GroupNorm(4, 8)

    def forward(self, ids: torch.Tensor, img: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tokens = self.emb(ids)
        joined = torch.cat([self.gn(img), img], dim=1)
        return (self.ln(tokens).mean(-1), joined.transpose(1, 2).contiguous(), nn.functional.max_pool2d(img, 2),
                img.softmax(dim=1))


def test_embedding_norms_mean_concat_transpose_and_pool() -> None:
    graph = graph_from_onnx(export(Mixed(), torch.randint(0, 50, (2, 6)), torch.randn(2, 8, 4, 4)))
    assert kernels(graph) == [
        ("embedding", "", dict(vocab=50, c=16, tokens=6)),
        ("group_norm", "", dict(c=8, h=4, w=4, groups=4)),  # exported as Reshape, InstanceNorm, Reshape
        ("concat", "", dict(inputs=2, c=8, h=4, w=4)),
        ("layer_norm", "", dict(tokens=6, c=16)),
        ("mean", "", dict(rows=6, c=16)),
        # No padding, like torch's MaxPool2d(2): costed as a pool, as the torch importer does.
        ("pool", "max", dict(c=8, h=4, w=4, kernel=2, stride=2)),
    ]
    # .transpose(1, 2).contiguous() as a graph output: the export keeps the transpose only, a view.
    assert [n.kind for n in graph.nodes if n.op == "Transpose"] == ["free"]
    # A softmax over channels is not the catalogue's (last-axis) softmax.
    assert [(n.op, n.elements_per_sample) for n in graph.nodes if n.kind == "fallback"] == [("Softmax", 256)]


# ---------------------------------------------------------------------------- batch

def test_symbolic_batch_takes_the_batch_argument_and_params_stay_per_sample() -> None:
    data = export(small_cnn(), torch.randn(2, 3, 32, 32), dynamic={0: "batch"})
    assert onnx.load_from_string(data).graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    default, eight = graph_from_onnx(data), graph_from_onnx(data, batch=8)
    assert default.batch == 1 and eight.batch == 8
    conv = [g.nodes[[n.op for n in g.nodes].index("Conv")] for g in (default, eight)]
    assert conv[0].outputs == [[1, 16, 16, 16]] and conv[1].outputs == [[8, 16, 16, 16]]
    fixed = export(small_cnn(), torch.randn(2, 3, 32, 32))
    assert kernels(default) == kernels(eight) == kernels(graph_from_onnx(fixed))
    # A fixed batch keeps its shapes; the argument only sets the batch the graph is predicted at.
    again = graph_from_onnx(fixed, batch=8)
    assert again.batch == 8 and kernels(again) == kernels(eight)


def test_a_symbolic_dimension_other_than_the_batch_is_set_by_name_or_refused_naming_it() -> None:
    data = export(nn.Linear(8, 4), torch.randn(2, 5, 8), dynamic={0: "batch", 1: "seq"})
    with pytest.raises(ValueError, match=r"input 'in0' has symbolic dim 'seq' at axis 1: set it with --dim seq=N"):
        graph_from_onnx(data)
    graph = graph_from_onnx(data, batch=2, dims={"seq": 7})
    assert kernels(graph) == [("linear", "", {"tokens": 7, "k": 8, "n": 4})]


@pytest.mark.parametrize("batch", [0, -1, 1.5])
def test_a_bad_batch_is_refused(batch: Any) -> None:
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        graph_from_onnx(export(nn.ReLU(), torch.randn(1, 4)), batch=batch)


# ---------------------------------------------------------------------------- kernel detection

class HandAttention(nn.Module):
    """Attention written out by hand, as older models do: PyTorch runs it call by call."""

    def __init__(self, embed: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(embed, 3 * embed), nn.Linear(embed, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, e = x.shape
        q, k, v = (part.view(b, t, self.heads, e // self.heads).transpose(1, 2)
                   for part in self.qkv(x).split(e, dim=-1))
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(e // self.heads))
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, e)
        return self.out(y)


def test_hand_written_attention_stays_the_calls_pytorch_makes() -> None:
    """Not one sdpa (that is F.scaled_dot_product_attention's export: test_onnx_patterns): a
    batched matmul, the scale, a softmax and a second matmul, as PyTorch runs them."""
    graph = graph_from_onnx(export(HandAttention(), torch.randn(2, 8, 32), dynamic={0: "batch"}), batch=3)
    assert not [n for n in graph.nodes if n.family == "sdpa"]
    assert [n.family for n in graph.nodes if n.kind == "kernel" and not n.launched_by] == [
        "linear", "matmul", "activation", "softmax", "matmul", "activation", "linear"]
    assert [n.params for n in graph.nodes if n.family == "linear"] == [dict(tokens=8, k=32, n=96),
                                                                        dict(tokens=8, k=32, n=32)]
    # The copy that makes the attention output viewable again (the reshape after the transpose).
    assert graph.nodes[-2].layout == "strided" and graph.nodes[-2].params == {"elements": 8 * 32}


class ErfGelu(nn.Module):
    def __init__(self, half_first: bool) -> None:
        super().__init__()
        self.half_first, self.proj = half_first, nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        erf = 1.0 + torch.erf(y / math.sqrt(2.0))
        return y * 0.5 * erf if self.half_first else y * erf * 0.5


@pytest.mark.parametrize("half_first", [True, False])
def test_gelu_written_with_erf_becomes_one_gelu_node(half_first: bool) -> None:
    data = export(ErfGelu(half_first), torch.randn(2, 4, 16))
    graph = graph_from_onnx(data)
    gelu = [n for n in graph.nodes if n.variant == "gelu"]
    assert len(gelu) == 1 and gelu[0].family == "activation" and gelu[0].params == dict(elements=64)
    ops = onnx_ops(data)
    assert sorted(ops[name] for name in gelu[0].merged) == ["Add", "Div", "Erf", "Mul", "Mul"]
    assert [n.family for n in graph.nodes if n.kind != "free"] == ["linear", "activation"]


def test_x_times_sigmoid_x_becomes_one_silu_node() -> None:
    graph = graph_from_onnx(export(nn.SiLU(), torch.randn(2, 3, 8)))
    assert [(n.op, n.family, n.variant, n.params) for n in graph.nodes] == [
        ("Silu", "activation", "silu", dict(elements=24))]
    assert len(graph.nodes[0].merged) == 2


# ---------------------------------------------------------------------------- free and fallback

class ShapeArithmetic(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.view(x.shape[0], x.shape[1] // 2, -1)  # Shape, Gather, Div, Unsqueeze, Concat, Reshape
        return torch.relu(y).flatten(1)


def test_shape_arithmetic_makes_no_node_and_views_are_free() -> None:
    data = export(ShapeArithmetic(), torch.randn(2, 4, 6), dynamic={0: "batch"})
    ops = set(onnx_ops(data).values())
    assert {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"} <= ops  # the test has something to test
    graph = graph_from_onnx(data, batch=4)
    # PyTorch computes the shape in Python: no call, no node; the view and the flatten are calls.
    assert [(n.op, n.kind, n.family) for n in graph.nodes] == [
        ("Reshape", "free", None), ("Relu", "kernel", "activation"), ("Flatten", "free", None)]


class CumulativeSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1) * 2.0


def test_an_op_without_a_family_is_a_listed_fallback() -> None:
    graph = graph_from_onnx(export(CumulativeSum(), torch.randn(2, 4, 8)))
    fallback = [n for n in graph.nodes if n.kind == "fallback"]
    assert [n.op for n in fallback] == ["CumSum"]
    assert fallback[0].elements_per_sample == 32 + 32  # input read plus output written, per sample
    # The scalar Mul has no family of its own: costed like a unary activation, keeping its op name.
    assert [(n.op, n.family, n.variant) for n in graph.nodes if n.kind == "kernel"] == [
        ("Mul", "activation", "relu")]


def test_windows_strided_unevenly_fall_back_and_an_unstrided_pool_strides_by_one() -> None:
    """A (1, 2) stride does half the work of 1: costing it as its first stride was silently wrong,
    so it is a listed fallback. ONNX's default stride is 1, not PyTorch's window: a pool written
    without ``strides`` (a hand-made graph, another exporter) slides by one."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 32, 32])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8, 3, 3], [0.0] * 8 * 8 * 9)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="even", pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Conv", ["x", "w"], ["b"], name="uneven", pads=[1] * 4, strides=[1, 2]),
             helper.make_node("MaxPool", ["x"], ["c"], name="unstrided", kernel_shape=[3, 3]),
             helper.make_node("MaxPool", ["x"], ["d"], name="strided", kernel_shape=[3, 3], strides=[3, 3])]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 8, h, w])
               for name, h, w in (("a", 16, 16), ("b", 32, 16), ("c", 30, 30), ("d", 10, 10))]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outputs, initializer=[w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = graph_from_onnx(model.SerializeToString(), batch=2)
    by_name = {n.name: n for n in graph.nodes}
    assert (by_name["even"].kind, by_name["even"].params["stride"]) == ("kernel", 2)
    assert by_name["uneven"].kind == "fallback"
    assert (by_name["unstrided"].family, by_name["unstrided"].params["stride"]) == ("pool", 1)
    assert by_name["unstrided"].outputs == [[2, 8, 30, 30]]  # what ONNX's shape inference says ran
    assert by_name["strided"].params["stride"] == 3


def test_node_names_are_onnx_names_when_unique_else_index_and_op() -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="dup"), helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Sin", ["b"], ["c"]), helper.make_node("Tanh", ["c"], ["y"], name="last")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = graph_from_onnx(model.SerializeToString(), batch=2)
    assert [n.name for n in graph.nodes] == ["0:Relu", "1:Relu", "2:Sin", "last"]
    assert [n.outputs for n in graph.nodes] == [[[2, 4]]] * 4
    assert graph.name == "g" and graph.batch == 2


# ---------------------------------------------------------------------------- refusals

def test_a_cycle_is_refused_with_the_checkers_whole_message() -> None:
    """onnx's checker writes its complaint over three lines; the first alone ended at 'of node:'."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node("Add", ["x", "z"], ["w"], name="a"), helper.make_node("Relu", ["w"], ["z"], name="b"),
             helper.make_node("Relu", ["w"], ["y"], name="c")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="input 'z' of node: name: a OpType: Add is not output of any previous nodes"):
        graph_from_onnx(model.SerializeToString())


@pytest.mark.parametrize("op", ["Identity", "Constant"])
def test_a_model_that_runs_nothing_is_refused_in_plain_words(op: str) -> None:
    from onnx import TensorProto, helper

    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    value = helper.make_tensor("v", TensorProto.FLOAT, [1, 4], [0.0] * 4)
    node = (helper.make_node("Identity", ["x"], ["y"]) if op == "Identity" else
            helper.make_node("Constant", [], ["y"], value=value))
    model = helper.make_model(helper.make_graph([node], "g", [x] if op == "Identity" else [], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="^the ONNX model runs nothing on the device: its 1 node") as caught:
        graph_from_onnx(model.SerializeToString())
    assert "validation error" not in str(caught.value)


@pytest.mark.parametrize("data", [b"", b"this is not an ONNX model at all", bytes(range(256)) * 4,
                                  b"\x08\x07"])  # the last parses: an ir_version and nothing else
def test_garbage_bytes_are_not_a_valid_onnx_model(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a valid ONNX model") as caught:
        graph_from_onnx(data)
    error = caught.value  # protobuf's own error is neither the cause nor shown as the context
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_truncated_model_bytes_and_files_are_not_a_valid_onnx_model(tmp_path: Path) -> None:
    data = export(small_cnn(), torch.randn(1, 3, 16, 16))
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        graph_from_onnx(data[: len(data) // 2])
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) - 7])
    with pytest.raises(ValueError, match=f"{path}.*not a valid ONNX model"):
        graph_from_onnx(path)


def test_an_attribute_from_a_newer_opset_is_refused_saying_how_to_export_it() -> None:
    """torch 2.11's dynamo exporter writes opset 18's Split num_outputs into an opset 17 model (its
    GPT-2 export): the checker refuses it, and the error says what to do."""
    from onnx import TensorProto, helper

    split = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
    graph = helper.make_graph([split], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 2]) for y in ("a", "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match=r"num_outputs for operator Split\): the node uses an attribute that "
                                         r"opset 17 does not define.*opset_version=18 or later"):
        graph_from_onnx(model.SerializeToString())
    model.opset_import[0].version = 18  # where num_outputs is defined, it imports
    assert [n.op for n in graph_from_onnx(model.SerializeToString()).nodes] == ["Split"]




def external_model(location: str, where: str) -> Any:
    """A valid model whose weight W lives 'outside' at ``location``: in an initializer or a Constant."""
    from onnx import TensorProto, helper

    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    if where == "constant":
        nodes.insert(0, helper.make_node("Constant", [], ["W"], value=w))
    graph = helper.make_graph(nodes, "external", [x], [y], initializer=[w] if where == "initializer" else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("where", ["initializer", "constant"])
@pytest.mark.parametrize("location", ["/etc/passwd", "weights_that_do_not_exist.bin", "../../outside.bin"])
def test_external_data_is_read_as_dims_without_opening_it(where: str, location: str, tmp_path: Path,
                                                         opened: list[str]) -> None:
    model = external_model(location, where)
    path = tmp_path / "external.onnx"
    path.write_bytes(model.SerializeToString())
    for source in (model.SerializeToString(), path, str(path)):
        graph = graph_from_onnx(source, batch=1)
        assert [(family, params) for family, _, params in kernels(graph)] == [("linear", {"tokens": 1, "k": 4, "n": 4})]
    assert not [p for p in opened if "passwd" in p or "weights_that_do_not_exist" in p or "outside.bin" in p]
    assert str(path) in opened  # the hook does see the files that are opened


def test_predictor_imports_without_onnx_at_module_level() -> None:
    code = ("import sys; import predictor.importers.onnx_graph; "
            "assert 'onnx' not in sys.modules, 'onnx imported at module level'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
