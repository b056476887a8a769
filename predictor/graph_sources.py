"""Turn what a user names (an ONNX file, a JSON IR file, a zoo name) into a Graph."""

from __future__ import annotations

from pathlib import Path

from predictor.graph import Graph
from predictor.zoo import load_zoo_graph, zoo_names


def load_graph(source: str, batch: int | None = None) -> Graph:
    """A graph from a path ending in .onnx or .json, or from a zoo name; errors name the problem."""
    path = Path(source)
    if path.suffix.lower() == ".onnx":
        if not path.is_file():
            raise ValueError(f"{source}: no such ONNX file")
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise ValueError("reading ONNX needs the onnx package: pip install 'latpred[predict]'") from None
        from predictor.importers.onnx_graph import graph_from_onnx

        return graph_from_onnx(path, name=path.stem, batch=batch)
    if path.suffix.lower() == ".json":
        if not path.is_file():
            raise ValueError(f"{source}: no such graph file")
        return Graph.load(path)
    if source.lower() in {n.lower() for n in zoo_names()}:
        return load_zoo_graph(source)
    raise ValueError(f"{source!r} is neither an .onnx or .json file nor a zoo name "
                     f"(zoo: {', '.join(zoo_names())})")
