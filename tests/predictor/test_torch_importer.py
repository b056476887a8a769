"""The torch importer: one CPU forward of a small module becomes a checked graph, every call a node
costed the right way (kernel, free view, or proxy); and predictor itself never imports torch."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from predictor.graph import Graph

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from predictor.importers.torch_module import graph_from_module  # noqa: E402

BATCH, TOKENS, EMBED, HEADS = 2, 6, 32, 4


class Small(nn.Module):
    """conv -> bn -> relu -> flatten -> linear -> view -> attention -> scale -> sin."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1, stride=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, TOKENS * EMBED)
        self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.flatten(x, 1)
        x = self.fc(x).view(x.shape[0], TOKENS, EMBED)
        x, _ = self.attn(x, x, x, need_weights=False)
        x = x * 0.5
        return torch.sin(x)


@pytest.fixture(scope="module")
def graph() -> Graph:
    model = Small().eval()
    return graph_from_module(model, torch.randn(BATCH, 3, 4, 4), name="small")


def kernels(graph: Graph, family: str) -> list:
    return [n for n in graph.nodes if n.kind == "kernel" and n.family == family]


def test_graph_checks_and_keeps_issue_order(graph: Graph) -> None:
    assert Graph.from_json(graph.to_json()).nodes == graph.nodes  # what the importer made passes the IR's checks
    assert (graph.name, graph.batch, graph.source) == ("small", BATCH, "torch")
    families = [n.family for n in graph.nodes if n.kind == "kernel"]
    assert families == ["conv2d", "batch_norm", "activation", "linear",
                        "linear", "sdpa", "linear", "activation", "activation"]
    assert len({n.name for n in graph.nodes}) == len(graph.nodes)


def test_conv_bn_relu_linear_have_per_sample_params(graph: Graph) -> None:
    (conv,) = kernels(graph, "conv2d")
    assert conv.params == dict(c_in=3, c_out=8, h=4, w=4, kernel=3, stride=1, groups=1)
    assert conv.layout == "nchw"
    (bn,) = kernels(graph, "batch_norm")
    assert bn.params == dict(c=8, h=4, w=4)
    relu = kernels(graph, "activation")[0]
    assert (relu.op, relu.variant, relu.params) == ("relu", "relu", {"elements": 8 * 4 * 4})
    fc = kernels(graph, "linear")[0]
    assert fc.op == "linear" and fc.params == {"tokens": 1, "k": 128, "n": TOKENS * EMBED}
    assert fc.outputs == [[BATCH, TOKENS * EMBED]]


def test_views_are_free_nodes(graph: Graph) -> None:
    free = {n.op for n in graph.nodes if n.kind == "free"}
    assert {"flatten", "view"} <= free
    for node in graph.nodes:
        if node.kind == "free":
            assert node.family is None and node.params == {}
    assert not [n for n in graph.nodes if n.kind == "fallback"]


def test_multihead_attention_becomes_projection_attention_projection(graph: Graph) -> None:
    parts = [n for n in graph.nodes if n.merged]
    assert [n.family for n in parts] == ["linear", "sdpa", "linear"]
    assert [n.name.rsplit("/", 1)[1] for n in parts] == ["qkv", "attention", "out_proj"]
    assert len({tuple(n.merged) for n in parts}) == 1  # one source call
    assert not any(n.launched_by for n in parts)  # three aten operators, each dispatched
    qkv, attention, out = parts
    assert qkv.params == {"tokens": TOKENS, "k": EMBED, "n": 3 * EMBED}
    assert attention.params == dict(heads=HEADS, seq_q=TOKENS, seq_kv=TOKENS, head_dim=EMBED // HEADS, causal=0)
    assert out.params == {"tokens": TOKENS, "k": EMBED, "n": EMBED}


def test_elementwise_calls_without_a_family_are_costed_as_proxies(graph: Graph) -> None:
    scale, sin = kernels(graph, "activation")[1:]
    assert sin.op == "sin"
    assert (sin.family, sin.variant) == ("activation", "relu")
    assert sin.params == {"elements": TOKENS * EMBED}
    assert scale.op in ("mul", "__mul__") and scale.params == {"elements": TOKENS * EMBED}


@pytest.mark.parametrize("activation", [nn.PReLU(), nn.SELU(), nn.CELU(), nn.Mish(), nn.LogSigmoid(),
                                        nn.LeakyReLU(0.1, inplace=True), nn.ELU(inplace=True), nn.SELU(inplace=True),
                                        nn.Mish(inplace=True)])
def test_activations_without_a_variant_are_elementwise_kernels_not_fallbacks(activation: nn.Module) -> None:
    """As the ONNX importer costs PRelu, Selu, Celu, Mish and LogSigmoid: an activation's kernel
    over the output, not a fallback estimated from bytes; and one written in place is a kernel
    too (its output is its input's storage, which the view rule took for a view)."""
    graph = graph_from_module(activation.eval(), torch.randn(BATCH, 8, 4, 4), name="act")
    assert [(n.kind, n.family, n.variant, n.params) for n in graph.nodes] == [
        ("kernel", "activation", "relu", {"elements": 8 * 4 * 4})]


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 4, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y += 1
        y /= 3
        y.clamp_(0, 1)
        y.masked_fill_(y > 0.5, 0.0)
        y.unsqueeze_(0)
        self.cache.index_copy_(1, torch.tensor([1]), y[:, :1, :])
        return F.dropout(y, 0.1, training=False, inplace=True)


def test_an_in_place_write_is_a_kernel_and_an_in_place_view_is_free() -> None:
    """An in-place call's output is its input's storage, as a view's is; but a kernel wrote it
    (a boolean attention mask's masked_fill_, ``y += 1``), where ``unsqueeze_`` only says so and a
    dropout in eval does nothing. A write at indices (a KV cache's ``index_copy_``) stays without a
    kernel, as the ONNX importer leaves the ScatterND an export makes of it."""
    graph = graph_from_module(InPlace().eval(), torch.randn(BATCH, 8), name="in_place")
    assert [(n.op, n.kind) for n in graph.nodes if n.op.endswith("_") and n.op[0] != "_" or n.op == "dropout"] == [
        ("add_", "kernel"), ("div_", "kernel"), ("clamp_", "kernel"), ("masked_fill_", "kernel"),
        ("unsqueeze_", "free"), ("index_copy_", "free"), ("dropout", "free")]
    written = [n for n in graph.nodes if n.op in ("add_", "div_", "clamp_", "masked_fill_")]
    assert all(n.params == {"elements": 8} for n in written)


class TwoInputs(nn.Module):
    """Tokens and an additive attention mask of [tokens, tokens], as nn.MultiheadAttention takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)
        self.fc = nn.Linear(EMBED, EMBED)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(self.attn(x, x, x, attn_mask=mask, need_weights=False)[0])


def test_an_example_of_several_arguments_is_passed_as_the_forward_takes_them() -> None:
    """A tuple is the positional arguments and a dict the keyword ones; the batch is the first
    tensor's, not the mask's [tokens, tokens]."""
    model, x, mask = TwoInputs().eval(), torch.randn(BATCH, TOKENS, EMBED), torch.zeros(TOKENS, TOKENS)
    positional = graph_from_module(model, (x, mask), name="two")
    keywords = graph_from_module(model, {"x": x, "mask": mask}, name="two")
    assert positional.batch == keywords.batch == BATCH
    assert [(n.family, n.params) for n in positional.nodes] == [(n.family, n.params) for n in keywords.nodes]
    fc = [n for n in positional.nodes if n.family == "linear"][-1]
    assert fc.params["tokens"] == TOKENS  # rows per sample: the batch was not taken as 1
    with pytest.raises(ValueError, match="batch_dim 3 is not an axis of argument 0"):
        graph_from_module(model, (x, mask), name="two", batch_dim=3)


def test_importer_counts_do_not_depend_on_the_batch() -> None:
    model = Small().eval()
    one = graph_from_module(model, torch.randn(1, 3, 4, 4), name="b1")
    five = graph_from_module(model, torch.randn(5, 3, 4, 4), name="b5")
    assert one.batch == 1 and five.batch == 5
    assert [(n.kind, n.family, n.params) for n in one.nodes] == [(n.kind, n.family, n.params) for n in five.nodes]
    assert Counter(n.kind for n in one.nodes) == Counter(n.kind for n in five.nodes)


def test_the_imported_graph_round_trips_as_json(graph: Graph, tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    graph.save(path)
    assert Graph.load(path).nodes == graph.nodes


def test_predictor_does_not_import_torch() -> None:
    code = ("import predictor.predict, predictor.graph, predictor.bundle, predictor.zoo, "
            "predictor.graph_sources, predictor.cli, predictor.importers.torch_module, sys; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


class MaskedAttention(nn.Module):
    """One SDPA call per kind of mask PyTorch dispatches differently."""

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        b, h, t, d = q.shape
        f = torch.nn.functional.scaled_dot_product_attention
        out = f(q, q, q)
        out = out + f(q, q, q, attn_mask=torch.zeros(b, 1, t, t))  # additive float mask
        out = out + f(q, q, q, attn_mask=torch.ones(b, 1, t, t, dtype=torch.bool).tril())
        padding = torch.ones(b, t, dtype=torch.bool)[:, None, None, :].expand(b, 1, t, t)
        out = out + f(q, q, q, attn_mask=padding)
        # transformers 5's vmapped mask: the last dim has stride 0, so only the math path takes it
        strided = torch.ones(t, dtype=torch.bool)[None, None, :, None].expand(b, 1, t, t)
        return out + f(q, q, q, attn_mask=strided)


def test_sdpa_variant_follows_the_mask_pytorch_receives() -> None:
    g = graph_from_module(MaskedAttention(), torch.randn(BATCH, HEADS, TOKENS, 8), name="masks")
    assert [n.variant for n in kernels(g, "sdpa")] == ["", "masked", "bool_full", "bool_padding", "math"]
    # no transformers in this model: the captured forward runs the same kernels
    assert all(n.capture_variant == "" for n in kernels(g, "sdpa"))


def test_capture_variants_are_copied_in_order_and_mismatches_are_noted() -> None:
    from predictor.graph import Node
    from predictor.importers.torch_module import _with_capture_variants

    def attention(variant: str, index: int) -> Node:
        return Node(name=f"{index}:sdpa", op="scaled_dot_product_attention", kind="kernel", family="sdpa",
                    variant=variant, params=dict(heads=2, seq_q=4, seq_kv=4, head_dim=8, causal=0))

    eager = _with_capture_variants(Graph("m", [attention("", 0), attention("", 1)]),
                                   Graph("m", [attention("math", 0), attention("", 1)]))
    assert [n.capture_variant for n in eager.nodes] == ["math", ""]
    assert [n.variant_in("cudagraph") for n in eager.nodes] == ["math", ""]
    assert [n.variant_in("eager") for n in eager.nodes] == ["", ""]
    fresh = _with_capture_variants(Graph("m", [attention("", 0), attention("", 1)]), Graph("m", [attention("math", 0)]))
    assert all(n.capture_variant == "" for n in fresh.nodes)
    assert "capture variants not recorded" in fresh.meta["capture_trace"]


def test_convolution_padding_picks_the_variant_and_output_size() -> None:
    from predictor.catalogue.families import conv_out_hw

    model = nn.Sequential(nn.Conv2d(3, 16, 11, stride=4, padding=2),  # AlexNet's stem: costed unpadded
                          nn.Conv2d(16, 8, 3, stride=2, bias=False),  # Inception's reducing conv
                          nn.Conv2d(8, 8, 3, padding=1),  # 'same'
                          nn.Conv2d(8, 8, (1, 7), padding=(0, 3), bias=False),  # Inception's factorised
                          nn.Conv2d(8, 8, (7, 1), padding=(3, 0), bias=False),
                          nn.Conv2d(8, 8, (1, 7), padding=(0, 3)),  # with a bias: roofline fallback
                          nn.Conv2d(8, 8, (1, 3), padding=(1, 1), bias=False))  # padded both ways: too
    g = graph_from_module(model, torch.randn(BATCH, 3, 64, 64), name="convs")
    assert [(n.kind, n.variant) for n in g.nodes] == [
        ("kernel", "valid"), ("kernel", "valid_nobias"), ("kernel", ""), ("kernel", "row_nobias"),
        ("kernel", "col_nobias"), ("fallback", ""), ("fallback", "")]
    for node in g.nodes[1:5]:  # exact padding: the catalogue's output size is what ran
        assert [node.params["c_out"], *conv_out_hw(node.params, node.variant)] == node.outputs[0][1:]
    assert g.nodes[3].params["kernel"] == 7


def test_windows_strided_or_dilated_unevenly_fall_back() -> None:
    """A (1, 2) stride does half the work of 1, and a (1, 2) dilation widens the window: taking
    the first of each, as the importer did, costed them as another convolution without a word.
    The catalogue's windows are square, strided and dilated alike both ways: the others fall back,
    listed, as an adaptive pool to a size other than 1 x 1 does."""
    model = nn.Sequential(nn.Conv2d(8, 8, 3, stride=(2, 2), padding=1),
                          nn.Conv2d(8, 8, 3, stride=(1, 2), padding=1),
                          nn.Conv2d(8, 8, 3, padding=2, dilation=(1, 2)),
                          nn.MaxPool2d(3, stride=(1, 2)),
                          nn.MaxPool2d((3, 1), stride=1),
                          nn.AvgPool2d(2),
                          nn.AdaptiveAvgPool2d((1, 3)),
                          nn.AdaptiveAvgPool2d((1, 1)))
    g = graph_from_module(model, torch.randn(BATCH, 8, 32, 32), name="windows")
    assert [(n.kind, n.family) for n in g.nodes] == [
        ("kernel", "conv2d"), ("fallback", None), ("fallback", None), ("fallback", None), ("fallback", None),
        ("kernel", "pool"), ("fallback", None), ("kernel", "pool")]
    assert g.nodes[0].params["stride"] == 2 and g.nodes[5].params["stride"] == 2


class WindowAttention(nn.Module):
    """Swin's window attention on a packed qkv, a shifted window (roll) and a cache-style cat."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(EMBED, 3 * EMBED)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.roll(x, (1, 1), (1, 2)).reshape(x.shape[0], -1, EMBED)
        qkv = self.qkv(x).reshape(x.shape[0], -1, 3, HEADS, EMBED // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * 0.5, qkv[1], qkv[2]
        out = (q @ k.transpose(-2, -1)).softmax(-1) @ v
        values = x.view(x.shape[0], -1, HEADS, EMBED // HEADS).transpose(1, 2)  # OPT's: a permuted view
        cache = torch.cat([torch.empty(x.shape[0], HEADS, 0, EMBED // HEADS), values], dim=-2)
        halves = torch.cat([-out[..., 4:], out[..., :4]], dim=-1)  # rotate_half: a cat of slices
        return out + torch.ones(1, 1, 1, EMBED // HEADS), cache, halves


def test_strided_calls_and_the_copies_a_matmul_makes_are_kernels_of_their_own() -> None:
    g = graph_from_module(WindowAttention().eval(), torch.randn(BATCH, 3, 3, EMBED), name="window")
    kernels = [n for n in g.nodes if n.kind == "kernel"]
    summary = [(n.name.split(":", 1)[1], n.family, n.layout) for n in kernels]
    elements = 9 * EMBED  # per sample, of x and of each of q, k, v
    # a roll over two dims is two passes; the reshape of its (contiguous) result is a view
    assert summary[:3] == [("roll/copy0", "activation", "strided"), ("roll", "activation", "strided"),
                           ("linear", "linear", "contiguous")]
    # q * 0.5 reads a slice of the packed projection: the generic (strided) elementwise kernel
    assert summary[3] == ("mul", "activation", "strided")
    # q and k cannot be folded into [batch*heads, 9, 8] without a copy; the scores can, v cannot
    assert summary[4:7] == [("matmul/copy0", "activation", "strided"), ("matmul/copy1", "activation", "strided"),
                            ("matmul", "matmul", "contiguous")]
    assert summary[7][1] == "softmax"
    assert summary[8:10] == [("matmul/copy0", "activation", "strided"), ("matmul", "matmul", "contiguous")]
    copies = [n for n in kernels if "/copy" in n.name]
    assert all(n.params == {"elements": elements} for n in copies)
    assert [n.launched_by for n in copies] == [n.name.split("/")[0] for n in copies]
    assert all(not n.launched_by for n in kernels if "/copy" not in n.name)
    cat_cache, cat_halves = [n for n in kernels if n.op == "cat"]
    assert (cat_cache.family, cat_cache.layout) == ("concat", "strided")
    assert cat_cache.params == {"inputs": 1, "c": HEADS, "h": 9, "w": EMBED // HEADS}
    assert (cat_halves.family, cat_halves.layout) == ("activation", "strided")
    add = next(n for n in kernels if n.op in ("add", "__add__"))
    assert (add.family, add.layout) == ("binary", "strided")  # a broadcast operand
    assert Graph.from_json(g.to_json()).nodes == g.nodes


def test_linear_without_bias_is_its_own_variant() -> None:
    """LLaMA's, Qwen2's and T5's projections have no bias; cuBLAS runs other kernels for them."""

    class Projections(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.with_bias = nn.Linear(EMBED, EMBED)
            self.without = nn.Linear(EMBED, EMBED, bias=False)
            self.weight = nn.Parameter(torch.randn(EMBED, EMBED))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.without(self.with_bias(x)) @ self.weight

    g = graph_from_module(Projections().eval(), torch.randn(BATCH, TOKENS, EMBED), name="proj")
    linears = [n for n in g.nodes if n.family == "linear"]
    assert [n.variant for n in linears] == ["", "nobias", "nobias"]
    assert all(n.params == {"tokens": TOKENS, "k": EMBED, "n": EMBED} for n in linears)


def test_whole_tensor_reductions_and_tensor_min_max_have_families() -> None:
    """T5's float16 guard reduces a whole tensor; its position buckets take a tensor minimum."""

    class Guard(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            limit = torch.where(torch.isinf(x).any(), torch.finfo(x.dtype).max - 1000, torch.finfo(x.dtype).max)
            y = torch.clamp(x, min=-limit, max=limit)
            return torch.min(y, torch.full_like(y, 3.0)) + y.sum(-1, keepdim=True)

    g = graph_from_module(Guard().eval(), torch.randn(BATCH, TOKENS, EMBED), name="guard")
    by_op = {n.op: n for n in g.nodes}
    assert not [n.op for n in g.nodes if n.kind == "fallback"]
    assert (by_op["any"].family, by_op["any"].params) == ("mean", {"rows": 1, "c": TOKENS * EMBED})
    assert (by_op["sum"].family, by_op["sum"].params) == ("mean", {"rows": TOKENS, "c": EMBED})
    assert by_op["isinf"].family == "activation"
    assert by_op["min"].family == "binary"  # two tensors of one shape: elementwise


# --- PyTorch's fused inference fast paths (predictor.importers.torch_fused) -------------------

SEQ, D_MODEL, FFN = 10, 64, 96


def encoder(heads: int, norm_first: bool, layers: int = 2, d_model: int = D_MODEL) -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model, heads, FFN, batch_first=True, norm_first=norm_first,
                                       activation="gelu")
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def fused_parts(graph: Graph) -> list[list[tuple[str, str | None]]]:
    """Per fused encoder-layer call, its parts as (part name, family), in order."""
    calls: dict[str, list[tuple[str, str | None]]] = {}
    for n in graph.nodes:
        if n.op == "_transformer_encoder_layer_fwd":
            calls.setdefault(n.merged[0], []).append((n.name.rsplit("/", 1)[1], n.family))
    return list(calls.values())


def test_measurement_takes_the_encoder_fast_path_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise: in eval under inference_mode (as collectors.model_runs measures), with no
    recorder, PyTorch calls the fused layer, on the CPU too; with odd heads or in training, not."""
    calls = []
    original = torch._transformer_encoder_layer_fwd

    def counting(*args: object) -> torch.Tensor:
        calls.append(args[2])
        return original(*args)

    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd", counting)
    x = torch.randn(BATCH, SEQ, D_MODEL)
    with torch.inference_mode():
        encoder(4, False)(x)
        encoder(1, False)(x)  # odd heads: the slow path
    encoder(4, False).train()(x)  # training: the slow path
    assert calls == [4, 4]


ATTENTION = [("attn_qkv", "linear"), ("attn_attention", "sdpa"), ("attn_out_proj", "linear")]


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_fast_path_becomes_the_kernels_it_launches(norm_first: bool) -> None:
    g = graph_from_module(encoder(4, norm_first), torch.randn(BATCH, SEQ, D_MODEL), name="enc")
    parts = fused_parts(g)
    assert len(parts) == 2
    residual1, residual2 = ("residual1", "binary"), ("residual2", "binary")
    ffn = [("ffn1", "linear"), ("ffn2", "linear")]  # the GELU runs in the first GEMM's epilogue
    norm1, norm2 = ("norm1", "layer_norm"), ("norm2", "layer_norm")
    if norm_first:
        assert parts[0] == [norm1, *ATTENTION, residual1, norm2, *ffn, residual2]
    else:
        assert parts[0] == [*ATTENTION, residual1, norm1, *ffn, residual2, norm2]
    first = next(n.merged[0] for n in g.nodes if n.op == "_transformer_encoder_layer_fwd")
    by_part = {n.name.rsplit("/", 1)[1]: n for n in g.nodes if n.merged == [first]}
    assert by_part["attn_qkv"].params == {"tokens": SEQ, "k": D_MODEL, "n": 3 * D_MODEL}
    assert by_part["attn_attention"].params == dict(heads=4, seq_q=SEQ, seq_kv=SEQ, head_dim=16, causal=0)
    assert by_part["ffn1"].params == {"tokens": SEQ, "k": D_MODEL, "n": FFN}
    assert by_part["ffn2"].params == {"tokens": SEQ, "k": FFN, "n": D_MODEL}
    assert by_part["residual1"].params == {"elements": SEQ * D_MODEL}
    # nothing else runs: the only other nodes are free (attribute reads, checks)
    assert all(n.kind == "free" for n in g.nodes if n.op != "_transformer_encoder_layer_fwd")


def test_odd_heads_take_the_slow_path_call_by_call() -> None:
    """The layer's own calls, and multi_head_attention_forward as the kernels it launches for a
    batch-first module (seen on the H200): the input copied for the projection GEMM, its bias added
    apart, the projection made contiguous, attention, the output permuted back, the projection."""
    g = graph_from_module(encoder(1, False), torch.randn(BATCH, SEQ, D_MODEL), name="odd")
    assert not fused_parts(g)
    ops = [n.op for n in g.nodes if n.kind == "kernel"]
    assert ops.count("layer_norm") == 4 and ops.count("gelu") == 2 and ops.count("linear") == 4
    first = next(n.merged[0] for n in g.nodes if n.op == "multi_head_attention_forward")
    parts = [(n.name.rsplit("/", 1)[1], n.family, n.variant, n.layout) for n in g.nodes if n.merged == [first]]
    assert parts == [("input_copy", "activation", "relu", "strided"), ("qkv_gemm", "linear", "nobias", "contiguous"),
                     ("qkv_bias", "binary", "add", "strided"), ("qkv_copy", "activation", "relu", "strided"),
                     ("attention", "sdpa", "", "contiguous"), ("output_copy", "activation", "relu", "strided"),
                     ("out_proj", "linear", "", "contiguous")]
    attention = next(n for n in g.nodes if n.merged == [first] and n.family == "sdpa")
    assert attention.params == dict(heads=1, seq_q=SEQ, seq_kv=SEQ, head_dim=D_MODEL, causal=0)


def test_sequence_first_attention_projects_with_one_gemm() -> None:
    """A sequence-first module's input is contiguous: F.linear folds the bias into the GEMM."""

    class SequenceFirst(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(48, 3)  # odd heads: the slow path

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    g = graph_from_module(SequenceFirst().eval(), torch.randn(TOKENS, BATCH, 48), name="seqfirst")
    assert [n.name.rsplit("/", 1)[1] for n in g.nodes if n.op == "multi_head_attention_forward"] == [
        "qkv", "qkv_copy", "attention", "output_copy", "out_proj"]


def test_training_mode_is_traced_as_it_runs() -> None:
    """measured_fast_paths answers only what the recorder changes: in training no fast path runs."""
    g = graph_from_module(encoder(4, False), torch.randn(BATCH, SEQ, D_MODEL), name="enc")
    model = encoder(4, False)
    from predictor.importers.torch_calls import call_recorder
    from predictor.importers.torch_fused import measured_fast_paths

    seen: list[str] = []
    with measured_fast_paths(), call_recorder(lambda op, *rest: seen.append(op)):
        model.train()(torch.randn(BATCH, SEQ, D_MODEL))
    assert "_transformer_encoder_layer_fwd" not in seen and "multi_head_attention_forward" in seen
    assert fused_parts(g)  # graph_from_module puts the model in eval


def test_head_dims_that_are_not_multiples_of_8_run_unfused() -> None:
    """Head dim 12: no fused attention kernel takes it, so the fused call runs GEMMs around a
    softmax, in every precision (seen on the H200 in float32 and float16)."""
    g = graph_from_module(encoder(4, False, layers=1, d_model=48), torch.randn(BATCH, SEQ, 48), name="hd12")
    parts = fused_parts(g)[0]
    assert parts[:7] == [("attn_qkv_gemm", "linear"), ("attn_qkv_bias_rescale", "activation"),
                         ("attn_scores", "matmul"), ("attn_softmax", "softmax"), ("attn_context", "matmul"),
                         ("attn_context_0213", "transpose"), ("attn_out_proj_gemm", "linear")]
    assert [p for p, _ in parts[7:]] == ["residual1", "norm1", "ffn1", "ffn2", "residual2", "norm2"]
    assert not any(n.precisions for n in g.nodes)


def test_multihead_attention_that_returns_weights_runs_unfused() -> None:
    class Weights(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out, weights = self.attn(x, x, x)  # need_weights defaults to True
            return out

    g = graph_from_module(Weights().eval(), torch.randn(BATCH, TOKENS, EMBED), name="weights")
    parts = [n.name.rsplit("/", 1)[1] for n in g.nodes if n.op == "_native_multi_head_attention"]
    assert parts == ["qkv_gemm", "qkv_bias_rescale", "scores", "softmax", "context", "context_0213",
                     "out_proj_gemm", "weights_sum", "weights_div"]
    scores = next(n for n in g.nodes if n.name.endswith("/scores"))
    assert scores.params == dict(heads=HEADS, m=TOKENS, k=EMBED // HEADS, n=TOKENS)


# --- copies PyTorch makes inside a call, and the batches they run at ------------------------


def call_nodes(g: Graph, op: str) -> list[tuple[str, str | None, str, int]]:
    """(name suffix, family, variant, min_batch) of the nodes one kind of call made."""
    return [(n.name.split(":", 1)[1], n.family, n.variant, n.min_batch) for n in g.nodes if n.op == op]


class TokenMixing(nn.Module):
    """MLP-Mixer's token mixing: a linear layer over the tokens of [batch, tokens, c] transposed."""

    def __init__(self, tokens: int = 12, hidden: int = 20, bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(tokens, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.transpose(1, 2))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_a_transposed_input_copies_it_from_batch_two_and_adds_its_bias_apart(bias: bool) -> None:
    """at::linear cannot fold a non-contiguous 3-d input with its bias into addmm: matmul folds
    the rows (reshape: a copy from batch 2 on, a transposed view at batch 1), runs the GEMM
    without the bias, and add_ adds it at every batch. The copy turns [batch, 12, 16] into
    [batch, 16, 12]: a transpose, costed by its family."""
    g = graph_from_module(TokenMixing(bias=bias), torch.randn(1, 12, 16), name="mix")
    expected = [("linear/copy0", "transpose", "", 2), ("linear", "linear", "nobias", 1)]
    if bias:
        expected.append(("linear/after0", "binary", "add", 1))
    assert call_nodes(g, "linear") == expected
    gemm = next(n for n in g.nodes if n.family == "linear")
    assert gemm.params == {"tokens": 16, "k": 12, "n": 20}
    assert next(n for n in g.nodes if n.name.endswith("/copy0")).params == {"d1": 12, "d2": 16, "d3": 1}
    assert all(n.launched_by == "1:linear" for n in g.nodes if "/" in n.name)  # node 0: the transpose
    # traced at batch 2 the same nodes are recorded: the graph does not depend on the trace's batch
    assert call_nodes(graph_from_module(TokenMixing(bias=bias), torch.randn(2, 12, 16), name="mix"),
                      "linear") == expected


def test_the_batch_one_graph_drops_the_copy_as_pytorch_does() -> None:
    """What the profiler lists inside F.linear at batch 1 and 2 (aten::copy_ from the reshape),
    and the graph at each batch (``Graph.at_precision(precision, batch)``)."""
    from torch.profiler import ProfilerActivity, profile

    module = TokenMixing().eval()
    copies = {}
    for batch in (1, 2):
        x = torch.randn(batch, 12, 16)
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
            module(x)
        names = [e.name for e in prof.events()]
        copies[batch] = (names.count("aten::copy_"), names.count("aten::add_"))
    assert copies == {1: (0, 1), 2: (1, 1)}
    g = graph_from_module(module, torch.randn(1, 12, 16), name="mix")
    kernels_at = {b: [n.name for n in g.at_precision("fp32", b).nodes if n.kind == "kernel"] for b in (1, 2, 32)}
    assert kernels_at == {1: ["1:linear", "1:linear/after0"], 2: ["1:linear/copy0", "1:linear", "1:linear/after0"],
                          32: ["1:linear/copy0", "1:linear", "1:linear/after0"]}
    assert g.at_precision("fp32", 8) is g.at_precision("fp32", 32)  # made once, kept with the graph


def test_linear_on_a_contiguous_input_is_one_gemm_with_its_bias() -> None:
    g = graph_from_module(nn.Linear(16, 20), torch.randn(2, 12, 16), name="fc")
    assert call_nodes(g, "linear") == [("linear", "linear", "", 1)]


def test_layer_norm_copies_a_permuted_input_first() -> None:
    """native_layer_norm makes its input contiguous (expect_contiguous): ConvNeXt's channels-last
    norm over an NCHW map copies it at every batch; over a contiguous input nothing extra runs."""

    class NormOverChannels(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(x.permute(0, 2, 3, 1)) + self.norm(x.permute(0, 2, 3, 1).contiguous())

    g = graph_from_module(NormOverChannels(), torch.randn(1, 8, 5, 6), name="ln")
    assert call_nodes(g, "layer_norm") == [("layer_norm/copy0", "transpose", "", 1),
                                           ("layer_norm", "layer_norm", "", 1), ("layer_norm", "layer_norm", "", 1)]
    copy = next(n for n in g.nodes if n.name.endswith("layer_norm/copy0"))
    # NCHW -> NHWC: the 8 channels and the 30 pixels swapped, one element apart on both sides
    assert (copy.params, copy.launched_by) == ({"d1": 8, "d2": 30, "d3": 1}, "1:layer_norm")
    norm = next(n for n in g.nodes if n.family == "layer_norm")
    assert norm.params == {"tokens": 30, "c": 8}


def test_a_mean_over_the_tokens_is_a_reduction() -> None:
    """x.mean(dim=1) of [batch, tokens, c] (a ViT's token pooling) runs PyTorch's reduce kernel:
    costed by the mean family, c tokens summed for each of the c kept values; over the batch dim
    nothing is recognised."""

    class Pool(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(dim=1), x.sum(dim=(1, 2), keepdim=True), x.mean(-1).mean(0)

    g = graph_from_module(Pool(), torch.randn(2, 7, 5), name="pool")
    reductions = [(n.op, n.kind, n.family, n.params) for n in g.nodes if n.op in ("mean", "sum")]
    assert reductions == [("mean", "kernel", "mean", {"rows": 5, "c": 7}),
                          ("sum", "kernel", "mean", {"rows": 1, "c": 35}),
                          ("mean", "kernel", "mean", {"rows": 7, "c": 5}), ("mean", "fallback", None, {})]


def test_odd_heads_copies_run_from_batch_two() -> None:
    """A batch-first tensor handed to sequence-first attention is contiguous at batch 1: there the
    in-projection is one GEMM with its bias and attention's output is a view, so the input copy,
    the bias add and the output copy run only from batch 2 on (the GEMM is costed without its
    bias at every batch)."""
    g = graph_from_module(encoder(1, False), torch.randn(1, SEQ, D_MODEL), name="odd")
    first = next(n.merged[0] for n in g.nodes if n.op == "multi_head_attention_forward")
    parts = {n.name.rsplit("/", 1)[1]: n.min_batch for n in g.nodes if n.merged == [first]}
    assert parts == {"input_copy": 2, "qkv_gemm": 1, "qkv_bias": 2, "qkv_copy": 1, "attention": 1,
                     "output_copy": 2, "out_proj": 1}
    at_1 = [n.name.rsplit("/", 1)[1] for n in g.at_precision("fp16", 1).nodes if n.merged == [first]]
    assert at_1 == ["qkv_gemm", "qkv_copy", "attention", "out_proj"]
    assert Graph.from_json(g.to_json()).nodes == g.nodes  # min_batch survives the JSON round trip


class PatchAttentionStream(nn.Module):
    """A ViT-style stream that stays transposed: patches as ``conv(x).flatten(2).transpose(1, 2)``
    ([batch, tokens, c] laid out [batch, c, tokens]), a broadcast position table and a pre-norm
    branch added back (the sum keeps the stream's layout: TensorIterator follows its first operand)."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, c, 4, 4)
        self.pos = nn.Parameter(torch.zeros(1, 16, c))
        self.norm, self.fc = nn.LayerNorm(c), nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        x = x + self.fc(self.norm(x))
        return self.norm(x)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_transposed_stream_is_copied_and_added_by_the_transpose_family(batch: int) -> None:
    """Reading or writing whole rows of one side a single element apart is what makes PyTorch's
    generic elementwise kernel slow (nas-88's residual adds and their norms' copies on the H200:
    2-2.5x the 'strided' estimate): each norm's input copy is the transpose family's copy of the
    16 channels and 16 tokens, the residual add its 'add'; the broadcast position add keeps the
    'strided' elementwise layout, at a batch of 1 too."""
    g = graph_from_module(PatchAttentionStream(), torch.randn(batch, 3, 16, 16), name="stream")
    kernels = [(n.op, n.family, n.variant, n.params) for n in g.nodes if n.kind == "kernel"]
    swap, norm = {"d1": 16, "d2": 16, "d3": 1}, {"tokens": 16, "c": 16}
    assert kernels[1:] == [("add", "binary", "add", {"elements": 256}),
                           ("layer_norm", "transpose", "", swap), ("layer_norm", "layer_norm", "", norm),
                           ("linear", "linear", "", {"tokens": 16, "k": 16, "n": 16}),
                           ("add", "transpose", "add", swap),
                           ("layer_norm", "transpose", "", swap), ("layer_norm", "layer_norm", "", norm)]
    assert next(n for n in g.nodes if n.op == "add").layout == "strided"


class StreamPlusTables(nn.Module):
    """A transposed stream plus what no batch enlarges: a buffer and a slice of a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.zeros(1, 16, 8))
        self.pos = nn.Parameter(torch.zeros(1, 17, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2)
        return x + self.table + self.pos[:, 1:]


def test_a_buffer_or_a_slice_of_a_parameter_is_broadcast_at_a_batch_of_one() -> None:
    """Traced at batch 1 a [1, 16, 8] buffer has the stream's shape, but no batch enlarges it:
    the adds are broadcast ('strided'), as at batch 2 and as the ONNX importer's initializers."""
    for batch in (1, 2):
        g = graph_from_module(StreamPlusTables(), torch.randn(batch, 8, 16), name="tables")
        adds = [(n.family, n.layout) for n in g.nodes if n.op in ("add", "__add__")]
        assert adds == [("binary", "strided"), ("binary", "strided")], (batch, adds)


def test_a_batched_matmuls_operand_copies_stay_strided_copies() -> None:
    """torch.matmul copies an operand it cannot fold, here k permuted to [b, heads, head, tokens];
    that copy is costed as a strided one (as the ONNX importer's matmul copies), whatever the
    permutation: the transpose family costs a copy made into row-major order by reshape, a norm
    or a linear layer."""

    class Scores(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            b, t, c = q.shape
            k = q.reshape(b, t, 4, c // 4).permute(0, 2, 3, 1)
            return q.reshape(b, t, 4, c // 4).transpose(1, 2) @ k

    g = graph_from_module(Scores(), torch.randn(2, 10, 32), name="scores")
    copies = [(n.family, n.layout) for n in g.nodes if "/copy" in n.name]
    assert copies and all(c == ("activation", "strided") for c in copies), copies
