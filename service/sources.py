"""Turn what a request names (JSON IR, ONNX bytes, a zoo name, a stored id) into a checked Graph.

Parsing and checking are predictor's (its ``Graph`` declaration, which the request models use,
so an inline graph is parsed and checked once, with the body; ``graph_from_onnx``, run within a
budget in a child process by ``onnx_budget``; the zoo);
this module adds what a server needs on top: limits on a graph's size, errors that name the request
field, and caches, since NAS loops and spreadsheets name the same zoo and stored graphs again
and again and re-reading a 60 KB JSON file would cost more than predicting it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from predictor.graph import Graph
from predictor.zoo import load_zoo_graph, zoo_names
from service.graph_names import check_graph_name
from service.graph_store import ID_PATTERN, GraphStore, graph_id
from service.onnx_budget import BudgetedImporter, ImportBudgetError, ImportRefused
from service.problems import ProblemError


class GraphResolver:
    """Resolves graph sources with the server's node cap; thread-safe, shared by the app."""

    def __init__(self, store: GraphStore, max_nodes: int, importer: BudgetedImporter) -> None:
        self.store = store
        self.max_nodes = max_nodes
        #: ONNX uploads are imported by it, in a child process within a time and memory budget
        self.importer = importer
        self._zoo: dict[str, Graph] = {}
        self._zoo_names = {n.lower(): n for n in zoo_names()}
        self._digests: dict[int, str] = {}
        self._lock = threading.Lock()

    def zoo_names(self) -> list[str]:
        return sorted(self._zoo_names.values())

    def check_size(self, count: int, field: str, counted_to_cap: bool = False) -> None:
        """422 for a graph over the node cap; ``counted_to_cap``: ``count`` stopped one past the cap
        (an ONNX upload's nodes are counted no further), so the graph has at least that many."""
        if count > self.max_nodes:
            has = f"more than {self.max_nodes}" if counted_to_cap else str(count)
            raise ProblemError(422, f"the graph has {has} nodes; this server accepts at most {self.max_nodes} "
                                    "(LATPRED_MAX_NODES)", field=field, kind="graph-too-large")

    def from_ir(self, graph: Graph, field: str = "graph") -> Graph:
        """A graph parsed and checked with its request body, within the node cap, its name one
        this service takes (``graph_names``)."""
        check_graph_name(graph.name, f"{field}.name")
        self.check_size(len(graph.nodes), f"{field}.nodes")
        return graph

    def from_zoo(self, name: str, field: str = "model") -> Graph:
        key = name.strip().lower()
        canonical = self._zoo_names.get(key)
        if canonical is None:
            raise ProblemError(404, f"no zoo graph named {name!r}: GET /v1/models lists them", field=field,
                               kind="unknown-model")
        graph = self._zoo.get(canonical)
        if graph is None:
            loaded = load_zoo_graph(canonical)
            with self._lock:  # one object per name: the prediction cache is keyed by it
                graph = self._zoo.setdefault(canonical, loaded)
        return graph

    def from_name(self, name: str, field: str = "model") -> Graph:
        """A spreadsheet GET's ``model``: a stored graph's id (64 hex digits) or a zoo name."""
        return self.from_id(name, field) if ID_PATTERN.match(name) else self.from_zoo(name, field)

    def zoo_digest(self, name: str) -> str:
        """sha256 of a zoo graph's IR, for ETags: re-traced graphs must not keep old ETags."""
        graph = self.from_zoo(name)
        digest = self._digests.get(id(graph))
        if digest is None:
            digest = graph_id(graph)
            self._digests[id(graph)] = digest  # zoo graphs live as long as the resolver
        return digest

    def from_id(self, gid: str, field: str = "graph_id") -> Graph:
        if not ID_PATTERN.match(gid):
            raise ProblemError(422, f"{gid!r} is not a graph id (64 lowercase hex digits)", field=field)
        try:
            return self.store.get(gid)
        except KeyError:
            raise ProblemError(404, f"no stored graph with id {gid} (never stored, or evicted as the least recently "
                                    "used when the store was full): store it with POST /v1/graphs",
                               field=field, kind="unknown-graph") from None

    def from_onnx(self, data: bytes, name: str | None, batch: int | None, dims: Mapping[str, int] | None = None,
                  field: str = "onnx") -> Graph:
        """Import ONNX bytes: only the weights' dims are read, and no file the model names is ever
        opened (predictor's loader). The node count is checked before the costly shape inference;
        a problem with ``dims`` (unknown, unset or absurd) names the ``dims`` field. The graph's
        name (``name``, or the file's own graph name) must be one this service takes, and a
        problem with either names the ``name`` field, where a request can give a better one."""
        if name:  # (an empty one is no name: the file's own is taken)
            check_graph_name(name, "name")
        if not data:
            raise ProblemError(422, "the uploaded ONNX file is empty", field=field, kind="invalid-onnx")
        try:
            import onnx  # noqa: F401

            from predictor.importers.onnx_wire import node_count
        except ImportError:
            raise ProblemError(415, "this server cannot read ONNX (the onnx package is not installed)") from None
        self.check_size(node_count(data, stop=self.max_nodes), field, counted_to_cap=True)
        try:
            graph = self.importer.import_graph(data, name=name, batch=batch, dims=dims)
        except ImportRefused as exc:
            if exc.dims:
                raise ProblemError(422, str(exc), field="dims", kind="invalid-dims") from None
            raise ProblemError(422, str(exc), field=field, kind="invalid-onnx") from None
        except ImportBudgetError as exc:
            raise ProblemError(422, str(exc), field=field, kind="import-budget", budget=exc.budget) from None
        if not name:
            check_graph_name(graph.name, "name", origin="the ONNX file names its graph ")
        return graph

    def resolve(self, source: Any, prefix: str = "") -> Graph:
        """A GraphSource-like object (graph, model or graph_id set) to its graph."""
        p = f"{prefix}." if prefix else ""
        if getattr(source, "graph", None) is not None:
            return self.from_ir(source.graph, f"{p}graph")
        if getattr(source, "model", None) is not None:
            return self.from_zoo(source.model, f"{p}model")
        return self.from_id(source.graph_id, f"{p}graph_id")
