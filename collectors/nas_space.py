"""A seeded space of architectures that the predictor never trains on: the NAS suite.

``arch_spec(seed)`` draws one architecture as a plain dict (JSON-ready, pure Python: the same
seed gives the same spec on any machine, from ``random.Random(seed)``); ``build(spec)`` makes it
a torch module (``collectors.nas_modules``, imported on first use, so this module loads without
torch); ``example_input(spec, batch, device, dtype)`` is one input batch. The space is chosen by
``seed % 6``:

- ``mbconv``: MobileNet/EfficientNet-style inverted residuals on 96-224 px images: expansion
  1/3/4/6, depthwise 3x3 or 5x5, stride 1 or 2, squeeze-excite (sigmoid or hard-sigmoid gate) or
  none, ReLU/SiLU/Hardswish/GELU per stage, BatchNorm; 4-6 stages of 1-4 blocks.
- ``transformer``: ``nn.TransformerEncoder`` on a float (batch, 32-512, d_model) input: 2-12
  layers, d_model 64-768, 1-12 heads of 16-128 dims (a third odd, which PyTorch's fused fast path
  skips), FFN ratio 1-4, norm first or after, ReLU or GELU, batch_first, a final norm or none.
- ``resnet``: basic or bottleneck residual stages on 64-224 px images (2-4 stages of 1-3 blocks,
  width 32-96 doubling per stage; a 7x7 stem and max pool from 128 px).
- ``convnext``: ConvNeXt blocks on 64-224 px images (depthwise 7x7, LayerNorm channels-last,
  pointwise MLP with GELU, layer scale or none; 2-4 stages, dims 32-768).
- ``attention``: hand-written pre-norm blocks over 36-400 patch tokens of 64-224 px images: qkv
  linear, ``F.scaled_dot_product_attention`` (a quarter causal), out projection, MLP
  (GELU/SiLU/ReLU); dim 64-768, 1-12 heads, 2-12 blocks.
- ``mixer``: MLP-Mixer over 16-400 patch tokens of 64-224 px images: token-mixing and
  channel-mixing MLPs with GELU; dim 64-768, 2-12 blocks.

Every draw is kept within a FLOPs budget per sample (``FLOPS_RANGE``), so that one fp32 forward
at batch 32 takes about 0.5-15 ms on an H200. ``split(seed)`` puts seeds into ``nas-dev`` (tune
on it) and ``nas-test`` (only scored) by ``(seed // 6) % 2``: six consecutive seeds, one per
space, go to the same split, so every space is split evenly.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from predictor.model_kinds import NAS_SPACES

SPACES = NAS_SPACES
SPLITS = ("nas-dev", "nas-test")
#: seeds from here on make the 'nas-train' suite (``datasets/suites/nas-train``): architectures of
#: the same spaces whose CUDA-graph runs the composition constants are fitted on, beside the zoo's,
#: so that no constant is chosen from nas-dev or nas-test
TRAIN_SEEDS_FROM = 1000
#: the default suite: 24 architectures per space
DEFAULT_SEEDS = tuple(range(144))
#: FLOPs per sample (multiply-add = 2) a draw must fall in, per space: with the H200's fp32 (full
#: FP32 matmuls, TF32 convolutions) this keeps batch 32 within about 0.5-15 ms.
FLOPS_RANGE: dict[str, tuple[float, float]] = {
    "mbconv": (0.1e9, 2.5e9), "resnet": (0.3e9, 6e9), "convnext": (0.3e9, 6e9),
    "transformer": (0.3e9, 8e9), "attention": (0.3e9, 8e9), "mixer": (0.3e9, 8e9),
}
ACTIVATIONS = ("relu", "silu", "hardswish", "gelu")
IMAGE_SIZES = (64, 96, 128, 160, 192, 224)
SEQUENCES = (32, 64, 128, 192, 256, 384, 512)
CLASSES = 1000
#: draws tried before the closest to the FLOPs range is kept (deterministic either way)
MAX_DRAWS = 200


def space_of(seed: int) -> str:
    """The space seed ``seed`` draws from."""
    return SPACES[seed % len(SPACES)]


def split(seed: int) -> str:
    """'nas-dev' or 'nas-test': by ``(seed // 6) % 2``, so each space has as many of each; seeds
    from ``TRAIN_SEEDS_FROM`` on are 'nas-train', the only NAS runs training may fit on."""
    if seed >= TRAIN_SEEDS_FROM:
        return "nas-train"
    return SPLITS[(seed // len(SPACES)) % 2]


def model_name(seed: int) -> str:
    """The name of an architecture in rows, graphs and files: ``nas-<seed>``."""
    return f"nas-{seed}"


def seed_of(name: str) -> int:
    """The seed of a name made by ``model_name``."""
    if not name.startswith("nas-") or not name[4:].isdigit():
        raise ValueError(f"{name!r} is not a NAS architecture name (nas-<seed>)")
    return int(name[4:])


def _round8(x: float) -> int:
    return max(8, int(round(x / 8)) * 8)


def _conv(c_in: int, c_out: int, kernel: int, size: int, stride: int = 1, groups: int = 1,
          pad: int | None = None) -> tuple[float, int]:
    """(FLOPs per sample, output size) of a square convolution."""
    pad = kernel // 2 if pad is None else pad
    out = (size + 2 * pad - kernel) // stride + 1
    return 2.0 * (c_in // groups) * kernel * kernel * c_out * out * out, out


# --- the spaces: draw(rng) -> spec, flops(spec) -> FLOPs per sample -------------------------


def _draw_mbconv(rng: random.Random) -> dict[str, Any]:
    image = rng.choice((96, 128, 160, 192, 224))
    stem = rng.choice((16, 24, 32))
    stages = rng.randint(4, 6)
    size = image // 2
    downsample = min(stages, rng.randint(2, 4), int(math.log2(size / 3)))
    strided = set(rng.sample(range(stages), downsample))
    blocks, c = [], stem
    for i in range(stages):
        c_out = min(320, _round8(c * rng.choice((1.0, 1.5, 2.0)))) if i else rng.choice((16, 24))
        expand = 1 if i == 0 and rng.random() < 0.5 else rng.choice((3, 4, 6))
        kernel, act = rng.choice((3, 5)), rng.choice(ACTIVATIONS)
        se = rng.random() < 0.5
        gate = rng.choice(("sigmoid", "hardsigmoid"))
        for j in range(rng.randint(1, 4 if i else 2)):
            blocks.append({"c_in": c, "c_out": c_out, "expand": expand, "kernel": kernel,
                           "stride": 2 if j == 0 and i in strided else 1, "se": se, "gate": gate, "act": act})
            c = c_out
    return {"space": "mbconv", "image": image, "stem": stem, "stem_act": rng.choice(ACTIVATIONS),
            "blocks": blocks, "head": rng.choice((512, 768, 1024, 1280)), "head_act": rng.choice(ACTIVATIONS),
            "classes": CLASSES}


def _flops_mbconv(s: dict[str, Any]) -> float:
    total, size = _conv(3, s["stem"], 3, s["image"], 2)
    for b in s["blocks"]:
        mid = b["c_in"] * b["expand"]
        if b["expand"] != 1:
            total += _conv(b["c_in"], mid, 1, size)[0]
        f, size = _conv(mid, mid, b["kernel"], size, b["stride"], groups=mid)
        total += f + _conv(mid, b["c_out"], 1, size)[0]
    return total + _conv(s["blocks"][-1]["c_out"], s["head"], 1, size)[0] + 2.0 * s["head"] * s["classes"]


def _draw_resnet(rng: random.Random) -> dict[str, Any]:
    image = rng.choice(IMAGE_SIZES)
    block = rng.choice(("basic", "bottleneck"))
    base = rng.choice((32, 48, 64, 96) if block == "basic" else (32, 48, 64))
    stages = rng.randint(2, 4)
    return {"space": "resnet", "image": image, "block": block, "stem": rng.choice((32, 64)),
            "deep_stem": image >= 128, "widths": [base * 2 ** i for i in range(stages)],
            "depths": [rng.randint(1, 3) for _ in range(stages)], "expansion": 4 if block == "bottleneck" else 1,
            "classes": CLASSES}


def _flops_resnet(s: dict[str, Any]) -> float:
    if s["deep_stem"]:
        total, size = _conv(3, s["stem"], 7, s["image"], 2)
        size = (size + 2 - 3) // 2 + 1  # max pool 3x3, stride 2
    else:
        total, size = _conv(3, s["stem"], 3, s["image"])
    c = s["stem"]
    for i, (width, depth) in enumerate(zip(s["widths"], s["depths"])):
        out = width * s["expansion"]
        for j in range(depth):
            stride = 2 if i and j == 0 else 1
            if s["block"] == "basic":
                f1, new = _conv(c, width, 3, size, stride)
                total += f1 + _conv(width, width, 3, new)[0]
            else:
                f1, _ = _conv(c, width, 1, size)
                f2, new = _conv(width, width, 3, size, stride)
                total += f1 + f2 + _conv(width, out, 1, new)[0]
            if stride != 1 or c != out:
                total += _conv(c, out, 1, size, stride, pad=0)[0]
            c, size = out, new
    return total + 2.0 * c * s["classes"]


def _draw_convnext(rng: random.Random) -> dict[str, Any]:
    image = rng.choice(IMAGE_SIZES)
    stages = rng.randint(2, 4)
    base = rng.choice((32, 48, 64, 96, 128))
    return {"space": "convnext", "image": image, "dims": [min(768, base * 2 ** i) for i in range(stages)],
            "depths": [rng.randint(1, 6 if i == 2 else 3) for i in range(stages)],
            "mlp_ratio": rng.choice((2, 3, 4)), "layer_scale": rng.random() < 0.5, "classes": CLASSES}


def _flops_convnext(s: dict[str, Any]) -> float:
    total, size = _conv(3, s["dims"][0], 4, s["image"], 4, pad=0)
    c = s["dims"][0]
    for i, (dim, depth) in enumerate(zip(s["dims"], s["depths"])):
        if i:
            f, size = _conv(c, dim, 2, size, 2, pad=0)
            total += f
        c = dim
        tokens = size * size
        total += depth * (_conv(dim, dim, 7, size, groups=dim)[0] + 4.0 * tokens * dim * dim * s["mlp_ratio"])
    return total + 2.0 * c * s["classes"]


def _heads_and_dim(rng: random.Random, odd_share: float, head_dims: tuple[int, ...]) -> tuple[int, int]:
    """(heads, head_dim) with 64 <= heads * head_dim <= 768; ``odd_share`` of draws odd heads."""
    while True:
        heads = rng.choice((1, 3, 5, 7, 9, 11) if rng.random() < odd_share else (2, 4, 6, 8, 12))
        head_dim = rng.choice(head_dims)
        if 64 <= heads * head_dim <= 768:
            return heads, head_dim


def _draw_transformer(rng: random.Random) -> dict[str, Any]:
    # Head dims are multiples of 8, so the fused fast path runs flash or memory-efficient
    # attention in every precision (torch_fused.attention_routes).
    heads, head_dim = _heads_and_dim(rng, 1 / 3, (16, 24, 32, 48, 64, 80, 96, 128))
    return {"space": "transformer", "seq": rng.choice(SEQUENCES), "d_model": heads * head_dim, "heads": heads,
            "layers": rng.randint(2, 12), "ffn_ratio": rng.choice((1, 2, 3, 4)),
            "norm_first": rng.random() < 0.5, "activation": rng.choice(("relu", "gelu")),
            "final_norm": rng.random() < 0.5}


def _attention_flops(tokens: int, d: int, hidden: int) -> float:
    """One pre-norm attention block: qkv, scores and context, out projection, MLP."""
    return 2.0 * tokens * d * (3 * d + d + 2 * hidden) + 4.0 * tokens * tokens * d


def _flops_transformer(s: dict[str, Any]) -> float:
    d = s["d_model"]
    return s["layers"] * _attention_flops(s["seq"], d, d * s["ffn_ratio"])


def _patches(rng: random.Random, patches: tuple[int, ...], low: int, high: int) -> tuple[int, int]:
    while True:
        image, patch = rng.choice(IMAGE_SIZES), rng.choice(patches)
        if image % patch == 0 and low <= (image // patch) ** 2 <= high:
            return image, patch


def _draw_attention(rng: random.Random) -> dict[str, Any]:
    image, patch = _patches(rng, (8, 16), 32, 512)
    heads, head_dim = _heads_and_dim(rng, 1 / 3, (16, 32, 48, 64, 96, 128))
    return {"space": "attention", "image": image, "patch": patch, "dim": heads * head_dim, "heads": heads,
            "depth": rng.randint(2, 12), "mlp_ratio": rng.choice((2, 3, 4)),
            "act": rng.choice(("gelu", "silu", "relu")), "qkv_bias": rng.random() < 0.5,
            "causal": rng.random() < 0.25, "pos_embed": rng.random() < 0.5, "classes": CLASSES}


def _flops_attention(s: dict[str, Any]) -> float:
    tokens, d = (s["image"] // s["patch"]) ** 2, s["dim"]
    stem = 2.0 * 3 * s["patch"] ** 2 * d * tokens
    return stem + s["depth"] * _attention_flops(tokens, d, d * s["mlp_ratio"]) + 2.0 * d * s["classes"]


def _draw_mixer(rng: random.Random) -> dict[str, Any]:
    image, patch = _patches(rng, (8, 16, 32), 16, 400)
    tokens = (image // patch) ** 2
    dim = rng.choice((64, 128, 192, 256, 384, 512, 768))
    return {"space": "mixer", "image": image, "patch": patch, "dim": dim, "depth": rng.randint(2, 12),
            "token_dim": _round8(tokens * rng.choice((0.5, 1, 2))), "channel_dim": dim * rng.choice((2, 3, 4)),
            "classes": CLASSES}


def _flops_mixer(s: dict[str, Any]) -> float:
    tokens, d = (s["image"] // s["patch"]) ** 2, s["dim"]
    block = 4.0 * d * tokens * s["token_dim"] + 4.0 * tokens * d * s["channel_dim"]
    return 2.0 * 3 * s["patch"] ** 2 * d * tokens + s["depth"] * block + 2.0 * d * s["classes"]


_DRAW = {"mbconv": _draw_mbconv, "transformer": _draw_transformer, "resnet": _draw_resnet,
         "convnext": _draw_convnext, "attention": _draw_attention, "mixer": _draw_mixer}
_FLOPS = {"mbconv": _flops_mbconv, "transformer": _flops_transformer, "resnet": _flops_resnet,
          "convnext": _flops_convnext, "attention": _flops_attention, "mixer": _flops_mixer}


def spec_flops(spec: dict[str, Any]) -> float:
    """FLOPs per sample of the main layers (convolutions, GEMMs, attention), estimated from the
    spec alone: what keeps draws within ``FLOPS_RANGE``."""
    return _FLOPS[spec["space"]](spec)


def arch_spec(seed: int) -> dict[str, Any]:
    """The architecture of ``seed``: a JSON-ready dict with its ``space`` and every choice made.

    Draws from ``random.Random(seed)`` until one falls within its space's FLOPs range (the
    draws that do not are skipped, so the result depends on the seed alone)."""
    if seed < 0:
        raise ValueError(f"seeds are non-negative integers, got {seed}")
    space = space_of(seed)
    low, high = FLOPS_RANGE[space]
    rng = random.Random(seed)
    best: tuple[float, dict[str, Any]] | None = None
    for _ in range(MAX_DRAWS):
        spec = _DRAW[space](rng)
        flops = spec_flops(spec)
        if low <= flops <= high:
            return spec
        miss = math.log(low / flops) if flops < low else math.log(flops / high)
        if best is None or miss < best[0]:
            best = (miss, spec)
    assert best is not None
    return best[1]


def spec_hash(seeds: range | tuple[int, ...] | list[int]) -> str:
    """sha256 of the specs of ``seeds``, as canonical JSON: pins the generator in a test."""
    text = json.dumps([arch_spec(s) for s in seeds], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def input_kind(spec: dict[str, Any]) -> str:
    """'image' (batch, 3, size, size) or 'sequence' (batch, seq, d_model), both float."""
    return "sequence" if spec["space"] == "transformer" else "image"


def build(spec: dict[str, Any]) -> Any:
    """The torch module of ``spec`` (in train mode, as torch makes it: call ``.eval()``)."""
    from collectors.nas_modules import build_module

    return build_module(spec)


def example_input(spec: dict[str, Any], batch: int, device: Any = "cpu", dtype: Any = None) -> Any:
    """A random input batch of ``spec``'s architecture on ``device`` in ``dtype`` (float32 by default)."""
    import torch

    dtype = dtype or torch.float32
    if input_kind(spec) == "sequence":
        return torch.randn(batch, spec["seq"], spec["d_model"], device=device, dtype=dtype)
    return torch.randn(batch, 3, spec["image"], spec["image"], device=device, dtype=dtype)


@dataclass(frozen=True)
class NasModel:
    """One NAS architecture in the shape ``collectors.model_runs.measure_models`` takes a model
    in (as ``collectors.zoo_models.ZooModel``): a name, a kind (its space), how to build it and
    what one input looks like."""

    seed: int

    @property
    def name(self) -> str:
        return model_name(self.seed)

    @property
    def spec(self) -> dict[str, Any]:
        return arch_spec(self.seed)

    @property
    def kind(self) -> str:
        return space_of(self.seed)

    def build(self) -> Any:
        return build(self.spec)

    def example_input(self, batch: int, device: Any, dtype: Any) -> Any:
        return example_input(self.spec, batch, device, dtype)


def parse_seeds(text: str) -> list[int]:
    """Seeds from '0-143', '3,5,9-11' and the like, in order, without repeats."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ValueError(f"bad seed range {part!r}: expected N or N-M") from None
        if first < 0 or last < first:
            raise ValueError(f"bad seed range {part!r}: expected 0 <= N <= M")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise ValueError("no seeds given")
    return list(dict.fromkeys(seeds))


def format_seeds(seeds: list[int]) -> str:
    """Seeds as ``parse_seeds`` reads them, runs of consecutive seeds joined: '0-143', '3,5,9-11'."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and runs[-1][1] == seed - 1:
            runs[-1][1] = seed
        else:
            runs.append([seed, seed])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
