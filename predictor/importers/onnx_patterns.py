"""Kernel detection: what one PyTorch call leaves behind in an export, found and costed as the
kernel(s) that call runs.

``F.scaled_dot_product_attention`` (which exporters write out as q and k each scaled, MatMul,
[mask], Softmax, MatMul) becomes one ``sdpa``, and ``nn.MultiheadAttention`` around it the
kernels of the path PyTorch takes for it (onnx_attention); ``F.gelu`` written with Erf or with
Tanh one ``gelu``; ``F.silu`` written as ``x * Sigmoid(x)`` one ``silu``; ``F.logsigmoid``
written as ``Log(Sigmoid(x))`` and ``F.mish`` as ``x * Tanh(Softplus(x))`` (opsets before 18) one
activation each; ``F.layer_norm`` written out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div,
[Mul, Add]) one ``layer_norm``; ``F.linear`` with a bias (MatMul by a 2-d weight, Add of the bias)
one ``linear``; and the Reshape -> InstanceNormalization -> Reshape of an exported GroupNorm one
``group_norm``; ``torch.roll``'s Slices and Concat per dim one roll (onnx_roll). Patterns that several PyTorch
calls write (a hand-written attention, an RMSNorm) are left alone: PyTorch runs those as
separate kernels too. The activations are the exception: a hand-written ``x * torch.sigmoid(x)``
exports exactly as ``nn.SiLU`` does (``x * tanh(softplus(x))`` as ``nn.Mish``, ``log(sigmoid(x))``
as ``nn.LogSigmoid``), so the importer takes the one call and says so in the graph's assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from predictor.importers.onnx_layouts import node_axes
from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_ops import Hit, kernel_fields, matmul_rule, try_rule
from predictor.importers.onnx_tensors import GraphTensors


@dataclass
class FusedKernel:
    """Several ONNX nodes that one PyTorch call runs; emitted where the last one stands, as
    ``hit`` or, for a call that launches several kernels, as each of ``parts`` in order."""

    indices: list[int]
    op: str
    hit: Hit
    #: (name suffix, hit) of each kernel a call runs (nn.MultiheadAttention's three)
    parts: list[tuple[str, Hit]] = field(default_factory=list)
    #: node fields a part keeps beyond its hit, by suffix: its layout, the batch it runs from
    part_fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: attention only: the mask tensor (None: none), and whether it is boolean (True keeps)
    mask: str | None = None
    mask_bool: bool = False
    #: attention only: the exporter merged a user transpose into the attention's own (one view call)
    views: int = 0
    #: the tensor the call returns
    output: str = ""
    #: where the mask is built (a Where turning a boolean mask additive): read by the attention only
    mask_builders: list[int] = field(default_factory=list)
    #: a call that launches no kernel of its own (an in-place write): emitted as one free node
    free: bool = False
    #: nn.MultiheadAttention only: PyTorch runs it as its fused fast path (batch-first, an even
    #: head count), as an nn.TransformerEncoderLayer around it may too (onnx_encoder_layer)
    fast_path: bool = False
    #: a call that runs its kernel once per pass (torch.roll: one per rolled dim); the passes
    #: before the last are emitted as copies it launches, as the torch importer records them
    passes: int = 1
    #: the assumption the match makes where a hand-written expression exports the same (a key of
    #: onnx_emit's assumption sentences), or "" where none can
    note: str = ""
    #: nn.MultiheadAttention only: the Where nodes that made each boolean mask it was given
    #: additive (``F._canonical_mask``), whose zeros_like no export shows
    mask_fills: list[int] = field(default_factory=list)


def other(node: Any, name: str) -> str | None:
    """The other operand of a two-input node that reads ``name``."""
    if len(node.input) == 2 and name in node.input:
        return node.input[1] if node.input[0] == name else node.input[0]
    return None


def producer(t: GraphTensors, name: str, ops: tuple[str, ...]) -> int | None:
    """The node producing ``name`` if it is one of ``ops`` and nothing else reads ``name``'s values."""
    i = t.producer.get(name)
    if i is None or t.nodes[i].op_type not in ops or t.nodes[i].domain not in STANDARD or len(t.users(name)) != 1:
        return None
    return i


def scalar_operand(t: GraphTensors, node: Any) -> str | None:
    """For Mul/Div by a one-element static tensor, the other (activation) operand."""
    if node.op_type not in ("Mul", "Div") or len(node.input) != 2:
        return None
    a, b = node.input
    if t.is_scalar(b) and not t.is_scalar(a):
        return a
    return b if node.op_type == "Mul" and t.is_scalar(a) and not t.is_scalar(b) else None


def is_close(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) < 1e-3 * abs(target)


def _consumer(t: GraphTensors, name: str, op: str) -> int | None:
    j = t.only_consumer(name)
    return j if j is not None and t.nodes[j].op_type == op else None


def _scaled(t: GraphTensors, node: Any, x: str, value: float) -> bool:
    """``node`` multiplies ``x`` by ``value`` (or divides it by its inverse)."""
    if scalar_operand(t, node) != x:
        return False
    c = t.scalar(other(node, x) or "")
    return is_close(c, value) if node.op_type == "Mul" else is_close(c, 1 / value)


def _find_gelu(t: GraphTensors, erf: int) -> FusedKernel | None:
    """x * 0.5 * (1 + Erf(x / sqrt 2)), in either order of the two Muls, as one gelu."""
    d = producer(t, t.nodes[erf].input[0], ("Div", "Mul"))
    if d is None:
        return None
    x = scalar_operand(t, t.nodes[d])
    if not x or not _scaled(t, t.nodes[d], x, 1 / math.sqrt(2)):
        return None
    return _gelu_tail(t, [d, erf], x, t.nodes[erf].output[0])


def _gelu_tail(t: GraphTensors, taken: list[int], x: str, inner: str) -> FusedKernel | None:
    """The common end of both GELU forms: (1 + inner) times x times 0.5, in either order."""
    add = _consumer(t, inner, "Add")
    if add is None or not is_close(t.scalar(other(t.nodes[add], inner) or ""), 1.0):
        return None
    m1 = _consumer(t, t.nodes[add].output[0], "Mul")
    if m1 is None:
        return None
    o = other(t.nodes[m1], t.nodes[add].output[0])
    taken = taken + [add, m1]
    if o is not None and t.is_scalar(o) and is_close(t.scalar(o), 0.5):  # x * (0.5 * (1 + inner))
        m2 = _consumer(t, t.nodes[m1].output[0], "Mul")
        if m2 is None or other(t.nodes[m2], t.nodes[m1].output[0]) != x:
            return None
        taken.append(m2)
    elif o == x:  # (x * (1 + inner)) * 0.5
        m2 = _consumer(t, t.nodes[m1].output[0], "Mul")
        if m2 is None or not _scaled(t, t.nodes[m2], t.nodes[m1].output[0], 0.5):
            return None
        taken.append(m2)
    else:  # (x * 0.5) * (1 + inner)
        h = producer(t, o or "", ("Mul",))
        if h is None or not _scaled(t, t.nodes[h], x, 0.5):
            return None
        taken.append(h)
    end = max(taken)
    out = t.shape(t.nodes[end].output[0])
    if out is None:
        return None
    return FusedKernel(sorted(taken), "Gelu", ("activation", "gelu", dict(elements=t.per_sample(out))),
                       output=t.nodes[end].output[0])


def _find_tanh_gelu(t: GraphTensors, tanh: int) -> FusedKernel | None:
    """0.5 * x * (1 + Tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), F.gelu(approximate='tanh'),
    with x^3 as Pow(x, 3) or x * x * x, as one gelu."""
    m = producer(t, t.nodes[tanh].input[0], ("Mul",))
    if m is None:
        return None
    inner = scalar_operand(t, t.nodes[m])
    if inner is None or not _scaled(t, t.nodes[m], inner, math.sqrt(2 / math.pi)):
        return None
    add = producer(t, inner, ("Add",))
    if add is None:
        return None
    taken = [m, add, tanh]
    for x, cube in (t.nodes[add].input, reversed(t.nodes[add].input)):
        c = producer(t, cube, ("Mul",))
        if c is None or not _scaled(t, t.nodes[c], scalar_operand(t, t.nodes[c]) or "", 0.044715):
            continue
        cubed = scalar_operand(t, t.nodes[c]) or ""
        p = t.producer.get(cubed)
        if p is None:
            continue
        pn = t.nodes[p]
        if pn.op_type == "Pow" and pn.input[0] == x and is_close(t.scalar(pn.input[1]), 3.0):
            return _gelu_tail(t, taken + [c, p], x, t.nodes[tanh].output[0])
        if pn.op_type == "Mul" and x in pn.input:  # x * x * x
            sq = t.producer.get(other(pn, x) or "")
            if sq is not None and t.nodes[sq].op_type == "Mul" and list(t.nodes[sq].input) == [x, x]:
                return _gelu_tail(t, taken + [c, p, sq], x, t.nodes[tanh].output[0])
    return None


def _find_sigmoid_pair(t: GraphTensors, sig: int) -> FusedKernel | None:
    """x * Sigmoid(x) as one silu, or Log(Sigmoid(x)) as one ``F.logsigmoid``."""
    return _find_silu(t, sig) or _find_log_sigmoid(t, sig)


def _find_log_sigmoid(t: GraphTensors, sig: int) -> FusedKernel | None:
    """Log(Sigmoid(x)): how the TorchScript exporter writes ``F.logsigmoid`` (nn.LogSigmoid), one
    kernel in PyTorch, which the torch importer costs as an elementwise activation. (Written by
    hand, ``torch.log(torch.sigmoid(x))`` is two, and loses precision: rarer, and said so.)"""
    log = _consumer(t, t.nodes[sig].output[0], "Log")
    out = None if log is None else t.shape(t.nodes[log].output[0])
    if log is None or out is None:
        return None
    return FusedKernel([sig, log], "LogSigmoid", ("activation", "relu", dict(elements=t.per_sample(out))),
                       output=t.nodes[log].output[0], note="log_sigmoid")


def _find_silu(t: GraphTensors, sig: int) -> FusedKernel | None:
    """x * Sigmoid(x) as one silu."""
    x, s = t.nodes[sig].input[0], t.nodes[sig].output[0]
    m = _consumer(t, s, "Mul")
    if m is None or other(t.nodes[m], s) != x:
        return None
    out = t.shape(t.nodes[m].output[0])
    if out is None:
        return None
    return FusedKernel([sig, m], "Silu", ("activation", "silu", dict(elements=t.per_sample(out))),
                       output=t.nodes[m].output[0], note="silu")


def _find_mish(t: GraphTensors, softplus: int) -> FusedKernel | None:
    """x * Tanh(Softplus(x)) as one mish: how the TorchScript exporter writes ``F.mish`` (and
    ``nn.Mish``) before opset 18's Mish. PyTorch runs one kernel, which the torch importer costs
    as an elementwise activation, as an opset-18 Mish node is."""
    x, s = t.nodes[softplus].input[0], t.nodes[softplus].output[0]
    tanh = _consumer(t, s, "Tanh")
    if tanh is None:
        return None
    m = _consumer(t, t.nodes[tanh].output[0], "Mul")
    if m is None or other(t.nodes[m], t.nodes[tanh].output[0]) != x:
        return None
    out = t.shape(t.nodes[m].output[0])
    if out is None:
        return None
    return FusedKernel([softplus, tanh, m], "Mish", ("activation", "relu", dict(elements=t.per_sample(out))),
                       output=t.nodes[m].output[0], note="mish")


def _find_linear_bias(t: GraphTensors, mm: int) -> FusedKernel | None:
    """MatMul by a 2-d weight followed by a static bias Add: one addmm, as torch runs F.linear."""
    hit = matmul_rule(t, t.nodes[mm], {})
    if hit is None or hit[0] != "linear" or t.nodes[mm].input[1] not in t.static:
        return None
    add = _consumer(t, t.nodes[mm].output[0], "Add")
    if add is None:
        return None
    bias = other(t.nodes[add], t.nodes[mm].output[0])
    if bias is None or bias not in t.static or t.numel(bias) != hit[2]["n"]:
        return None
    return FusedKernel([mm, add], "MatMul+Add", (hit[0], "", hit[2]), output=t.nodes[add].output[0])


def _find_layer_norm(t: GraphTensors, sqrt: int) -> FusedKernel | None:
    """F.layer_norm written out over the last axis: d = x - ReduceMean(x); d / Sqrt(ReduceMean(
    d^2) + eps) [* weight] [+ bias], as one layer_norm. (An RMSNorm has no Sub: left alone.)"""
    add = producer(t, t.nodes[sqrt].input[0], ("Add",))
    if add is None:
        return None
    var = next((i for i in (t.producer.get(x) for x in t.nodes[add].input) if i is not None
                and t.nodes[i].op_type == "ReduceMean"), None)
    if var is None or not t.is_scalar(other(t.nodes[add], t.nodes[var].output[0]) or ""):
        return None
    pow_i = producer(t, t.nodes[var].input[0], ("Pow", "Mul"))
    if pow_i is None:
        return None
    d = t.nodes[pow_i].input[0]
    if t.nodes[pow_i].op_type == "Pow" and not is_close(t.scalar(t.nodes[pow_i].input[1]), 2.0):
        return None
    if t.nodes[pow_i].op_type == "Mul" and list(t.nodes[pow_i].input) != [d, d]:
        return None
    sub = t.producer.get(d)
    if sub is None or t.nodes[sub].op_type != "Sub":
        return None
    x, mean = t.nodes[sub].input
    mean_i = t.producer.get(mean)
    if mean_i is None or t.nodes[mean_i].op_type != "ReduceMean" or t.nodes[mean_i].input[0] != x:
        return None
    div = _consumer(t, t.nodes[sqrt].output[0], "Div")
    if div is None or t.nodes[div].input[0] != d:
        return None
    s = t.shape(x)
    if s is None or not s:
        return None
    taken, out = [mean_i, sub, pow_i, var, add, sqrt, div], t.nodes[div].output[0]
    for op_type in ("Mul", "Add"):  # the affine, when the module has one
        j = t.only_consumer(out)
        if j is None or t.nodes[j].op_type != op_type or other(t.nodes[j], out) not in t.static:
            break
        taken.append(j)
        out = t.nodes[j].output[0]
    if set(t.users(d)) - set(taken) or set(t.users(mean)) - set(taken):
        return None
    return FusedKernel(sorted(taken), "LayerNormalization",
                       ("layer_norm", "", dict(tokens=t.per_sample(s[:-1]), c=s[-1])), output=out)


def _find_unary_pair(t: GraphTensors, second: int) -> FusedKernel | None:
    """Two nodes one PyTorch call writes: ``a != b`` as Not(Equal(a, b)) (``ne``), and
    ``torch.rsqrt(x)`` as Reciprocal(Sqrt(x)) or Div(1, Sqrt(x)): one elementwise kernel each."""
    n = t.nodes[second]
    if n.op_type == "Not":
        first, op = producer(t, n.input[0], ("Equal",)), "ne"
    elif n.op_type == "Reciprocal" or (n.op_type == "Div" and is_close(t.scalar(n.input[0]), 1.0)):
        first, op = producer(t, n.input[-1], ("Sqrt",)), "rsqrt"
    else:
        return None
    out = t.shape(n.output[0])
    if first is None or out is None:
        return None
    ins = [x for x in t.nodes[first].input if x]
    family = "binary" if op == "ne" and sum(t.numel(x) == t.numel(n.output[0]) for x in ins) >= 2 else "activation"
    variant = "add" if family == "binary" else "relu"
    return FusedKernel([first, second], op, (family, variant, dict(elements=t.per_sample(out))),
                       output=n.output[0])


_WRITE_CHAIN = ("Transpose", "ScatterND", "ScatterElements", "Slice", "Reshape", "Unsqueeze", "Squeeze")


def _find_write(t: GraphTensors, scatter: int) -> FusedKernel | None:
    """An in-place write ``x[a:b, c:d] = v`` (one ``__setitem__`` call, costed by the torch
    importer as a call without a kernel), which the dynamo exporter writes as a read of the
    region (Slice), views and a ScatterND into it, and a ScatterND of the region back."""
    s = t.nodes[scatter]
    data = s.input[0]
    taken, cur = [scatter], s.input[2] if len(s.input) > 2 else ""
    for _ in range(8):
        i = producer(t, cur, _WRITE_CHAIN)
        if i is None:
            return None
        taken.append(i)
        if t.nodes[i].input[0] == data:
            return FusedKernel(sorted(taken), "__setitem__", ("binary", "add", {}), output=s.output[0], free=True)
        cur = t.nodes[i].input[0]
    return None


def _find_group_norm(t: GraphTensors, inorm: int) -> FusedKernel | None:
    """GroupNorm as exporters write it before opset 18: Reshape to [batch, groups, -1] ->
    InstanceNormalization -> Reshape back [-> Mul weight -> Add bias], as one group_norm."""
    r1 = producer(t, t.nodes[inorm].input[0], ("Reshape",))
    r2 = _consumer(t, t.nodes[inorm].output[0], "Reshape")
    if r1 is None or r2 is None:
        return None
    x, grouped = t.shape(t.nodes[r1].input[0]), t.shape(t.nodes[r1].output[0])
    if x is None or grouped is None or len(x) != 4 or t.shape(t.nodes[r2].output[0]) != x:
        return None
    taken, out = [r1, inorm, r2], t.nodes[r2].output[0]
    for op_type in ("Mul", "Add"):  # the per-channel affine, when the module has one
        j = t.only_consumer(out)
        if j is None or t.nodes[j].op_type != op_type or other(t.nodes[j], out) not in t.static:
            break
        taken.append(j)
        out = t.nodes[j].output[0]
    return FusedKernel(sorted(taken), "GroupNormalization",
                       ("group_norm", "", dict(c=x[1], h=x[2], w=x[3], groups=grouped[1])), output=out)


def slice_bounds(t: GraphTensors, n: Any, dims: list[int]) -> tuple[int, int, int] | None:
    """(axis, start, end) of a Slice of a tensor of ``dims`` along one axis with step 1, its
    bounds clamped to that axis, else None (several axes, a step, bounds known only at run time)."""
    a = node_attributes(n)
    if "starts" in a:  # before opset 10: attributes
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:  # inputs: starts, ends, [axes], [steps]
        names = (list(n.input[1:5]) + ["", ""])[:4]
        values = [None if v is None else [int(x) for x in v.reshape(-1)]
                  for v in (t.value(x) if x else None for x in names)]
        starts, ends, axes, steps = values
        if starts is None or ends is None or (names[2] and axes is None):
            return None  # bounds computed at run time
    axes = list(range(len(starts))) if axes is None else list(axes)
    if len(starts) != 1 or len(ends) != 1 or len(axes) != 1 or (steps is not None and list(steps) != [1]):
        return None
    axis = axes[0] % len(dims)
    size = dims[axis]
    start, end = (min(max(v + size if v < 0 else v, 0), size) for v in (starts[0], ends[0]))
    return axis, start, end


def _slice_of_one(t: GraphTensors, n: Any, rank: int, dims: list[int]) -> tuple[int, int] | None:
    """(axis, index) of a Slice that keeps one index along one axis with step 1, else None."""
    found = slice_bounds(t, n, dims[:rank])
    return (found[0], found[1]) if found is not None and found[2] - found[1] == 1 else None


def _find_unbind(t: GraphTensors, first: int) -> FusedKernel | None:
    """``x.unbind(d)`` (``q, k, v = qkv.unbind(0)``): one view call in PyTorch, which the legacy
    exporter writes as a Split into pieces of one along d and a Squeeze of each, and the dynamo
    exporter as a Slice of one index along d and a Squeeze for every index. One free node, as the
    torch importer records the call. (``torch.split(x, 1, d)`` with each piece squeezed exports
    the same; it is n + 1 calls in PyTorch, and far rarer.)"""
    n = t.nodes[first]
    x = n.input[0]
    dims = t.shape(x)
    if not dims:
        return None
    if n.op_type == "Split":
        axis = int(node_attributes(n).get("axis", 0)) % len(dims)
        pieces = [(first, str(o)) for o in n.output]
        if any(not o or (t.shape(o) or [0] * len(dims))[axis] != 1 for _, o in pieces):
            return None
    else:
        by_axis: dict[int, dict[int, int]] = {}
        for u in t.users(x):
            if u >= 0 and t.nodes[u].op_type == "Slice" and t.nodes[u].domain in STANDARD:
                found = _slice_of_one(t, t.nodes[u], len(dims), dims)
                if found is not None:
                    by_axis.setdefault(found[0], {}).setdefault(found[1], u)
        axis = next((d for d, picked in by_axis.items() if first in picked.values()), -1)
        if axis < 0:
            return None
        pieces = [(u, str(t.nodes[u].output[0])) for _, u in sorted(by_axis[axis].items())]
    if len(pieces) != dims[axis] or len(pieces) < 2:
        return None
    squeezes = []
    for _, o in pieces:
        j = t.only_consumer(o)
        if j is None or t.nodes[j].op_type != "Squeeze" or t.nodes[j].domain not in STANDARD:
            return None
        axes = node_axes(t, t.nodes[j], node_attributes(t.nodes[j]))
        if axes is None or [d % len(dims) for d in axes] != [axis]:
            return None
        squeezes.append(j)
    taken = sorted({i for i, _ in pieces} | set(squeezes))
    return FusedKernel(taken, "unbind", ("binary", "add", {}), output=str(t.nodes[max(squeezes)].output[0]),
                       free=True)


def _index_step(t: GraphTensors, n: Any) -> bool:
    """A Slice of an activation, or a Gather of one by a scalar index (``x[:, 0]``): one step of
    an indexing expression."""
    if n.domain not in STANDARD or not n.input or n.input[0] in t.static:
        return False
    if n.op_type == "Slice":
        return True
    return n.op_type == "Gather" and len(n.input) > 1 and n.input[1] in t.static and t.shape(n.input[1]) == []


def _find_indexing(t: GraphTensors, first: int) -> FusedKernel | None:
    """``x[:, :h, :w]`` or ``x[:, 0, 2:]``: one ``__getitem__`` call in PyTorch, which exporters
    write as a chain of Slices (one per sliced axis) and Gathers (one per integer index), each
    the only reader of the one before. One free node, as the torch importer records the call.
    (Indexing written as two expressions, ``x[:, :h][..., :w]``, exports the same; it is two
    calls in PyTorch, and rarer.)"""
    n = t.nodes[first]
    if not _index_step(t, n):
        return None
    before = t.producer.get(n.input[0])
    if before is not None and _index_step(t, t.nodes[before]) and t.only_consumer(n.input[0]) == first:
        return None  # not the chain's first step
    taken, cur = [first], str(n.output[0])
    while (j := t.only_consumer(cur)) is not None and _index_step(t, t.nodes[j]) and t.nodes[j].input[0] == cur:
        taken.append(j)
        cur = str(t.nodes[j].output[0])
    if len(taken) < 2:
        return None
    return FusedKernel(taken, "__getitem__", ("binary", "add", {}), output=cur, free=True)


def _find_slicing(t: GraphTensors, first: int) -> FusedKernel | None:
    """A Slice that is part of an unbind, else of an indexing expression, else None."""
    return _find_unbind(t, first) or _find_indexing(t, first)


FUSIONS: dict[str, Callable[[GraphTensors, int], FusedKernel | None]] = {
    "Erf": _find_gelu, "Tanh": _find_tanh_gelu, "Sigmoid": _find_sigmoid_pair, "Softplus": _find_mish,
    "Sqrt": _find_layer_norm,
    "InstanceNormalization": _find_group_norm, "MatMul": _find_linear_bias, "Not": _find_unary_pair,
    "Reciprocal": _find_unary_pair, "Div": _find_unary_pair, "ScatterND": _find_write,
    "Split": _find_unbind, "Slice": _find_slicing, "Gather": _find_indexing,
}


def _valid(found: FusedKernel) -> bool:
    return found.free or all(kernel_fields(h) is not None for h in [found.hit] + [p[1] for p in found.parts])


def detect_fused_kernels(t: GraphTensors) -> dict[int, FusedKernel]:
    """Fused kernels found in the graph, keyed by the index of their last node (where each is
    emitted); a node joins at most one. Attention is looked for first, then the rest, then
    nn.MultiheadAttention around each attention (it takes in the linear projections found)."""
    from predictor.importers.onnx_attention import find_packed_mha, find_sdpa
    from predictor.importers.onnx_roll import find_roll

    fused: dict[int, FusedKernel] = {}
    absorbed: set[int] = set()
    # (a roll's Slices are its own: looked for before indexing and unbind take them)
    for op_type, find in {"Softmax": find_sdpa, "Concat": find_roll, **FUSIONS}.items():
        for i, n in enumerate(t.nodes):
            if n.op_type != op_type or n.domain not in STANDARD or i in absorbed:
                continue
            found = try_rule(find, t, i)
            if found is None or absorbed & set(found.indices) or not _valid(found) \
                    or (not found.free and t.is_host(found.output)):
                continue  # (arithmetic on host values is folded, not fused)
            fused[max(found.indices)] = found
            absorbed.update(found.indices)
    for attention in list(fused.values()):
        if attention.op != "Attention":
            continue
        mha = try_rule(find_packed_mha, t, attention, fused)
        if mha is None or not _valid(mha):
            continue
        inside = set(mha.indices)
        others = [k for k, f in fused.items() if set(f.indices) & inside]
        if any(not set(fused[k].indices) <= inside for k in others) or (inside - set(attention.indices)) & (
                absorbed - {i for k in others for i in fused[k].indices}):
            continue  # it would split another fused kernel, or take a node another one holds
        for k in others:
            del fused[k]
        fused[max(mha.indices)] = mha
        absorbed.update(inside)
    return fused
