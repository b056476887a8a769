"""Import an ONNX model into the graph IR, one node per kernel PyTorch would launch.

Each ONNX node becomes a graph node (named by its ONNX name when that is set and unique, else
``"{index}:{op_type}"``), except where kernel detection merges a written-out pattern into the
one fused kernel PyTorch runs for it, as nn-Meter detects fused kernels: attention written as
MatMul -> [scale] -> [mask] -> Softmax -> MatMul becomes one ``sdpa`` node, GELU written with Erf
one ``gelu``, ``x * Sigmoid(x)`` one ``silu``, MatMul + bias Add one ``linear``, and the
Reshape -> InstanceNormalization -> Reshape of an exported GroupNorm one ``group_norm``. Views and
shape arithmetic are ``free``; an elementwise op without a family is costed like ``activation``
relu or ``binary`` add (keeping its own op name); anything else is a ``fallback``, never dropped.

Parameters are per sample (dimension 0 is the batch), as in the torch importer. A symbolic or
missing batch dimension is fixed to ``batch`` before shape inference; other dimensions must be
fixed. The loader never reads external data: a model that points at any is refused. onnx is
imported inside the functions, so predictor loads without it.

The work is split by concept: onnx_load reads the model and infers shapes, onnx_tensors holds
what is known about each tensor, onnx_patterns detects the fused kernels, and onnx_ops costs
each remaining node; this module assembles the Graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from predictor.graph import Graph, Node
from predictor.importers.onnx_load import fix_batch, infer_folded_shapes, load_model, standard_opset
from predictor.importers.onnx_ops import classify_node, kernel_fields
from predictor.importers.onnx_patterns import FusedKernel, detect_fused_kernels
from predictor.importers.onnx_tensors import GraphTensors

# ---------------------------------------------------------------------------- the importer

def _dtype(elem_type: int | None) -> str:
    if not elem_type:
        return ""
    from onnx import TensorProto, helper

    try:
        return str(helper.tensor_dtype_to_np_dtype(elem_type).name)
    except Exception:
        return TensorProto.DataType.Name(elem_type).lower()


def _names(nodes: list[Any]) -> list[str]:
    """ONNX names where set and unique, else ``"{index}:{op_type}"``; never a clash."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    names = [n.name if n.name and counts[n.name] == 1 else f"{i}:{n.op_type}" for i, n in enumerate(nodes)]
    real = {n.name for n in nodes if n.name and counts[n.name] == 1}
    return [nm if nm == n.name or nm not in real else f"{nm}#{i}" for i, (nm, n) in enumerate(zip(names, nodes))]


def _node(t: GraphTensors, i: int, names: list[str], fused: FusedKernel | None) -> Node:
    """The graph node for ONNX node ``i``, or for the fused kernel that ends there."""
    n = t.nodes[i]
    reads = [x for x in n.input if x]
    fields: dict[str, Any] | None
    if fused is None:
        fields, op, merged = classify_node(t, n), n.op_type, []
    else:
        fields, op, merged = kernel_fields(fused.hit), fused.op, [names[j] for j in fused.indices]
        inside = {o for j in fused.indices for o in t.nodes[j].output}
        reads = list(dict.fromkeys(x for j in fused.indices for x in t.nodes[j].input
                                   if x and x not in inside and x not in t.static))
    outs = [x for x in n.output if x]
    return Node(name=names[i], op=op, merged=merged, dtype=_dtype(t.types.get(outs[0]) if outs else None),
                inputs=[s for s in map(t.shape, reads) if s is not None],
                outputs=[s for s in map(t.shape, outs) if s is not None], **(fields or {}))


def graph_from_onnx(source: bytes | str | Path, name: str | None = None, batch: int | None = None) -> Graph:
    """Read an ONNX model (bytes or a path) into a checked Graph with per-sample parameters.

    ``batch`` fixes a symbolic or missing batch dimension (default 1) and becomes the graph's
    batch; a model with a fixed batch keeps its shapes and is divided by that batch. Invalid
    bytes, external data and symbolic non-batch dimensions raise ``ValueError`` naming the problem.
    """
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    model = load_model(source)
    traced = fix_batch(model, batch)
    inferred, values = infer_folded_shapes(model, standard_opset(model))
    t = GraphTensors(model, inferred, values, traced)
    fused = detect_fused_kernels(t)
    absorbed = {j for f in fused.values() for j in f.indices}
    names = _names(t.nodes)
    nodes = [_node(t, i, names, fused.get(i)) for i in range(len(t.nodes)) if i in fused or i not in absorbed]
    unknown = [n.name for n in nodes if n.kind != "free" and not n.outputs]
    if name is None:
        name = model.graph.name if isinstance(source, (bytes, bytearray)) else Path(source).stem
    meta: dict[str, Any] = {"opset": t.opset, "producer": f"{model.producer_name} {model.producer_version}".strip()}
    if unknown:
        meta["shapes_unknown"] = unknown
    return Graph(name=name or "onnx_model", nodes=nodes, batch=batch or traced, source="onnx", meta=meta)
