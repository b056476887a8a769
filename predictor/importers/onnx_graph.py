"""Import an ONNX model into the graph IR, one node per kernel PyTorch would launch.

Each ONNX node becomes a graph node (named by its ONNX name when that is set and unique, else
``"{index}:{op_type}"``), except where kernel detection merges a written-out pattern into the
one fused kernel PyTorch runs for it, as nn-Meter detects fused kernels: attention written as
MatMul -> [scale] -> [mask] -> Softmax -> MatMul becomes one ``sdpa`` node, GELU written with Erf
one ``gelu``, ``x * Sigmoid(x)`` one ``silu``, MatMul + bias Add one ``linear``, and the
Reshape -> InstanceNormalization -> Reshape of an exported GroupNorm one ``group_norm``. Views and
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
STANDARD = ("", "ai.onnx")  # the default ONNX domain; other domains' ops are never mapped
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


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in STANDARD), 1)


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
    """Set symbolic or missing batch dims (axis 0) of the inputs and return the batch the shapes
    will carry: an input's fixed batch if there is one (so the inputs stay consistent), else
    ``batch`` (default 1). Symbolic dims elsewhere are refused: they leave the shapes unknown."""
    weights = {t.name for t in model.graph.initializer}
    dims = [(vi.name, list(vi.type.tensor_type.shape.dim)) for vi in model.graph.input
            if vi.name not in weights and vi.type.tensor_type.HasField("shape")]
    fixed = [d[0].dim_value for _, d in dims if d and d[0].HasField("dim_value") and d[0].dim_value > 0]
    traced = fixed[0] if fixed else batch or 1
    for name, shape in dims:
        for axis, dim in enumerate(shape):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            if axis:
                raise ValueError(f"input {name!r} has a symbolic dimension {dim.dim_param or '?'!r} "
                                 f"at axis {axis}: only the batch (axis 0) may be symbolic; "
                                 "export the model with fixed sizes")
            dim.Clear()
            dim.dim_value = traced
    # Stale symbolic shapes inside the graph would fight the inferred ones: infer afresh.
    del model.graph.value_info[:]
    for vi in model.graph.output:
        for dim in vi.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
    return traced


# ---------------------------------------------------------------------------- shapes

FOLD_LIMIT = 1 << 16  # shape arithmetic is tiny; anything bigger is not folded


def _constant_value(node: Any) -> Any:
    from onnx import helper, numpy_helper

    attr = node.attribute[0] if len(node.attribute) == 1 else None
    if attr is None or attr.name not in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        return None
    import numpy as np

    return numpy_helper.to_array(attr.t) if attr.name == "value" else np.asarray(helper.get_attribute_value(attr))


def _fold(nodes: list[Any], shapes: dict[str, list[int] | None], values: dict[str, Any], opset: int) -> bool:
    """Evaluate shape arithmetic (Shape, Size and nodes reading only known values) into ``values``
    with onnx's reference ops, so that a Reshape fed by it gets a known shape. True if any new."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    grew = False
    for n in nodes:
        if not n.output or n.output[0] in values or n.domain not in STANDARD or n.op_type in RANDOM_OPS:
            continue
        ins = [x for x in n.input if x]
        out: list[Any] | None = None
        if n.op_type == "Constant":
            out = [_constant_value(n)]
        elif n.op_type in ("Shape", "Size") and shapes.get(n.input[0]) is not None:
            dims = shapes[n.input[0]]
            a = _attrs(n)
            out = [np.array(dims[a.get("start", 0):a.get("end", len(dims))] if n.op_type == "Shape"
                            else math.prod(dims), dtype=np.int64)]
        elif ins and all(x in values for x in ins) and sum(values[x].size for x in ins) <= FOLD_LIMIT \
                and not any(a.HasField("g") or a.graphs for a in n.attribute):
            try:
                out = ReferenceEvaluator(n, opsets={"": opset}).run(None, {x: values[x] for x in ins})
            except Exception:
                out = None  # an op the reference cannot run: leave it to shape inference
        for name, value in zip(n.output, out or []):
            if value is not None and np.asarray(value).size <= FOLD_LIMIT:
                values[name] = np.asarray(value)
                grew = True
    return grew


def _shapes(model: Any) -> dict[str, list[int] | None]:
    shapes: dict[str, list[int] | None] = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shapes[vi.name] = None if None in dims else dims
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def _infer(model: Any, opset: int) -> tuple[Any, dict[str, Any]]:
    """Shape inference, repeated with the shape arithmetic folded into constants until it settles:
    onnx's own data propagation stops at ops such as Div and Cast that exporters put in reshapes."""
    from onnx import helper, numpy_helper, shape_inference

    def infer(m: Any) -> Any:
        try:
            return shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
        except Exception as exc:
            raise ValueError(f"ONNX shape inference failed: {str(exc).strip().splitlines()[0]}") from None

    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
              if math.prod(t.dims) <= FOLD_LIMIT}
    light = type(model)()  # the model without its weights' data: inference needs only their dims
    light.CopyFrom(model)
    for w in light.graph.initializer:
        if w.name not in values:
            for data in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                w.ClearField(data)
    inferred = infer(light)
    for _ in range(8):
        if not _fold(list(model.graph.node), _shapes(inferred), values, opset):
            break
        probe = type(light)()
        probe.CopyFrom(light)
        made = {w.name for w in probe.graph.initializer}
        for n in probe.graph.node:
            for k, x in enumerate(n.input):
                if x in values and x not in made and n.op_type != "Constant":
                    n.input[k] = f"latpred.folded:{x}"
        for x, v in values.items():
            if x not in made:
                probe.graph.initializer.append(numpy_helper.from_array(v, f"latpred.folded:{x}"))
                if model.ir_version < 4:  # initializers had to be listed as inputs then
                    probe.graph.input.append(helper.make_tensor_value_info(
                        f"latpred.folded:{x}", helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
        inferred = infer(probe)
    return inferred, values


# ---------------------------------------------------------------------------- the tensors

class _Tensors:
    """Shapes, types, producers, consumers and constness of every tensor after shape inference."""

    def __init__(self, model: Any, inferred: Any, values: dict[str, Any], batch: int) -> None:
        from onnx import numpy_helper

        self._to_array = numpy_helper.to_array
        graph = model.graph
        self.nodes = list(graph.node)
        self.batch = batch
        self.values = values
        self.opset = _opset(model)
        #: indices of nodes fused into attention (their inputs are read strided, as views)
        self.attention: set[int] = set()
        self.shapes = _shapes(inferred)
        self.types: dict[str, int] = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            self.types[vi.name] = vi.type.tensor_type.elem_type
        self.weights = {t.name: t for t in graph.initializer}
        for t in graph.initializer:
            self.types[t.name] = t.data_type
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
        """The numpy value of a weight, Constant or folded shape tensor (up to 2**20 elements), else None."""
        if name in self.values:
            return self.values[name]
        if (self.numel(name) or 0) > 1 << 20:
            return None
        if name in self.weights:
            return self._to_array(self.weights[name])
        node = self.constants.get(name)
        return None if node is None else _constant_value(node)

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


def _scores_operand(t: _Tensors, add: Any) -> str:
    """Which input of a mask Add carries the attention scores (the other is the mask)."""
    def scores(x: str) -> bool:
        i = t.producer.get(x)
        return x not in t.static and i is not None and t.nodes[i].op_type in ("MatMul", "Mul", "Div", "Where")

    a, b = add.input
    if scores(a) != scores(b):
        return a if scores(a) else b
    return b if t.shape(b) == t.shape(add.output[0]) != t.shape(a) else a


def _find_sdpa(t: _Tensors, softmax: int) -> _Fused | None:
    """MatMul(Q, Transpose(K)) [-> scale] [-> mask] -> Softmax -> MatMul(., V) as one sdpa."""
    sm = t.nodes[softmax]
    if _softmax(t, sm, _attrs(sm)) is None:
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


def _find_group_norm(t: _Tensors, inorm: int) -> _Fused | None:
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
    return _Fused(sorted(taken), "GroupNormalization", ("group_norm", "", dict(c=x[1], h=x[2], w=x[3], groups=grouped[1])))


FUSIONS: dict[str, Callable[[_Tensors, int], _Fused | None]] = {
    "Softmax": _find_sdpa, "Erf": _find_gelu, "Sigmoid": _find_silu, "MatMul": _find_linear_bias,
    "InstanceNormalization": _find_group_norm,
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
    has_bias = len(n.input) > 2 and bool(n.input[2])
    return "conv2d", "" if has_bias else "nobias", dict(c_in=s[1], c_out=w[0], h=s[2], w=s[3], kernel=k,
                                                       stride=strides[0], groups=a.get("group", 1))


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


def _last_axis(t: _Tensors, n: Any, axis: int) -> list[int] | None:
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
    readers = t.consumers.get(n.output[0], [])
    if s is None or len(s) != 4 or list(a.get("perm", [])) != [0, 2, 1, 3] \
            or (readers and all(r in t.attention for r in readers)):
        return None  # other permutations stay views; fused attention reads q and v strided
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


def _attention(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
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


def _global_avg(t: _Tensors, n: Any, a: dict[str, Any]) -> Hit | None:
    s = _nchw(t, n)
    return None if s is None else ("pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1))


FAMILY_RULES: dict[str, Callable[[_Tensors, Any, dict[str, Any]], Hit | None]] = {
    "Conv": _conv, "MatMul": _matmul, "Attention": _attention, "Gemm": _gemm, "Softmax": _softmax,
    "LayerNormalization": _layer_norm, "BatchNormalization": _norm, "GroupNormalization": _norm,
    "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _global_avg, "ReduceMean": _mean,
    "Gather": _gather, "Concat": _concat, "Transpose": _transpose, "Add": _same_shape_binary,
    "Mul": _same_shape_binary, **{op: _activation for op in ACTIVATIONS},
}


def _safely(rule: Callable[..., Any], *args: Any) -> Any:
    """Run a rule; a node too odd for it (a missing input, a strange attribute) just falls back."""
    try:
        return rule(*args)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return None


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
    standard = n.domain in STANDARD
    if standard and (n.op_type in ("Constant", "Shape", "Size")
                     or (all(t.shape_like(x) for x in ins) and all(t.shape_like(x) for x in outs))):
        return {"kind": "free"}  # shape arithmetic: computed on the host, or folded away
    rule = FAMILY_RULES.get(n.op_type) if standard else None
    fields = _checked(_safely(rule, t, n, _attrs(n))) if rule else None
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
    real = {n.name for n in nodes if n.name and counts[n.name] == 1}
    return [nm if nm == n.name or nm not in real else f"{nm}#{i}" for i, (nm, n) in enumerate(zip(names, nodes))]


def _detect_kernels(t: _Tensors) -> dict[int, _Fused]:
    """Fused kernels found in the graph, keyed by the index of their last node (where each is
    emitted); a node joins at most one, and attention is looked for first."""
    fused: dict[int, _Fused] = {}
    absorbed: set[int] = set()
    for op_type, find in FUSIONS.items():
        for i, n in enumerate(t.nodes):
            if n.op_type != op_type or n.domain not in STANDARD or i in absorbed:
                continue
            found = _safely(find, t, i)
            if found is None or absorbed & set(found.indices) or _checked(found.hit) is None:
                continue
            fused[max(found.indices)] = found
            absorbed.update(found.indices)
            if found.op == "Attention":
                t.attention.update(found.indices)
    return fused


def _node(t: _Tensors, i: int, names: list[str], fused: _Fused | None) -> Node:
    """The graph node for ONNX node ``i``, or for the fused kernel that ends there."""
    n = t.nodes[i]
    reads = [x for x in n.input if x]
    if fused is None:
        fields, op, merged = _classify(t, n), n.op_type, []
    else:
        fields, op, merged = _checked(fused.hit), fused.op, [names[j] for j in fused.indices]
        inside = {o for j in fused.indices for o in t.nodes[j].output}
        reads = list(dict.fromkeys(x for j in fused.indices for x in t.nodes[j].input
                                   if x and x not in inside and x not in t.static))
    outs = [x for x in n.output if x]
    return Node(name=names[i], op=op, merged=merged, dtype=_dtype(t.types.get(outs[0]) if outs else None),
                inputs=[s for s in map(t.shape, reads) if s is not None],
                outputs=[s for s in map(t.shape, outs) if s is not None], **(fields or {}))


def graph_from_onnx(source: bytes | str | Path, name: str | None = None, batch: int | None = None) -> Graph:
    """Read an ONNX model (bytes or a path) into a checked Graph with per-sample parameters.

    ``batch`` fixes a symbolic or missing batch dimension (default 1) and becomes the graph's
    batch; a model with a fixed batch keeps its shapes and is divided by that batch. Invalid
    bytes, external data and symbolic non-batch dimensions raise ``ValueError`` naming the problem.
    """
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    model = _load(source)
    traced = _fix_batch(model, batch)
    inferred, values = _infer(model, _opset(model))
    t = _Tensors(model, inferred, values, traced)
    fused = _detect_kernels(t)
    absorbed = {j for f in fused.values() for j in f.indices}
    names = _names(t.nodes)
    nodes = [_node(t, i, names, fused.get(i)) for i in range(len(t.nodes)) if i in fused or i not in absorbed]
    unknown = [n.name for n in nodes if n.kind != "free" and not n.outputs]
    if name is None:
        name = model.graph.name if isinstance(source, (bytes, bytearray)) else Path(source).stem
    meta: dict[str, Any] = {"opset": t.opset, "producer": f"{model.producer_name} {model.producer_version}".strip()}
    if unknown:
        meta["shapes_unknown"] = unknown
    graph = Graph(name=name or "onnx_model", nodes=nodes, batch=batch or traced, source="onnx", meta=meta)
    graph.check()
    return graph

