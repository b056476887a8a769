"""Turn what a user names (an ONNX file, a JSON IR file, a zoo name) into a Graph.

Only an ONNX file has symbolic dims to set: ``dims`` given for a JSON graph or a zoo name, whose
shapes are fixed numbers, is refused rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from predictor.graph import Graph
from predictor.zoo import load_zoo_graph, zoo_names


def load_graph(source: str, batch: int | None = None, dims: Mapping[str, int] | None = None) -> Graph:
    """A graph from a path ending in .onnx or .json, or from a zoo name; errors name the problem.
    ``dims`` sets an ONNX model's symbolic dims by name (``{"sequence": 256}``)."""
    path = Path(source)
    if dims and path.suffix.lower() != ".onnx":
        raise ValueError(f"{source}: dims ({', '.join(dims)}) apply only to an .onnx model; a JSON graph "
                         "or a zoo graph has fixed shapes")
    if path.suffix.lower() == ".onnx":
        if not path.is_file():
            raise ValueError(f"{source}: no such ONNX file")
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise ValueError("reading ONNX needs the onnx package: pip install 'latpred[predict]'") from None
        from predictor.importers.onnx_graph import graph_from_onnx

        return graph_from_onnx(path, name=path.stem, batch=batch, dims=dims)
    if path.suffix.lower() == ".json":
        if not path.is_file():
            raise ValueError(f"{source}: no such graph file")
        return Graph.load(path)
    if source.lower() in {n.lower() for n in zoo_names()}:
        return load_zoo_graph(source)
    raise ValueError(f"{source!r} is neither an .onnx or .json file nor a zoo name "
                     f"(zoo: {', '.join(zoo_names())})")
