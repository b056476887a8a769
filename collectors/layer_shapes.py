"""The distribution of real layers: which operator shapes real models actually run.

A ``TorchFunctionMode`` records every top-level torch call a model's forward makes (batch 1),
and ``recognize`` maps each call onto a catalogue family with per-sample parameters. Sweeps then
sample from these shapes and from perturbations around them, so the dataset covers what models
run rather than a uniform grid nobody uses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from predictor.catalogue import get_family
from predictor.graph import Graph
from predictor.importers.torch_calls import call_recorder, recognize

Shape = dict[str, Any]  # {"family", "variant", "params", "sources"}, and "layout" where it is known


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

    with torch.inference_mode(), call_recorder(on_call):
        model(example)
    return found


def graph_shapes(graph: Graph) -> list[tuple[str, str, dict[str, int], str]]:
    """The costed kernel nodes of a traced graph as (family, variant, params, layout).

    Unlike ``extract_model_shapes`` this keeps each node's layout: a NAS architecture's
    channels-last convolutions and strided elementwise ops are measured in the layout they run
    in, not in every layout of their family (which would double a sweep for shapes no one runs).
    Nodes the catalogue cannot express are left out, as in ``extract_model_shapes``.
    """
    found: list[tuple[str, str, dict[str, int], str]] = []
    for node in graph.nodes:
        if node.kind != "kernel" or not node.family:
            continue
        params = {k: int(v) for k, v in node.params.items()}
        variant = node.variant or ""
        try:
            get_family(node.family).check(params, variant, node.layout)
        except ValueError:
            continue
        found.append((node.family, variant, params, node.layout))
    return found


def merge_shapes(per_model: Iterable[tuple[str, Sequence[tuple[Any, ...]]]]) -> list[Shape]:
    """Deduplicate shapes across models, keeping which models use each and how often.

    A shape is (family, variant, params) or (family, variant, params, layout); with a layout, the
    same params in two layouts are two shapes."""
    merged: dict[str, Shape] = {}
    for model_name, shapes in per_model:
        for family, variant, params, *layout in shapes:
            key = json.dumps([family, variant, sorted(params.items()), *layout])
            entry = merged.setdefault(key, {"family": family, "variant": variant,
                                            "params": dict(sorted(params.items())), "sources": {},
                                            **({"layout": layout[0]} if layout else {})})
            entry["sources"][model_name] = entry["sources"].get(model_name, 0) + 1
    return sorted(merged.values(), key=lambda e: json.dumps([e["family"], e["variant"], sorted(e["params"].items()),
                                                             e.get("layout", "")]))


def save_shapes(shapes: list[Shape], path: Path, meta: dict[str, Any]) -> None:
    """Write the layer-shape catalogue as JSON (committed beside the dataset it seeded)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "shapes": shapes}, indent=1, sort_keys=True))


def load_shapes(path: Path) -> list[Shape]:
    """Read a layer-shape catalogue written by ``save_shapes``."""
    return json.loads(Path(path).read_text())["shapes"]
