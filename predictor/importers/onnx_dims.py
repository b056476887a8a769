"""Give an ONNX model's symbolic input dims numbers, and refuse sizes no GPU could run.

An export leaves the batch symbolic, often the sequence length or the image size too; shape
inference needs numbers. The batch (a dim named as one, else one at axis 0) takes ``batch``; any
other dim is set by name from ``dims`` (the CLI's ``--dim seq=256``, a request's ``dims``), and one
left unknown is refused with a message naming it and the input it is on: guessing a sequence
length would give a confident wrong answer. Bounds are checked before anything is computed, so absurd input fails
fast: a dim is at most ``MAX_DIM`` and a tensor at most ``MAX_ELEMENTS`` elements, checked on the
inputs once their dims are set and on every tensor shape inference gives.

``parse_dims`` reads ``name=value`` text, shared by the CLI and the service. onnx is not imported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: a dim above this is a mistake (onnx stores dims as int64; 2**31 elements in one axis is no model)
MAX_DIM = 2**31 - 1
#: more elements than this in one tensor: 256 GiB even at one byte each, beyond any GPU's memory
MAX_ELEMENTS = 2**38
#: symbolic dim names (any case) that name the batch at whichever axis they are; shorter ones
#: ('N', 'b') are the batch only at axis 0, as any symbolic dim found there alone is: elsewhere
#: 'n' is as likely a count of points or tokens
BATCH_NAMES = frozenset({"batch", "batch_size", "batchsize", "bsz"})


class DimsError(ValueError):
    """A problem with the dims asked for (or left unset): the service names the ``dims`` field."""


def check_dims(dims: Mapping[str, Any] | None) -> dict[str, int]:
    """``dims`` as a plain dict, each name a non-empty string and each value an int in 1..MAX_DIM."""
    if dims is None:
        return {}
    if not isinstance(dims, Mapping):
        raise DimsError(f"dims must map dim names to sizes, got {type(dims).__name__}")
    checked: dict[str, int] = {}
    for name, value in dims.items():
        if not isinstance(name, str) or not name:
            raise DimsError(f"dim name {name!r} is not a non-empty string")
        if not isinstance(value, int) or isinstance(value, bool):
            raise DimsError(f"dim {name!r} must be a positive integer, got {value!r}")
        if not 1 <= value <= MAX_DIM:
            raise DimsError(f"dim {name!r} = {value} is out of range: a dim is 1 to {MAX_DIM}")
        checked[name] = value
    return checked


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a name given twice (``json`` keeps the last
    without a word: ``{"seq": 128, "seq": 256}`` would be 256 for a client that may mean 128)."""
    found: dict[str, Any] = {}
    for name, value in pairs:
        if name in found:
            raise DimsError(f"dim {name!r} is given twice")
        found[name] = value
    return found


def _unset(name: str, axis: int, dim: Any) -> str:
    """What is wrong with an input's dim that no size was given for."""
    if dim.dim_param:
        return f"input {name!r} has symbolic dim {dim.dim_param!r} at axis {axis}"
    if dim.HasField("dim_value"):  # 0 or negative: not a size (a tool's -1 for 'dynamic', unnamed)
        return f"input {name!r} has size {dim.dim_value} at axis {axis}, which is not a positive size"
    return f"input {name!r} has an unnamed symbolic dim at axis {axis}"


def parse_dims(items: str | Iterable[str]) -> dict[str, int]:
    """Dims from ``name=value`` text: a JSON object (``{"seq": 256}``), ``seq=256,height=384``,
    or an iterable of ``name=value`` items (repeated CLI options). A name given twice is refused."""
    if isinstance(items, str):
        text = items.strip()
        if text.startswith("{"):
            try:
                parsed = json.loads(text, object_pairs_hook=_once_each)
            except DimsError:
                raise
            except ValueError as exc:
                raise DimsError(f"dims is not valid JSON: {exc}") from None
            if not isinstance(parsed, dict):
                raise DimsError("dims must be a JSON object of name -> positive integer")
            return check_dims(parsed)
        items = [part for part in text.split(",") if part.strip()] if text else []
    dims: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise DimsError(f"{item.strip()!r} is not NAME=SIZE (e.g. seq=256)")
        if name in dims:
            raise DimsError(f"dim {name!r} is given twice")
        try:
            dims[name] = int(value)
        except ValueError:
            raise DimsError(f"dim {name!r} = {value!r} is not an integer") from None
    return check_dims(dims)


def _symbolic(model: Any) -> tuple[list[tuple[str, list[Any]]], dict[str, list[tuple[str, int]]]]:
    """The graph inputs (not weights) with shapes, and where each named symbolic dim is."""
    weights = {t.name for t in model.graph.initializer}
    inputs = [(vi.name, list(vi.type.tensor_type.shape.dim)) for vi in model.graph.input
              if vi.name not in weights and vi.type.tensor_type.HasField("shape")]
    where: dict[str, list[tuple[str, int]]] = {}
    for name, shape in inputs:
        for axis, dim in enumerate(shape):
            if not (dim.HasField("dim_value") and dim.dim_value > 0) and dim.dim_param:
                where.setdefault(dim.dim_param, []).append((name, axis))
    return inputs, where


def set_input_dims(model: Any, batch: int | None, dims: Mapping[str, int] | None = None) -> int:
    """Give every symbolic or missing input dim a number, and return the batch the shapes carry.

    The batch is a symbolic dim named as one (``BATCH_NAMES``), at whichever axis: a sequence-first
    model (``nn.MultiheadAttention``'s default, [sequence, batch, embed]) exported with
    ``dynamic_axes={0: "seq", 1: "batch"}`` keeps its batch in axis 1, and taking axis 0 for it
    made ``--batch`` set the sequence length. Without such a name, a symbolic dim found only at
    axis 0 is the batch. The batch's size is, without a named one, an input's fixed axis-0 size if
    one has it (the inputs stay consistent); else ``batch``, else the size ``dims`` gives the batch
    dim, else 1. Any other symbolic dim takes its size from ``dims`` by name. ``DimsError`` names
    every dim left unknown (with its input and axis), a name in ``dims`` the model does not have,
    and an input that would exceed ``MAX_ELEMENTS``."""
    sizes = check_dims(dims)
    inputs, where = _symbolic(model)
    extra = [n for n in sizes if n not in where]
    if extra:
        known = ", ".join(repr(n) for n in where) or "none"
        raise DimsError(f"the model has no symbolic dim {', '.join(repr(n) for n in extra)}; "
                        f"its symbolic dims are: {known}")
    # (at most once an input: a square [n, n] input's n is no batch)
    named = {n for n, places in where.items() if n.lower() in BATCH_NAMES
             and len({name for name, _ in places}) == len(places)}
    batch_dims = named or {n for n, places in where.items() if all(axis == 0 for _, axis in places)}
    clash = sorted(n for n in batch_dims if n in sizes and batch is not None and sizes[n] != batch)
    if clash:
        raise DimsError(f"dim {clash[0]!r} is the batch: it is {sizes[clash[0]]} in dims but the "
                        f"batch is {batch}; give one of them")
    fixed = [] if named else [s[0].dim_value for _, s in inputs if s and s[0].HasField("dim_value")
                              and s[0].dim_value > 0]
    traced = fixed[0] if fixed else batch or next((sizes[n] for n in batch_dims if n in sizes), None) or 1
    unknown: list[str] = []
    for name, shape in inputs:
        for axis, dim in enumerate(shape):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            size = sizes.get(dim.dim_param) if dim.dim_param else None
            if size is None and (dim.dim_param in batch_dims or (axis == 0 and not dim.dim_param and not named)):
                size = traced
            if size is None:
                unknown.append(_unset(name, axis, dim))
                continue
            dim.Clear()
            dim.dim_value = size
    if unknown:
        names = [n for n in where if n not in sizes and n not in batch_dims]
        how = (f"set {'it' if len(names) == 1 else 'them'} with "
               + " ".join(f"--dim {n}=N" for n in names) + " (or dims in the request)") if names \
            else "export the model with fixed sizes or named dims"
        raise DimsError(f"{'; '.join(unknown)}: {how}")
    for name, shape in inputs:
        check_elements(f"input {name!r}", [d.dim_value for d in shape])
    # Stale symbolic shapes inside the graph would fight the inferred ones: infer afresh.
    del model.graph.value_info[:]
    for vi in model.graph.output:
        if not all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
            vi.type.tensor_type.ClearField("shape")
    return traced


def check_elements(what: str, shape: list[int], cls: type[ValueError] = DimsError,
                   hint: str = "check the dims and the batch") -> None:
    """Refuse a shape with a negative dim or more than ``MAX_ELEMENTS`` elements, naming ``what``."""
    if any(d < 0 for d in shape):
        raise cls(f"{what} has a negative dim: shape {shape}")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise cls(f"{what} would have shape {shape} = {count:.3g} elements, more than the 2**38 a tensor "
                  f"may have (no GPU holds it): {hint}")


def check_inferred_sizes(model: Any, shapes: Mapping[str, list[int] | None]) -> None:
    """Refuse a model whose shape inference gave a tensor absurd dims (``shapes``: tensor name ->
    dims, None where unknown), naming the node that makes it: an Expand to 10**12 elements is a
    bad model or bad dims, not a latency to predict."""
    for name, dims in shapes.items():
        if dims is not None and (math.prod(dims) > MAX_ELEMENTS or any(d < 0 for d in dims)):
            node = next((n for n in model.graph.node if name in n.output), None)
            what = (f"node {node.name or '?'!r} ({node.op_type}) output {name!r}" if node is not None
                    else f"tensor {name!r}")
            check_elements(what, dims, ValueError, "the model's shape arithmetic, or the dims and batch given, "
                                                   "ask for too much")


def check_reshapes(nodes: Iterable[Any], shapes: Mapping[str, list[int] | None], target: Callable[[str], Any],
                   names: list[str], cls: type[ValueError] = ValueError) -> None:
    """Refuse a Reshape whose target (``target(name)``: its folded value, None where unknown) cannot
    hold its input's elements (both known), naming it: no tensor can be reshaped so, and such a
    node means the export fixed a size its trace saw. TorchScript's exporter writes
    ``nn.MultiheadAttention``'s key length as the example's, so a model exported at sequence 32 with
    the sequence marked dynamic and set to 256 would be costed with 256 queries against 32 keys: a
    confident answer for a model that cannot run (onnx's reference evaluator fails on it). The
    target is read, not the output's declared shape, which an export may state for its trace only."""
    for node, name in zip(nodes, names):
        if node.op_type != "Reshape" or len(node.input) < 2 or not node.output:
            continue
        before, value = shapes.get(node.input[0]), target(node.input[1])
        if before is None or value is None:
            continue
        allow_zero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
        dims = [int(d) for d in value.reshape(-1)]
        if not allow_zero:  # a 0 copies the input's dim there
            dims = [before[i] if d == 0 and i < len(before) else d for i, d in enumerate(dims)]
        elements, fixed = math.prod(before), math.prod(d for d in dims if d != -1)
        if (fixed != 0 and elements % fixed == 0) if -1 in dims else fixed == elements:
            continue
        raise cls(f"node {name!r} (Reshape) turns shape {before} ({elements} elements) into {dims}, which no tensor "
                  "of that size fits: the export fixed a size it traced (a sequence length or batch taken as a "
                  "constant; TorchScript's exporter does so in MultiheadAttention): predict at the sizes it was "
                  "exported with, or export it again with that size dynamic (torch.onnx.export(..., dynamo=True))")
