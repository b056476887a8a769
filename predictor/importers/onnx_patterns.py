"""Kernel detection: written-out ONNX patterns that PyTorch runs as one fused kernel.

As nn-Meter detects fused kernels: attention written as MatMul -> [scale] -> [mask] -> Softmax ->
MatMul becomes one ``sdpa``, GELU written with Erf one ``gelu``, ``x * Sigmoid(x)`` one ``silu``,
MatMul + bias Add one ``linear``, and the Reshape -> InstanceNormalization -> Reshape of an
exported GroupNorm one ``group_norm``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_ops import Hit, kernel_fields, matmul_rule, softmax_rule, try_rule
from predictor.importers.onnx_tensors import GraphTensors

# ---------------------------------------------------------------------------- kernel detection

def _other(node: Any, name: str) -> str | None:
    """The other operand of a two-input node that reads ``name``."""
    if len(node.input) == 2 and name in node.input:
        return node.input[1] if node.input[0] == name else node.input[0]
    return None


@dataclass
class FusedKernel:
    """Several ONNX nodes that PyTorch runs as one kernel; emitted where the last one stands."""

    indices: list[int]
    op: str
    hit: Hit


def _producer(t: GraphTensors, name: str, ops: tuple[str, ...]) -> int | None:
    """The node producing ``name`` if it is one of ``ops`` and ``name`` has no other reader."""
    i = t.producer.get(name)
    if i is None or t.nodes[i].op_type not in ops or len(t.consumers.get(name, [])) != 1:
        return None
    return i


def _scalar_operand(t: GraphTensors, node: Any) -> str | None:
    """For Mul/Div by a one-element tensor, the other (activation) operand."""
    if node.op_type not in ("Mul", "Div") or len(node.input) != 2:
        return None
    a, b = node.input
    if t.numel(b) == 1:
        return a
    return b if node.op_type == "Mul" and t.numel(a) == 1 else None


def _causal(t: GraphTensors, node: Any, scores: str) -> int:
    """1 when an Add or Where applies a constant upper-triangular -inf mask (torch's is_causal)."""
    import numpy as np

    def upper(shape: tuple[int, ...]) -> Any:
        return np.triu(np.ones(shape[-2:], dtype=bool), k=1)

    if node.op_type == "Add":
        m = t.value(_other(node, scores) or "")
        if m is None or m.ndim < 2 or min(m.shape[-2:]) < 2:
            return 0
        m = m.reshape(-1, *m.shape[-2:])[0].astype(float)
        mask = upper(m.shape)
        return int(bool((m[mask] <= -1e4).all() and (m[~mask] == 0).all()))
    cond, then, other = node.input
    c, fill = t.value(cond), t.scalar(other if then == scores else then)
    if c is None or c.ndim < 2 or fill is None or fill > -1e4:
        return 0
    c = c.reshape(-1, *c.shape[-2:])[0].astype(bool)
    return int(bool((c == (~upper(c.shape) if then == scores else upper(c.shape))).all()))


def _scores_operand(t: GraphTensors, add: Any) -> str:
    """Which input of a mask Add carries the attention scores (the other is the mask)."""
    def scores(x: str) -> bool:
        i = t.producer.get(x)
        return x not in t.static and i is not None and t.nodes[i].op_type in ("MatMul", "Mul", "Div", "Where")

    a, b = add.input
    if scores(a) != scores(b):
        return a if scores(a) else b
    return b if t.shape(b) == t.shape(add.output[0]) != t.shape(a) else a


def _find_sdpa(t: GraphTensors, softmax: int) -> FusedKernel | None:
    """MatMul(Q, Transpose(K)) [-> scale] [-> mask] -> Softmax -> MatMul(., V) as one sdpa."""
    sm = t.nodes[softmax]
    if softmax_rule(t, sm, node_attributes(sm)) is None:
        return None  # attention normalises over the keys: the last axis
    taken, causal = [softmax], 0
    j = t.only_consumer(sm.output[0])
    while j is not None and t.nodes[j].op_type in ("Dropout", "Identity"):
        taken.append(j)
        j = t.only_consumer(t.nodes[j].output[0])
    if j is None or t.nodes[j].op_type != "MatMul" or t.nodes[j].input[0] != t.nodes[taken[-1]].output[0]:
        return None
    pv = t.nodes[j]
    taken.append(j)
    cur = sm.input[0]
    for _ in range(3):  # scale and mask, in either order
        i = _producer(t, cur, ("Mul", "Div", "Add", "Where"))
        if i is None:
            break
        n = t.nodes[i]
        if n.op_type in ("Mul", "Div") and _scalar_operand(t, n):
            nxt = _scalar_operand(t, n)
        elif n.op_type == "Add" and len(n.input) == 2:
            nxt = _scores_operand(t, n)
            causal = causal or _causal(t, n, nxt)
        elif n.op_type == "Where" and len(n.input) == 3:
            nxt = n.input[2] if t.numel(n.input[1]) == 1 else n.input[1]
            causal = causal or _causal(t, n, nxt)
        else:
            break
        taken.append(i)
        cur = nxt
    qk_i = _producer(t, cur, ("MatMul",))
    if qk_i is None:
        return None
    taken.append(qk_i)
    q, k = t.nodes[qk_i].input
    if q in t.static or k in t.static:
        return None  # a product with weights, not attention
    for side, steps in ((q, ("Mul", "Div")), (k, ("Mul", "Div", "Transpose"))):
        for _ in range(2):  # torch's exported SDPA scales q and k; K arrives transposed
            i = _producer(t, side, steps)
            if i is None or (t.nodes[i].op_type != "Transpose" and not _scalar_operand(t, t.nodes[i])):
                break
            taken.append(i)
            side = t.nodes[i].input[0] if t.nodes[i].op_type == "Transpose" else _scalar_operand(t, t.nodes[i])
    qs, ss, vs = t.shape(t.nodes[qk_i].input[0]), t.shape(t.nodes[qk_i].output[0]), t.shape(pv.input[1])
    if qs is None or ss is None or vs is None or min(len(qs), len(ss), len(vs)) < 3:
        return None
    params = dict(heads=t.per_sample(qs[:-2]), seq_q=qs[-2], seq_kv=ss[-1], head_dim=qs[-1], causal=causal)
    return FusedKernel(sorted(taken), "Attention", ("sdpa", "", params))


def _is(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) < 1e-3 * abs(target)


def _find_gelu(t: GraphTensors, erf: int) -> FusedKernel | None:
    """x * 0.5 * (1 + Erf(x / sqrt 2)), in either order of the two Muls, as one gelu."""
    d = _producer(t, t.nodes[erf].input[0], ("Div", "Mul"))
    if d is None:
        return None
    dn = t.nodes[d]
    x = _scalar_operand(t, dn)
    const = _other(dn, x) if x else None
    if not x or const is None or not (_is(t.scalar(const), math.sqrt(2)) if dn.op_type == "Div"
                                      else _is(t.scalar(const), 1 / math.sqrt(2))):
        return None
    add = t.only_consumer(t.nodes[erf].output[0])
    if add is None or t.nodes[add].op_type != "Add" \
            or not _is(t.scalar(_other(t.nodes[add], t.nodes[erf].output[0]) or ""), 1.0):
        return None
    m1 = t.only_consumer(t.nodes[add].output[0])
    if m1 is None or t.nodes[m1].op_type != "Mul":
        return None
    o = _other(t.nodes[m1], t.nodes[add].output[0])
    taken = [d, erf, add, m1]
    if o == x:  # (x * (1 + erf)) * 0.5
        m2 = t.only_consumer(t.nodes[m1].output[0])
        if m2 is None or t.nodes[m2].op_type != "Mul" or \
                not _is(t.scalar(_other(t.nodes[m2], t.nodes[m1].output[0]) or ""), 0.5):
            return None
        taken.append(m2)
    else:  # (x * 0.5) * (1 + erf)
        h = _producer(t, o or "", ("Mul",))
        if h is None or _scalar_operand(t, t.nodes[h]) != x \
                or not _is(t.scalar(_other(t.nodes[h], x) or ""), 0.5):
            return None
        taken.append(h)
    out = t.shape(t.nodes[max(taken)].output[0])
    if out is None:
        return None
    return FusedKernel(sorted(taken), "Gelu", ("activation", "gelu", dict(elements=t.per_sample(out))))


def _find_silu(t: GraphTensors, sig: int) -> FusedKernel | None:
    """x * Sigmoid(x) as one silu."""
    x, s = t.nodes[sig].input[0], t.nodes[sig].output[0]
    m = t.only_consumer(s)
    if m is None or t.nodes[m].op_type != "Mul" or _other(t.nodes[m], s) != x:
        return None
    out = t.shape(t.nodes[m].output[0])
    if out is None:
        return None
    return FusedKernel([sig, m], "Silu", ("activation", "silu", dict(elements=t.per_sample(out))))


def _find_linear_bias(t: GraphTensors, mm: int) -> FusedKernel | None:
    """MatMul by a constant 2-d weight followed by a constant bias Add: one addmm, as torch runs it."""
    hit = matmul_rule(t, t.nodes[mm], {})
    if hit is None or hit[0] != "linear":
        return None
    add = t.only_consumer(t.nodes[mm].output[0])
    if add is None or t.nodes[add].op_type != "Add":
        return None
    bias = _other(t.nodes[add], t.nodes[mm].output[0])
    if bias is None or bias not in t.static or t.numel(bias) != hit[2]["n"]:
        return None
    return FusedKernel([mm, add], "MatMul+Add", hit)


def _find_group_norm(t: GraphTensors, inorm: int) -> FusedKernel | None:
    """GroupNorm as exporters write it before opset 18: Reshape to [batch, groups, -1] ->
    InstanceNormalization -> Reshape back [-> Mul weight -> Add bias], as one group_norm."""
    r1 = _producer(t, t.nodes[inorm].input[0], ("Reshape",))
    r2 = t.only_consumer(t.nodes[inorm].output[0])
    if r1 is None or r2 is None or t.nodes[r2].op_type != "Reshape":
        return None
    x, grouped = t.shape(t.nodes[r1].input[0]), t.shape(t.nodes[r1].output[0])
    if x is None or grouped is None or len(x) != 4 or t.shape(t.nodes[r2].output[0]) != x:
        return None
    taken, out = [r1, inorm, r2], t.nodes[r2].output[0]
    for op_type in ("Mul", "Add"):  # the per-channel affine, when the module has one
        j = t.only_consumer(out)
        if j is None or t.nodes[j].op_type != op_type or _other(t.nodes[j], out) not in t.static:
            break
        taken.append(j)
        out = t.nodes[j].output[0]
    return FusedKernel(sorted(taken), "GroupNormalization",
                       ("group_norm", "", dict(c=x[1], h=x[2], w=x[3], groups=grouped[1])))


FUSIONS: dict[str, Callable[[GraphTensors, int], FusedKernel | None]] = {
    "Softmax": _find_sdpa, "Erf": _find_gelu, "Sigmoid": _find_silu, "MatMul": _find_linear_bias,
    "InstanceNormalization": _find_group_norm,
}


def detect_fused_kernels(t: GraphTensors) -> dict[int, FusedKernel]:
    """Fused kernels found in the graph, keyed by the index of their last node (where each is
    emitted); a node joins at most one, and attention is looked for first."""
    fused: dict[int, FusedKernel] = {}
    absorbed: set[int] = set()
    for op_type, find in FUSIONS.items():
        for i, n in enumerate(t.nodes):
            if n.op_type != op_type or n.domain not in STANDARD or i in absorbed:
                continue
            found = try_rule(find, t, i)
            if found is None or absorbed & set(found.indices) or kernel_fields(found.hit) is None:
                continue
            fused[max(found.indices)] = found
            absorbed.update(found.indices)
            if found.op == "Attention":
                t.attention.update(found.indices)
    return fused
