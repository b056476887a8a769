"""Build a runnable call of each operator family, with its inputs allocated on the device.

One builder per family in ``predictor.catalogue``, keyed by family name. Builders use nn.Module
layers where real models do (conv, linear, norms, pooling, activations, embedding), so eager
dispatch time includes the module call a model pays, and tensor functions elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from predictor.catalogue import get_family
from predictor.catalogue.families import CONV_NO_BIAS, conv_padding, conv_window

OpCall = Callable[[], Any]


@dataclass(frozen=True)
class BuildSpec:
    """Everything needed to materialise one configuration."""

    family: str
    params: Mapping[str, int]
    variant: str
    layout: str
    batch: int
    dtype: torch.dtype
    device: torch.device


Builder = Callable[[BuildSpec], OpCall]
BUILDERS: dict[str, Builder] = {}


def builder(family: str) -> Callable[[Builder], Builder]:
    """Register the builder for ``family`` (which must exist in the catalogue)."""
    get_family(family)

    def register(fn: Builder) -> Builder:
        BUILDERS[family] = fn
        return fn

    return register


def build(spec: BuildSpec) -> OpCall:
    """Check the configuration against the catalogue, then build its call."""
    get_family(spec.family).check(spec.params, spec.variant, spec.layout)
    return BUILDERS[spec.family](spec)


def _randn(spec: BuildSpec, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=spec.device, dtype=spec.dtype)


def _image(spec: BuildSpec, c: int, h: int, w: int) -> torch.Tensor:
    x = _randn(spec, spec.batch, c, h, w)
    return x.contiguous(memory_format=torch.channels_last) if spec.layout == "nhwc" else x


def _on(spec: BuildSpec) -> dict[str, Any]:
    """Factory kwargs that create a layer's weights on the device: initialising large layers on
    the CPU and copying them over would cost more than measuring them."""
    return {"device": spec.device, "dtype": spec.dtype}


M = TypeVar("M", bound=nn.Module)


def _module(spec: BuildSpec, module: M) -> M:
    module = module.eval()
    if spec.layout == "nhwc":
        module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs lack it
    return module


@builder("conv2d")
def _conv(spec: BuildSpec) -> OpCall:
    p = spec.params
    kh, kw = conv_window(p, spec.variant)
    conv = _module(spec, nn.Conv2d(p["c_in"], p["c_out"], (kh, kw), p["stride"],
                                   padding=(conv_padding(kh, spec.variant), conv_padding(kw, spec.variant)),
                                   groups=p["groups"], bias=spec.variant not in CONV_NO_BIAS, **_on(spec)))
    x = _image(spec, p["c_in"], p["h"], p["w"])
    return lambda: conv(x)


@builder("linear")
def _linear(spec: BuildSpec) -> OpCall:
    p = spec.params
    layer = _module(spec, nn.Linear(p["k"], p["n"], bias=spec.variant != "nobias", **_on(spec)))
    x = _randn(spec, spec.batch, p["tokens"], p["k"])
    return lambda: layer(x)


@builder("matmul")
def _matmul(spec: BuildSpec) -> OpCall:
    p = spec.params
    a = _randn(spec, spec.batch, p["heads"], p["m"], p["k"])
    b = _randn(spec, spec.batch, p["heads"], p["k"], p["n"])
    return lambda: torch.matmul(a, b)


@builder("sdpa")
def _sdpa(spec: BuildSpec) -> OpCall:
    p = spec.params
    q = _randn(spec, spec.batch, p["heads"], p["seq_q"], p["head_dim"])
    k = _randn(spec, spec.batch, p["heads"], p["seq_kv"], p["head_dim"])
    v = _randn(spec, spec.batch, p["heads"], p["seq_kv"], p["head_dim"])
    causal = bool(p["causal"])
    if spec.variant == "math":
        # What transformers 5's encoders pass while a CUDA graph is captured (is_tracing() is true
        # then, so the all-ones padding mask cannot be skipped): a bool mask built by vmap with
        # strides (0, seq_q, 1, 0). Its last dim is not contiguous, so no fused kernel takes it and
        # PyTorch runs the math path (measured in distilbert's captured graph on the H200).
        mask = torch.ones(p["seq_q"], device=spec.device, dtype=torch.bool)[None, None, :, None] \
            .expand(spec.batch, 1, p["seq_q"], p["seq_kv"])
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if spec.variant == "bool_padding":
        # A padding mask [batch, 1, 1, seq_kv] expanded over the queries (stride 0, last dim
        # contiguous), as other transformers versions build it.
        padding = torch.ones(spec.batch, p["seq_kv"], device=spec.device, dtype=torch.bool)
        mask = padding[:, None, None, :].expand(spec.batch, 1, p["seq_q"], p["seq_kv"])
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if spec.variant == "bool_full":
        # Decoders under capture: causal and padding masks combined into one materialised bool mask.
        mask = torch.ones(spec.batch, 1, p["seq_q"], p["seq_kv"], device=spec.device, dtype=torch.bool)
        if causal:
            mask = mask.tril()
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if spec.variant == "masked":
        # An explicit additive float mask (older transformers and hand-written models pass these).
        mask = torch.zeros(spec.batch, 1, p["seq_q"], p["seq_kv"], device=spec.device, dtype=spec.dtype)
        if causal:
            mask = mask.masked_fill(torch.ones_like(mask, dtype=torch.bool).triu(1), float("-inf"))
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


@builder("batch_norm")
def _batch_norm(spec: BuildSpec) -> OpCall:
    p = spec.params
    bn = nn.BatchNorm2d(p["c"], **_on(spec))
    assert bn.running_mean is not None and bn.running_var is not None  # track_running_stats: the default
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn = _module(spec, bn)
    x = _image(spec, p["c"], p["h"], p["w"])
    return lambda: bn(x)


@builder("layer_norm")
def _layer_norm(spec: BuildSpec) -> OpCall:
    p = spec.params
    ln = _module(spec, nn.LayerNorm(p["c"], **_on(spec)))
    x = _randn(spec, spec.batch, p["tokens"], p["c"])
    return lambda: ln(x)


@builder("group_norm")
def _group_norm(spec: BuildSpec) -> OpCall:
    p = spec.params
    gn = _module(spec, nn.GroupNorm(p["groups"], p["c"], **_on(spec)))
    x = _image(spec, p["c"], p["h"], p["w"])
    return lambda: gn(x)


@builder("softmax")
def _softmax(spec: BuildSpec) -> OpCall:
    x = _randn(spec, spec.batch, spec.params["rows"], spec.params["c"])
    return lambda: torch.softmax(x, dim=-1)


ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh,
    "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid, "clamp": lambda: nn.Hardtanh(0.0, 6.0),
}


#: Head sizes a strided view keeps contiguous, largest first (attention heads, rotary halves).
STRIDED_HEADS = (64, 32, 16, 8, 4, 2)
STRIDED_GROUPS = (16, 12, 8, 6, 4, 3, 2)


def _strided_view(spec: BuildSpec, elements: int) -> torch.Tensor:
    """``elements`` per sample as the views models run elementwise ops on and copy: the query
    of a packed [batch, rows, 3, heads, head] projection seen as [batch, heads, rows, head]
    (Swin's and ViT's q after ``permute``), innermost ``head`` elements contiguous. A view like
    this is neither contiguous nor dense, so PyTorch cannot vectorize over it."""
    head = next((d for d in STRIDED_HEADS if elements % d == 0 and elements // d >= 2), 1)
    rest = elements // head
    heads = next((g for g in STRIDED_GROUPS if rest % g == 0 and rest // g >= 2), 1)
    packed = _randn(spec, spec.batch, rest // heads, 3, heads, head)
    return packed[:, :, 0].transpose(1, 2)


@builder("activation")
def _activation(spec: BuildSpec) -> OpCall:
    act = ACTIVATION_MODULES[spec.variant]()
    n = spec.params["elements"]
    x = _strided_view(spec, n) if spec.layout == "strided" else _randn(spec, spec.batch, n)
    return lambda: act(x)


@builder("binary")
def _binary(spec: BuildSpec) -> OpCall:
    n = spec.params["elements"]
    a = _randn(spec, spec.batch, n)
    # 'strided': the second operand is one sample broadcast over the batch (stride 0).
    b = _randn(spec, 1, n).expand(spec.batch, n) if spec.layout == "strided" else _randn(spec, spec.batch, n)
    return (lambda: a + b) if spec.variant == "add" else (lambda: a * b)


@builder("pool")
def _pool(spec: BuildSpec) -> OpCall:
    p = spec.params
    if spec.variant == "max":
        pool: nn.Module = nn.MaxPool2d(p["kernel"], p["stride"], padding=p["kernel"] // 2)
    elif spec.variant == "avg":
        pool = nn.AvgPool2d(p["kernel"], p["stride"], padding=p["kernel"] // 2)
    else:
        pool = nn.AdaptiveAvgPool2d(1)
    x = _image(spec, p["c"], p["h"], p["w"])
    return lambda: pool(x)


@builder("embedding")
def _embedding(spec: BuildSpec) -> OpCall:
    p = spec.params
    table = _module(spec, nn.Embedding(p["vocab"], p["c"], **_on(spec)))
    ids = torch.randint(0, p["vocab"], (spec.batch, p["tokens"]), device=spec.device)
    return lambda: table(ids)


@builder("concat")
def _concat(spec: BuildSpec) -> OpCall:
    p = spec.params
    if spec.layout == "strided":
        parts = [_randn(spec, spec.batch, p["h"], p["c"], p["w"]).transpose(1, 2) for _ in range(p["inputs"])]
    else:
        parts = [_image(spec, p["c"], p["h"], p["w"]) for _ in range(p["inputs"])]
    return lambda: torch.cat(parts, dim=1)


@builder("transpose")
def _transpose(spec: BuildSpec) -> OpCall:
    p = spec.params
    x = _randn(spec, spec.batch, p["d1"], p["d2"], p["d3"])
    if spec.variant == "add":  # the output follows x (TensorIterator: the first operand decides)
        y = _randn(spec, spec.batch, p["d2"], p["d1"], p["d3"])
        return lambda: x.transpose(1, 2) + y
    return lambda: x.transpose(1, 2).contiguous()


@builder("mean")
def _mean(spec: BuildSpec) -> OpCall:
    x = _randn(spec, spec.batch, spec.params["rows"], spec.params["c"])
    return lambda: x.mean(dim=-1)
