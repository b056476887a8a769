"""How one ONNX node is costed: its kernel family, a view (``free``), or a ``fallback``.

``FAMILY_RULES`` maps an ONNX op type to a rule that reads the node's shapes and attributes and
returns the family hit, or None when the node does not fit the family (it then falls back). The
rules mirror the torch importer's (torch_calls.recognize): the same call in PyTorch and its node
in an export get the same family, variant and parameters. Views are free; an elementwise op
without a family is costed like ``activation`` relu or ``binary`` add, in the layout PyTorch
would run it in (onnx_layouts); anything else is a fallback, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from predictor.catalogue import get_family
from predictor.importers.onnx_exporters import has_bias
from predictor.importers.onnx_layouts import TensorLayouts
from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_strides import transpose_fields
from predictor.importers.onnx_tensors import INT_TYPES, GraphTensors

Hit = tuple[str, str, dict[str, int]]  # (family, variant, per-sample params)

#: Ops that launch no kernel in PyTorch: views (a Dropout is a no-op call in eval), and the
#: writes into a tensor an export makes out of place and PyTorch makes in place (``x[i] = v``,
#: ``index_put_``), which the torch importer costs as calls without a kernel of their own.
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Expand", "Slice", "Split",
            "Transpose", "ScatterND", "ScatterElements"}
#: Ops that never reach PyTorch's dispatcher: constants, shapes, aliases.
FOLDED_OPS = {"Constant", "Identity", "Shape", "Size"}
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
#: Reductions PyTorch runs with its reduce kernel, costed by the mean family (torch_calls.REDUCTIONS).
REDUCE_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"}

Rule = Callable[[GraphTensors, Any, dict[str, Any], TensorLayouts], "Hit | None"]


def _square(pads: list[int]) -> int | None:
    return pads[0] if pads and all(p == pads[0] for p in pads) else None


def conv_rule(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts | None = None) -> Hit | None:
    """A Conv as torch_calls._conv maps conv2d: a square window padded up to kernel // 2 (less
    is 'valid', costed unpadded), or Inception's 1xk / kx1 windows padded along their long side;
    with the bias PyTorch runs it with (onnx_exporters.has_bias: not a folded BatchNorm's, and
    one the exporter removed for being zeros)."""
    s, w = t.shape(n.input[0]), t.shape(n.input[1])
    if s is None or w is None or len(s) != 4 or len(w) != 4:
        return None
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        return None
    kh, kw = w[2], w[3]
    kernel = max(kh, kw)
    strides = a.get("strides", [1, 1])
    if len(set(strides)) != 1:  # a (1, 2) stride does half the work of 1: not costed as its first
        return None
    auto = a.get("auto_pad", b"NOTSET")
    pads = list(a.get("pads", [0] * 4))
    if auto in (b"SAME_UPPER", b"SAME_LOWER"):
        pads = [kh // 2, kw // 2, kh // 2, kw // 2]
    bias = has_bias(t, n)
    params = dict(c_in=s[1], c_out=w[0], h=s[2], w=s[3], kernel=kernel, stride=strides[0],
                  groups=a.get("group", 1))
    if kh != kw:
        want = [0, kernel // 2] * 2 if kh == 1 else [kernel // 2, 0] * 2
        if bias or min(kh, kw) != 1 or pads != want:
            return None
        return "conv2d", "row_nobias" if kh == 1 else "col_nobias", params
    pad = _square(pads)
    if pad is None or pad > kernel // 2:
        return None
    valid = pad < kernel // 2
    variant = {(False, True): "", (False, False): "nobias", (True, True): "valid",
               (True, False): "valid_nobias"}[(valid, bias)]
    return "conv2d", variant, params


def matmul_rule(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts | None = None) -> Hit | None:
    """MatMul as ``linear`` (a 2-d right operand, as torch.matmul runs it) or batched ``matmul``."""
    x, y = t.shape(n.input[0]), t.shape(n.input[1])
    if x is None or y is None or len(x) < 1:
        return None
    if len(y) == 2:
        return "linear", "nobias", dict(tokens=t.per_sample(x[:-1]), k=y[0], n=y[1])
    if len(x) >= 3 and len(y) >= 3:
        return "matmul", "", dict(heads=t.per_sample(x[:-2]), m=x[-2], k=x[-1], n=y[-1])
    return None


def _gemm(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    x, y = t.shape(n.input[0]), t.shape(n.input[1])
    if x is None or y is None or a.get("transA", 0):
        return None
    k, out = (y[1], y[0]) if a.get("transB", 0) else (y[0], y[1])
    return "linear", "" if has_bias(t, n) else "nobias", dict(tokens=t.per_sample(x[:-1]), k=k, n=out)


def _last_axis(t: GraphTensors, n: Any, axis: int) -> list[int] | None:
    s = t.shape(n.input[0])
    if s is None or axis % max(len(s), 1) != len(s) - 1:
        return None
    return s


def softmax_rule(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts | None = None) -> Hit | None:
    """Softmax over the last axis (the only one the family covers)."""
    s = _last_axis(t, n, a.get("axis", -1 if t.opset >= 13 else 1))
    return None if s is None else ("softmax", "", dict(rows=t.per_sample(s[:-1]), c=s[-1]))


def _layer_norm(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    s = _last_axis(t, n, a.get("axis", -1))
    return None if s is None else ("layer_norm", "", dict(tokens=t.per_sample(s[:-1]), c=s[-1]))


def _nchw(t: GraphTensors, n: Any) -> list[int] | None:
    s = t.shape(n.input[0])
    return s if s is not None and len(s) == 4 else None


def _pool(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    """Pooling by window and stride, as the torch importer maps max_pool2d and avg_pool2d (its
    padding and ceil mode are not parameters of the family)."""
    s, k = _nchw(t, n), a.get("kernel_shape", [0, 0])
    strides = a.get("strides", [1] * len(k))  # ONNX's default stride is 1 (PyTorch's is the window)
    if s is None or k[0] != k[1] or strides[0] != strides[1] or any(d != 1 for d in a.get("dilations", [1, 1])):
        return None
    return "pool", "max" if n.op_type == "MaxPool" else "avg", dict(c=s[1], h=s[2], w=s[3], kernel=k[0],
                                                                   stride=strides[0])


def _reduce_axes(t: GraphTensors, n: Any, a: dict[str, Any]) -> list[int] | None:
    axes = a.get("axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        v = t.value(n.input[1])
        axes = None if v is None else [int(x) for x in v.reshape(-1)]
    return None if axes is None else [int(x) for x in axes]


def _reduce(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    """A reduction over the last dim, over H and W of a 4-d tensor, or over everything, as the
    mean family; a ReduceMean over H and W that keeps them is ``adaptive_avg_pool2d(x, 1)``,
    which is how exporters write it (torchvision never averages with ``mean`` there)."""
    s = t.shape(n.input[0])
    axes = _reduce_axes(t, n, a)
    if s is None or not s:
        return None
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return None
        return "mean", "", dict(rows=1, c=max(1, t.per_sample(s)))
    axes = sorted(x % len(s) for x in axes)
    if axes == [len(s) - 1]:
        return "mean", "", dict(rows=t.per_sample(s[:-1]), c=s[-1])
    if len(s) == 4 and axes == [2, 3]:
        if n.op_type == "ReduceMean" and a.get("keepdims", 1):
            return "pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1)
        return "mean", "", dict(rows=s[1], c=s[2] * s[3])
    if axes == list(range(len(s))):
        return "mean", "", dict(rows=1, c=max(1, t.per_sample(s)))
    return None


def _gather(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    table, ids = t.shape(n.input[0]), t.shape(n.input[1])
    if table is None or ids is None or len(table) != 2 or a.get("axis", 0) != 0 \
            or n.input[0] not in t.weights or t.types.get(n.input[1]) not in INT_TYPES:
        return None
    return "embedding", "", dict(vocab=table[0], c=table[1], tokens=t.per_sample(ids))


def _concat(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    """torch.cat of 4-d tensors along channels (concat family), or of same-shape permuted 4-d
    views along another dim (its 'strided' layout); other cats are copies (``classify_node``)."""
    names = [x for x in n.input if x and (t.numel(x) or 0) > 0]
    shapes = [t.shape(x) for x in names]
    parts = [p for p in shapes if p is not None and len(p) == 4]
    if not parts or len(parts) != len(shapes):
        return None
    if a.get("axis") in (1, -3):
        return "concat", "", dict(inputs=len(parts), c=round(sum(p[1] for p in parts) / len(parts)),
                                  h=parts[0][2], w=parts[0][3])
    permuted = all(lay.is_dense(x) for x in names) and any(lay.memory_order(x) != [0, 1, 2, 3] for x in names)
    if permuted and len({tuple(p) for p in parts}) == 1:
        return "concat", "", dict(inputs=len(parts), c=parts[0][1], h=parts[0][2], w=parts[0][3])
    return None


def _binary(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    """Add or Mul of two tensors (not a number): the binary family, broadcasting or not."""
    out = t.shape(n.output[0])
    if out is None or len(n.input) != 2 or any(t.is_scalar(x) for x in n.input):
        return None
    return "binary", n.op_type.lower(), dict(elements=t.per_sample(out))


def _activation(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    out = t.shape(n.output[0])
    return None if out is None else ("activation", ACTIVATIONS[n.op_type], dict(elements=t.per_sample(out)))


def _norm(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    s = _nchw(t, n)
    if s is None:
        return None
    if n.op_type == "GroupNormalization":
        return "group_norm", "", dict(c=s[1], h=s[2], w=s[3], groups=a.get("num_groups", 0))
    return "batch_norm", "", dict(c=s[1], h=s[2], w=s[3])


def _attention(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
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


def _global_avg(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    s = _nchw(t, n)
    return None if s is None else ("pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1))


def _global_max(t: GraphTensors, n: Any, a: dict[str, Any], lay: TensorLayouts) -> Hit | None:
    """A max over a square image's whole plane, as the torch importer maps ``adaptive_max_pool2d(x,
    1)`` (the TorchScript exporter writes that call as a MaxPool of the plane's size)."""
    s = _nchw(t, n)
    if s is None or s[2] != s[3]:
        return None
    return "pool", "max", dict(c=s[1], h=s[2], w=s[3], kernel=s[2], stride=s[2])


FAMILY_RULES: dict[str, Rule] = {
    "Conv": conv_rule, "MatMul": matmul_rule, "Attention": _attention, "Gemm": _gemm, "Softmax": softmax_rule,
    "LayerNormalization": _layer_norm, "BatchNormalization": _norm, "GroupNormalization": _norm,
    "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _global_avg, "GlobalMaxPool": _global_max,
    **{op: _reduce for op in REDUCE_OPS}, "Gather": _gather, "Concat": _concat,
    "Add": _binary, "Mul": _binary, **{op: _activation for op in ACTIVATIONS},
}


class ModelRefused(ValueError):
    """A rule's refusal of the whole model, on purpose (its message says what to fix): unlike a
    node too odd for a rule, it is not a fall back to the node's plain costs."""


def try_rule(rule: Callable[..., Any], *args: Any) -> Any:
    """Run a rule; a node too odd for it (a missing input, a strange attribute) just falls back."""
    try:
        return rule(*args)
    except ModelRefused:
        raise
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return None


def kernel_fields(hit: Hit | None, layout: str | None = None) -> dict[str, Any] | None:
    """Node fields for a family hit the catalogue accepts, else None (the node falls back).
    ``layout`` is the elementwise layout where the family has one (else its first layout)."""
    if hit is None:
        return None
    family, variant, params = hit
    fam = get_family(family)
    if layout not in fam.layouts:
        layout = "nchw" if "nchw" in fam.layouts else "contiguous"
    params = {k: int(v) for k, v in params.items()}
    try:
        fam.check(params, variant, layout)
    except ValueError:
        return None
    return {"kind": "kernel", "family": family, "variant": variant, "layout": layout, "params": params}


def elementwise_fields(family: str, variant: str, layout: str, elements: int, batch: int) -> dict[str, Any]:
    """Node fields of an elementwise kernel costed by ``family`` over ``elements`` in all."""
    return {"kind": "kernel", "family": family, "variant": variant, "layout": layout,
            "params": {"elements": max(1, elements // batch)}}


def copy_fields(t: GraphTensors, elements: int, dense: bool = False,
                blocks: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """A copy kernel (a reshape that cannot view, a cat of non-4-d tensors, a pad): PyTorch's
    elementwise copy, vectorized when dense, generic ('strided') when the layout changes; the
    transpose family's where the copied tensor's dims are two blocks swapped (``blocks``,
    TensorLayouts.copy_blocks), as the torch importer costs it."""
    if blocks is not None:
        return transpose_fields(blocks)
    return elementwise_fields("activation", "relu", "contiguous" if dense else "strided", elements, t.batch)


def layout_of(lay: TensorLayouts, hit: Hit | None, ins: list[str], outs: list[str]) -> str | None:
    """The layout PyTorch runs a family hit in, from its operands' layouts (None: the default)."""
    if hit is None or not ins:
        return None
    layouts = get_family(hit[0]).layouts
    if "nchw" in layouts:
        return lay.image_layout([x for x in ins if (lay.t.numel(x) or 0) > 0 and x not in lay.t.static], layouts)
    if "strided" in layouts and outs:
        return lay.elementwise_layout(ins, outs[0])
    return None


def same_integer_type(t: GraphTensors, n: Any) -> bool:
    """A Cast of a boolean or integer tensor to its own type (the TorchScript exporter writes one
    for ``masked_fill``'s mask): no call in PyTorch, where ``.to()`` of a tensor's own dtype
    returns it (onnx_emit drops it, as an Identity). A float one to its own type is not taken so:
    a float32 export writes a half-precision model's upcasts so (onnx_decoder), and those are
    kernels."""
    to = node_attributes(n).get("to")
    return to in INT_TYPES and t.types.get(str(n.input[0])) == to


def classify_node(t: GraphTensors, n: Any, lay: TensorLayouts) -> dict[str, Any]:
    """How one unfused ONNX node is costed, as Node fields."""
    ins, outs = [x for x in n.input if x], [x for x in n.output if x]
    standard = n.domain in STANDARD
    rule = FAMILY_RULES.get(n.op_type) if standard else None
    if rule:
        hit = try_rule(rule, t, n, node_attributes(n), lay)
        blocks = lay.transposed_operand(ins, outs[0]) if hit is not None and hit[0] == "binary" and outs else None
        if blocks is not None:
            return transpose_fields(blocks, "add")
        fields = kernel_fields(hit, layout_of(lay, hit, ins, outs))
        if fields:
            return fields
    if standard and (n.op_type in VIEW_OPS or (n.op_type == "Gather" and n.input[1] in t.static
                                               and t.shape(n.input[1]) == [])):
        return {"kind": "free"}  # a view in PyTorch (select for a constant scalar Gather)
    out = t.numel(outs[0]) if outs else None
    if standard and n.op_type in ELEMENTWISE_OPS and len(outs) == 1 and out is not None:
        same = sum(1 for x in ins if t.numel(x) == out)
        blocks = lay.transposed_operand(ins, outs[0]) if same >= 2 else None
        if blocks is not None:
            return transpose_fields(blocks, "add")
        family, variant = ("binary", "add") if same >= 2 else ("activation", "relu")
        return elementwise_fields(family, variant, lay.elementwise_layout(ins, outs[0]), out, t.batch)
    if standard and n.op_type in ("Concat", "Pad") and len(outs) == 1 and out is not None:
        return copy_fields(t, out, dense=all(lay.is_dense(x) for x in ins if (t.numel(x) or 0) > 1))
    moved = sum(t.numel(x) or 0 for x in ins + outs)
    return {"kind": "fallback", "elements_per_sample": max(1, moved // t.batch)}
