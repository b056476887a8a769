"""An attention mask's pattern where its values are too large to fold: replayed on a small square.

A constant causal mask is folded and compared with a triangle (``onnx_emit.mask_verdict``) only
up to the folding's limit (onnx_load.FOLD_LIMIT, 65,536 elements): TorchScript's export of
``F.scaled_dot_product_attention(..., is_causal=True)`` builds it as Expand(1, [L, S]) -> Trilu ->
Equal(0) -> Where(-inf, 0), so from a sequence of 256 on the mask was taken for a real one and
costed as a full boolean mask, 1.3-1.8x the torch trace. Such a mask is made of a Trilu over a
tensor that holds one value, and elementwise operations with scalar constants after it: its
pattern does not depend on its size. ``pattern`` replays that chain on a ``SIDE`` x ``SIDE``
square and returns the result, which the verdict reads as it reads a folded mask. Anything else in
the chain (a mask read from an input, a gather, a reshape that moves the last two dims, a Trilu
further from the main diagonal than a causal mask's, as a sliding window's band) gives None: the
mask stays unknown, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from predictor.importers.onnx_tensors import GraphTensors

#: the side of the square the chain is replayed on (a triangle shows at any side above 2)
SIDE = 8
#: how many nodes up from the mask the chain is followed
MAX_DEPTH = 16
#: the furthest diagonal a Trilu may start at to be replayed (a causal mask's: 0 or 1), well inside SIDE
MAX_DIAGONAL = 1

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Add": np.add,
    "Sub": np.subtract, "Mul": np.multiply,
}
#: views and casts that keep the last two dims where they are (checked by shape)
_KEEPS_LAST_TWO = {"Identity", "Cast", "Unsqueeze", "Expand", "Reshape", "Squeeze"}


def pattern(t: GraphTensors, name: str) -> np.ndarray | None:
    """The mask ``name`` replayed on a SIDE x SIDE square (its last two dims, square), or None
    where it is not a Trilu of one value followed by elementwise operations with scalars."""
    shape = t.shape(name)
    if shape is None or len(shape) < 2 or shape[-1] != shape[-2] or shape[-1] < 2:
        return None
    with np.errstate(all="ignore"):
        out = _replay(t, name, MAX_DEPTH)
    return None if out is None or np.ndim(out) != 2 else np.asarray(out)


def _replay(t: GraphTensors, name: str, depth: int) -> Any:
    """A scalar (a constant operand), a SIDE x SIDE array, or None."""
    scalar = t.scalar(name) if name in t.static else None
    if scalar is not None and (t.numel(name) or 0) == 1:
        return scalar
    i = t.producer.get(name)
    if depth <= 0 or i is None:
        return None
    n = t.nodes[i]
    ins = [x for x in n.input if x]
    if n.op_type == "Trilu" and ins:
        value = t.uniform(ins[0])
        k = t.scalar(ins[1]) if len(ins) > 1 else 0.0
        # a causal mask's triangle starts at the main diagonal or the next one; a band further out
        # (a sliding window's triu(-w)) would fill the small square and pass for one
        if value is None or k is None or abs(k) > MAX_DIAGONAL:
            return None
        upper = next((a.i for a in n.attribute if a.name == "upper"), 1)
        square = np.full((SIDE, SIDE), value)
        return np.triu(square, int(k)) if upper else np.tril(square, int(k))
    if n.op_type in _KEEPS_LAST_TWO and ins:
        before, after = t.shape(ins[0]), t.shape(n.output[0])
        if before is None or after is None or len(before) < 2 or before[-2:] != after[-2:]:
            return None
        return _replay(t, ins[0], depth - 1)
    if n.op_type == "Not" and ins:
        x = _replay(t, ins[0], depth - 1)
        return None if x is None else np.logical_not(x)
    if n.op_type in _BINARY and len(ins) == 2:
        a, b = _replay(t, ins[0], depth - 1), _replay(t, ins[1], depth - 1)
        return None if a is None or b is None else _BINARY[n.op_type](a, b)
    if n.op_type == "Where" and len(ins) == 3:
        parts = [_replay(t, x, depth - 1) for x in ins]
        return None if any(p is None for p in parts) else np.where(*parts)
    return None
