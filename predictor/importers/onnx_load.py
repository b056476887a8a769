"""Read an ONNX model safely and give every tensor a concrete shape.

Loading parses bytes or a path without following any external-data path (such a model is
refused), and runs onnx's checker. A symbolic or missing batch dimension is then fixed, and
shape inference is repeated with the model's shape arithmetic (Shape, Size and nodes reading only
known values) evaluated into constants, so that reshapes fed by it get known shapes. onnx (and
numpy) are imported inside the functions, so predictor loads without them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli"}
STANDARD = ("", "ai.onnx")  # the default ONNX domain; other domains' ops are never mapped


# ---------------------------------------------------------------------------- loading

def load_model(source: bytes | str | Path) -> Any:
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


def standard_opset(model: Any) -> int:
    """The opset version the model imports for the default ONNX domain (1 if it names none)."""
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


def fix_batch(model: Any, batch: int | None) -> int:
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


def constant_value(node: Any) -> Any:
    """The numpy value a Constant node holds, or None for a form it does not hold inline."""
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
            out = [constant_value(n)]
        elif n.op_type in ("Shape", "Size") and (dims := shapes.get(n.input[0])) is not None:
            a = node_attributes(n)
            out = [np.array(dims[a.get("start", 0):a.get("end", len(dims))] if n.op_type == "Shape"
                            else math.prod(dims), dtype=np.int64)]
        elif ins and all(x in values for x in ins) and sum(values[x].size for x in ins) <= FOLD_LIMIT \
                and not any(a.HasField("g") or a.graphs for a in n.attribute):
            try:
                # a list: only run(intermediate=True) answers a dict, which onnx's annotation allows for
                out = ReferenceEvaluator(n, opsets={"": opset}).run(None, {x: values[x] for x in ins})  # type: ignore[assignment]
            except Exception:
                out = None  # an op the reference cannot run: leave it to shape inference
        for name, value in zip(n.output, out or []):
            if value is not None and np.asarray(value).size <= FOLD_LIMIT:
                values[name] = np.asarray(value)
                grew = True
    return grew


def known_shapes(model: Any) -> dict[str, list[int] | None]:
    """Every tensor's dims from the model's inputs, value_info, outputs and initializers; None
    where a dimension is not a known number."""
    shapes: dict[str, list[int] | None] = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            dims = [d.dim_value for d in tt.shape.dim if d.HasField("dim_value")]
            shapes[vi.name] = dims if len(dims) == len(tt.shape.dim) else None
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def infer_folded_shapes(model: Any, opset: int) -> tuple[Any, dict[str, Any]]:
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
        if not _fold(list(model.graph.node), known_shapes(inferred), values, opset):
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


def node_attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as plain Python values, by name."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}
