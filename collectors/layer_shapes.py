"""The distribution of real layers: which operator shapes real models actually run.

A ``TorchFunctionMode`` records every top-level torch call a model's forward makes (batch 1),
and ``recognize`` maps each call onto a catalogue family with per-sample parameters. Sweeps then
sample from these shapes and from perturbations around them, so the dataset covers what models
run rather than a uniform grid nobody uses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from predictor.catalogue import get_family

Shape = dict[str, Any]  # {"family", "variant", "params", "sources"}

ACTIVATION_NAMES = {
    "relu": "relu", "relu_": "relu", "gelu": "gelu", "silu": "silu", "silu_": "silu",
    "sigmoid": "sigmoid", "tanh": "tanh", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid",
    "hardtanh": "clamp", "relu6": "clamp", "clamp": "clamp", "clamp_": "clamp",
}
BINARY_NAMES = {"add": "add", "__add__": "add", "__iadd__": "add", "add_": "add", "__radd__": "add",
                "mul": "mul", "__mul__": "mul", "__imul__": "mul", "mul_": "mul", "__rmul__": "mul"}


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


def _first(value: Any) -> int:
    return int(value[0] if isinstance(value, (tuple, list)) else value)


def _per_sample(shape: torch.Size) -> int:
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def recognize(name: str, args: tuple, kwargs: dict, out: Any) -> tuple[str, str, dict[str, int]] | None:
    """Map one torch call onto (family, variant, per-sample params), or None if not costed here."""
    if name == "cat":
        parts = _arg(args, kwargs, 0, "tensors", ())
        if parts and all(isinstance(p, torch.Tensor) and p.dim() == 4 for p in parts) \
                and _arg(args, kwargs, 1, "dim", 0) in (1, -3):
            c = round(sum(p.shape[1] for p in parts) / len(parts))
            return "concat", "", dict(inputs=len(parts), c=c, h=parts[0].shape[2], w=parts[0].shape[3])
        return None
    t = [a for a in args if isinstance(a, torch.Tensor)]
    x = t[0] if t else None
    if x is None:
        return None
    s = x.shape
    if name == "conv2d" and x.dim() == 4:
        w = _arg(args, kwargs, 1, "weight")
        kernel = w.shape[2]
        padding = _arg(args, kwargs, 4, "padding", 0)
        dilation = _first(_arg(args, kwargs, 5, "dilation", 1))
        padded_same = padding == "same" or _first(padding) == kernel // 2
        if w.shape[2] != w.shape[3] or dilation != 1 or not padded_same:
            return None  # not expressible in the catalogue (square, padding k//2, no dilation)
        return "conv2d", "", dict(c_in=s[1], c_out=w.shape[0], h=s[2], w=s[3], kernel=kernel,
                                  stride=_first(_arg(args, kwargs, 3, "stride", 1)),
                                  groups=int(_arg(args, kwargs, 6, "groups", 1)))
    if name == "linear":
        w = _arg(args, kwargs, 1, "weight")
        return "linear", "", dict(tokens=max(1, math.prod(s[1:-1])), k=s[-1], n=w.shape[0])
    if name in ("matmul", "__matmul__", "bmm") and len(t) >= 2:
        a, b = t[0], t[1]
        if b.dim() == 2:
            return "linear", "", dict(tokens=max(1, math.prod(a.shape[1:-1])), k=a.shape[-1], n=b.shape[-1])
        if a.dim() >= 3:
            return "matmul", "", dict(heads=max(1, math.prod(a.shape[1:-2])), m=a.shape[-2],
                                      k=a.shape[-1], n=b.shape[-1])
    if name == "scaled_dot_product_attention" and x.dim() == 4:
        k = t[1]
        causal = int(bool(_arg(args, kwargs, 5, "is_causal", False)))
        return "sdpa", "", dict(heads=s[1], seq_q=s[2], seq_kv=k.shape[2], head_dim=s[3], causal=causal)
    if name == "batch_norm" and x.dim() == 4:
        return "batch_norm", "", dict(c=s[1], h=s[2], w=s[3])
    if name == "layer_norm":
        return "layer_norm", "", dict(tokens=max(1, math.prod(s[1:-1])), c=s[-1])
    if name == "group_norm" and x.dim() == 4:
        return "group_norm", "", dict(c=s[1], h=s[2], w=s[3], groups=int(_arg(args, kwargs, 1, "num_groups")))
    if name == "softmax" and _arg(args, kwargs, 1, "dim", -1) in (-1, x.dim() - 1):
        return "softmax", "", dict(rows=max(1, math.prod(s[1:-1])), c=s[-1])
    if name in ACTIVATION_NAMES:
        return "activation", ACTIVATION_NAMES[name], dict(elements=_per_sample(s))
    if name in BINARY_NAMES and len(t) >= 2 and isinstance(out, torch.Tensor):
        return "binary", BINARY_NAMES[name], dict(elements=_per_sample(out.shape))
    if name in ("max_pool2d", "avg_pool2d") and x.dim() == 4:
        kernel = _first(_arg(args, kwargs, 1, "kernel_size"))
        stride = _arg(args, kwargs, 2, "stride", None)
        return "pool", name[:3], dict(c=s[1], h=s[2], w=s[3], kernel=kernel,
                                      stride=_first(stride) if stride else kernel)
    if name == "adaptive_avg_pool2d" and x.dim() == 4 and _first(_arg(args, kwargs, 1, "output_size")) == 1:
        return "pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1)
    if name == "embedding":
        w = _arg(args, kwargs, 1, "weight")
        return "embedding", "", dict(vocab=w.shape[0], c=w.shape[1], tokens=_per_sample(s))
    if name == "contiguous" and x.dim() == 4 and not x.is_contiguous():
        return "transpose", "", dict(d1=s[2], d2=s[1], d3=s[3])
    if name == "mean" and isinstance(out, torch.Tensor):
        dim = _arg(args, kwargs, 1, "dim")
        dims = tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)
        if dims in ((-1,), (x.dim() - 1,)):
            return "mean", "", dict(rows=max(1, math.prod(s[1:-1])), c=s[-1])
        if x.dim() == 4 and sorted(d % 4 for d in dims) == [2, 3]:
            return "mean", "", dict(rows=s[1], c=s[2] * s[3])
    return None


class CallRecorder(TorchFunctionMode):
    """Records every top-level torch call (inner calls run with the mode popped, unseen)."""

    def __init__(self, on_call: Callable[[str, tuple, dict, Any], None]) -> None:
        super().__init__()
        self.on_call = on_call

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.on_call(getattr(func, "__name__", str(func)), args, kwargs, out)
        return out


def extract_model_shapes(model: Any, example: Any) -> list[tuple[str, str, dict[str, int]]]:
    """Run one forward of ``model`` on ``example`` and return the recognised layer shapes."""
    found: list[tuple[str, str, dict[str, int]]] = []

    def on_call(name: str, args: tuple, kwargs: dict, out: Any) -> None:
        hit = recognize(name, args, kwargs, out)
        if hit is None:
            return
        family, variant, params = hit
        params = {k: int(v) for k, v in params.items()}
        try:
            get_family(family).check(params, variant)
        except ValueError:
            return  # a shape our catalogue cannot express (e.g. uneven padding) is not sampled
        found.append((family, variant, params))

    with torch.inference_mode(), CallRecorder(on_call):
        model(example)
    return found


def merge_shapes(per_model: Iterable[tuple[str, list[tuple[str, str, dict[str, int]]]]]) -> list[Shape]:
    """Deduplicate shapes across models, keeping which models use each and how often."""
    merged: dict[str, Shape] = {}
    for model_name, shapes in per_model:
        for family, variant, params in shapes:
            key = json.dumps([family, variant, sorted(params.items())])
            entry = merged.setdefault(key, {"family": family, "variant": variant,
                                            "params": dict(sorted(params.items())), "sources": {}})
            entry["sources"][model_name] = entry["sources"].get(model_name, 0) + 1
    return sorted(merged.values(), key=lambda e: json.dumps([e["family"], e["variant"], sorted(e["params"].items())]))


def save_shapes(shapes: list[Shape], path: Path, meta: dict[str, Any]) -> None:
    """Write the layer-shape catalogue as JSON (committed beside the dataset it seeded)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "shapes": shapes}, indent=1, sort_keys=True))


def load_shapes(path: Path) -> list[Shape]:
    """Read a layer-shape catalogue written by ``save_shapes``."""
    return json.loads(Path(path).read_text())["shapes"]
