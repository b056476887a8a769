"""Refuse an ONNX graph whose shapes stop being known part way, naming where they stop.

Shape inference follows a graph only as far as it can compute each tensor's dims. It stops at an
operator it does not know (a custom domain's) and at a shape it cannot read: a Reshape target, an
Expand shape or a Resize size held in external data, which the loader never opens
(predictor.importers.onnx_load). Every node from there on would then be costed with no size: a
MatMul of 64 x 4096 came out as 0.004 ms, listed among the roofline's fallbacks as if it were an
operator without a model. A number that cannot be right is refused instead, with the node where
the shapes stop and what to do. A node whose own inputs are known but whose outputs are not (a
custom operator at the end of a graph) is still costed, as a fallback from the bytes it reads, and
so is what follows a size the data decides (NonZero, Unique, a TopK whose k is computed): no file
can state it, and those graphs were costed so before.
"""

from __future__ import annotations

from typing import Any

from predictor.importers.onnx_load import has_data
from predictor.importers.onnx_tensors import GraphTensors


def _origin(t: GraphTensors, name: str) -> int | None:
    """The node that makes the first tensor of unknown shape on the way up to ``name``: the one
    whose own inputs are all known (or None for a graph input without a shape)."""
    node = t.producer.get(name)
    seen: set[int] = set()
    while node is not None and node not in seen:
        seen.add(node)
        unknown = [x for x in t.nodes[node].input if x and t.shape(x) is None]
        if not unknown:
            return node
        node = t.producer.get(unknown[0])
    return node


def _external(t: GraphTensors, node: Any) -> str | None:
    """The first input of ``node`` that is a weight or constant without its values here (held in
    external data, which is never read), or None."""
    for x in node.input:
        weight = t.weights.get(x)
        if weight is not None and x not in t.values and not has_data(weight):
            return x
    return None


def check_known_shapes(t: GraphTensors, names: list[str]) -> None:
    """Raise a ValueError naming the first node that computes on a tensor of unknown shape because of
    external data or a custom operator, and the node where the shapes stopped being known (shape
    arithmetic and constants are folded, and never costed: they are skipped)."""
    for i, n in enumerate(t.nodes):
        if n.op_type == "Constant" or all(o in t.static for o in n.output if o):
            continue
        unknown = next((x for x in n.input if x and t.shape(x) is None), None)
        if unknown is None:
            continue
        where = f"node {names[i]!r} ({n.op_type}) reads {unknown!r}, whose shape is unknown"
        origin = _origin(t, unknown)
        if origin is None:
            raise ValueError(f"{where}: it is a graph input without a shape; give the input its dims in the export")
        o = t.nodes[origin]
        external = _external(t, o)
        if external is not None:
            cause = (f"its input {external!r} holds its values in external data, which latpred never reads: save the "
                     "model with small tensors inline (onnx.save_model's default size_threshold=1024 keeps them so)")
        elif o.domain not in ("", "ai.onnx"):
            cause = (f"it is an operator of domain {o.domain!r}, whose output shape inference cannot give: give its "
                     "outputs shapes in the model's value_info, or export without the custom operator")
        else:  # a size the data decides (NonZero, Unique, a runtime TopK): costed as fallbacks, as before
            continue
        raise ValueError(f"{where}: the shapes stop being known at node {names[origin]!r} ({o.op_type}) ({cause}). "
                         "Every node from there on would be costed with no size, so the graph is refused")
