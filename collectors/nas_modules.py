"""The NAS spaces' torch modules, each built from a spec that ``collectors.nas_space`` draws.

Written the way their namesakes are written where people find them (torchvision's MobileNet,
ResNet and ConvNeXt, ``nn.TransformerEncoder``, timm-style attention and MLP-Mixer blocks), so
that the suite holds the calls real code makes: in-place ReLU, permutes around a channels-last
LayerNorm, a packed qkv unbound into strided q, k and v, transposes before a token-mixing linear.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "silu": nn.SiLU, "hardswish": nn.Hardswish,
                                           "gelu": nn.GELU}


def _act(name: str) -> nn.Module:
    return ACTIVATIONS[name]()


# --- mbconv ---------------------------------------------------------------------------------


class SqueezeExcite(nn.Module):
    """Global pool, two 1x1 convolutions and a gate that scales the channels."""

    def __init__(self, channels: int, squeezed: int, gate: str) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.act = nn.ReLU()
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.gate = nn.Sigmoid() if gate == "sigmoid" else nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(scale))))


class MBConv(nn.Module):
    """Inverted residual: 1x1 expansion, depthwise kxk, squeeze-excite, 1x1 projection."""

    def __init__(self, b: dict[str, Any]) -> None:
        super().__init__()
        c_in, c_out, kernel, stride = b["c_in"], b["c_out"], b["kernel"], b["stride"]
        mid = c_in * b["expand"]
        layers: list[nn.Module] = []
        if b["expand"] != 1:
            layers += [nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid), _act(b["act"])]
        layers += [nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False), nn.BatchNorm2d(mid),
                   _act(b["act"])]
        if b["se"]:
            layers.append(SqueezeExcite(mid, max(8, c_in // 4), b["gate"]))
        layers += [nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


def _mbconv(s: dict[str, Any]) -> nn.Module:
    last = s["blocks"][-1]["c_out"]
    return nn.Sequential(
        nn.Conv2d(3, s["stem"], 3, 2, 1, bias=False), nn.BatchNorm2d(s["stem"]), _act(s["stem_act"]),
        *[MBConv(b) for b in s["blocks"]],
        nn.Conv2d(last, s["head"], 1, bias=False), nn.BatchNorm2d(s["head"]), _act(s["head_act"]),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(s["head"], s["classes"]),
    )


# --- resnet ---------------------------------------------------------------------------------


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(c_out)]


class ResidualBlock(nn.Module):
    """torchvision's BasicBlock (two 3x3) or Bottleneck (1x1, 3x3, 1x1), with a 1x1 projection
    of the shortcut where the shape changes."""

    def __init__(self, kind: str, c_in: int, width: int, expansion: int, stride: int) -> None:
        super().__init__()
        out = width * expansion
        if kind == "basic":
            layers = [*_conv_bn(c_in, width, 3, stride), nn.ReLU(inplace=True), *_conv_bn(width, out, 3)]
        else:
            layers = [*_conv_bn(c_in, width, 1), nn.ReLU(inplace=True), *_conv_bn(width, width, 3, stride),
                      nn.ReLU(inplace=True), *_conv_bn(width, out, 1)]
        self.body = nn.Sequential(*layers)
        self.shortcut = nn.Sequential(*_conv_bn(c_in, out, 1, stride)) if stride != 1 or c_in != out else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        out = self.body(x)
        out += identity
        return self.relu(out)


def _resnet(s: dict[str, Any]) -> nn.Module:
    stem: list[nn.Module]
    if s["deep_stem"]:
        stem = [*_conv_bn(3, s["stem"], 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    else:
        stem = [*_conv_bn(3, s["stem"], 3), nn.ReLU(inplace=True)]
    blocks: list[nn.Module] = []
    c = s["stem"]
    for i, (width, depth) in enumerate(zip(s["widths"], s["depths"])):
        for j in range(depth):
            blocks.append(ResidualBlock(s["block"], c, width, s["expansion"], 2 if i and j == 0 else 1))
            c = width * s["expansion"]
    return nn.Sequential(*stem, *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, s["classes"]))


# --- convnext -------------------------------------------------------------------------------


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor, through a channels-last view (torchvision's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7, then LayerNorm and a GELU MLP channels-last, layer scale, residual."""

    def __init__(self, dim: int, ratio: int, layer_scale: bool) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, ratio * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ratio * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6)) if layer_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(self.act(self.fc1(self.norm(y))))
        if self.gamma is not None:
            y = self.gamma * y
        return x + y.permute(0, 3, 1, 2)


def _convnext(s: dict[str, Any]) -> nn.Module:
    dims = s["dims"]
    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
    for i, (dim, depth) in enumerate(zip(dims, s["depths"])):
        if i:
            layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
        layers += [ConvNeXtBlock(dim, s["mlp_ratio"], s["layer_scale"]) for _ in range(depth)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(),
                         nn.Linear(dims[-1], s["classes"]))


# --- transformer ----------------------------------------------------------------------------


def _transformer(s: dict[str, Any]) -> nn.Module:
    d = s["d_model"]
    layer = nn.TransformerEncoderLayer(d, s["heads"], d * s["ffn_ratio"], activation=s["activation"],
                                       batch_first=True, norm_first=s["norm_first"])
    # No padding masks are passed, so nested tensors never come into it; saying so spares the
    # warning torch gives for norm_first or odd heads.
    return nn.TransformerEncoder(layer, s["layers"], norm=nn.LayerNorm(d) if s["final_norm"] else None,
                                 enable_nested_tensor=False)


# --- attention ------------------------------------------------------------------------------


class AttentionBlock(nn.Module):
    """Pre-norm self-attention (packed qkv, ``F.scaled_dot_product_attention``) and MLP."""

    def __init__(self, dim: int, heads: int, ratio: int, act: str, qkv_bias: bool, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ratio * dim)
        self.act = _act(act)
        self.fc2 = nn.Linear(ratio * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class PatchNet(nn.Module):
    """Patch embedding, blocks over the tokens, a final norm, mean over tokens, classifier."""

    def __init__(self, s: dict[str, Any], blocks: Sequence[nn.Module], pos_embed: bool = False) -> None:
        super().__init__()
        dim, tokens = s["dim"], (s["image"] // s["patch"]) ** 2
        self.stem = nn.Conv2d(3, dim, s["patch"], s["patch"])
        self.pos = nn.Parameter(torch.zeros(1, tokens, dim)) if pos_embed else None
        self.blocks = nn.Sequential(*blocks)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, s["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x).flatten(2).transpose(1, 2)
        if self.pos is not None:
            x = x + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x.mean(dim=1))


def _attention(s: dict[str, Any]) -> nn.Module:
    blocks = [AttentionBlock(s["dim"], s["heads"], s["mlp_ratio"], s["act"], s["qkv_bias"], s["causal"])
              for _ in range(s["depth"])]
    return PatchNet(s, blocks, s["pos_embed"])


# --- mixer ----------------------------------------------------------------------------------


class MixerBlock(nn.Module):
    """Token mixing (an MLP across tokens, on the transposed tokens) then channel mixing."""

    def __init__(self, tokens: int, dim: int, token_dim: int, channel_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_fc1 = nn.Linear(tokens, token_dim)
        self.token_fc2 = nn.Linear(token_dim, tokens)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_fc1 = nn.Linear(dim, channel_dim)
        self.channel_fc2 = nn.Linear(channel_dim, dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x).transpose(1, 2)
        y = self.token_fc2(self.act(self.token_fc1(y))).transpose(1, 2)
        x = x + y
        return x + self.channel_fc2(self.act(self.channel_fc1(self.norm2(x))))


def _mixer(s: dict[str, Any]) -> nn.Module:
    tokens = (s["image"] // s["patch"]) ** 2
    return PatchNet(s, [MixerBlock(tokens, s["dim"], s["token_dim"], s["channel_dim"]) for _ in range(s["depth"])])


BUILDERS = {"mbconv": _mbconv, "resnet": _resnet, "convnext": _convnext, "transformer": _transformer,
            "attention": _attention, "mixer": _mixer}


def build_module(spec: dict[str, Any]) -> nn.Module:
    """The module of ``spec`` (``collectors.nas_space.build`` is the entry point)."""
    try:
        builder = BUILDERS[spec["space"]]
    except KeyError:
        raise ValueError(f"unknown NAS space {spec.get('space')!r}: expected one of {', '.join(BUILDERS)}") from None
    return builder(spec)
