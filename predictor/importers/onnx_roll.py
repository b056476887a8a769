"""``torch.roll``, which exporters write as two Slices and a Concat per rolled dim, found as the
one call PyTorch makes.

``torch.roll(x, shifts=(s1, s2), dims=(1, 2))`` is one call that runs one copy kernel per rolled
dim (the torch importer records the roll and, launched by it, its further passes). Both
exporters write each dim's pass as ``Concat(x[.., n - s:, ..], x[.., :n - s, ..])`` along that
dim: two Slices (two free calls) and a Concat (a call of its own) per dim. Swin's shifted blocks
roll twice over two dims, so Swin-T's 10 rolls came out as 40 free calls and 10 dispatches more
than PyTorch makes, 5% of its eager prediction at batch 1.
"""

from __future__ import annotations

from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_patterns import FusedKernel, slice_bounds
from predictor.importers.onnx_tensors import GraphTensors


def _roll_step(t: GraphTensors, c: int) -> tuple[str, list[int]] | None:
    """Where Concat ``c`` is one rolled dim's pass, the tensor it rolls and the pass's nodes (its
    two Slices, then the Concat): the end of the tensor along the Concat's axis, then its start,
    each Slice read by the Concat only, together the whole tensor."""
    n = t.nodes[c]
    if n.op_type != "Concat" or n.domain not in STANDARD or len(n.input) != 2:
        return None
    slices = [t.producer.get(x) for x in n.input]
    if any(s is None or t.nodes[s].op_type != "Slice" or t.nodes[s].domain not in STANDARD
           or t.only_consumer(x) != c for s, x in zip(slices, n.input)):
        return None
    first, second = (t.nodes[s] for s in slices if s is not None)
    x = first.input[0]
    dims = t.shape(x)
    if second.input[0] != x or not dims or t.shape(n.output[0]) != dims:
        return None
    axis = int(node_attributes(n)["axis"]) % len(dims)
    head, tail = slice_bounds(t, first, dims), slice_bounds(t, second, dims)
    if head is None or tail is None or head[0] != axis or tail[0] != axis:
        return None
    size, shift = dims[axis], dims[axis] - head[1]
    if not 0 < shift < size or head[2] != size or tail[1:] != (0, size - shift):
        return None
    return x, [s for s in slices if s is not None] + [c]


def find_roll(t: GraphTensors, c: int) -> FusedKernel | None:
    """The roll whose first pass is Concat ``c``, over as many dims as passes follow it (each
    rolling the one before, which nothing else reads): one call, a strided copy per dim, as the
    torch importer costs it; None where ``c`` is no roll's first pass."""
    step = _roll_step(t, c)
    if step is None:
        return None
    before = t.producer.get(step[0])
    if before is not None and _roll_step(t, before) is not None \
            and all(u >= 0 and t.only_consumer(t.nodes[u].output[0]) == c for u in t.users(step[0])):
        return None  # a later pass of a roll found from its first
    taken, out, passes = list(step[1]), str(t.nodes[c].output[0]), 1
    while True:
        readers = t.users(out)
        ends = {t.only_consumer(t.nodes[u].output[0]) for u in readers if u >= 0}
        following = next(iter(ends)) if len(readers) == 2 and len(ends) == 1 else None
        step = None if following is None else _roll_step(t, following)
        if step is None or step[0] != out:
            break
        taken += step[1]
        out, passes = str(t.nodes[step[1][-1]].output[0]), passes + 1
    elements = t.per_sample(t.shape(out) or [1])
    return FusedKernel(sorted(taken), "roll", ("activation", "relu", {"elements": elements}), output=out,
                       part_fields={"": {"layout": "strided"}}, passes=passes)
