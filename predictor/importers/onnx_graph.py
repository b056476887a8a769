"""Import an ONNX model into the graph IR, one node per kernel PyTorch would launch.

Each ONNX node becomes a graph node (named by its ONNX name when that is set and unique, else
``"{index}:{op_type}"``), except where kernel detection merges a written-out pattern into the
one fused kernel PyTorch runs for it, as nn-Meter detects fused kernels: attention written as
MatMul -> [scale] -> [mask] -> Softmax -> MatMul becomes one ``sdpa`` node, GELU written with Erf
one ``gelu``, ``x * Sigmoid(x)`` one ``silu``, and MatMul + bias Add one ``linear``. Views and
shape arithmetic are ``free``; an elementwise op without a family is costed like ``activation``
relu or ``binary`` add (keeping its own op name); anything else is a ``fallback``, never dropped.

Parameters are per sample (dimension 0 is the batch), as in the torch importer. A symbolic or
missing batch dimension is fixed to ``batch`` before shape inference; other dimensions must be
fixed. The loader never reads external data: a model that points at any is refused. onnx is
imported inside the functions, so predictor loads without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictor.catalogue import get_family
from predictor.graph import Graph, Node

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
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli"}
INT_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # uint8..int64, bool, uint32, uint64 (TensorProto codes)


# ---------------------------------------------------------------------------- loading

def _load(source: bytes | str | Path) -> Any:
    """Parse the model without touching any file it points at; garbage becomes ValueError."""
    import onnx

    where = "the given bytes" if isinstance(source, (bytes, bytearray)) else str(source)
    if not isinstance(source, (bytes, bytearray)) and not Path(source).is_file():
        raise ValueError(f"{source}: no such ONNX file")
    try:
        if isinstance(source, (bytes, bytearray)):
            model = onnx.load_from_string(bytes(source))
        else:
            model = onnx.load(str(source), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: say what, not where in protobuf
        raise ValueError(f"{where} is not a valid ONNX model ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'cannot be parsed'})") from None
    if not model.graph.node or not model.opset_import:
        raise ValueError(f"{where} is not a valid ONNX model (no graph nodes or no opset)")
    _refuse_external_data(model)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{where} is not a valid ONNX model ({first})") from None
    return model


def _all_tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto a graph holds: initializers, sparse ones and node attributes, subgraphs too."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def _refuse_external_data(model: Any) -> None:
    """Refuse external data outright: following its paths would read arbitrary files."""
    import onnx

    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "?")
            raise ValueError(f"tensor {tensor.name!r} stores its data outside the model "
                             f"(location {location!r}): external data is not supported; "
                             "save the model with its weights inside the .onnx file")


def _fix_batch(model: Any, batch: int | None) -> int:
    """Set symbolic or missing batch dims of the inputs to ``batch`` (default 1); return the batch
    the shapes will carry (an input's fixed batch wins). Other symbolic dims are refused."""
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    traced: int | None = None
    for vi in graph.input:
        if vi.name in weights or not vi.type.HasField("tensor_type") \
                or not vi.type.tensor_type.HasField("shape"):
            continue
        for axis, dim in enumerate(vi.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                if axis == 0 and traced is None:
                    traced = dim.dim_value
            elif axis == 0:
                dim.Clear()
                dim.dim_value = batch or 1
                traced = traced or dim.dim_value
            else:
                raise ValueError(f"input {vi.name!r} has a symbolic dimension "
                                 f"{dim.dim_param or '?'!r} at axis {axis}: only the batch "
                                 "(axis 0) may be symbolic; export with fixed sizes")
    # Stale symbolic shapes inside the graph would fight the inferred ones: infer afresh.
    del graph.value_info[:]
    for vi in graph.output:
        for dim in vi.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
    return traced or batch or 1


# ---------------------------------------------------------------------------- the tensors

class _Tensors:
    """Shapes, types, producers, consumers and constness of every tensor after shape inference."""

    def __init__(self, model: Any, batch: int) -> None:
        from onnx import numpy_helper

        self._to_array = numpy_helper.to_array
        graph = model.graph
        self.nodes = list(graph.node)
        self.batch = batch
        self.shapes: dict[str, list[int] | None] = {}
        self.types: dict[str, int] = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            tt = vi.type.tensor_type
            self.types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
                self.shapes[vi.name] = None if None in dims else dims
        self.weights = {t.name: t for t in graph.initializer}
        for t in graph.initializer:
            self.shapes[t.name], self.types[t.name] = list(t.dims), t.data_type
        self.constants = {n.output[0]: n for n in self.nodes if n.op_type == "Constant" and n.output}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                self.producer[o] = i
            for x in n.input:
                self.consumers.setdefault(x, []).append(i)
        for o in graph.output:
            self.consumers.setdefault(o.name, []).append(-1)  # a graph output cannot be fused away
        # Static: known without running the model (weights, constants, shapes and their arithmetic).
        self.static = set(self.weights) | set(self.constants)
        for n in self.nodes:
            ins = [x for x in n.input if x]
            if n.op_type in ("Shape", "Size") or (ins and n.op_type not in RANDOM_OPS
                                                   and all(x in self.static for x in ins)):
                self.static.update(n.output)

    def shape(self, name: str) -> list[int] | None:
        return self.shapes.get(name)

    def numel(self, name: str) -> int | None:
        s = self.shape(name)
        return None if s is None else math.prod(s)

    def per_sample(self, dims: list[int]) -> int:
        """Elements of ``dims`` per sample, at least 1 (robust to a batch folded into dim 0)."""
        return max(1, math.prod(dims) // self.batch)

    def shape_like(self, name: str) -> bool:
        """A shape tensor: static, or a small integer tensor (rank <= 1)."""
        s = self.shape(name)
        return name in self.static or (self.types.get(name) in INT_TYPES and s is not None and len(s) <= 1)

    def value(self, name: str) -> Any:
        """The numpy value of a weight or Constant of up to a million elements, else None."""
        if (self.numel(name) or 0) > 1 << 20:
            return None
        if name in self.weights:
            return self._to_array(self.weights[name])
        node = self.constants.get(name)
        if node is None or not node.attribute:
            return None
        import numpy as np
        from onnx import helper

        attr = node.attribute[0]
        if attr.name == "value":
            return self._to_array(attr.t)
        if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
            return np.asarray(helper.get_attribute_value(attr))
        return None

    def scalar(self, name: str) -> float | None:
        v = self.value(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def only_consumer(self, name: str) -> int | None:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0] >= 0 else None


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _other(node: Any, name: str) -> str | None:
    """The other operand of a two-input node that reads ``name``."""
    if len(node.input) == 2 and name in node.input:
        return node.input[1] if node.input[0] == name else node.input[0]
    return None


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


# ---------------------------------------------------------------------------- kernel detection

@dataclass
class _Fused:
    """Several ONNX nodes that PyTorch runs as one kernel; emitted where the last one stands."""

    indices: list[int]
    op: str
    hit: Hit


def _producer(t: _Tensors, name: str, ops: tuple[str, ...]) -> int | None:
    """The node producing ``name`` if it is one of ``ops`` and ``name`` has no other reader."""
    i = t.producer.get(name)
    if i is None or t.nodes[i].op_type not in ops or len(t.consumers.get(name, [])) != 1:
        return None
    return i


def _scalar_operand(t: _Tensors, node: Any) -> str | None:
    """For Mul/Div by a one-element tensor, the other (activation) operand."""
    if node.op_type not in ("Mul", "Div") or len(node.input) != 2:
        return None
    a, b = node.input
    if t.numel(b) == 1:
        return a
    return b if node.op_type == "Mul" and t.numel(a) == 1 else None


def _causal(t: _Tensors, node: Any, scores: str) -> int:
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


def _find_sdpa(t: _Tensors, softmax: int) -> _Fused | None:
    """MatMul(Q, Transpose(K)) [-> scale] [-> mask] -> Softmax -> MatMul(., V) as one sdpa."""
    sm = t.nodes[softmax]
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
        elif n.op_type == "Add":
            nxt = n.input[0] if t.producer.get(n.input[0]) is not None and \
                t.nodes[t.producer[n.input[0]]].op_type in ("MatMul", "Mul", "Div") else n.input[1]
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
    return _Fused(sorted(taken), "Attention", ("sdpa", "", params))


def _is(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) < 1e-3 * abs(target)


def _find_gelu(t: _Tensors, erf: int) -> _Fused | None:
    """x * 0.5 * (1 + Erf(x / sqrt 2)), in either order of the two Muls, as one gelu."""
    d = _producer(t, t.nodes[erf].input[0], ("Div", "Mul"))
    if d is None:
        return None
    dn = t.nodes[d]
    x = _scalar_operand(t, dn)
    const = _other(dn, x) if x else None
    if not x or not (_is(t.scalar(const), math.sqrt(2)) if dn.op_type == "Div"
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
    return _Fused(sorted(taken), "Gelu", ("activation", "gelu", dict(elements=t.per_sample(out))))


def _find_silu(t: _Tensors, sig: int) -> _Fused | None:
    """x * Sigmoid(x) as one silu."""
    x, s = t.nodes[sig].input[0], t.nodes[sig].output[0]
    m = t.only_consumer(s)
    if m is None or t.nodes[m].op_type != "Mul" or _other(t.nodes[m], s) != x:
        return None
    out = t.shape(t.nodes[m].output[0])
    return None if out is None else _Fused([sig, m], "Silu", ("activation", "silu", dict(elements=t.per_sample(out))))


def _find_linear_bias(t: _Tensors, mm: int) -> _Fused | None:
    """MatMul by a constant 2-d weight followed by a constant bias Add: one addmm, as torch runs it."""
    hit = _matmul(t, t.nodes[mm], {})
    if hit is None or hit[0] != "linear":
        return None
    add = t.only_consumer(t.nodes[mm].output[0])
    if add is None or t.nodes[add].op_type != "Add":
        return None
    bias = _other(t.nodes[add], t.nodes[mm].output[0])
    if bias not in t.static or t.numel(bias) != hit[2]["n"]:
        return None
    return _Fused([mm, add], "MatMul+Add", hit)


FUSIONS: dict[str, Callable[[_Tensors, int], _Fused | None]] = {
    "Softmax": _find_sdpa, "Erf": _find_gelu, "Sigmoid": _find_silu, "MatMul": _find_linear_bias,
}


# ---------------------------------------------------------------------------- one node, one family

def _conv(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s, w = t.shape(n.input[0]), t.shape(n.input[1])
    if s is None or w is None or len(s) != 4 or len(w) != 4:
        return None
    k = w[2]
    pads, strides = a.get("pads", [0] * 4), a.get("strides", [1, 1])
    same = a.get("auto_pad", b"NOTSET") in (b"SAME_UPPER", b"SAME_LOWER") and k % 2 and strides == [1, 1]
    if w[3] != k or any(d != 1 for d in a.get("dilations", [1, 1])) or strides[0] != strides[1] \
            or not (same or list(pads) == [k // 2] * 4):
        return None
    return "conv2d", "", dict(c_in=s[1], c_out=w[0], h=s[2], w=s[3], kernel=k, stride=strides[0],
                              groups=a.get("group", 1))


def _matmul(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    x, y = t.shape(n.input[0]), t.shape(n.input[1])
    if x is None or y is None or len(x) < 1:
        return None
    if n.input[1] in t.static and len(y) == 2:
        return "linear", "", dict(tokens=t.per_sample(x[:-1]), k=y[0], n=y[1])
    if len(x) >= 3 and len(y) >= 3:
        return "matmul", "", dict(heads=t.per_sample(x[:-2]), m=x[-2], k=x[-1], n=y[-1])
    return None


def _gemm(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    x, y = t.shape(n.input[0]), t.shape(n.input[1])
    if x is None or y is None or a.get("transA", 0) or n.input[1] not in t.static:
        return None
    k, out = (y[1], y[0]) if a.get("transB", 0) else (y[0], y[1])
    return "linear", "", dict(tokens=t.per_sample(x[:-1]), k=k, n=out)


def _last_axis(t: _Tensors, n: Any, axis: int) -> Hit | None:
    s = t.shape(n.input[0])
    if s is None or axis % max(len(s), 1) != len(s) - 1:
        return None
    return s


def _softmax(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _last_axis(t, n, a.get("axis", -1 if t.opset >= 13 else 1))
    return None if s is None else ("softmax", "", dict(rows=t.per_sample(s[:-1]), c=s[-1]))


def _layer_norm(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _last_axis(t, n, a.get("axis", -1))
    return None if s is None else ("layer_norm", "", dict(tokens=t.per_sample(s[:-1]), c=s[-1]))


def _nchw(t: _Tensors, n: Any) -> list[int] | None:
    s = t.shape(n.input[0])
    return s if s is not None and len(s) == 4 else None


def _pool(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s, k = _nchw(t, n), a.get("kernel_shape", [0, 0])
    strides, pads = a.get("strides", [1, 1]), list(a.get("pads", [0] * 4))
    if s is None or k[0] != k[1] or strides[0] != strides[1] or a.get("ceil_mode", 0) \
            or any(d != 1 for d in a.get("dilations", [1, 1])) or pads not in ([0] * 4, [k[0] // 2] * 4):
        return None  # padding 0 is accepted like the torch importer does (MaxPool2d(2) is common)
    return "pool", "max" if n.op_type == "MaxPool" else "avg", dict(c=s[1], h=s[2], w=s[3], kernel=k[0],
                                                                   stride=strides[0])


def _mean(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
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


def _gather(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    table, ids = t.shape(n.input[0]), t.shape(n.input[1])
    if table is None or ids is None or len(table) != 2 or a.get("axis", 0) != 0 \
            or n.input[0] not in t.static or t.types.get(n.input[1]) not in INT_TYPES:
        return None
    return "embedding", "", dict(vocab=table[0], c=table[1], tokens=t.per_sample(ids))


def _concat(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    parts = [t.shape(x) for x in n.input]
    if not parts or any(p is None or len(p) != 4 for p in parts) or a.get("axis") not in (1, -3):
        return None
    return "concat", "", dict(inputs=len(parts), c=round(sum(p[1] for p in parts) / len(parts)),
                              h=parts[0][2], w=parts[0][3])


def _transpose(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = t.shape(n.input[0])
    if s is None or len(s) != 4 or list(a.get("perm", [])) != [0, 2, 1, 3] \
            or all(t.nodes[c].op_type == "Attention" for c in t.consumers.get(n.output[0], [-1]) if c >= 0):
        return None
    return "transpose", "", dict(d1=s[1], d2=s[2], d3=s[3])


def _same_shape_binary(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    x, y, out = (t.shape(v) for v in (n.input[0], n.input[1], n.output[0]))
    if x is None or x != y or x != out:
        return None
    return "binary", n.op_type.lower(), dict(elements=t.per_sample(out))


def _activation(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    out = t.shape(n.output[0])
    return None if out is None else ("activation", ACTIVATIONS[n.op_type], dict(elements=t.per_sample(out)))


def _norm(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _nchw(t, n)
    if s is None:
        return None
    if n.op_type == "GroupNormalization":
        return "group_norm", "", dict(c=s[1], h=s[2], w=s[3], groups=a.get("num_groups", 0))
    return "batch_norm", "", dict(c=s[1], h=s[2], w=s[3])


def _global_avg(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _nchw(t, n)
    return None if s is None else ("pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1))


FAMILY_RULES: dict[str, Callable[[_Tensors, Any, dict[str, Any]], Hit | None]] = {
    "Conv": _conv, "MatMul": _matmul, "Gemm": _gemm, "Softmax": _softmax,
    "LayerNormalization": _layer_norm, "BatchNormalization": _norm, "GroupNormalization": _norm,
    "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _global_avg, "ReduceMean": _mean,
    "Gather": _gather, "Concat": _concat, "Transpose": _transpose, "Add": _same_shape_binary,
    "Mul": _same_shape_binary, **{op: _activation for op in ACTIVATIONS},
}


def _checked(hit: Hit | None) -> dict[str, Any] | None:
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


def _classify(t: _Tensors, n: Any) -> dict[str, Any]:
    """How one unfused ONNX node is costed, as Node fields."""
    ins, outs = [x for x in n.input if x], [x for x in n.output if x]
    standard = n.domain in ("", "ai.onnx")
    if standard and (n.op_type in ("Constant", "Shape", "Size")
                     or (all(t.shape_like(x) for x in ins) and all(t.shape_like(x) for x in outs))):
        return {"kind": "free"}  # shape arithmetic: computed on the host, or folded away
    rule = FAMILY_RULES.get(n.op_type) if standard else None
    fields = _checked(rule(t, n, _attrs(n))) if rule else None
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


# ---------------------------------------------------------------------------- the importer

def _dtype(elem_type: int | None) -> str:
    if not elem_type:
        return ""
    from onnx import TensorProto, helper

    try:
        return str(helper.tensor_dtype_to_np_dtype(elem_type).name)
    except Exception:
        return TensorProto.DataType.Name(elem_type).lower()


def _names(nodes: list[Any]) -> list[str]:
    """ONNX names where set and unique, else ``"{index}:{op_type}"``; never a clash."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    names = [n.name if n.name and counts[n.name] == 1 else f"{i}:{n.op_type}" for i, n in enumerate(nodes)]
    taken = {n.name for n in nodes if n.name and counts[n.name] == 1}
    return [nm if nm in taken or nm not in taken else f"{nm}#{i}" for i, nm in enumerate(names)]


def graph_from_onnx(source: bytes | str | Path, name: str | None = None, batch: int | None = None) -> Graph:
    """Read an ONNX model (bytes or a path) into a checked Graph with per-sample parameters.

    ``batch`` fixes a symbolic or missing batch dimension (default 1) and becomes the graph's
    batch; a model with a fixed batch keeps its shapes and is divided by that batch. Invalid
    bytes, external data and symbolic non-batch dimensions raise ``ValueError`` naming the problem.
    """
    from onnx import shape_inference

    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    model = _load(source)
    traced = _fix_batch(model, batch)
    try:
        model = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:
        raise ValueError(f"ONNX shape inference failed: {str(exc).splitlines()[0]}") from None
    t = _Tensors(model, traced)
    t.opset = _opset(model)
    names = _names(t.nodes)

    fused: dict[int, _Fused] = {}  # by the index where each is emitted
    absorbed: set[int] = set()
    for i, n in enumerate(t.nodes):
        find = FUSIONS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        found = find(t, i) if find and i not in absorbed else None
        if found and not absorbed & set(found.indices) and _checked(found.hit):
            fused[max(found.indices)] = found
            absorbed.update(found.indices)
            for j in found.indices:  # lets a Transpose feeding only fused attention stay a view
                if found.op == "Attention":
                    t.nodes[j] = _renamed(t.nodes[j], "Attention")

    nodes: list[Node] = []
    unknown: list[str] = []
    for i, n in enumerate(t.nodes):
        if i in fused:
            f = fused[i]
            fields = _checked(f.hit)
            op, merged = f.op, [names[j] for j in f.indices]
        elif i in absorbed:
            continue
        else:
            fields, op, merged = _classify(t, n), n.op_type, []
        outs = [x for x in n.output if x]
        shapes = [t.shape(x) for x in outs]
        if fields["kind"] != "free" and (not outs or shapes[0] is None):
            unknown.append(names[i])
        nodes.append(Node(name=names[i], op=op, merged=merged, dtype=_dtype(t.types.get(outs[0]) if outs else None),
                          inputs=[s for s in (t.shape(x) for x in n.input if x) if s is not None],
                          outputs=[s for s in shapes if s is not None], **fields))

    if name is None:
        name = model.graph.name if isinstance(source, (bytes, bytearray)) else Path(source).stem
    meta: dict[str, Any] = {"opset": t.opset, "producer": f"{model.producer_name} {model.producer_version}".strip()}
    if unknown:
        meta["shapes_unknown"] = unknown
    graph = Graph(name=name or "onnx_model", nodes=nodes, batch=batch or traced, source="onnx", meta=meta)
    graph.check()
    return graph


def _renamed(node: Any, op_type: str) -> Any:
    """A copy of ``node`` marked as part of fused attention (so its readers know it is fused)."""
    copy = type(node)()
    copy.CopyFrom(node)
    copy.op_type = op_type
    return copy
