"""What torchvision's Swin blocks run at every forward that an export folds away or merges.

torchvision's ``ShiftedWindowAttention`` (0.26) computes, in each block's forward:

- its relative position bias: ``table[index]`` (a gather, which the torch importer costs as a
  fallback by the elements it reads and writes), ``.view``, ``.permute(2, 0, 1)``,
  ``.contiguous()`` (a copy of heads x N x N elements, N the tokens of a window) and
  ``.unsqueeze(0)``. It depends on parameters and buffers only, so both exporters fold it into a
  stored tensor that the Add after q @ k^T reads (the dynamo exporter keeps the views of the
  larger ones): the gather and the copy leave no node. Swin-T: 12 blocks, 24 kernels.
- in a shifted block, its attention mask: ``x.new_zeros((H, W))``, nine slice writes, view,
  permute, reshape (a copy), two unsqueezes, sub, ne, masked_fill, eq, masked_fill, and the two
  unsqueezes that add it to the scores. The dynamo exporter's common-subexpression elimination
  computes it once for the blocks of a stage that have the same shapes, where PyTorch computes
  it in each (Swin-T: 2 of its 5 shifted blocks reuse an earlier block's mask, Swin-S 8 of 11).

Each is put back after the block's q @ k^T, found from the block's qkv projection, whose bias
``features.<stage>.<block>.attn.qkv.bias`` both exporters keep, as the torch importer records it,
sized from tensors the export has: the folded bias as the Add reads it ([1, heads, N, N]), the
mask ([1, windows, 1, N, N]) and the windows the qkv projection reads ([.., N, C]).
"""

from __future__ import annotations

import math
import re

from predictor.importers.onnx_layouts import VIEW_OPS
from predictor.importers.onnx_module_calls import FoundCalls, HiddenCall, as_elements, free, output_of
from predictor.importers.onnx_patterns import FusedKernel, other
from predictor.importers.onnx_tensors import GraphTensors

#: a Swin block's qkv projection (torchvision: ``features.1.0.attn.qkv.bias``)
SWIN_QKV = re.compile(r"(?:^|\.)features\.\d+\.\d+\.attn\.qkv\.bias$")
#: what leads from the qkv projection to q @ k^T: its reshape and permute, the unbinding select,
#: q's scaling, k's transpose
_TO_SCORES = {"Reshape", "Transpose", "Gather", "Squeeze", "Split", "Slice", "Mul", "Div"}


def _gathered(elements: int, shape: list[int]) -> int:
    """The elements ``table[index]`` reads and writes, from the bias [1, heads, N, N] it makes:
    the bias, the N*N index and the table of (2w - 1)^2 offsets per head (a square window of
    w*w = N tokens), per sample as the torch importer counts them."""
    n = shape[-1]
    w = math.isqrt(n)
    return elements + elements * n * n // max(1, math.prod(shape)) + elements * (2 * w - 1) ** 2 // (n * n)


#: the relative position bias's gather and its copy by ``.contiguous()``
BIAS_KERNELS = (HiddenCall("__getitem__", fallback=_gathered),
                HiddenCall("contiguous", "activation", "relu", as_elements, layout="strided"))
#: the bias's views, as many as the export does not show
BIAS_VIEWS = ("view", "permute", "unsqueeze")
#: ``x.new_zeros((H, W))``: the padded windows' map, costed by the input it reads and what it writes
MASK_ZEROS = HiddenCall("new_zeros", fallback=lambda e, shape: e + e // max(1, shape[-1]))
#: the rest of the mask, sized by the mask [1, windows, 1, N, N]: nine slice writes, the windows'
#: ids (view, permute, a reshape copy of windows x N), their differences and the fills
MASK_CALLS = free(*["__setitem__"] * 9, "view", "permute") + (
    HiddenCall("reshape", "activation", "relu", lambda e, shape: {"elements": max(1, e // shape[-1])},
               layout="strided"),) + free("unsqueeze", "unsqueeze") + (
    HiddenCall("sub", "activation", "relu", as_elements, layout="strided"),
    HiddenCall("ne", "activation", "relu", as_elements),
    HiddenCall("masked_fill", "binary", "add", as_elements),
    HiddenCall("__eq__", "activation", "relu", as_elements),
    HiddenCall("masked_fill", "binary", "add", as_elements)) + free("unsqueeze", "unsqueeze")

SWIN_BIAS = "torchvision Swin relative position bias"
SWIN_MASK = "torchvision Swin attention mask shared by the exporter"


def _scores(t: GraphTensors, qkv: str) -> int | None:
    """q @ k^T: the first MatMul both of whose operands come from ``qkv`` (the attention's
    product with v reads the softmax, which the walk does not pass)."""
    reached, frontier = {qkv}, [qkv]
    for _ in range(8):
        ahead = []
        for name in frontier:
            for u in t.users(name):
                if u < 0:
                    continue
                n = t.nodes[u]
                if n.op_type == "MatMul" and all(x in reached for x in n.input):
                    return u
                if n.op_type in _TO_SCORES:
                    ahead += [o for o in n.output if o and o not in reached]
                    reached.update(n.output)
        frontier = ahead
    return None


def _shown_views(t: GraphTensors, bias: str, dropped: set[int]) -> tuple[str, int]:
    """The tensor the folded bias is a view of, and how many of those views the export shows."""
    shown, cur = 0, bias
    while (i := t.producer.get(cur)) is not None and t.nodes[i].op_type in VIEW_OPS and t.nodes[i].input:
        shown += i not in dropped
        cur = t.nodes[i].input[0]
    return cur, shown


def _windows(t: GraphTensors, i: int) -> str | None:
    """The windows [.., N, C] the qkv projection reads: the input of the MatMul whose product
    node ``i`` adds the bias to (or of node ``i`` itself, a Gemm taking the bias)."""
    n = t.nodes[i]
    if n.op_type == "Gemm":
        return str(n.input[0])
    for x in n.input:
        j = t.producer.get(x)
        if j is not None and t.nodes[j].op_type == "MatMul":
            return next((str(y) for y in t.nodes[j].input if y not in t.static), None)
    return None


def _mask_of(t: GraphTensors, scores: str) -> str | None:
    """The stored mask added to the biased scores (through their reshape to windows), if any."""
    cur = scores
    for _ in range(3):
        j = t.only_consumer(cur)
        if j is None:
            return None
        n = t.nodes[j]
        if n.op_type == "Add":
            mask = other(n, cur)
            return mask if mask is not None and mask in t.static and len(t.shape(mask) or []) == 5 else None
        if n.op_type != "Reshape":
            return None
        cur = str(n.output[0])
    return None


def swin_calls(t: GraphTensors, fused: dict[int, FusedKernel], key: dict[int, int], dropped: set[int],
               found: FoundCalls) -> None:
    """The relative position bias's calls after each Swin block's q @ k^T where the bias was
    folded into a stored tensor, and the mask's after its Add where an earlier block's Add
    reads the same mask (module docstring)."""
    masks: set[str] = set()
    for i, n in enumerate(t.nodes):
        if i in dropped or not any(SWIN_QKV.search(x) for x in n.input if x in t.static):
            continue
        _, qkv = output_of(t, fused, key, i)
        s = _scores(t, qkv)
        a = None if s is None else t.only_consumer(str(t.nodes[s].output[0]))
        if s is None or a is None or t.nodes[a].op_type != "Add":
            continue
        bias = other(t.nodes[a], str(t.nodes[s].output[0]))
        if bias is None or bias not in t.static or len(t.shape(bias) or []) != 4:
            continue  # a bias the export computes shows its own calls
        tokens = (t.shape(bias) or [0])[-1]
        if math.isqrt(tokens) ** 2 != tokens:
            continue  # not a square 2-D window (torchvision's video Swin: other tables, 27 slice writes)
        source, shown = _shown_views(t, bias, dropped)
        # the gather is folded only where the views start from a stored tensor; from a computed one
        # the export shows the Gather itself, and only the copy by .contiguous() is missing
        calls = [c for c in BIAS_KERNELS if source in t.weights or source in t.constants or c.fallback is None]
        calls += free(*BIAS_VIEWS[:max(0, len(BIAS_VIEWS) - shown)])
        found.after.setdefault(key.get(s, s), []).extend((c, bias) for c in calls)
        found.modules[SWIN_BIAS] += 1
        mask = _mask_of(t, str(t.nodes[a].output[0]))
        windows = _windows(t, i)
        if mask is not None and mask in masks and windows is not None:
            anchor = key.get(a, a)
            found.after.setdefault(anchor, []).append((MASK_ZEROS, windows))
            found.after[anchor].extend((c, mask) for c in MASK_CALLS)
            found.modules[SWIN_MASK] += 1
        if mask is not None:
            masks.add(mask)
