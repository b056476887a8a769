"""Schemathesis hooks for latpred's run (``SCHEMATHESIS_HOOKS=hooks``, with this folder on the path).

One check is narrowed, not dropped: ``positive_data_acceptance`` wants every request the document
calls valid to be served. The document describes a graph's JSON shape and an ONNX upload's field,
but three rules of their content are beyond JSON Schema: an ONNX file must be ONNX (its field is
``format: binary``), node names are unique within a graph and a kernel node's parameters are its
family's (``predictor.catalogue``, with checks across parameters); and a graph's sizes must lie
where the models can predict. ``graph_content_refusals`` therefore allows a 422 on the operations
that take a graph, and only when the problem names one of those rules: a refusal of anything else
(a batch, a name, a null, a host) is still a failure. ``GET /v1/capacity`` has two rules of the same
kind: its ``qps`` and ``slo_p99_ms`` lists may hold 16 values each but make at most 64 combinations
together (JSON Schema bounds each list, not their product), and a grid's plans may together need
more simulated requests than one request may make (``work-budget``, which no schema could predict);
a 400 naming either is allowed there; ``POST /v1/capacity`` adds a recorded load's rules and
which of a load, a trace and a cv may go together, a 422 naming one of them (or the grid's) is
allowed there, as a graph's content is. ``GET /v1/select`` ranks a stored graph too, whose content
may be one of those rules' (a graph that runs nothing, or is past the work budget): a 400 naming a
rule of a graph's content is allowed there. Every other operation keeps the stock check.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

GRAPH_OPERATIONS = {"POST /v1/predict", "POST /v1/predict/batch", "POST /v1/graphs", "POST /v1/select",
                    "POST /v1/capacity"}
#: problem types GET /v1/capacity may refuse a schema-valid query with (see the module's docstring)
CAPACITY_GRID_KINDS = {"too-many-combinations", "work-budget"}
#: and POST /v1/capacity a body: besides the grid's, a recorded load's rules (at least some span of
#: time, a rate in seconds' range), a load given neither as qps nor as a trace, a trace given a cv
#: too, and a device capacity planning does not plan (a CPU)
CAPACITY_BODY_KINDS = CAPACITY_GRID_KINDS | {"invalid-trace", "missing-load", "conflicting-arrivals", "not-planned"}
#: problem types that are about a graph's or ONNX file's content
CONTENT_KINDS = {"invalid-onnx", "invalid-dims", "cannot-predict", "graph-too-large", "work-budget", "import-budget"}


def _about_content(problem: dict[str, Any]) -> bool:
    kind = str(problem.get("type", "")).rsplit(":", 1)[-1]
    if kind in CONTENT_KINDS:
        return True
    if kind != "validation-error":
        return False
    fields = [str(e.get("field") or "") for e in problem.get("errors") or [{"field": problem.get("field")}]]
    return all(_in_graph(f) for f in fields)


def _in_graph(field: str) -> bool:
    """A path inside a graph's IR (``graph.nodes[3]``, ``graphs[0].graph``, the /v1/graphs body),
    or an ONNX upload's ``dims`` (which names an upload may set depends on the file)."""
    head = field.split(".", 1)[0].split("[", 1)[0]
    return head in ("graph", "nodes", "dims") or (head == "graphs" and ".graph" in field) or field == ""


def _problem(response: Any) -> dict[str, Any]:
    try:
        problem = json.loads(response.content)
    except ValueError:
        return {}
    return problem if isinstance(problem, dict) else {}


@schemathesis.check
def graph_content_refusals(ctx: Any, response: Any, case: Any) -> bool | None:
    """positive_data_acceptance, except a 422 about a graph's content on the graph operations, a 400
    about the size of a capacity grid, and a 400 about a stored graph's content when it is ranked."""
    if case.operation.label in GRAPH_OPERATIONS and response.status_code == 422:
        if _about_content(_problem(response)):
            return None
    if case.operation.label == "POST /v1/capacity" and response.status_code == 422:
        if str(_problem(response).get("type", "")).rsplit(":", 1)[-1] in CAPACITY_BODY_KINDS:
            return None
    if case.operation.label == "GET /v1/capacity" and response.status_code == 400:
        if str(_problem(response).get("type", "")).rsplit(":", 1)[-1] in CAPACITY_GRID_KINDS:
            return None
    if case.operation.label == "GET /v1/select" and response.status_code == 400:
        if str(_problem(response).get("type", "")).rsplit(":", 1)[-1] in CONTENT_KINDS:
            return None
    return positive_data_acceptance(ctx, response, case)
