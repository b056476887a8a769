"""Read an ONNX model's graph without its weights, straight from the protobuf wire format.

``onnx.load`` parses every weight: 280-450 ms for a 100 MB model, when the predictor needs only
the weights' dims. This module walks the ModelProto's fields over the file's bytes (memory-mapped
for a path, so the pages of skipped weights are never even read) and copies every field into a
small byte string except the payloads of large tensors; protobuf then parses that string, since
concatenated wire-format fields are a valid message. Each tensor keeps its name, dims and data
type, and its data only when it has at most ``KEEP_ELEMENTS`` elements (and while the data kept
stays within ``KEEP_TOTAL_BYTES``): the shape constants and scalars that constant folding and
kernel detection read. External-data references
(``external_data``, ``data_location``) are dropped with the data, so nothing downstream can
follow one to a file: a weight-stripped export and a model over 2 GB read like any other.

Only what can be large is walked: the top graph's initializers, and nodes over ``NODE_INLINE``
bytes (a big Constant, a subgraph with weights); smaller nodes are copied whole, and the loader
cleans any external reference left in them after parsing. Bad bytes fail fast with a
``ValueError``: a length past the end, a varint over 10 bytes, more than ``MAX_NODES`` nodes,
subgraphs nested deeper than ``MAX_NESTING``, a graph over ``MAX_SLIM_BYTES`` without its
weights. No onnx or protobuf import is needed here.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

#: the element types (onnx.TensorProto's numbers) the importer and the suite's stripping tell apart
FLOAT, INT32, INT64, BOOL = 1, 6, 7, 9
#: a tensor's payload is kept up to this many elements (onnx_load.FOLD_LIMIT: what folding reads)
KEEP_ELEMENTS = 1 << 16
#: ... and up to this many bytes (a string tensor's elements have no fixed size)
KEEP_BYTES = 1 << 20
#: ... and all the payloads kept together at most this many bytes (the rest are left out: not folded)
KEEP_TOTAL_BYTES = 64 << 20
#: nodes up to this size are copied whole: any tensor inside is small
NODE_INLINE = 4096
#: nodes in all graphs; a real export has at most tens of thousands, and shape inference is linear in them
MAX_NODES = 100_000
#: graphs inside graphs (If, Loop, Scan bodies)
MAX_NESTING = 16
#: the graph without its weights (a real one is a few MB; protobuf refuses 2 GiB)
MAX_SLIM_BYTES = 256 << 20

# Field numbers from onnx.proto (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto, ...).
_MODEL_GRAPH, _MODEL_TRAINING_INFO, _MODEL_FUNCTIONS = 7, 20, 25
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 1, 5, 15
_NODE_ATTRIBUTE = 5
_FUNCTION_NODE = 7
_ATTR_TENSORS = {5, 10}  # t, tensors
_ATTR_GRAPHS = {6, 11}  # g, graphs
_ATTR_SPARSE = {22, 23}  # sparse_tensor, sparse_tensors
_SPARSE_TENSORS = {1, 2}  # values, indices
_TENSOR_DIMS = 1
_TENSOR_PAYLOAD = {4, 5, 6, 7, 9, 10, 11}  # float, int32, string, int64, raw, double, uint64 data
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
_TENSOR_DROPPED = {12, 16}  # doc_string, metadata_props: never read, can be long

Buffer = bytes | mmap.mmap  # slicing either gives bytes


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message; says where."""


class LimitError(WireError):
    """The model is well-formed so far but past a limit (nodes, nesting, size)."""


def _varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(f"a number runs past the end of its message at byte {pos}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"a number longer than 10 bytes at byte {pos}")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf: Buffer, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Each field of the message in ``buf[pos:end]``: (number, wire type, start of the field,
    start and end of its value). A length that runs past the end of the message is an error."""
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {start}")
        if wire == 2:
            size, pos = _varint(buf, pos, end)
            if size > end - pos:
                raise WireError(f"field {number} at byte {start} claims {size} bytes, but only {end - pos} remain")
            yield number, 2, start, pos, pos + size
            pos += size
            continue
        value = pos
        if wire == 0:
            _, pos = _varint(buf, pos, end)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise WireError(f"field {number} at byte {start} runs past the end of its message")
        else:
            raise WireError(f"wire type {wire} (field {number}) at byte {start} is not used by ONNX")
        yield number, wire, start, value, pos


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _message(number: int, body: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(body)) + body


class _Slimmer:
    """One pass over one model's bytes; counts nodes as it goes."""

    def __init__(self, buf: Buffer) -> None:
        self.buf = buf
        self.nodes = 0
        self.copied = 0  # bytes copied so far
        self.kept = 0  # of which tensor payloads

    def copy(self, start: int, end: int) -> bytes:
        self.copied += end - start
        if self.copied > MAX_SLIM_BYTES:
            raise LimitError(f"the graph is over {MAX_SLIM_BYTES >> 20} MiB without its weights; at most "
                             f"{MAX_SLIM_BYTES >> 20} MiB is read")
        return self.buf[start:end]

    def model(self, pos: int, end: int) -> bytes:
        out = []
        for number, wire, start, a, b in _fields(self.buf, pos, end):
            if wire == 2 and number == _MODEL_GRAPH:
                out.append(_message(number, self.graph(a, b, 0)))
            elif wire == 2 and number == _MODEL_FUNCTIONS:
                out.append(_message(number, self.container(a, b, _FUNCTION_NODE, 0)))
            elif number != _MODEL_TRAINING_INFO:  # training's own graphs and state: never costed
                out.append(self.copy(start, b))
        return b"".join(out)

    def graph(self, pos: int, end: int, depth: int) -> bytes:
        if depth > MAX_NESTING:
            raise LimitError(f"subgraphs are nested more than {MAX_NESTING} deep; at most {MAX_NESTING} are read")
        out = []
        for number, wire, start, a, b in _fields(self.buf, pos, end):
            if wire == 2 and number == _GRAPH_INITIALIZER:
                out.append(_message(number, self.tensor(a, b)))
            elif wire == 2 and number == _GRAPH_SPARSE_INITIALIZER:
                out.append(_message(number, self.sparse(a, b)))
            elif wire == 2 and number == _GRAPH_NODE:
                out.append(self.node(start, a, b, depth, _GRAPH_NODE))
            else:
                out.append(self.copy(start, b))
        return b"".join(out)

    def container(self, pos: int, end: int, node_field: int, depth: int) -> bytes:
        """A FunctionProto: its nodes as a graph's, everything else as it is."""
        out = []
        for number, wire, start, a, b in _fields(self.buf, pos, end):
            out.append(self.node(start, a, b, depth, node_field) if wire == 2 and number == node_field
                       else self.copy(start, b))
        return b"".join(out)

    def node(self, start: int, pos: int, end: int, depth: int, field: int) -> bytes:
        """A NodeProto (field ``field`` of its graph or function) as it is, or with its tensors
        slimmed when it is big enough to hold large ones."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise LimitError(f"more than {MAX_NODES} nodes; at most {MAX_NODES} are read")
        if end - pos <= NODE_INLINE:
            return self.copy(start, end)
        out = []
        for number, wire, fstart, a, b in _fields(self.buf, pos, end):
            out.append(_message(number, self.attribute(a, b, depth)) if wire == 2 and number == _NODE_ATTRIBUTE
                       else self.copy(fstart, b))
        return _message(field, b"".join(out))

    def attribute(self, pos: int, end: int, depth: int) -> bytes:
        out = []
        for number, wire, start, a, b in _fields(self.buf, pos, end):
            if wire == 2 and number in _ATTR_TENSORS:
                out.append(_message(number, self.tensor(a, b)))
            elif wire == 2 and number in _ATTR_GRAPHS:
                out.append(_message(number, self.graph(a, b, depth + 1)))
            elif wire == 2 and number in _ATTR_SPARSE:
                out.append(_message(number, self.sparse(a, b)))
            else:
                out.append(self.copy(start, b))
        return b"".join(out)

    def sparse(self, pos: int, end: int) -> bytes:
        out = []
        for number, wire, start, a, b in _fields(self.buf, pos, end):
            out.append(_message(number, self.tensor(a, b)) if wire == 2 and number in _SPARSE_TENSORS
                       else self.copy(start, b))
        return b"".join(out)

    def tensor(self, pos: int, end: int) -> bytes:
        """A TensorProto without external-data references, and without its payload unless small."""
        buf = self.buf
        out: list[bytes] = []
        payload: list[tuple[int, int]] = []
        dims: list[int] = []
        external = False
        payload_bytes = 0
        for number, wire, start, a, b in _fields(buf, pos, end):
            if number in _TENSOR_PAYLOAD:
                payload.append((start, b))
                payload_bytes += b - a
            elif number == _TENSOR_EXTERNAL_DATA:
                external = True
            elif number == _TENSOR_DATA_LOCATION:
                external = external or wire != 0 or _varint(buf, a, b)[0] != 0
            elif number not in _TENSOR_DROPPED:
                if number == _TENSOR_DIMS:
                    if wire == 0:
                        dims.append(_signed(_varint(buf, a, b)[0]))
                    elif wire == 2:  # packed
                        while a < b:
                            value, a = _varint(buf, a, b)
                            dims.append(_signed(value))
                out.append(self.copy(start, b))
        if not external and payload_bytes <= KEEP_BYTES and all(d >= 0 for d in dims) \
                and math.prod(dims) <= KEEP_ELEMENTS and self.kept + payload_bytes <= KEEP_TOTAL_BYTES:
            self.kept += payload_bytes
            out.extend(self.copy(s, e) for s, e in payload)
        return b"".join(out)


def slim_model_bytes(source: bytes | bytearray | str | Path) -> bytes:
    """The serialized ModelProto of ``source`` (bytes or a path) without large tensor payloads,
    training info or external-data references. Raises ``WireError`` (a ValueError) on bad bytes."""
    if isinstance(source, (bytes, bytearray)):
        return _slim(bytes(source))  # a bytearray is copied once: slices of bytes are bytes
    with open(source, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
                mapped.madvise(mmap.MADV_RANDOM)  # read the pages the fields are on, not the weights ahead
            return _slim(mapped)


def _slim(buf: Buffer) -> bytes:
    return _Slimmer(buf).model(0, len(buf))


def node_count(data: bytes | bytearray, stop: int = MAX_NODES) -> int:
    """Nodes in the model's graph, those of its subgraphs (If, Loop and Scan bodies) included,
    counted without parsing it, up to ``stop + 1`` (0 if it is not a well-formed message: the
    importer then says why). A cap on this count bounds what an import walks: an If hiding a
    million nodes in its branches counts past the cap, not as one node."""
    data = bytes(data)
    seen = [0]
    try:
        for number, wire, _, a, b in _fields(data, 0, len(data)):
            if number == _MODEL_GRAPH and wire == 2:
                _count_nodes(data, a, b, 0, seen, stop)
    except _Enough:
        pass
    except WireError:  # LimitError too: the importer says what is wrong
        return 0
    return seen[0]


class _Enough(Exception):
    """More than ``stop`` nodes seen: the count is past any cap that asked."""


def _count_nodes(data: bytes, pos: int, end: int, depth: int, seen: list[int], stop: int) -> None:
    if depth > MAX_NESTING:
        raise LimitError(f"subgraphs are nested more than {MAX_NESTING} deep")
    for number, wire, _, a, b in _fields(data, pos, end):
        if number != _GRAPH_NODE or wire != 2:
            continue
        seen[0] += 1
        if seen[0] > stop:
            raise _Enough
        for n_number, n_wire, _, na, nb in _fields(data, a, b):
            if n_number == _NODE_ATTRIBUTE and n_wire == 2:
                for g_number, g_wire, _, ga, gb in _fields(data, na, nb):
                    if g_number in _ATTR_GRAPHS and g_wire == 2:
                        _count_nodes(data, ga, gb, depth + 1, seen, stop)
