"""Draw the configurations a sweep measures: real layer shapes, perturbations, random shapes.

Reproducible: the same shape catalogue and seed give the same configurations in the same order.
Each shape is measured in every precision and layout of its family at a few batch sizes drawn
from 1..256, keeping only batches whose working set and arithmetic fit the caps (so one huge
configuration cannot eat a sweep's budget). The order is shuffled, so a sweep stopped early
still covers every family evenly.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from collectors.layer_shapes import Shape
from collectors.op_config import OpConfig
from predictor.catalogue import FAMILIES, bytes_moved, flops, get_family
from predictor.precision import PRECISIONS

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PERTURB_FACTORS = (0.5, 0.75, 1.5, 2.0)
HEAD_DIMS = (32, 64, 80, 96, 128)
#: Parameters a perturbation scales; the others (kernel, stride, causal...) keep real values.
SCALABLE = {"c_in", "c_out", "h", "w", "tokens", "k", "n", "m", "heads", "seq_q", "seq_kv", "c",
            "rows", "elements", "vocab", "d1", "d2", "d3"}

#: Log-uniform ranges (low, high) for random shapes, per family; fixed choices are lists.
RANDOM_SPACE: dict[str, dict[str, tuple[int, int] | list[int]]] = {
    "conv2d": {"c_in": (3, 1024), "c_out": (8, 2048), "h": (7, 224), "kernel": [1, 3, 5, 7],
               "stride": [1, 2], "groups": [1, 1, 1, 0]},  # 0 marks depthwise
    "linear": {"tokens": (1, 1024), "k": (64, 8192), "n": (64, 8192)},
    "matmul": {"heads": (1, 32), "m": (16, 2048), "k": (16, 512), "n": (16, 2048)},
    "sdpa": {"heads": (1, 32), "seq_q": (16, 2048), "head_dim": list(HEAD_DIMS), "causal": [0, 1]},
    "batch_norm": {"c": (16, 2048), "h": (7, 112)},
    "layer_norm": {"tokens": (1, 1024), "c": (128, 8192)},
    "group_norm": {"c": (32, 1024), "h": (7, 112), "groups": [8, 16, 32]},
    "softmax": {"rows": (1, 16384), "c": (16, 4096)},
    "activation": {"elements": (1024, 1 << 22)},
    "binary": {"elements": (1024, 1 << 22)},
    "pool": {"c": (16, 1024), "h": (7, 112), "kernel": [2, 3], "stride": [1, 2]},
    "embedding": {"vocab": (1000, 160000), "c": (64, 4096), "tokens": (1, 2048)},
    "concat": {"inputs": (2, 6), "c": (16, 512), "h": (7, 56)},
    "transpose": {"d1": (8, 2048), "d2": (2, 64), "d3": (16, 256)},
    "mean": {"rows": (1, 4096), "c": (16, 4096)},
}

#: Variants random shapes are drawn in, where not all of a family's: conv2d's and linear's 'nobias',
#: sdpa's 'masked' and transpose's 'add' came after the first H200 sweep, and drawing them here
#: would change that sweep's configurations (measure them with ``variants=(...)`` instead).
RANDOM_VARIANTS: dict[str, tuple[str, ...]] = {"conv2d": ("",), "sdpa": ("",), "linear": ("",),
                                               "transpose": ("",)}

#: Families that few zoo layers exercise but transformers lean on get more random shapes.
RANDOM_WEIGHT: dict[str, int] = {"linear": 3, "matmul": 2, "sdpa": 2, "layer_norm": 2, "softmax": 2}


@dataclass(frozen=True)
class SamplerSettings:
    """What to draw: how many configurations, and the caps that keep each one affordable."""

    seed: int = 0
    target_configs: int = 44_000
    batches_per_shape: int = 3
    perturbations_per_shape: int = 1
    random_shapes_per_family: int = 120
    max_bytes: float = 3e9
    max_flops: float = 3e11
    #: skip batches whose arithmetic is below this: a sweep that extends an earlier one to larger
    #: calls (a CPU's first sweep capped at 2 GFLOP, while its zoo's batch-32 GEMMs run 30)
    min_flops: float = 0.0
    precisions: tuple[str, ...] = tuple(PRECISIONS)
    families: tuple[str, ...] = field(default_factory=lambda: tuple(FAMILIES))
    #: If set, every shape is measured in each of these variants (where its family has them)
    #: instead of its own: e.g. the convolutions of an earlier sweep again without bias.
    variants: tuple[str, ...] | None = None
    #: If set, only these layouts (where a family has them).
    layouts: tuple[str, ...] | None = None


def _round_like(value: float, original: int) -> int:
    step = 8 if original % 8 == 0 and original >= 16 else 1
    return max(1, int(round(value / step)) * step)


def _perturb(shape: Shape, rng: random.Random) -> dict[str, int]:
    params = dict(shape["params"])
    family = shape["family"]
    for name in params:
        if name in SCALABLE:
            params[name] = _round_like(params[name] * rng.choice(PERTURB_FACTORS), params[name])
    if family == "conv2d":
        src = shape["params"]
        if src["groups"] == src["c_in"] and src["groups"] > 1:  # keep depthwise depthwise
            params["groups"] = params["c_in"]
            params["c_out"] = params["c_in"] * max(1, src["c_out"] // src["c_in"])
        else:
            g = src["groups"]
            params["c_in"] = max(g, params["c_in"] // g * g)
            params["c_out"] = max(g, params["c_out"] // g * g)
        params["w"] = params["h"] if src["h"] == src["w"] else params["w"]
    if family in ("batch_norm", "group_norm", "pool", "concat") and shape["params"]["h"] == shape["params"]["w"]:
        params["w"] = params["h"]
    if family == "group_norm":
        params["c"] = max(params["groups"], params["c"] // params["groups"] * params["groups"])
    if family == "sdpa":
        params["head_dim"] = rng.choice(HEAD_DIMS)
    return params


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _random_shape(family: str, rng: random.Random) -> dict[str, int]:
    space = RANDOM_SPACE[family]
    params: dict[str, int] = {}
    for name in get_family(family).params:
        choice = space.get(name)
        if isinstance(choice, list):
            params[name] = rng.choice(choice)
        elif isinstance(choice, tuple):
            params[name] = _round_like(_log_uniform(rng, *choice), 16 if choice[0] >= 16 else 1)
    if family in ("conv2d", "batch_norm", "group_norm", "pool", "concat"):
        params["w"] = params["h"]
    if family == "conv2d" and params["groups"] == 0:
        params["groups"] = params["c_in"]
        params["c_out"] = params["c_in"]
    if family == "sdpa":
        params["seq_kv"] = params["seq_q"]
    if family == "group_norm":
        params["c"] = max(params["groups"], params["c"] // params["groups"] * params["groups"])
    return params


def _fits(family: str, params: dict[str, int], variant: str, batch: int, s: SamplerSettings) -> bool:
    return (bytes_moved(family, params, variant, batch, 4) <= s.max_bytes
            and s.min_flops <= flops(family, params, variant, batch) <= s.max_flops)


def candidate_shapes(shapes: Iterable[Shape],
                     settings: SamplerSettings) -> list[tuple[str, str, dict[str, int], str, str | None]]:
    """Real shapes, perturbed real shapes and random shapes, as (family, variant, params, source,
    layout): the layout a real shape was recorded in (and its perturbation), or None for every
    layout of the family."""
    rng = random.Random(settings.seed)
    out: list[tuple[str, str, dict[str, int], str, str | None]] = []
    for shape in shapes:
        if shape["family"] not in settings.families:
            continue
        top_source = max(shape["sources"], key=shape["sources"].get) if shape.get("sources") else "unknown"
        layout = shape.get("layout")
        out.append((shape["family"], shape["variant"], dict(shape["params"]), f"model:{top_source}", layout))
        for _ in range(settings.perturbations_per_shape):
            out.append((shape["family"], shape["variant"], _perturb(shape, rng), f"perturbed:{top_source}", layout))
    for family in settings.families:
        variants = RANDOM_VARIANTS.get(family, get_family(family).variants)
        for _ in range(settings.random_shapes_per_family * RANDOM_WEIGHT.get(family, 1)):
            out.append((family, rng.choice(variants), _random_shape(family, rng), "random", None))
    valid = []
    for family, variant, params, source, layout in out:
        try:
            get_family(family).check(params, variant, layout)
        except ValueError:
            continue
        valid.append((family, variant, params, source, layout))
    return valid


def sample_configs(shapes: Iterable[Shape], settings: SamplerSettings) -> list[OpConfig]:
    """All configurations of a sweep, deduplicated, shuffled by the seed, cut to the target."""
    rng = random.Random(settings.seed + 1)
    configs: dict[str, OpConfig] = {}
    for family, variant, params, source, shape_layout in candidate_shapes(shapes, settings):
        allowed = [b for b in BATCHES if _fits(family, params, variant, b, settings)]
        if not allowed:
            continue
        batches = rng.sample(allowed, min(settings.batches_per_shape, len(allowed)))
        spec = get_family(family)
        variants = [v for v in settings.variants if v in spec.variants] if settings.variants else [variant]
        layouts = [x for x in spec.layouts if not settings.layouts or x in settings.layouts] or list(spec.layouts)
        if shape_layout is not None:
            layouts = [shape_layout] if shape_layout in layouts else []
        for variant_, layout, precision, batch in itertools.product(variants, layouts, settings.precisions, batches):
            cfg = OpConfig.make(family, params, variant_, layout, precision, batch, source)
            configs.setdefault(cfg.config_id, cfg)
    ordered = sorted(configs.values(), key=lambda c: c.config_id)
    rng.shuffle(ordered)
    return ordered[: settings.target_configs]
