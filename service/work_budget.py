"""What a prediction request will cost, estimated before any prediction, and the budget it must fit.

Nodes per graph (``LATPRED_MAX_NODES``) and results per request (``LATPRED_MAX_RESULTS``) each
have a cap, but their product does not: 5,000 distinct nodes x 40 batches is seconds of CPU in one
small body. So every predicting endpoint estimates its request's work first, in *node
evaluations*, and refuses what is over ``LATPRED_MAX_WORK`` before any tree runs:

    work = sum over (graph, variant) of the graph's nodes          (composing each node)
         + KERNEL_WEIGHT x distinct kernel configurations not yet in the predictor's cache

A prediction's two costs are composing its nodes and evaluating, through the tree models, the
kernel configurations it is the first to meet; a configuration already evaluated, by this
request's repeated layers or by an earlier request, costs a cache lookup, so it is not counted.
``benchmarks/work_budget.py`` measures both, the CPU a unit costs and the estimate's own cost:
0.7 us a node and 14 us a new configuration (ratio 19) on two AMD EPYC cores, 0.5-1 us of CPU a
unit on its large requests (``benchmarks/results/work_budget.txt``), so the default budget of
2,000,000 is 1-2 s of CPU there.

Computing the estimate is kept cheap: no tree runs, and a request whose every node counted as a
new kernel would still fit is let through without looking anything up. Otherwise the lookups
cost one set per (graph, precision, mode) and one dict lookup per distinct configuration per
batch (``Predictor.new_kernels``): a few ms where predicting takes seconds.

A refusal is a 422 (RFC 9110 15.5.21, Unprocessable Content: the request is well formed but the
server will not carry out this much of it), as the batch endpoint's too-many-results is; not 413
(Content Too Large), which is about the body's size, and a small body (or a GET with none) can ask
for this much; not 429 (Too Many Requests, a rate limit), since the same request is refused
again however long the client waits. GET /v1/latency answers 400 for it, as for its other
refusals of query values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from predictor.graph import Graph
from predictor.predict import Predictor
from service.predictions import ResolvedVariant
from service.problems import ProblemError

#: Node evaluations one new kernel configuration counts for: the tree models' cost of evaluating
#: it over the cost of composing one node (``benchmarks/work_budget.py`` fits the two: 19).
KERNEL_WEIGHT = 20


@dataclass(frozen=True)
class WorkEstimate:
    """How much predicting a request would take, in node evaluations (``units``)."""

    #: (graph, variant) pairs the request asks for
    results: int
    #: nodes composed: each graph's nodes, once per variant
    nodes: int
    #: distinct kernel configurations (configuration, batch, precision) the request needs
    kernels: int
    #: those of them the predictors have not evaluated yet
    new_kernels: int

    @property
    def units(self) -> int:
        return self.nodes + KERNEL_WEIGHT * self.new_kernels

    def members(self) -> dict[str, Any]:
        """The estimate as a problem's members (``work`` is the total)."""
        return {"work": self.units, "nodes": self.nodes, "kernels": self.kernels, "new_kernels": self.new_kernels}


def _predictors(graphs: Sequence[Graph], variants: Sequence[ResolvedVariant]) \
        -> list[tuple[Predictor, list[tuple[Graph, int | None, str, str]]]]:
    """Each predictor with the (graph, batch, precision, mode) requests it would predict."""
    by_predictor: dict[int, tuple[Predictor, list[tuple[Graph, int | None, str, str]]]] = {}
    for variant in variants:
        entry = by_predictor.setdefault(id(variant.predictor), (variant.predictor, []))
        entry[1].extend((g, variant.batch, variant.precision, variant.mode) for g in graphs)
    return list(by_predictor.values())


def estimate(graphs: Sequence[Graph], variants: Sequence[ResolvedVariant]) -> WorkEstimate:
    """The work of predicting every graph on every variant (the product: a batch request's
    pairs, a spreadsheet's grid), counting only the kernel configurations not evaluated yet."""
    nodes = sum(len(g.nodes) for g in graphs) * len(variants)
    kernels = new = 0
    for predictor, requests in _predictors(graphs, variants):
        distinct, fresh = predictor.new_kernels(requests)
        kernels += distinct
        new += fresh
    return WorkEstimate(len(graphs) * len(variants), nodes, kernels, new)


def check(graphs: Sequence[Graph], variants: Sequence[ResolvedVariant], budget: int, *, field: str | None,
          max_results: int, status: int = 422) -> None:
    """Refuse (a ``work-budget`` problem naming ``LATPRED_MAX_WORK``, with the estimate and the
    budget as members) a request whose work is over ``budget``; return at once when even every
    node counted as a new kernel would fit, which most requests do."""
    nodes = sum(len(g.nodes) for g in graphs) * len(variants)
    if nodes * (1 + KERNEL_WEIGHT) <= budget:
        return
    work = estimate(graphs, variants)
    if work.units <= budget:
        return
    raise ProblemError(status, _detail(work, budget, max_results), field=field, kind="work-budget",
                       max_work=budget, **work.members())


def _detail(work: WorkEstimate, budget: int, max_results: int) -> str:
    split = ("one graph on one variant: the operator can raise LATPRED_MAX_WORK, or predict the graph in parts"
             if work.results == 1 else
             f"split it into requests of fewer graphs x variants, each within this budget "
             f"(POST /v1/predict/batch answers up to {max_results:,} results a request, LATPRED_MAX_RESULTS, "
             f"and evaluates a request's shared kernel configurations once)")
    return (f"this request is about {work.units:,} units of work ({work.nodes:,} node evaluations for "
            f"{work.results:,} results + {KERNEL_WEIGHT} x {work.new_kernels:,} kernel configurations not "
            f"evaluated yet); this server does at most {budget:,} per request (LATPRED_MAX_WORK): {split}")


def openapi_note(budget: int) -> dict[str, Any]:
    """What an operation's document says of the budget (its description and an ``x-`` member)."""
    return {"x-latpred-max-work": budget,
            "description": f"Also a `work-budget` problem: the request's estimated work is over this "
                           f"server's budget of {budget:,} node evaluations (LATPRED_MAX_WORK): each graph's "
                           f"nodes once per variant, plus {KERNEL_WEIGHT} per kernel configuration not "
                           "evaluated yet."}
