"""Evaluate an ONNX model's shape arithmetic into constants, never materialising a big array.

Exporters compute reshape targets at run time (Shape -> Gather -> Div -> Concat -> Reshape), and
onnx's own data propagation stops at ops such as Div and Cast; evaluating those nodes with onnx's
reference ops gives shape inference the numbers. The inputs are small (at most ``FOLD_LIMIT``
elements), but an output need not be: an Expand, a ConstantOfShape, a Range, a Tile or a
broadcast can ask for 10**12 elements from a handful of numbers. So a node is evaluated only when
``OUTPUT_BOUNDS`` bounds its outputs' element count from its input values, before it runs, and
the bound is within ``FOLD_LIMIT``; an op without a bound is left to shape inference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from predictor.importers.onnx_load import FOLD_LIMIT, RANDOM_OPS, STANDARD, constant_value, node_attributes

Values = list[Any]  # the input values by position (numpy arrays; None for an omitted optional input)


def _total(n: Any, xs: Values) -> int:
    """Ops whose outputs together hold no more than their inputs (times the outputs' count)."""
    return sum(x.size for x in xs if x is not None) * max(1, len(n.output))


def _nonzero(n: Any, xs: Values) -> int:
    return xs[0].size * max(1, xs[0].ndim)


def _broadcast(n: Any, xs: Values) -> int | None:
    import numpy as np

    return math.prod(np.broadcast_shapes(*(x.shape for x in xs if x is not None)))


def _ints(x: Any) -> list[int]:
    return [int(v) for v in x.reshape(-1)]


def _expand(n: Any, xs: Values) -> int | None:
    import numpy as np

    shape = _ints(xs[1])
    if any(d < 0 for d in shape):
        return None
    return math.prod(np.broadcast_shapes(xs[0].shape, tuple(shape)))


def _constant_of_shape(n: Any, xs: Values) -> int | None:
    shape = _ints(xs[0])
    return None if any(d < 0 for d in shape) else math.prod(shape)


def _range(n: Any, xs: Values) -> int | None:
    start, limit, delta = (float(x.reshape(-1)[0]) for x in xs[:3])
    if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
        return None
    return max(math.ceil((limit - start) / delta), 0)


def _tile(n: Any, xs: Values) -> int | None:
    repeats = _ints(xs[1])
    if len(repeats) != xs[0].ndim or any(r < 0 for r in repeats):
        return None
    return math.prod(s * r for s, r in zip(xs[0].shape, repeats))


def _gather(n: Any, xs: Values) -> int | None:
    data, indices = xs[0], xs[1]
    axis = int(node_attributes(n).get("axis", 0))
    if data.ndim == 0 or not -data.ndim <= axis < data.ndim:
        return None
    along = data.shape[axis]
    return 0 if along == 0 else indices.size * (data.size // along)


def _gather_nd(n: Any, xs: Values) -> int | None:
    """GatherND: one slice of ``data`` (past the batch dims and the indexed ones) per index tuple."""
    data, indices = xs[0], xs[1]
    b = int(node_attributes(n).get("batch_dims", 0))
    return math.prod(indices.shape[:-1]) * math.prod(data.shape[b + indices.shape[-1]:])


_SMALLER = (
    "Identity Cast CastLike Neg Abs Floor Ceil Round Sqrt Reciprocal Exp Log Not Sign Relu Sigmoid Tanh Erf "
    "Softmax LogSoftmax Reshape Flatten Squeeze Unsqueeze Transpose Slice Split Concat Trilu Clip IsNaN IsInf "
    "CumSum ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ArgMax ArgMin Dropout "
    "GatherElements ScatterND ScatterElements TopK Unique Compress EyeLike"
).split()
_BROADCASTING = (
    "Add Sub Mul Div Pow Mod Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Max Min Sum Mean Where "
    "BitShift BitwiseAnd BitwiseOr BitwiseXor"
).split()

#: op type -> an upper bound on its outputs' total elements, from its input values (None: unknown)
OUTPUT_BOUNDS: dict[str, Callable[[Any, Values], int | None]] = {
    **{op: _total for op in _SMALLER},
    **{op: _broadcast for op in _BROADCASTING},
    "NonZero": _nonzero, "Expand": _expand, "ConstantOfShape": _constant_of_shape, "Range": _range,
    "Tile": _tile, "Gather": _gather, "GatherND": _gather_nd,
}


def output_bound(n: Any, xs: Values) -> int | None:
    """The most elements node ``n`` can output from inputs ``xs``, or None if that is not known
    (an op without a bound, or inputs it cannot take): such a node is not evaluated."""
    bound = OUTPUT_BOUNDS.get(n.op_type)
    if bound is None:
        return None
    try:
        return bound(n, xs)
    except (ValueError, TypeError, IndexError, AttributeError, OverflowError):
        return None


def fold_node(n: Any, shapes: dict[str, list[int] | None], values: dict[str, Any], opset: int) -> bool:
    """Evaluate one node of shape arithmetic (a Constant, Shape or Size, or a node reading only
    known values) into ``values`` with onnx's reference ops. True if it gave a new value."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    if not n.output or n.output[0] in values or n.domain not in STANDARD or n.op_type in RANDOM_OPS:
        return False
    ins = [x for x in n.input if x]
    out: list[Any] | None = None
    if n.op_type == "Constant":
        try:
            out = [constant_value(n)]
        except ValueError:  # a value whose data was left out (large, or stored outside the model)
            out = None
    elif n.op_type in ("Shape", "Size") and (dims := shapes.get(n.input[0])) is not None \
            and math.prod(dims) < 1 << 62:  # an int64 (absurd sizes are refused after inference)
        a = node_attributes(n)
        out = [np.array(dims[a.get("start", 0):a.get("end", len(dims))] if n.op_type == "Shape"
                        else math.prod(dims), dtype=np.int64)]
    elif ins and all(x in values for x in ins) and sum(values[x].size for x in ins) <= FOLD_LIMIT \
            and not any(a.HasField("g") or a.graphs for a in n.attribute):
        bound = output_bound(n, [values[x] if x else None for x in n.input])
        if bound is None or bound > FOLD_LIMIT:
            return False  # it could be huge: shape inference gives its shape without making it
        try:
            # numpy's warnings silenced: a model's own arithmetic on constants may take log(0)
            # (T5's relative position buckets), which PyTorch computes too; the value is kept as is
            with np.errstate(all="ignore"):
                # a list: only run(intermediate=True) answers a dict, which onnx's annotation allows for
                out = ReferenceEvaluator(n, opsets={"": opset}).run(  # type: ignore[assignment]
                    None, {x: values[x] for x in ins})
        except Exception:
            out = None  # an op the reference cannot run: leave it to shape inference
    grew = False
    for name, value in zip(n.output, out or []):
        if value is not None and np.asarray(value).size <= FOLD_LIMIT:
            values[name] = np.asarray(value)
            grew = True
    return grew


def _dims(tp: Any) -> list[int] | None:
    """A TypeProto's dims, or None unless every one is a known number."""
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = [d.dim_value for d in tt.shape.dim if d.HasField("dim_value")]
    return dims if len(dims) == len(tt.shape.dim) else None


def fold_along(model: Any, inferred: Any, values: dict[str, Any], opset: int) -> bool:
    """``fold_node`` over ``model``'s nodes in their order, from the shapes whole-model inference gave
    (``inferred``), inferring on the way those it left unknown (onnx's inference of that node
    alone, from its inputs' types and the values folded so far). True if any value is new.

    Whole-model inference sees a reshape target only once it is folded into a constant, and the
    folding sees a shape only once inference gave it, so a chain of k reshapes computed from shapes
    (a Swin export's windows, block after block) took k rounds of both, each inferring the whole
    model again: 29 rounds and 7 s for swin_t's TorchScript export, and swin_s ran out of rounds
    with its later stages' shapes unknown. Node by node, one pass follows the whole chain; the
    shapes given here only feed the folding, and the model's shapes are still whole-model
    inference's, with the folded values in."""
    from onnx import defs, helper, numpy_helper, shape_inference

    from predictor.importers.onnx_load import known_shapes

    graph = inferred.graph
    types: dict[str, Any] = {vi.name: vi.type for vi in (*graph.input, *graph.value_info, *graph.output)}
    for t in graph.initializer:
        types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
    shapes = known_shapes(inferred)
    grew = False
    for n in model.graph.node:
        ins = [x for x in n.input if x]
        if n.domain in STANDARD and any(shapes.get(x) is None for x in n.output if x) \
                and all(x in types for x in ins) and not any(a.HasField("g") or a.graphs for a in n.attribute):
            try:
                schema = defs.get_schema(n.op_type, opset, "")
                data = {x: numpy_helper.from_array(values[x], x) for x in ins if x in values}
                made = shape_inference.infer_node_outputs(schema, n, {x: types[x] for x in ins}, data,
                                                          opset_imports=list(inferred.opset_import),
                                                          ir_version=inferred.ir_version)
            except Exception:  # an op or node onnx cannot infer alone: left to whole-model inference
                made = {}
            for name, tp in made.items():
                dims = _dims(tp)
                if dims is not None or name not in types:
                    types[name] = tp
                    shapes[name] = dims
        grew |= fold_node(n, shapes, values, opset)
    return grew
