"""Read an ONNX model safely, without its weights, and give every tensor a concrete shape.

Loading reads the graph from the protobuf wire format (onnx_wire): every tensor keeps its dims
and data type, only small tensors keep their data, and no external data is ever opened, wherever
its ``location`` points: the predictor needs dims, not weights. Any external-data reference left
in a small node is cleaned after parsing, so nothing downstream (numpy_helper, the reference
evaluator, the checker) can follow one to a file. onnx's checker then runs on the graph, with the
tensors whose data was left out declared empty, since it insists on data it does not need here.
Symbolic input dims are then set (onnx_dims), and shape inference is repeated with the model's
shape arithmetic evaluated into constants (onnx_fold), so that reshapes fed by it get known shapes.
onnx (and numpy) are imported inside the functions, so predictor loads without them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from predictor.importers import onnx_wire
from predictor.importers.onnx_wire import KEEP_ELEMENTS, MAX_NESTING, MAX_NODES, LimitError

RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli"}
STANDARD = ("", "ai.onnx")  # the default ONNX domain; other domains' ops are never mapped
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data",
                "uint64_data")


# ---------------------------------------------------------------------------- loading

def load_model(source: bytes | bytearray | str | Path) -> Any:
    """Parse the model's graph without its weights' data and without touching any file it points
    at; garbage, and a model past the wire reader's limits, become ValueError."""
    import onnx

    if isinstance(source, (bytes, bytearray)):
        where = "the given bytes"
    elif not Path(source).is_file():
        raise ValueError(f"{source}: no such ONNX file")
    else:
        where = str(source)
    try:
        slim = onnx_wire.slim_model_bytes(source)  # called through the module: tests swap it
        model = onnx.ModelProto()
        model.ParseFromString(slim)
    except LimitError as exc:
        raise ValueError(f"{where}: {exc}") from None
    except Exception as exc:  # protobuf's DecodeError and friends: say what, not where in protobuf
        raise ValueError(f"{where} is not a valid ONNX model ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'cannot be parsed'})") from None
    if not model.graph.node or not model.opset_import:
        raise ValueError(f"{where} is not a valid ONNX model (no graph nodes or no opset)")
    try:
        tensors, nodes = _walk(model)
    except ValueError as exc:
        text = "UTF-8" in str(exc)
        raise ValueError(f"{where} is not a valid ONNX model ({exc})" if text else f"{where}: {exc}") from None
    if nodes > MAX_NODES:
        raise ValueError(f"{where}: {nodes} nodes, subgraphs included; at most {MAX_NODES} are read")
    _check(model, _without_data(tensors), where)
    for t in model.graph.initializer:
        if any(d < 0 for d in t.dims):
            raise ValueError(f"{where} is not a valid ONNX model (weight {t.name!r} has dims {list(t.dims)})")
    return model


def standard_opset(model: Any) -> int:
    """The opset version the model imports for the default ONNX domain (1 if it names none)."""
    return next((o.version for o in model.opset_import if o.domain in STANDARD), 1)


def _graph_tensors(graph: Any, depth: int, found: list[Any]) -> int:
    """Collect every TensorProto of ``graph`` (initializers, sparse ones, node attributes,
    subgraphs too) into ``found``; returns the nodes counted. Refuses nesting past the limit."""
    if depth > MAX_NESTING:
        raise ValueError(f"subgraphs are nested more than {MAX_NESTING} deep; at most {MAX_NESTING} are read")
    found.extend(graph.initializer)
    for sparse in graph.sparse_initializer:
        found.extend((sparse.values, sparse.indices))
    return len(graph.node) + _node_tensors(graph.node, depth, found)


def _node_tensors(nodes: Any, depth: int, found: list[Any]) -> int:
    """``_graph_tensors`` for a list of nodes; also refuses a node whose names are not UTF-8 text
    (protobuf hands those over as bytes, which no later step expects)."""
    count = 0
    for node in nodes:
        if not all(isinstance(x, str) for x in (node.name, node.op_type, node.domain, *node.input, *node.output)):
            raise ValueError(f"a name of node {node.name!r} ({node.op_type!r}) is not UTF-8 text")
        for attr in node.attribute:
            if attr.HasField("t"):
                found.append(attr.t)
            found.extend(attr.tensors)
            if attr.HasField("sparse_tensor"):
                found.extend((attr.sparse_tensor.values, attr.sparse_tensor.indices))
            for sparse in attr.sparse_tensors:
                found.extend((sparse.values, sparse.indices))
            if attr.HasField("g"):
                count += _graph_tensors(attr.g, depth + 1, found)
            for sub in attr.graphs:
                count += _graph_tensors(sub, depth + 1, found)
    return count


def _walk(model: Any) -> tuple[list[Any], int]:
    """Every TensorProto in the model (functions too), and the number of nodes in all graphs."""
    found: list[Any] = []
    graph = model.graph
    names = (graph.name, model.producer_name, model.producer_version, *(t.name for t in graph.initializer),
             *(vi.name for vi in (*graph.input, *graph.output, *graph.value_info)))
    if not all(isinstance(x, str) for x in names):
        raise ValueError("a graph, input, output or weight name is not UTF-8 text")
    nodes = _graph_tensors(graph, 0, found)
    for function in model.functions:
        nodes += len(function.node) + _node_tensors(function.node, 1, found)
    return found, nodes


def _without_data(tensors: list[Any]) -> list[Any]:
    """The tensors that have elements but no data here (left out, or stored outside the model),
    with any external-data reference removed: what reads them finds no data, never a file."""
    missing = []
    for t in tensors:
        if len(t.external_data) or t.data_location:
            for field in _DATA_FIELDS:
                t.ClearField(field)
            t.ClearField("external_data")
            t.ClearField("data_location")
        if not has_data(t):
            missing.append(t)
    return missing


def _check(model: Any, missing: list[Any], where: str) -> None:
    """onnx's checker on the model, with the tensors whose data was left out declared empty (the
    checker insists that a tensor with elements carries them); their dims are put back after."""
    import onnx

    saved = [(t, list(t.dims)) for t in missing]
    try:
        for t, _ in saved:
            del t.dims[:]
            t.dims.append(0)
        onnx.checker.check_model(model.SerializeToString())
    except Exception as exc:
        # onnx's messages run over lines ("... input 'z' of node: \nname: a OpType: Add\n is not
        # output of any previous nodes."): one line of it, whole up to a length a client can show,
        # without the checker's own context (" ==> Context: Bad node spec for node. Name: ...")
        text = " ".join(str(exc).split()).split(" ==> Context:")[0]
        first = (text if len(text) <= 300 else text[:297] + "...") if text else type(exc).__name__
        raise ValueError(f"{where} is not a valid ONNX model ({first}){_fix_for(first, model)}") from None
    finally:
        for t, dims in saved:
            del t.dims[:]
            t.dims.extend(dims)


def _fix_for(problem: str, model: Any) -> str:
    """What to do about a checker's complaint, where it is one an exporter is known to cause: an
    attribute its opset does not define (torch 2.11's dynamo exporter writes opset 18's Split
    ``num_outputs`` into an opset 17 model, GPT-2's for one)."""
    if problem.startswith("Unrecognized attribute"):
        return (f": the node uses an attribute that opset {standard_opset(model)} does not define, a newer opset's "
                "form; export it again at the opset that defines it (opset_version=18 or later)")
    return ""


def has_data(tensor: Any) -> bool:
    """Whether a TensorProto read by ``load_model`` carries its values (small tensors do)."""
    return (math.prod(tensor.dims) == 0 or tensor.HasField("raw_data")  # HasField: no copy of the bytes
            or any(len(getattr(tensor, f)) for f in _DATA_FIELDS[1:]))


# ---------------------------------------------------------------------------- shapes

FOLD_LIMIT = KEEP_ELEMENTS  # shape arithmetic is tiny; anything bigger is not folded (nor read)
#: fold-then-infer rounds. Folding infers node by node on the way (onnx_fold.fold_along), so one
#: round follows a chain of reshapes to its end and the zoo's exports settle in two; with
#: whole-model inference alone a round reached one more stage (ShuffleNet took 15, swin_s over 32)
MAX_FOLD_ROUNDS = 32


def constant_value(node: Any) -> Any:
    """The numpy value a Constant node holds, or None for a form it does not hold inline."""
    from onnx import helper, numpy_helper

    attr = node.attribute[0] if len(node.attribute) == 1 else None
    if attr is None or attr.name not in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        return None
    import numpy as np

    return numpy_helper.to_array(attr.t) if attr.name == "value" else np.asarray(helper.get_attribute_value(attr))


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
    """Shape inference, repeated with the shape arithmetic folded into constants until it settles.

    onnx's own data propagation (``data_prop``) is left off: it stops at ops such as Div that
    exporters put in reshapes, so the folding is needed anyway, and it turns a 1-d integer tensor
    of n elements into n dim objects, so an Expand, Range or ConstantOfShape to 10**12 elements
    followed by a Cast runs it out of memory. The folding bounds every output before computing it;
    inference without data propagation reads only initializers, which hold at most FOLD_LIMIT
    elements here. On the 70 zoo exports both ways give the same graphs.

    Each round folds along the graph with each node's shapes inferred alone where whole-model
    inference had none (``fold_along``), then infers the whole model again with what was folded:
    the model's shapes are always whole-model inference's."""
    from onnx import helper, numpy_helper, shape_inference

    def infer(m: Any) -> Any:
        try:
            return shape_inference.infer_shapes(m, strict_mode=False, data_prop=False)
        except Exception as exc:
            raise ValueError(f"ONNX shape inference failed: {str(exc).strip().splitlines()[0]}") from None

    from predictor.importers.onnx_dims import check_inferred_sizes
    from predictor.importers.onnx_fold import fold_along

    values = {}
    for t in model.graph.initializer:
        if math.prod(t.dims) <= FOLD_LIMIT and has_data(t):
            try:
                values[t.name] = numpy_helper.to_array(t)
            except (ValueError, TypeError, KeyError):  # data that does not fit its dims or type: not folded
                pass
    inferred = infer(model)  # the model holds no large data: inference needs only the weights' dims
    for _ in range(MAX_FOLD_ROUNDS):
        if not fold_along(model, inferred, values, opset):
            break
        probe = type(model)()
        probe.CopyFrom(model)
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
    check_inferred_sizes(model, known_shapes(inferred))
    return inferred, values


def node_attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as plain Python values, by name."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}
