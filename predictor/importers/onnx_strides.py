"""PyTorch's stride arithmetic, on shapes alone: whether a view is a view, and what layout an
elementwise kernel sees.

An ONNX export writes views (``view``, ``transpose``, ``permute``, ``expand``, slicing) as Reshape,
Transpose, Expand and Slice nodes, and says nothing about memory. PyTorch does: a reshape of a
permuted tensor copies, a batched matmul copies an operand it cannot fold into a GEMM, and an
elementwise op over a broadcast or permuted operand runs the generic (strided) kernel. These
functions replay the rules PyTorch applies (``at::detail::computeStride``, TensorIterator's output
layout, ``torch.matmul``'s folding), so that the ONNX importer costs the same kernels the torch
importer records. Strides are in elements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Shape = Sequence[int]
Strides = tuple[int, ...]


def contiguous(shape: Shape) -> Strides:
    """Row-major strides of ``shape`` (a size-1 dim gets the product of the dims after it)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def view_strides(old_shape: Shape, old_strides: Strides, new_shape: Shape) -> Strides | None:
    """Strides of ``new_shape`` viewing a tensor of ``old_shape`` and ``old_strides`` without a
    copy, or None where no view exists (PyTorch's ``computeStride``: ``reshape`` then copies)."""
    if math.prod(old_shape) == 0:
        return contiguous(new_shape)
    new = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    if not old_shape:
        return contiguous(new_shape) if all(s == 1 for s in new_shape) else None
    chunk_base = old_strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                             and old_strides[tensor_d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = old_strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new) if view_d == -1 else None


def is_dense(shape: Shape, strides: Strides) -> bool:
    """Whether a tensor covers its memory without gaps or overlaps, in some dim order (the torch
    importer's ``_dense``): elementwise kernels then run vectorized over it."""
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(strides, shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def is_contiguous(shape: Shape, strides: Strides) -> bool:
    """PyTorch's ``is_contiguous``: row-major, size-1 dims ignored."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def broadcast_strides(shape: Shape, strides: Strides, out: Shape) -> Strides:
    """An operand's strides seen in the output's (broadcast) shape: 0 where it is broadcast."""
    lead = len(out) - len(shape)
    return tuple([0] * lead + [0 if n == 1 and o != 1 else s
                               for n, s, o in zip(shape, strides, out[lead:])])


def _dim_order(out: Shape, operands: list[Strides]) -> list[int]:
    """TensorIterator's ``reorder_dimensions``: dims from innermost to outermost, by the
    operands' strides (a broadcast operand does not vote; equal strides put the smaller dim in)."""
    def should_swap(d0: int, d1: int) -> int:
        for strides in operands:
            s0, s1 = strides[d0], strides[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if out[d0] > out[d1]:
                return 1
        return 0

    perm = list(range(len(out) - 1, -1, -1))
    for i in range(1, len(out)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm


def channels_last(shape: Shape) -> Strides:
    """Strides of a 4-d tensor in channels-last (NHWC) memory order."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def is_channels_last(shape: Shape, strides: Strides) -> bool:
    if len(shape) != 4:
        return False
    expected = 1
    for d in (1, 3, 2, 0):
        if shape[d] != 1 and strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def elementwise_out_strides(out: Shape, inputs: list[tuple[Shape, Strides]]) -> Strides:
    """The layout TensorIterator gives the output of an elementwise op. With every operand of
    the output's shape: contiguous when all are, channels-last when all are, their strides when
    they share them densely; else dense in the dim order the operands' strides vote for (a
    permuted input keeps its permutation)."""
    if all(list(s) == list(out) for s, _ in inputs):
        if all(is_contiguous(s, st) for s, st in inputs):
            return contiguous(out)
        if all(is_channels_last(s, st) for s, st in inputs):
            return channels_last(out)
        if inputs and len({st for _, st in inputs}) == 1 and is_dense(out, inputs[0][1]):
            return inputs[0][1]
    order = _dim_order(out, [broadcast_strides(s, st, out) for s, st in inputs])
    strides = [0] * len(out)
    step = 1
    for d in order:
        strides[d] = step
        step *= max(out[d], 1)
    return tuple(strides)


def elementwise_layout(inputs: list[tuple[Shape, Strides]], out: Shape) -> str:
    """'strided' where PyTorch runs its generic elementwise kernel (the torch importer's
    ``elementwise_layout``): an operand broadcast to the output, not dense, or laid out unlike
    the others; else 'contiguous'."""
    full = [(s, st) for s, st in inputs if math.prod(s) > 1]
    if not full:
        return "contiguous"
    if not all(is_dense(s, st) for s, st in full):
        return "strided"
    if any(list(s) != list(out) for s, _ in full):
        return "strided"
    return "contiguous" if len({st for _, st in full}) == 1 else "strided"


def _memory_order(shape: Shape, strides: Strides) -> list[int]:
    """The dims after the batch dim whose size exceeds 1, from outermost to innermost in memory."""
    return sorted((d for d in range(1, len(shape)) if shape[d] != 1), key=lambda d: (-strides[d], d))


def transposed_blocks(shape: Shape, src: Strides, dst: Strides) -> tuple[int, int, int] | None:
    """(d1, d2, d3) where a dense tensor of ``shape`` laid out as ``src`` and one laid out as
    ``dst`` are the transpose family's [batch, d1, d2, d3] and [batch, d2, d1, d3] in memory: the
    batch dim (dim 0) outermost in both, the innermost d3 elements in the same order in both, the
    dims above them two blocks swapped. A copy between them, or an elementwise op reading one
    while writing the other, reads or writes whole rows of one side only ``d3`` elements apart:
    PyTorch's generic elementwise kernel then runs at a fraction of the bandwidth it reaches on
    a view that keeps its innermost dim (on the H200 a [32, 400, 384] bf16 residual stream laid
    out [32, 384, 400], nas-88's, copied in 32 us where the 'strided' view of as many elements
    takes 11-15). None where the two are no such swap: nothing moves, the batch is not outermost,
    or more than two blocks move."""
    if len(shape) < 2 or not (is_dense(shape, src) and is_dense(shape, dst)):
        return None
    rest = math.prod(shape[1:])
    if shape[0] != 1 and (src[0] != rest or dst[0] != rest):
        return None
    a, b = _memory_order(shape, src), _memory_order(shape, dst)
    inner = 0
    while inner < len(a) and a[len(a) - 1 - inner] == b[len(b) - 1 - inner]:
        inner += 1
    d3 = math.prod(shape[d] for d in a[len(a) - inner:])
    a, b = a[:len(a) - inner], b[:len(b) - inner]
    for j in range(1, len(a)):
        if b == a[j:] + a[:j]:
            return math.prod(shape[d] for d in a[:j]), math.prod(shape[d] for d in a[j:]), d3
    return None


#: the shortest run of elements contiguous on both sides of a swap that the generic kernel reads
#: and writes in whole sectors: shorter runs (a plain 2-d transpose, NCHW <-> NHWC) are costed by
#: the transpose family; longer ones (attention heads) by the 'strided' elementwise layout, as the
#: views they come from were measured
COALESCED_RUN = 8


def uncoalesced_blocks(shape: Shape, src: Strides, dst: Strides) -> tuple[int, int, int] | None:
    """``transposed_blocks`` where the run both sides share is shorter than ``COALESCED_RUN``."""
    blocks = transposed_blocks(shape, src, dst)
    return blocks if blocks is not None and blocks[2] < COALESCED_RUN else None


def transpose_fields(blocks: tuple[int, int, int], variant: str = "") -> dict[str, Any]:
    """The Node fields both importers cost a block swap by: the transpose family's kernel over
    (d1, d2, d3) of ``uncoalesced_blocks``, a copy ('') or an add across it ('add')."""
    d1, d2, d3 = blocks
    return {"kind": "kernel", "family": "transpose", "variant": variant, "layout": "contiguous",
            "params": {"d1": d1, "d2": d2, "d3": d3}}


def matmul_copies(a: tuple[Shape, Strides], b: tuple[Shape, Strides]) -> list[int]:
    """Elements of each operand ``torch.matmul`` copies before a batched GEMM: it expands both
    to one batch shape and folds each to [batches, rows, cols]; an operand that does not fold
    into a view a GEMM can read (a transposed key, q of a packed qkv) is copied first."""
    (sa, ta), (sb, tb) = a, b
    batch = _broadcast_shape(list(sa[:-2]), list(sb[:-2]))
    copies = []
    for shape, strides in ((sa, ta), (sb, tb)):
        rows, cols = shape[-2], shape[-1]
        expanded = [*batch, rows, cols]
        ex_strides = broadcast_strides(shape, strides, expanded)
        folded = view_strides(expanded, ex_strides, [math.prod(batch), rows, cols])
        ready = folded is not None and ((folded[2] == 1 and folded[1] >= max(1, cols))
                                        or (folded[1] == 1 and folded[2] >= max(1, rows)))
        if math.prod(expanded) and not ready:
            copies.append(math.prod(expanded))
    return copies


def _broadcast_shape(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [max(x, y) if min(x, y) == 1 else x for x, y in zip(a, b)]


def permute(strides: Strides, perm: Sequence[int]) -> Strides:
    return tuple(strides[p] for p in perm)


def unsqueeze(shape: Shape, strides: Strides, dim: int) -> Strides:
    """PyTorch's unsqueeze: the new dim's stride is the size times stride of the dim it precedes."""
    new = 1 if dim >= len(shape) else shape[dim] * strides[dim]
    return tuple(strides[:dim]) + (new,) + tuple(strides[dim:])
