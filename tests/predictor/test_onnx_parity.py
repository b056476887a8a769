"""Parity: a small model exported to ONNX predicts like the torch trace of the same module.

Each model is exported here with the TorchScript exporter (the dynamo one needs onnxscript) and
traced with ``graph_from_module``; both graphs are predicted with the shipped H200 bundle at
fp32 and fp16, CUDA graph and eager, batch 1, 8 and 32, and must agree within 3%. The models
hold what the importer has to get right: a BatchNorm the exporter folds into its conv, a
squeeze-excite block (a broadcast multiply), a residual add; LayerNorm, GELU, attention through
``F.scaled_dot_product_attention`` and through ``nn.MultiheadAttention`` (its fast path);
ConvNeXt's permuted, channels-last block; nn.TransformerEncoder stacks, which an export shows only
by their parameters' names. None has a Dropout of its own: its call in eval is a no-op no export
can show (an nn.TransformerEncoderLayer's are known from the module's code).
"""

from __future__ import annotations

from typing import Any

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402
from predictor.importers.torch_module import graph_from_module  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from tests.predictor.parity_helpers import (  # noqa: E402
    export_named,
    h200_predictor,
    torchscript_export,
    variants_off,
)


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return h200_predictor()


def export(module: nn.Module, example: torch.Tensor) -> bytes:
    return torchscript_export(module, example, dynamic_batch=True)


class SqueezeExcite(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.block = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                   nn.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False), nn.BatchNorm2d(32),
                                   nn.Hardswish(), SqueezeExcite(32))
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.block(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TransformerBlock(nn.Module):
    """A pre-norm encoder block; attention by F.scaled_dot_product_attention or nn.MultiheadAttention."""

    def __init__(self, attention: str, embed: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.attention, self.heads = attention, heads
        self.ln1, self.ln2 = nn.LayerNorm(embed), nn.LayerNorm(embed)
        if attention == "sdpa":
            self.q, self.k, self.v, self.o = (nn.Linear(embed, embed) for _ in range(4))
        else:
            self.mha = nn.MultiheadAttention(embed, heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(embed, 4 * embed), nn.Linear(4 * embed, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x)
        if self.attention == "sdpa":
            b, t, e = y.shape
            q, k, v = (p(y).view(b, t, self.heads, e // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
            y = self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, e))
        else:
            y = self.mha(y, y, y, need_weights=False)[0]
        x = x + y
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ConvNeXtBlock(nn.Module):
    """Depthwise conv, permute to channels-last, LayerNorm, MLP, permute back, layer scale, residual."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.scale = nn.Parameter(torch.full((c, 1, 1), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.ln(y)))).permute(0, 3, 1, 2)
        return x + self.scale * y


class PatchStreamBlock(nn.Module):
    """Patches as ``conv(x).flatten(2).transpose(1, 2)``, so the residual stream stays laid out
    [batch, c, tokens]: a norm copies it and the branch is added back across the swap (the
    transpose family's copy and add), then MLP-Mixer's token mixing copies the normed tokens."""

    def __init__(self, c: int = 32, tokens: int = 64) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, c, 4, 4)
        self.norm, self.fc, self.mix = nn.LayerNorm(c), nn.Linear(c, c), nn.Linear(tokens, tokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = x + self.fc(self.norm(x))
        return x + self.mix(self.norm(x).transpose(1, 2)).transpose(1, 2)


class MishCNN(nn.Sequential):
    """Convolutions with Mish, which opset 17 writes as x * Tanh(Softplus(x))."""

    def __init__(self) -> None:
        super().__init__(nn.Conv2d(3, 16, 3, 2, 1), nn.Mish(), nn.Conv2d(16, 16, 3, 1, 1), nn.Mish())


class ActivationsCNN(nn.Sequential):
    """Activations each importer once costed its own way (the torch trace as fallbacks, the export
    as two kernels): PReLU, SELU, LogSigmoid (Log of Sigmoid in opset 17), and a global max pool
    (adaptive_max_pool2d, a MaxPool of the whole plane in the export)."""

    def __init__(self) -> None:
        super().__init__(nn.Conv2d(3, 16, 3, 2, 1), nn.PReLU(), nn.Conv2d(16, 16, 3, 1, 1), nn.SELU(),
                         nn.Conv2d(16, 16, 3, 1, 1), nn.LogSigmoid(), nn.AdaptiveMaxPool2d(1), nn.Flatten(),
                         nn.Linear(16, 10))


class TwoConvNeXtBlocks(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(ConvNeXtBlock(), ConvNeXtBlock())


def encoder_stack(embed: int, heads: int) -> nn.Module:
    """nn.TransformerEncoder: with an even head count each layer is one fused call in eval, with an
    odd one its Python runs, dropout calls included (onnx_encoder_layer)."""
    layer = nn.TransformerEncoderLayer(embed, heads, 2 * embed, activation="gelu", batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


@pytest.mark.parametrize("name,build,shape", [
    ("cnn", SmallCNN, (2, 3, 64, 64)),
    ("mish_cnn", MishCNN, (2, 3, 64, 64)),
    ("activations_cnn", ActivationsCNN, (2, 3, 32, 32)),
    ("sdpa_block", lambda: TransformerBlock("sdpa"), (2, 16, 64)),
    ("mha_block", lambda: TransformerBlock("mha"), (2, 16, 64)),
    # an odd head count: PyTorch's fast path refuses it, F.multi_head_attention_forward runs
    ("mha_block_odd_heads", lambda: TransformerBlock("mha", embed=48, heads=3), (2, 16, 48)),
    ("convnext_blocks", TwoConvNeXtBlocks, (2, 32, 14, 14)),
    ("patch_stream", PatchStreamBlock, (2, 3, 32, 32)),
    ("encoder_even_heads", lambda: encoder_stack(64, 4), (2, 16, 64)),
    ("encoder_odd_heads", lambda: encoder_stack(48, 3), (2, 16, 48)),
])
def test_an_exported_model_predicts_like_its_torch_trace(predictor: Predictor, name: str, build: Any,
                                                          shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    module = build().eval()
    example = torch.randn(*shape)
    onnx_graph = graph_from_onnx(export(module, example), name=name, batch=1)
    torch_graph = graph_from_module(module, example[:1], name=name)
    off = variants_off(predictor, onnx_graph, torch_graph)
    assert not off, f"{name}: ONNX / torch outside 3%: {off}"
    families = sorted(str(n.family) for n in onnx_graph.nodes if n.kind == "kernel")
    assert families == sorted(str(n.family) for n in torch_graph.nodes if n.kind == "kernel")


def test_multi_head_attention_is_taken_to_run_its_fast_path() -> None:
    """An export records nn.MultiheadAttention's slow path (the exporter's trace forces it); in eval
    without gradients PyTorch runs the fast path, without the batch_first transposes. The graph is
    that call's kernels, as the torch importer records them, and says what it assumed."""
    torch.manual_seed(0)
    module = TransformerBlock("mha").eval()
    example = torch.randn(2, 16, 64)
    onnx_graph = graph_from_onnx(export(module, example), batch=1)
    assert any("fast path" in a for a in onnx_graph.meta["assumptions"])
    torch_graph = graph_from_module(module, example[:1], name="fast")
    assert "_native_multi_head_attention" in {n.op for n in torch_graph.nodes}
    assert [(n.kind, n.family, n.variant, n.layout, n.params) for n in onnx_graph.nodes] == [
        (n.kind, n.family, n.variant, n.layout, n.params) for n in torch_graph.nodes]


class SequenceFirstAttention(nn.Module):
    """nn.MultiheadAttention as constructed by default ([sequence, batch, embed]), asked for no weights."""

    def __init__(self, embed: int, heads: int) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(embed, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=False)[0]


def sequence_first_export(module: nn.Module, example: torch.Tensor) -> bytes:
    """TorchScript's export of a sequence-first module with both axes symbolic and the batch named."""
    return export_named(module, (example,), ["x"], {"x": {0: "seq", 1: "batch"}})


@pytest.mark.parametrize("name,build", [
    ("mha_even_heads", lambda: SequenceFirstAttention(64, 4)),
    ("mha_odd_heads", lambda: SequenceFirstAttention(60, 5)),
    ("encoder", lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128), 2, enable_nested_tensor=False)),
])
def test_a_sequence_first_model_predicts_like_its_torch_trace(predictor: Predictor, name: str, build: Any) -> None:
    # PyTorch's default layout: the batch is axis 1, which the export names and the trace is told;
    # no fast path takes it (it wants batch_first), so F.multi_head_attention_forward runs, with
    # the copies of its projection and of its output (torch_fused.sequence_first_slow_parts)
    torch.manual_seed(0)
    module = build().eval()
    width = module.attention.embed_dim if name.startswith("mha") else 64
    data = sequence_first_export(module, torch.randn(16, 2, width))
    for batch in (1, 8, 32):
        onnx_graph = graph_from_onnx(data, name=name, batch=batch, dims={"seq": 16})
        torch_graph = graph_from_module(module, torch.randn(16, batch, width), name=name, batch_dim=1)
        assert onnx_graph.batch == torch_graph.batch == batch
        off = variants_off(predictor, onnx_graph, torch_graph)
        assert not off, f"{name} at batch {batch}: ONNX / torch outside 3%: {off}"
    heads = module.attention.num_heads if name.startswith("mha") else 4
    assert {n.params["heads"] for n in onnx_graph.nodes if n.family == "sdpa"} == {heads}


def test_a_sequence_first_export_without_a_named_batch_is_refused() -> None:
    # a static export's axis 0 is the sequence: taken for the batch, the attention would have a
    # share of one head per sample
    module = SequenceFirstAttention(64, 4).eval()
    data = torchscript_export(module, torch.randn(16, 2, 64))
    with pytest.raises(ValueError, match=r"sequence-first .* axis 0 was taken for its batch \(16\).*dynamic_axes"):
        graph_from_onnx(data, batch=2)


class MaskedAttention(nn.Module):
    """Batch-first nn.MultiheadAttention (an even head count), or an nn.TransformerEncoderLayer
    around one, given one mask, then a linear layer."""

    def __init__(self, layer: bool) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True) if layer else None
        self.attention, self.fc = nn.MultiheadAttention(64, 4, batch_first=True), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        padding = mask.shape[0] != mask.shape[1]
        if self.layer is not None:
            return self.fc(self.layer(x, **{"src_key_padding_mask" if padding else "src_mask": mask}))
        keyword = "key_padding_mask" if padding else "attn_mask"
        return self.fc(self.attention(x, x, x, need_weights=False, **{keyword: mask})[0])


PADDING = torch.arange(12).expand(2, 12) >= 10
MASKS = {"float_attn_mask": torch.triu(torch.full((12, 12), float("-inf")), 1),
         "bool_attn_mask": torch.triu(torch.ones(12, 12, dtype=torch.bool), 1),
         "bool_key_padding_mask": PADDING,
         "float_key_padding_mask": torch.zeros(2, 12).masked_fill(PADDING, float("-inf"))}


@pytest.mark.parametrize("layer", [False, True], ids=["attention", "encoder_layer"])
@pytest.mark.parametrize("mask", list(MASKS))
def test_attention_given_a_mask_predicts_like_its_torch_trace(predictor: Predictor, mask: str, layer: bool) -> None:
    """nn.MultiheadAttention's fast path refuses a float mask (F.multi_head_attention_forward runs,
    as for an odd head count) and takes a boolean one, which F._canonical_mask makes additive first
    (zeros_like and masked_fill_: two kernels, of which the export shows a Where); an
    nn.TransformerEncoderLayer's fast path takes either. The views the export puts a mask through
    run inside the call. The example is given as the forward takes it, (x, mask)."""
    torch.manual_seed(0)
    module, x, given = MaskedAttention(layer).eval(), torch.randn(2, 12, 64), MASKS[mask]
    padding = "key_padding" in mask
    data = export_named(module, (x, given), ["x", "mask"],
                        {"x": {0: "batch"}, **({"mask": {0: "batch"}} if padding else {})})
    onnx_graph = graph_from_onnx(data, name=mask, batch=1)
    torch_graph = graph_from_module(module, (x[:1], given[:1] if padding else given), name=mask)
    off = variants_off(predictor, onnx_graph, torch_graph)
    assert not off, f"{mask}: ONNX / torch outside 3%: {off}"
    ops = [n.op for n in torch_graph.nodes if n.kind == "kernel"]
    fused = "_transformer_encoder_layer_fwd" if layer else "_native_multi_head_attention"
    assert (fused in ops) == (layer or mask.startswith("bool"))
    if mask.startswith("bool"):
        assert ops[:2] == ["zeros_like", "masked_fill_"]


class TwoMasks(nn.Module):
    """nn.MultiheadAttention given an attn_mask and a key padding mask: merged by merge_masks (fast
    path, boolean masks) or by F.multi_head_attention_forward (float masks)."""

    def __init__(self) -> None:
        super().__init__()
        self.attention, self.fc = nn.MultiheadAttention(64, 4, batch_first=True), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.fc(self.attention(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False)[0])


@pytest.mark.parametrize("dtype", ["bool", "float"])
def test_attention_given_two_masks_predicts_like_its_torch_trace(predictor: Predictor, dtype: str) -> None:
    torch.manual_seed(0)
    module, x = TwoMasks().eval(), torch.randn(2, 12, 64)
    mask, padding = MASKS[f"{dtype}_attn_mask"], MASKS[f"{dtype}_key_padding_mask"]
    data = export_named(module, (x, mask, padding), ["x", "mask", "padding"],
                        {"x": {0: "batch"}, "padding": {0: "batch"}})
    onnx_graph = graph_from_onnx(data, name=dtype, batch=1)
    torch_graph = graph_from_module(module, (x[:1], mask, padding[:1]), name=dtype)
    off = variants_off(predictor, onnx_graph, torch_graph)
    assert not off, f"{dtype} masks: ONNX / torch outside 3%: {off}"


class SequenceFirstMasked(nn.Module):
    """Sequence-first nn.MultiheadAttention ([tokens, batch, embed]) given a boolean key padding
    mask ([batch, tokens]), whose zeros the export makes with a ConstantOfShape of the batch's size."""

    def __init__(self) -> None:
        super().__init__()
        self.attention, self.fc = nn.MultiheadAttention(64, 4), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.fc(self.attention(x, x, x, key_padding_mask=padding, need_weights=False)[0])


def test_a_sequence_first_attention_given_a_mask_predicts_like_its_torch_trace(predictor: Predictor) -> None:
    torch.manual_seed(0)
    module = SequenceFirstMasked().eval()
    data = export_named(module, (torch.randn(12, 2, 64), PADDING), ["x", "padding"],
                        {"x": {1: "batch"}, "padding": {0: "batch"}})
    for batch in (1, 8):
        onnx_graph = graph_from_onnx(data, name="masked", batch=batch)
        padding = PADDING[:1].expand(batch, 12).contiguous()
        torch_graph = graph_from_module(module, (torch.randn(12, batch, 64), padding), name="masked", batch_dim=1)
        off = variants_off(predictor, onnx_graph, torch_graph)
        assert not off, f"batch {batch}: ONNX / torch outside 3%: {off}"
