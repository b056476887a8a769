"""The graph IR: an ordered list of named nodes, each one operator call of a model.

A node's ``kind`` says how it is costed: ``kernel`` nodes belong to a catalogue family and are
predicted by the per-layer models; ``free`` nodes are views and shape arithmetic that launch no
GPU kernel (they still cost host time in eager mode); ``fallback`` nodes launch a kernel our
models do not cover, and are estimated from their bytes by the roofline and listed as such.
Parameters are per sample, so one graph is predicted at any batch size.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from predictor.catalogue import get_family
from predictor.precision import PRECISIONS, get_precision

IR_VERSION = 1
NODE_KINDS = ("kernel", "free", "fallback")
HALF_DTYPES = ("bfloat16", "float16")
HALF_PRECISIONS = ("fp16", "bf16")
#: torch calls that only change a tensor's dtype.
CAST_OPS = frozenset({"to", "float", "half", "bfloat16", "type", "type_as"})


@dataclass
class Node:
    """One operator call. ``op`` is the source's own name (torch function or ONNX op type)."""

    name: str
    op: str
    kind: str
    family: str | None = None
    variant: str = ""
    #: the variant this kernel runs in when the model is captured into a CUDA graph, where that
    #: differs: transformers cannot skip attention masks while a stream captures, so a captured
    #: encoder's attention takes PyTorch's masked (math) path instead of flash attention.
    capture_variant: str = ""
    layout: str = "contiguous"
    params: dict[str, int] = field(default_factory=dict)
    #: fallback nodes: bytes moved per sample (inputs read plus outputs written), in elements.
    elements_per_sample: int = 0
    #: names of source nodes merged into this one by kernel detection (e.g. ONNX's attention).
    merged: list[str] = field(default_factory=list)
    #: where one call launches several kernels (a matmul's operand copies, a roll's further
    #: passes), the node of that call: its dispatch is paid once, and this kernel costs the host
    #: only its launch.
    launched_by: str = ""
    inputs: list[list[int]] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    dtype: str = ""
    #: the precisions (of the whole model) this node runs at, where the model's code branches on
    #: its dtype: T5 guards its hidden states against overflow only in float16. Empty: all.
    precisions: list[str] = field(default_factory=list)

    def variant_in(self, mode: str) -> str:
        """The variant that runs in execution ``mode`` ('eager' or 'cudagraph')."""
        return self.capture_variant if mode == "cudagraph" and self.capture_variant else self.variant

    def check(self, checked: set[tuple] | None = None) -> None:
        """Raise ``ValueError`` naming the node if it breaks the IR's rules.

        ``checked`` remembers the kernel configurations a graph has already checked: models
        repeat their blocks, and a server checks every uploaded graph.
        """
        for name in ("name", "op", "variant", "capture_variant", "layout", "dtype", "launched_by"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"node {self.name!r}: field '{name}' must be a string")
        if self.family is not None and not isinstance(self.family, str):
            raise ValueError(f"node {self.name!r}: field 'family' must be a string")
        if not isinstance(self.params, dict):
            raise ValueError(f"node {self.name!r}: field 'params' must be an object")
        for key, value in self.params.items():
            if not _is_size(value):
                raise ValueError(f"node {self.name!r}: parameter {key} must be an integer from 0 to "
                                 f"{MAX_SIZE}, got {value!r}")
        if not _is_size(self.elements_per_sample):
            raise ValueError(f"node {self.name!r}: field 'elements_per_sample' must be an integer from 0 to "
                             f"{MAX_SIZE}")
        if type(self.merged) is not list or not all(type(m) is str for m in self.merged):
            raise ValueError(f"node {self.name!r}: field 'merged' must be a list of strings")
        if (type(self.precisions) is not list or not all(type(p) is str and p in PRECISIONS for p in self.precisions)
                or len(set(self.precisions)) != len(self.precisions)):
            raise ValueError(f"node {self.name!r}: field 'precisions' must be a list of distinct precisions "
                             f"({', '.join(PRECISIONS)})")
        for name in ("inputs", "outputs"):
            if not _are_shapes(getattr(self, name)):
                raise ValueError(f"node {self.name!r}: field '{name}' must be a list of shapes "
                                 "(lists of integers >= 0)")
        if self.kind not in NODE_KINDS:
            raise ValueError(f"node {self.name!r}: kind {self.kind!r} is not one of {NODE_KINDS}")
        if self.kind == "kernel":
            if not self.family:
                raise ValueError(f"node {self.name!r}: a kernel node needs a family")
            key = (self.family, self.variant, self.capture_variant, self.layout, tuple(self.params.items()))
            if checked is not None and key in checked:
                return
            try:
                get_family(self.family).check(self.params, self.variant, self.layout)
                if self.capture_variant:
                    get_family(self.family).check(self.params, self.capture_variant, self.layout)
            except ValueError as exc:
                raise ValueError(f"node {self.name!r}: {exc}") from None
            if checked is not None:
                checked.add(key)


#: Largest parameter or size the IR accepts: no layer comes near 2**40 elements per sample, and
#: the bound keeps the features' arithmetic finite.
MAX_SIZE = 1 << 40


def _is_size(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SIZE  # type(True) is bool, not int


def _are_shapes(shapes: object) -> bool:
    """A list of lists of sizes (written out: every uploaded graph's every node is checked)."""
    if type(shapes) is not list:
        return False
    for shape in shapes:
        if type(shape) is not list:
            return False
        for d in shape:
            if type(d) is not int or d < 0 or d > MAX_SIZE:
                return False
    return True


@dataclass
class Graph:
    """A model as the ordered calls it makes; ``batch`` is the batch size it was traced at."""

    name: str
    nodes: list[Node]
    batch: int = 1
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def traced_in_half(self) -> bool:
        """Whether the graph was traced in half precision (``meta.traced_dtype``), so that the
        nodes a model keeps in float32 (RMSNorm, rotary embeddings) and its casts are visible."""
        return self.meta.get("traced_dtype") in HALF_DTYPES

    def precision_plan(self, precision: str) -> tuple[bool, bool]:
        """(upcast, noop_casts) for a model run in ``precision``: whether its nodes traced as
        float32 run in fp32 (a half-precision model still computes what it upcasts in fp32), and
        whether its casts are no-ops (a half-precision trace's casts, when the model runs in fp32
        or tf32)."""
        half_trace = self.traced_in_half
        return half_trace and precision in HALF_PRECISIONS, half_trace and precision not in HALF_PRECISIONS

    def precision_of(self, node: Node, precision: str) -> str:
        """The precision ``node`` runs in when the model runs in ``precision``."""
        upcast, _ = self.precision_plan(precision)
        return "fp32" if upcast and node.dtype == "float32" else precision

    def runs_kernel(self, node: Node, precision: str) -> bool:
        """False for a cast that is a no-op at ``precision``."""
        return not (self.precision_plan(precision)[1] and node.op in CAST_OPS)

    def at_precision(self, precision: str) -> "Graph":
        """The graph as it runs at ``precision``: without the nodes its code runs only at others
        (``Node.precisions``). Most graphs have none, and are returned as they are."""
        if not any(n.precisions for n in self.nodes):
            return self
        name = get_precision(precision).name
        nodes = [n for n in self.nodes if not n.precisions or name in n.precisions]
        if not nodes:
            raise ValueError(f"graph {self.name!r} has no nodes at precision {name}: every node's "
                             "'precisions' names others")
        return Graph(self.name, nodes, self.batch, self.source, self.meta)

    def check(self) -> None:
        if not self.nodes:
            raise ValueError(f"graph {self.name!r} has no nodes")
        seen: set[str] = set()
        checked: set[tuple] = set()
        for node in self.nodes:
            if node.name in seen:
                raise ValueError(f"graph {self.name!r}: node name {node.name!r} is used twice")
            seen.add(node.name)
            node.check(checked)

    def to_json(self) -> dict[str, Any]:
        return {"ir_version": IR_VERSION, "name": self.name, "batch": self.batch,
                "source": self.source, "meta": self.meta,
                "nodes": [{k: v for k, v in asdict(n).items() if v not in ("", [], {}, None, 0)
                           or k in ("name", "op", "kind")} for n in self.nodes]}

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @staticmethod
    def from_json(data: Any) -> "Graph":
        """Parse (and check) a graph from its JSON form, naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a graph must be a JSON object with 'name' and 'nodes'")
        if data.get("ir_version", IR_VERSION) != IR_VERSION:
            raise ValueError(f"graph IR version {data.get('ir_version')!r} is not supported "
                             f"(this latpred reads version {IR_VERSION})")
        if not isinstance(data.get("nodes"), list):
            raise ValueError("graph field 'nodes' must be a list of nodes")
        nodes = []
        allowed = set(Node.__dataclass_fields__)
        for i, raw in enumerate(data["nodes"]):
            if not isinstance(raw, dict):
                raise ValueError(f"nodes[{i}] must be an object")
            unknown = set(raw) - allowed
            if unknown:
                raise ValueError(f"nodes[{i}]: unknown field(s) {sorted(unknown)}")
            missing = {"name", "op", "kind"} - set(raw)
            if missing:
                raise ValueError(f"nodes[{i}]: missing field(s) {sorted(missing)}")
            nodes.append(Node(**raw))
        batch = data.get("batch", 1)
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"graph field 'batch' must be a positive integer, got {batch!r}")
        meta = data.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError("graph field 'meta' must be an object")
        graph = Graph(name=str(data.get("name") or "graph"), nodes=nodes, batch=batch,
                      source=str(data.get("source", "")), meta=meta)
        graph.check()
        return graph

    @staticmethod
    def load(path: Path) -> "Graph":
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        return Graph.from_json(data)


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the graph IR."""
    from predictor.catalogue import FAMILIES, PARAMETERS

    size = {"type": "integer", "minimum": 0, "maximum": MAX_SIZE}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "latpred graph IR", "type": "object", "required": ["name", "nodes"],
        "properties": {
            "ir_version": {"const": IR_VERSION},
            "name": {"type": "string"},
            "batch": {"type": "integer", "minimum": 1},
            "source": {"type": "string"},
            "meta": {"type": "object"},
            "nodes": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["name", "op", "kind"], "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"}, "op": {"type": "string"},
                    "kind": {"enum": list(NODE_KINDS)},
                    "family": {"enum": list(FAMILIES)},
                    "variant": {"type": "string"}, "layout": {"type": "string"},
                    "capture_variant": {"type": "string", "description":
                                        "variant run when the model is captured into a CUDA graph, "
                                        "where it differs from 'variant'"},
                    "params": {"type": "object", "additionalProperties": False, "properties": {
                        p: {"type": "integer", "minimum": 0, "maximum": MAX_SIZE, "description": d}
                        for p, d in PARAMETERS.items()}},
                    "elements_per_sample": {"type": "integer", "minimum": 0, "maximum": MAX_SIZE},
                    "merged": {"type": "array", "items": {"type": "string"}},
                    "launched_by": {"type": "string", "description":
                                    "the node whose call launches this kernel too (its dispatch is "
                                    "paid once; this kernel costs the host only its launch)"},
                    "inputs": {"type": "array", "items": {"type": "array", "items": size}},
                    "outputs": {"type": "array", "items": {"type": "array", "items": size}},
                    "dtype": {"type": "string"},
                    "precisions": {"type": "array", "items": {"enum": list(PRECISIONS)}, "uniqueItems": True,
                                   "description":
                                   "the precisions this node runs at, where the model's code branches "
                                   "on its dtype (empty or absent: all)"},
                }}},
        },
    }
