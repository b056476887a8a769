"""The graph IR: an ordered list of named nodes, each one operator call of a model.

A node's ``kind`` says how it is costed: ``kernel`` nodes belong to a catalogue family and are
predicted by the per-layer models; ``free`` nodes are views and shape arithmetic that launch no
GPU kernel (they still cost host time in eager mode); ``fallback`` nodes launch a kernel our
models do not cover, and are estimated from their bytes by the roofline and listed as such.
Parameters are per sample, so one graph is predicted at any batch size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from predictor.catalogue import FAMILIES, PARAMETERS, get_family
from predictor.precision import PRECISIONS, get_precision
from predictor.validation import INTEGRAL_FLOAT, JsonInt, validation_message

IR_VERSION = 1
NODE_KINDS = ("kernel", "free", "fallback")
HALF_DTYPES = ("bfloat16", "float16")
HALF_PRECISIONS = ("fp16", "bf16")
#: torch calls that only change a tensor's dtype.
CAST_OPS = frozenset({"to", "float", "half", "bfloat16", "type", "type_as"})

#: Largest parameter or size the IR accepts: no layer comes near 2**40 elements per sample, and
#: the bound keeps the features' arithmetic finite.
MAX_SIZE = 1 << 40

#: Fields are strict: an integer is an integer (3, or 3.0 as JSON Schema allows; not "3" or true),
#: a string a string.
Size = Annotated[int, Strict(), Field(ge=0, le=MAX_SIZE), INTEGRAL_FLOAT]
Text = Annotated[str, Strict()]
Shape = list[Size]
#: Unknown fields are refused; a Node or Graph object given as a value is taken as it is (an
#: importer's nodes were checked when they were made).
IR_CONFIG = ConfigDict(extra="forbid", revalidate_instances="never")

#: Values ``Graph.derived`` keeps per graph, past which it starts again: a request's prefetch and
#: predictions share them, and a zoo graph keeps those of the variants a spreadsheet asks for
#: (a value is a key per node, about 23 KB for 324 nodes: at most 0.8 MB a graph).
DERIVED_LIMIT = 32
T = TypeVar("T")

#: Kernel configurations whose family, variant, layout and parameters passed the catalogue's
#: check: models repeat their blocks, and a server checks every uploaded graph's every node.
_CHECKED: set[tuple] = set()
_CHECKED_LIMIT = 100_000


@dataclass(config=IR_CONFIG, frozen=True)
class Node:
    """One operator call. ``op`` is the source's own name (torch function or ONNX op type)."""

    name: Annotated[Text, Field(max_length=1024)]
    op: Annotated[Text, Field(max_length=256)]
    kind: Literal["kernel", "free", "fallback"]
    family: Literal[tuple(FAMILIES)] | None = None  # type: ignore[valid-type]
    variant: Text = ""
    capture_variant: Annotated[Text, Field(description=(
        "variant run when the model is captured into a CUDA graph, where it differs from 'variant': "
        "transformers cannot skip attention masks while a stream captures, so a captured encoder's "
        "attention takes PyTorch's masked (math) path instead of flash attention"))] = ""
    layout: Text = "contiguous"
    params: Annotated[dict[Literal[tuple(PARAMETERS)], Size],  # type: ignore[valid-type]
                      Field(description="the family's parameters, per sample",
                            json_schema_extra={"properties": {p: {"description": d, "type": "integer", "minimum": 0,
                                                                  "maximum": MAX_SIZE}
                                                              for p, d in PARAMETERS.items()}})] = \
        field(default_factory=dict)
    elements_per_sample: Annotated[Size, Field(description=(
        "fallback nodes: elements moved per sample (inputs read plus outputs written)"))] = 0
    merged: Annotated[list[Text], Field(description=(
        "names of source nodes kernel detection merged into this one (e.g. ONNX's attention)"))] = \
        field(default_factory=list)
    launched_by: Annotated[Text, Field(description=(
        "the node whose call launches this kernel too (a matmul's operand copies, a roll's further "
        "passes): its dispatch is paid once, and this kernel costs the host only its launch"))] = ""
    inputs: list[Shape] = field(default_factory=list)
    outputs: list[Shape] = field(default_factory=list)
    dtype: Text = ""
    keeps_float32: Annotated[bool, Strict(), Field(description=(
        "the node computes in float32 whatever the model's precision, upcast by a cast that a float32 "
        "graph cannot show (an RMS norm's arithmetic, a rotary embedding's tables): costed at fp32 when "
        "the model runs in half precision. A graph traced in half precision says the same by its "
        "nodes' dtype"))] = False
    precisions: Annotated[list[Literal[tuple(PRECISIONS)]], Field(description=(  # type: ignore[valid-type]
        "the precisions (of the whole model) this node runs at, where the model's code branches on "
        "its dtype (T5 guards its hidden states against overflow only in float16); empty: all"),
        json_schema_extra={"uniqueItems": True})] = field(default_factory=list)
    min_batch: Annotated[int, Strict(), Field(ge=1, le=MAX_SIZE, description=(
        "the smallest batch size this node runs at; 1: every batch. A copy PyTorch makes only when "
        "the batch dim has more than one sample (a batch-first tensor handed to sequence-first code "
        "is contiguous at batch 1, so F.linear folds it without a copy there)")), INTEGRAL_FLOAT] = 1

    @model_validator(mode="after")
    def _check(self) -> Node:
        """What only the catalogue knows: a kernel's family, variant, layout and parameters.
        Runs for every node of every uploaded graph, so it does as little as it can."""
        if self.precisions and len(set(self.precisions)) != len(self.precisions):
            # its own error type: the schema says uniqueItems, so a service refuses it with the body
            raise PydanticCustomError("unique_items", "node {name}: 'precisions' lists a precision twice",
                                      {"name": repr(self.name)})
        if self.kind != "kernel":
            return self
        if not self.family:
            raise ValueError(f"node {self.name!r}: a kernel node needs a family")
        # made here, once: every prediction keys its kernel cache by the sorted parameters
        self.__dict__["params_key"] = tuple(sorted(self.params.items()))  # frozen: not a field, not set twice
        key = (self.family, self.variant, self.capture_variant, self.layout, self.params_key)
        if key in _CHECKED:
            return self
        try:
            get_family(self.family).check(self.params, self.variant, self.layout)
            if self.capture_variant:
                get_family(self.family).check(self.params, self.capture_variant, self.layout)
        except ValueError as exc:
            raise ValueError(f"node {self.name!r}: {exc}") from None
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        _CHECKED.add(key)
        return self

    @property
    def params_key(self) -> tuple[tuple[str, int], ...]:
        """A kernel node's parameters as a sorted tuple, made once when the node is checked:
        sorting them per node per prediction was a tenth of a new graph's cost."""
        return self.__dict__["params_key"]

    def variant_in(self, mode: str) -> str:
        """The variant that runs in execution ``mode`` ('eager' or 'cudagraph')."""
        return self.capture_variant if mode == "cudagraph" and self.capture_variant else self.variant


def _check_launchers(graph: str, nodes: list[Node]) -> None:
    """Each ``launched_by`` names another node that runs wherever the launched one does: a
    dangling name changed the prediction without a word, and a launcher that a precision or batch
    leaves out (``Graph.at_precision``) would leave the launched node naming none there."""
    by_name = {n.name: n for n in nodes}  # (it may name a later node: a matmul's operand copies come before it)
    for node in nodes:
        if not node.launched_by:
            continue
        launcher = by_name.get(node.launched_by)
        if launcher is None or launcher is node:
            what = "itself" if launcher is node else "no node of the graph"
            raise ValueError(f"graph {graph!r}: node {node.name!r} is launched_by {node.launched_by!r}, {what}: "
                             "name the node whose call launches it, or leave it empty")
        fewer = launcher.precisions and (not node.precisions or not set(node.precisions) <= set(launcher.precisions))
        if fewer or launcher.min_batch > node.min_batch:
            raise ValueError(f"graph {graph!r}: node {node.name!r} is launched_by {launcher.name!r}, which does not "
                             "run wherever it does (its 'precisions' or 'min_batch' leave it out where the launched "
                             "node runs): give them the same")


def _supported_version(version: int) -> int:
    if version != IR_VERSION:
        raise ValueError(f"graph IR version {version} is not supported (this latpred reads version {IR_VERSION})")
    return version


@dataclass(config=IR_CONFIG, frozen=True)
class Graph:
    """A model as the ordered calls it makes; ``batch`` is the batch size it was traced at.

    Made from JSON (``from_json``), by an importer, or in code, it is checked once, when made:
    types and bounds by pydantic, each kernel by the catalogue, names unique. Graphs and nodes
    are frozen (``dataclasses.replace`` makes a changed, checked copy), so what was checked, and
    what predictions derive from a graph (``derived``), stays true.
    """

    name: Annotated[Text, Field(max_length=1024)]
    nodes: Annotated[list[Node], Field(min_length=1)]
    batch: Annotated[int, Strict(), Field(ge=1, description="the batch size the graph was traced at"),
                     INTEGRAL_FLOAT] = 1
    source: Text = ""
    meta: dict[str, Any] = field(default_factory=dict)
    ir_version: Annotated[JsonInt, AfterValidator(_supported_version),
                          Field(json_schema_extra={"const": IR_VERSION})] = IR_VERSION

    @model_validator(mode="after")
    def _check_nodes(self) -> Graph:
        """Node names are unique and a ``launched_by`` names another node (a dangling one changed
        the prediction without a word); and, while walking the nodes, note whether any runs at some
        precisions only (asked by every prediction)."""
        seen: set[str] = set()
        branches = islands = False
        min_batch = 1
        for node in self.nodes:
            if node.name in seen:
                raise ValueError(f"graph {self.name!r}: node name {node.name!r} is used twice")
            seen.add(node.name)
            branches = branches or bool(node.precisions)
            islands = islands or node.keeps_float32
            min_batch = max(min_batch, node.min_batch)
        if any(node.launched_by for node in self.nodes):
            _check_launchers(self.name, self.nodes)
        self.__dict__["branches_on_precision"] = branches
        self.__dict__["has_float32_islands"] = islands
        self.__dict__["largest_min_batch"] = min_batch
        return self

    @property
    def traced_in_half(self) -> bool:
        """Whether the graph was traced in half precision (``meta.traced_dtype``), so that the
        nodes a model keeps in float32 (RMSNorm, rotary embeddings) and its casts are visible."""
        return self.meta.get("traced_dtype") in HALF_DTYPES

    def precision_plan(self, precision: str) -> tuple[bool, bool]:
        """(upcast, noop_casts) for a model run in ``precision``: whether some of its nodes run in
        fp32 (a half-precision model still computes what it upcasts in fp32: the nodes a
        half-precision trace shows as float32, or that an importer marked ``keeps_float32``), and
        whether its casts are no-ops (a half-precision trace's casts, when the model runs in fp32
        or tf32)."""
        half_trace, half = self.traced_in_half, precision in HALF_PRECISIONS
        return half and (half_trace or self.__dict__["has_float32_islands"]), half_trace and not half

    def computes_in_float32(self, node: Node) -> bool:
        """Whether ``node`` computes in float32 when the model runs in half precision: marked so
        (``Node.keeps_float32``), or float32 in a trace made in half precision."""
        return node.keeps_float32 or (node.dtype == "float32" and self.traced_in_half)

    def precision_of(self, node: Node, precision: str) -> str:
        """The precision ``node`` runs in when the model runs in ``precision``."""
        upcast, _ = self.precision_plan(precision)
        return "fp32" if upcast and self.computes_in_float32(node) else precision

    def runs_kernel(self, node: Node, precision: str) -> bool:
        """False for a cast that is a no-op at ``precision``."""
        return not (self.precision_plan(precision)[1] and node.op in CAST_OPS)

    def derived(self, key: tuple, make: Callable[[], T]) -> T:
        """A value derived from this graph, made once per ``key`` and kept with the graph (a
        graph is not changed once made): a prediction derives each node's kernel key per
        (batch, precision, mode), and a batch request asks twice, to prefetch and to predict."""
        memo: dict[tuple, Any] = self.__dict__.setdefault("_derived", {})
        value = memo.get(key)
        if value is None:  # (another thread may clear the memo meanwhile: the value is kept here)
            value = make()
            if len(memo) >= DERIVED_LIMIT:
                memo.clear()
            memo[key] = value
        return value

    @property
    def branches_on_precision(self) -> bool:
        """Whether some node runs at some precisions only (``Node.precisions``)."""
        return self.__dict__["branches_on_precision"]

    @property
    def branches_on_batch(self) -> bool:
        """Whether some node runs only from some batch size on (``Node.min_batch``)."""
        return self.__dict__["largest_min_batch"] > 1

    def at_precision(self, precision: str, batch: int | None = None) -> Graph:
        """The graph as it runs at ``precision`` (and at ``batch``, where given): without the nodes
        its code runs only at other precisions (``Node.precisions``) or at larger batches
        (``Node.min_batch``). Most graphs have neither, and are returned as they are; the others'
        subgraphs are made once per (precision, batch that changes them) and kept."""
        by_batch = batch is not None and self.branches_on_batch
        if not self.branches_on_precision and not by_batch:
            return self
        name = get_precision(precision).name if self.branches_on_precision else ""
        # batches from the largest min_batch on all keep every node: one subgraph serves them
        runs_at = min(batch, self.__dict__["largest_min_batch"]) if by_batch and batch is not None else 0
        return self.derived(("at", name, runs_at), lambda: self._subgraph(name, runs_at))

    def _subgraph(self, precision: str, batch: int) -> Graph:
        """The nodes that run at ``precision`` (a name; '' for all) and ``batch`` (0 for all)."""
        nodes = [n for n in self.nodes if (not precision or not n.precisions or precision in n.precisions)
                 and (not batch or n.min_batch <= batch)]
        if not nodes:
            raise ValueError(f"graph {self.name!r} has no nodes at precision {precision}: every node's "
                             "'precisions' names others")
        return Graph(self.name, nodes, self.batch, self.source, self.meta)

    def to_json(self) -> dict[str, Any]:
        return {"ir_version": IR_VERSION, "name": self.name, "batch": self.batch,
                "source": self.source, "meta": self.meta,
                "nodes": [{k: v for k, v in asdict(n).items() if (v not in ("", [], {}, None, 0)
                           and not (k == "min_batch" and v == 1)) or k in ("name", "op", "kind")}
                          for n in self.nodes]}

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")))

    @staticmethod
    def from_json(data: Any) -> Graph:
        """Parse and check a graph from its JSON form (parsed JSON), naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a graph must be a JSON object with 'name' and 'nodes'")
        try:
            return GRAPH_ADAPTER.validate_python(data)
        except ValidationError as exc:
            raise ValueError(validation_message(exc)) from None

    @staticmethod
    def load(path: Path) -> Graph:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        return Graph.from_json(data)


GRAPH_ADAPTER: TypeAdapter[Graph] = TypeAdapter(Graph)


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the graph IR (predictor/graph_ir.schema.json), generated
    from the same declaration that validates graphs."""
    schema = GRAPH_ADAPTER.json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "latpred graph IR", **{
        k: v for k, v in schema.items() if k != "title"}}


#: The published schema, beside this module (package data): ``python -m predictor.graph`` rewrites it.
SCHEMA_FILE = Path(__file__).parent / "graph_ir.schema.json"

if __name__ == "__main__":
    SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=1) + "\n")
    print(f"wrote {SCHEMA_FILE}")
