"""Import an ONNX model into the graph IR: the calls PyTorch would make to run it, in order.

An export is not what PyTorch dispatches: it writes shape arithmetic out as nodes, records views
as Reshape and Transpose, splits one call (layer norm, GELU, attention, a linear with its bias)
into several nodes, and folds some calls away (an eval BatchNorm into its conv). The graph undoes
that (onnx_emit): shape arithmetic, constants and aliases make no node; a view is a ``free``
node, or the copy PyTorch makes where it cannot view (onnx_layouts replays the strides); what
one call left behind is that call's kernel(s) (onnx_patterns, onnx_attention); a folded
BatchNorm runs after its conv again (onnx_exporters); every other node is costed by family
(onnx_ops), or as a ``fallback``, never dropped. Nodes are named by their ONNX name when that is
set and unique, else ``"{index}:{op_type}"``. Where the export cannot tell what PyTorch runs, the
choice made is a sentence in ``graph.meta["assumptions"]``.

Parameters are per sample (dimension 0 is the batch), as in the torch importer. A symbolic or
missing batch dimension is fixed to ``batch`` before shape inference; other symbolic dimensions
are set by name from ``dims``. The loader reads dims, never weights, and never opens external data:
a weight-stripped export reads like any other. onnx is imported inside the functions, so
predictor loads without it.

The work is split by concept: onnx_load reads the model and infers shapes, onnx_tensors holds
what is known about each tensor, onnx_emit decides each node's calls; this module assembles the
Graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from predictor.graph import Graph
from predictor.importers.onnx_dims import DimsError, check_dims, check_reshapes, set_input_dims
from predictor.importers.onnx_emit import Emitter
from predictor.importers.onnx_load import infer_folded_shapes, load_model, standard_opset
from predictor.importers.onnx_tensors import GraphTensors
from predictor.importers.onnx_unknown_shapes import check_known_shapes

# ---------------------------------------------------------------------------- the importer

def _names(nodes: list[Any]) -> list[str]:
    """ONNX names where set and unique, else ``"{index}:{op_type}"``; never a clash."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    names = [n.name if n.name and counts[n.name] == 1 else f"{i}:{n.op_type}" for i, n in enumerate(nodes)]
    real = {n.name for n in nodes if n.name and counts[n.name] == 1}
    return [nm if nm == n.name or nm not in real else f"{nm}#{i}" for i, (nm, n) in enumerate(zip(names, nodes))]


def graph_from_onnx(source: bytes | str | Path, name: str | None = None, batch: int | None = None,
                    dims: Mapping[str, int] | None = None) -> Graph:
    """Read an ONNX model (bytes or a path) into a checked Graph with per-sample parameters.

    ``batch`` fixes a symbolic or missing batch dimension (default 1) and becomes the graph's
    batch; a model with a fixed batch keeps its shapes and is divided by that batch. ``dims`` sets
    other symbolic input dims by name (``{"sequence": 256}``). Weights are never read (only their
    dims), nor any external data file. Invalid bytes, symbolic dims left unset, a name in ``dims``
    the model lacks, and absurd sizes raise ``ValueError`` naming the problem (``DimsError`` for dims).
    """
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    dims = check_dims(dims)  # before reading anything: bad dims fail fast
    model = load_model(source)
    traced = set_input_dims(model, batch, dims)
    inferred, values = infer_folded_shapes(model, standard_opset(model))
    t = GraphTensors(model, inferred, values, traced)
    names = _names(t.nodes)
    # dims given are the likeliest cause of a size the export fixed: then the service names them
    check_reshapes(t.nodes, t.shapes, t.value, names, DimsError if dims else ValueError)
    check_known_shapes(t, names)
    emitter = Emitter(t, names)
    nodes = emitter.nodes()
    if not nodes:  # (a graph must have a node: pydantic's 'List should have at least 1 item' says nothing here)
        raise ValueError(f"the ONNX model runs nothing on the device: its {len(t.nodes)} node(s) are constants, "
                         "identities or shape arithmetic, which cost nothing (folded); there is no latency to predict")
    unknown = [n.name for n in nodes if n.kind != "free" and not n.outputs]
    if name is None:
        name = model.graph.name if isinstance(source, (bytes, bytearray)) else Path(source).stem
    meta: dict[str, Any] = {"opset": t.opset, "producer": f"{model.producer_name} {model.producer_version}".strip()}
    if unknown:
        meta["shapes_unknown"] = unknown
    if emitter.assumptions():
        meta["assumptions"] = emitter.assumptions()
    return Graph(name=name or "onnx_model", nodes=nodes, batch=batch or traced, source="onnx", meta=meta)
