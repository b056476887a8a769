"""Named graphs shipped with latpred, so naming ``resnet50`` needs no torch.

Each is the graph IR of a torchvision or transformers model traced at batch 1 (text models with
128 tokens) by ``latpred collect graphs``; prediction rescales them to any batch.
"""

from __future__ import annotations

from pathlib import Path

from predictor.graph import Graph

GRAPH_DIR = Path(__file__).parent / "zoo_graphs"


def zoo_names() -> list[str]:
    """Names of the shipped graphs."""
    return sorted(p.stem for p in GRAPH_DIR.glob("*.json"))


def load_zoo_graph(name: str) -> Graph:
    """A shipped graph by name (case-insensitive), with an error that lists the names."""
    wanted = name.strip().lower()
    for candidate in zoo_names():
        if candidate.lower() == wanted:
            return Graph.load(GRAPH_DIR / f"{candidate}.json")
    raise ValueError(f"no zoo graph named {name!r}: expected one of {', '.join(zoo_names())}")
