"""How one ONNX node is costed: its kernel family, a view (``free``), or a ``fallback``.

``FAMILY_RULES`` maps an ONNX op type to a rule that reads the node's shapes and attributes and
returns the family hit, or None when the node does not fit the family (it then falls back). Views
and shape arithmetic are free; an elementwise op without a family is costed like ``activation``
relu or ``binary`` add; anything else is a fallback, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from predictor.catalogue import get_family
from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_tensors import INT_TYPES, GraphTensors

Hit = tuple[str, str, dict[str, int]]  # (family, variant, per-sample params)

#: Ops that launch no kernel in PyTorch: views, metadata and constants.
VIEW_OPS = {"Constant", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout",
            "Shape", "Size", "Expand", "Slice", "Split", "Transpose"}
#: Elementwise ops without a family of their own (torch_calls.UNARY_ELEMENTWISE's ONNX names).
ELEMENTWISE_OPS = {
    "Add", "Mul", "Sub", "Div", "Pow", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Erf",
    "Sin", "Cos", "Cast", "CastLike", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "Celu",
    "Mish", "PRelu", "ThresholdedRelu", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Floor", "Ceil",
    "Round", "Sign", "IsNaN", "IsInf", "Mod", "Trilu", "Tile",
}
ACTIVATIONS = {"Relu": "relu", "Gelu": "gelu", "Sigmoid": "sigmoid", "Tanh": "tanh",
               "HardSwish": "hardswish", "HardSigmoid": "hardsigmoid", "Clip": "clamp"}


def _conv(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s, w = t.shape(n.input[0]), t.shape(n.input[1])
    if s is None or w is None or len(s) != 4 or len(w) != 4:
        return None
    k = w[2]
    pads, strides = a.get("pads", [0] * 4), a.get("strides", [1, 1])
    same = a.get("auto_pad", b"NOTSET") in (b"SAME_UPPER", b"SAME_LOWER") and k % 2 and strides == [1, 1]
    if w[3] != k or any(d != 1 for d in a.get("dilations", [1, 1])) or strides[0] != strides[1] \
            or not (same or list(pads) == [k // 2] * 4):
        return None
    has_bias = len(n.input) > 2 and bool(n.input[2])
    return "conv2d", "" if has_bias else "nobias", dict(c_in=s[1], c_out=w[0], h=s[2], w=s[3], kernel=k,
                                                       stride=strides[0], groups=a.get("group", 1))


def matmul_rule(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    """MatMul as ``linear`` (static 2-d weight) or batched ``matmul`` (both operands 3-d or more)."""
    x, y = t.shape(n.input[0]), t.shape(n.input[1])
    if x is None or y is None or len(x) < 1:
        return None
    if n.input[1] in t.static and len(y) == 2:
        return "linear", "", dict(tokens=t.per_sample(x[:-1]), k=y[0], n=y[1])
    if len(x) >= 3 and len(y) >= 3:
        return "matmul", "", dict(heads=t.per_sample(x[:-2]), m=x[-2], k=x[-1], n=y[-1])
    return None


def _gemm(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    x, y = t.shape(n.input[0]), t.shape(n.input[1])
    if x is None or y is None or a.get("transA", 0) or n.input[1] not in t.static:
        return None
    k, out = (y[1], y[0]) if a.get("transB", 0) else (y[0], y[1])
    has_bias = len(n.input) > 2 and bool(n.input[2])
    return "linear", "" if has_bias else "nobias", dict(tokens=t.per_sample(x[:-1]), k=k, n=out)


def _last_axis(t: GraphTensors, n: Any, axis: int) -> list[int] | None:
    s = t.shape(n.input[0])
    if s is None or axis % max(len(s), 1) != len(s) - 1:
        return None
    return s


def softmax_rule(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    """Softmax over the last axis (the only one the family covers)."""
    s = _last_axis(t, n, a.get("axis", -1 if t.opset >= 13 else 1))
    return None if s is None else ("softmax", "", dict(rows=t.per_sample(s[:-1]), c=s[-1]))


def _layer_norm(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _last_axis(t, n, a.get("axis", -1))
    return None if s is None else ("layer_norm", "", dict(tokens=t.per_sample(s[:-1]), c=s[-1]))


def _nchw(t: GraphTensors, n: Any) -> list[int] | None:
    s = t.shape(n.input[0])
    return s if s is not None and len(s) == 4 else None


def _pool(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s, k = _nchw(t, n), a.get("kernel_shape", [0, 0])
    strides, pads = a.get("strides", [1, 1]), list(a.get("pads", [0] * 4))
    if s is None or k[0] != k[1] or strides[0] != strides[1] or a.get("ceil_mode", 0) \
            or any(d != 1 for d in a.get("dilations", [1, 1])) or pads not in ([0] * 4, [k[0] // 2] * 4):
        return None  # padding 0 is accepted like the torch importer does (MaxPool2d(2) is common)
    return "pool", "max" if n.op_type == "MaxPool" else "avg", dict(c=s[1], h=s[2], w=s[3], kernel=k[0],
                                                                   stride=strides[0])


def _mean(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = t.shape(n.input[0])
    axes = a.get("axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        v = t.value(n.input[1])
        axes = None if v is None else [int(x) for x in v.reshape(-1)]
    if s is None or not axes:
        return None
    axes = sorted(x % len(s) for x in axes)
    if axes == [len(s) - 1]:
        return "mean", "", dict(rows=t.per_sample(s[:-1]), c=s[-1])
    if len(s) == 4 and axes == [2, 3]:
        return "mean", "", dict(rows=s[1], c=s[2] * s[3])
    return None


def _gather(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    table, ids = t.shape(n.input[0]), t.shape(n.input[1])
    if table is None or ids is None or len(table) != 2 or a.get("axis", 0) != 0 \
            or n.input[0] not in t.static or t.types.get(n.input[1]) not in INT_TYPES:
        return None
    return "embedding", "", dict(vocab=table[0], c=table[1], tokens=t.per_sample(ids))


def _concat(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    shapes = [t.shape(x) for x in n.input]
    parts = [p for p in shapes if p is not None and len(p) == 4]
    if not parts or len(parts) != len(shapes) or a.get("axis") not in (1, -3):
        return None
    return "concat", "", dict(inputs=len(parts), c=round(sum(p[1] for p in parts) / len(parts)),
                              h=parts[0][2], w=parts[0][3])


def _transpose(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = t.shape(n.input[0])
    readers = t.consumers.get(n.output[0], [])
    if s is None or len(s) != 4 or list(a.get("perm", [])) != [0, 2, 1, 3] \
            or (readers and all(r in t.attention for r in readers)):
        return None  # other permutations stay views; fused attention reads q and v strided
    return "transpose", "", dict(d1=s[1], d2=s[2], d3=s[3])


def _same_shape_binary(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    x, y, out = (t.shape(v) for v in (n.input[0], n.input[1], n.output[0]))
    if x is None or x != y or x != out:
        return None
    return "binary", n.op_type.lower(), dict(elements=t.per_sample(out))


def _activation(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    out = t.shape(n.output[0])
    return None if out is None else ("activation", ACTIVATIONS[n.op_type], dict(elements=t.per_sample(out)))


def _norm(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _nchw(t, n)
    if s is None:
        return None
    if n.op_type == "GroupNormalization":
        return "group_norm", "", dict(c=s[1], h=s[2], w=s[3], groups=a.get("num_groups", 0))
    return "batch_norm", "", dict(c=s[1], h=s[2], w=s[3])


def _attention(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    """ONNX's own Attention (opset 23): q, k, v as [batch, heads, seq, head_dim] or [batch, seq, hidden]."""
    q, k = t.shape(n.input[0]), t.shape(n.input[1])
    if q is None or k is None or len(q) != len(k) or len(q) not in (3, 4):
        return None
    causal = int(bool(a.get("is_causal", 0))) if len(n.input) < 4 or not n.input[3] else 0
    if len(q) == 4:
        return "sdpa", "", dict(heads=q[1], seq_q=q[2], seq_kv=k[2], head_dim=q[3], causal=causal)
    heads = a.get("q_num_heads", 0)
    return None if not heads else ("sdpa", "", dict(heads=heads, seq_q=q[1], seq_kv=k[1],
                                                    head_dim=q[2] // heads, causal=causal))


def _global_avg(t: GraphTensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _nchw(t, n)
    return None if s is None else ("pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1))


FAMILY_RULES: dict[str, Callable[[GraphTensors, Any, dict[str, Any]], Hit | None]] = {
    "Conv": _conv, "MatMul": matmul_rule, "Attention": _attention, "Gemm": _gemm, "Softmax": softmax_rule,
    "LayerNormalization": _layer_norm, "BatchNormalization": _norm, "GroupNormalization": _norm,
    "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _global_avg, "ReduceMean": _mean,
    "Gather": _gather, "Concat": _concat, "Transpose": _transpose, "Add": _same_shape_binary,
    "Mul": _same_shape_binary, **{op: _activation for op in ACTIVATIONS},
}


def try_rule(rule: Callable[..., Any], *args: Any) -> Any:
    """Run a rule; a node too odd for it (a missing input, a strange attribute) just falls back."""
    try:
        return rule(*args)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return None


def kernel_fields(hit: Hit | None) -> dict[str, Any] | None:
    """Node fields for a family hit the catalogue accepts, else None (the node falls back)."""
    if hit is None:
        return None
    family, variant, params = hit
    fam = get_family(family)
    layout = "nchw" if "nchw" in fam.layouts else "contiguous"
    params = {k: int(v) for k, v in params.items()}
    try:
        fam.check(params, variant, layout)
    except ValueError:
        return None
    return {"kind": "kernel", "family": family, "variant": variant, "layout": layout, "params": params}


def classify_node(t: GraphTensors, n: Any) -> dict[str, Any]:
    """How one unfused ONNX node is costed, as Node fields."""
    ins, outs = [x for x in n.input if x], [x for x in n.output if x]
    standard = n.domain in STANDARD
    if standard and (n.op_type in ("Constant", "Shape", "Size")
                     or (all(t.shape_like(x) for x in ins) and all(t.shape_like(x) for x in outs))):
        return {"kind": "free"}  # shape arithmetic: computed on the host, or folded away
    rule = FAMILY_RULES.get(n.op_type) if standard else None
    fields = kernel_fields(try_rule(rule, t, n, node_attributes(n))) if rule else None
    if fields:
        return fields
    if standard and (n.op_type in VIEW_OPS or (n.op_type == "Gather" and n.input[1] in t.static
                                               and t.shape(n.input[1]) == [])):
        return {"kind": "free"}  # a view in PyTorch (select for a constant scalar Gather)
    out = t.numel(outs[0]) if outs else None
    if standard and n.op_type in ELEMENTWISE_OPS and len(outs) == 1 and out is not None:
        same = sum(1 for x in ins if t.numel(x) == out)
        family, variant = ("binary", "add") if same >= 2 else ("activation", "relu")
        return {"kind": "kernel", "family": family, "variant": variant,
                "params": {"elements": max(1, out // t.batch)}}
    moved = sum(t.numel(x) or 0 for x in ins + outs)
    return {"kind": "fallback", "elements_per_sample": max(1, moved // t.batch)}
