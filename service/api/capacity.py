"""``GET|POST /v1/capacity``: how many GPUs, and which Triton batching settings, serve a load at a p99 objective.

``latpred capacity`` for spreadsheets, in a URL: a sheet lists loads and objectives and gets the GPU
count, the ``max_batch_size`` and queue delay, the simulated p50/p99 and the ``config.pbtxt`` block
for each combination. The model's latency at every batch size the planner weighs (1 to 128) is
predicted here as ``/v1/latency`` predicts it (and cached with its predictions); queueing is
simulated by ``predictor.capacity`` (``grid.plan_grid``). No plan is computed in this module.
``POST /v1/capacity`` asks the same in a JSON body, which can carry what a URL cannot: a recorded
load's arrival times (``arrival_times``, replayed by ``predictor.capacity.load_trace``) and a graph as
JSON IR.

``serving_path`` puts a shipped serving path around the predictions (``ServingPath.around``, as
``latpred capacity --serving-path`` does) and gives the plans its host's pauses and drift; it names a
shipped path only, never a file, so a request cannot make the server read anything else.

A request's work has two bounds, both checked before it can run long: its predictions by the
work budget (``LATPRED_MAX_WORK``, as every predicting endpoint), its simulations by
``LATPRED_MAX_SIMULATED`` simulated requests for the whole grid. An objective that no number of GPUs
up to ``max_gpus`` meets is answered (``meets`` false, with the reason and the nearest plan),
not refused: "you cannot have that" is the answer a capacity sheet needs to show.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, replace
from typing import Any

from flask import Response, jsonify, request
from flask_openapi3 import APIBlueprint, Tag

from predictor.capacity.grid import GridOverBudget, plan_grid
from predictor.capacity.instance_memory import instances_asked, instances_to_weigh
from predictor.capacity.load_trace import LoadTrace, trace_from_times
from predictor.capacity.planner import (
    DEFAULT_BUDGET,
    DELAY_US_CHOICES,
    MAX_BATCH_CHOICES,
    REQUESTS,
    SEED,
    Plan,
    largest_batch,
    limited_choices,
    triton_config,
)
from predictor.capacity.service_time import run_spread
from predictor.capacity.serving_path import ServingPath, planned_service
from predictor.capacity.simulator import MAX_RATE_QPS, LatencyModel, PlanFor, Scheduler
from predictor.graph import Graph
from predictor.prediction import Prediction
from predictor.spreadsheet_cells import SpreadsheetWriter, fixed, safe_cell
from predictor.variant import DEFAULT_MODE, DEFAULT_PRECISION, Variant
from service import predictions, work_budget
from service.etags import etag_of, matches
from service.graph_store import ID_PATTERN
from service.host_header import HOST_HEADER, HOST_HEADER_DOC, host_header
from service.openapi import budgeted, documents, problems, request_bodies
from service.predictions import ResolvedVariant
from service.problems import ProblemError
from service.query_values import as_bad_request, numbers, variant_field
from service.request_body import json_body
from service.schemas.capacity import (
    CSV_COLUMNS,
    MAX_COMBINATIONS,
    MAX_SLO_MS,
    MIN_QPS,
    MIN_SLO_MS,
    QPS_ITEM,
    SLO_ITEM,
    CapacityPlan,
    CapacityQuery,
)
from service.schemas.capacity_request import CapacityRequest
from service.serving_paths import SERVING_PATH_HEADER, named_serving_path, serving_path_header
from service.state import ServiceState, state

api = APIBlueprint("capacity", __name__, url_prefix="/v1",
                   abp_tags=[Tag(name="capacity", description="GPUs and batching settings for a load and a p99 "
                                                              "objective, as GET URLs for spreadsheets")])

#: What an answer depends on besides the query and the bundle, in the ETag: the planner's settings,
#: and how answers are written.
PLANNER = f"requests={REQUESTS} seed={SEED} budget={DEFAULT_BUDGET} {MAX_BATCH_CHOICES} {DELAY_US_CHOICES} plan-13"

OK_RESPONSE = {
    "description": "json: a list of plans, one per (qps, slo_p99_ms) combination; csv: a header and one row per "
                   "combination; txt: one number (`value`) per combination, one per line",
    "content": {
        "application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/CapacityPlan"}}},
        "text/csv": {"schema": {"type": "string"}},
        "text/plain": {"schema": {"type": "string"}},
    },
    "headers": {
        SERVING_PATH_HEADER: {"description": "the serving path the plans include (the `serving_path` asked for), "
                                             "or `none`: the GPU's time alone",
                              "schema": {"type": "string"}},
        HOST_HEADER: HOST_HEADER_DOC,
    },
}


@api.get("/capacity", responses={200: OK_RESPONSE, 304: {"description": "Not Modified (ETag matched)"},
                                 **problems(400, 404, 503)})
@documents(CapacityPlan)
@budgeted(400)
def capacity(query: CapacityQuery) -> Response:
    """Capacity plan for spreadsheets: GPUs and Triton dynamic batching for a load at a p99 objective.

    For `model` (a zoo name or a stored graph's id) on `device` at `precision` (default fp16) and
    `mode` (default cudagraph; `host` names the host profile of an eager plan), every combination
    of the comma-separated `qps` (requests per second, one sample each) and `slo_p99_ms` values
    (up to 16 each, 64 combinations) gets the fewest GPUs up to `max_gpus` (the load split evenly)
    and the `max_batch_size`, `max_queue_delay_microseconds` and model instances per GPU whose
    simulated p99 meets the objective at a load below 95% of each GPU's capacity (among max batches
    1-128 and queue delays 0-5,000 us, up to `batch_limit` and `delay_limit_us` where the deployment
    allows less: a model exported for batches up to 24 is planned at 24 too; up to `max_instances`
    model instances per GPU, by default 4 with a `batch_limit` below 128 and 1 otherwise, one for
    eager and `scheduler=rule`, sharing the GPU as measured on an H100: `instances_per_gpu`, and an
    `instance_group` in the config), with the
    simulated p50/p99, throughput and utilisation and the `config.pbtxt` lines. An objective no
    plan meets is answered with `meets` false, the reason and the lowest p99 found on `max_gpus`
    GPUs. The latency of each batch size is the bundle's prediction; the queueing is a simulation
    (20,000 requests a setting): see `latpred capacity --help`. Its arrivals are Poisson unless
    `arrival_cv` (the coefficient of variation of the gaps between requests; default 1, Poisson; 2,
    bursty) says otherwise: then each GPU sees its random share of a gamma process with that cv, and
    each plan says which `arrival_cv` it was made for.

    `p99_low_ms` and `p99_high_ms` are the plan's p99 simulated again with every batch at the low
    and at the high end of its latency prediction's 90% interval: how far the p99 may move if the
    model runs as far from its prediction as the interval allows. `plan_for=slow_end` makes each
    plan for the slow end of the intervals instead of the predicted medians: one that holds if the
    model runs as slowly as its prediction allows (its `p99_ms` is then its `p99_high_ms`).

    The predictions are the GPU's time alone; a server takes longer (Triton through PyTriton added
    1.1-2.6 ms a batch and 0.15-0.32 ms a request on ten H100 hosts). `serving_path` (a shipped path's
    name) adds a server's own time, with its range, to every batch (each model instance's own, where
    several share a GPU: only the GPU's time is shared), and replays its host's pauses
    and drift (its batches' times moving together);
    each plan names it (`serving_path`: its stored form and, for a path fitted on other hosts,
    `caution`; or null), as does the
    `Latpred-Serving-Path` header (`none` without one).

    `format=csv` answers the columns model, device, precision, mode, qps, slo_p99_ms, gpus,
    instances_per_gpu, max_batch, max_queue_delay_us, p50_ms, p99_ms, throughput_qps, utilisation,
    meets, reason, triton_config (on one line, as protobuf text allows), model_version, host (an
    eager plan's host profile; empty for a CUDA graph), p99_low_ms, p99_high_ms, plan_for, scheduler,
    serving_path (its name; empty without one), arrival_cv, one row per combination, qps first;
    `format=txt` one number per combination (`value`, default gpus; meets as 1 or 0) in that order.
    A request whose predictions are over the server's work budget (`LATPRED_MAX_WORK`), or whose
    plans together need more simulated requests than `LATPRED_MAX_SIMULATED`, is a 400 `work-budget`
    problem: ask for fewer combinations at a time.
    """
    with as_bad_request():
        return _capacity(query)


def _capacity(query: CapacityQuery) -> Response:
    st = state()
    name = query.model.strip(" ")
    graph = st.resolver.from_name(name, "model")
    device = predictions.resolve_device_id(st.registry, query.device.strip(" ") if query.device else None)
    refusal = device.planning_refusal()
    if refusal is not None:
        raise ProblemError(400, refusal, field="device", kind="not-planned")
    precision = variant_field("precision", query.precision, DEFAULT_PRECISION)
    mode = variant_field("mode", query.mode, DEFAULT_MODE)
    base = predictions.resolve_variant(st.registry, Variant(device=device.device_id, precision=precision, mode=mode),
                                       host=query.host.strip(" ") if query.host else None, store=st.host_store)
    path = named_serving_path(query.serving_path)
    asked = GridAsked(numbers(query.qps, "qps", QPS_ITEM, MIN_QPS, MAX_RATE_QPS),
                      numbers(query.slo_p99_ms, "slo_p99_ms", SLO_ITEM, MIN_SLO_MS, MAX_SLO_MS), query.max_gpus,
                      query.plan_for, query.scheduler, query.arrival_cv, None, query.batch_limit, query.delay_limit_us,
                      query.max_instances)
    asked.check_combinations(400)
    eager_host = base.host_key if mode == "eager" else None
    content = name if ID_PATTERN.match(name) else st.resolver.zoo_digest(name)
    etag = etag_of(json.dumps([content, device.device_id, precision, mode, eager_host, asked.loads, asked.objectives,
                               query.max_gpus, query.plan_for, query.scheduler, query.arrival_cv, query.batch_limit,
                               query.delay_limit_us, query.max_instances, query.format, query.value,
                               path.to_dict() if path is not None else None, base.predictor.bundle.version,
                               st.config.max_simulated, PLANNER]))
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={st.config.cache_max_age}",
               **serving_path_header(path)}
    if matches(request.headers.get("If-None-Match"), etag):
        return Response(status=304, headers=headers)

    rows, said = _plan_rows(st, graph, base, path, asked, status=400)
    response = _render(rows, query.format, query.value)
    response.headers.update({**headers, **host_header([said.host])})
    return response


@api.post("/capacity", responses={200: OK_RESPONSE, **problems(400, 404, 413, 415, 422, 503)})
@request_bodies(json=CapacityRequest)
@budgeted(422)
def capacity_post() -> Response:
    """Capacity plan in a JSON body: GET /v1/capacity's plans, and the one way to replay a recorded load.

    The body takes the GET's parameters as JSON values (`qps` and `slo_p99_ms` a number or a list
    of up to 16, their combinations up to 64), the graph as `POST /v1/select` does (exactly one of
    `graph`, JSON IR; `model`, a zoo name; `graph_id`, a stored graph), and `arrival_times`: a
    recorded load, its requests' arrival times in seconds (100 to 200,000; any origin, any
    order). A trace is replayed instead of generated arrivals: its shape kept, its times scaled so
    that its mean rate is each `qps` (default: the trace's own rate), each GPU seeing its random
    share of it (one request in G), pass after pass until at least 20,000 requests and whole
    passes, its end warming the simulated server up; each plan names it (`arrival_trace`: its size,
    span, rate and the gaps' coefficient of variation, which `arrival_cv` then holds, as measured:
    a log to the second or millisecond can show one outside what a request may give). A long trace
    costs as many simulated requests per setting tried as a GPU's share of it holds: a plan starts
    no run past its budget and answers what it found with `reason` saying so, and a grid past
    `LATPRED_MAX_SIMULATED` is a 422 `work-budget` problem naming `arrival_times` (plan a longer
    trace with `latpred capacity --arrival-trace`). The answer is the GET's JSON: a list of plans.
    """
    st = state()
    body = json_body(CapacityRequest)
    path = named_serving_path(body.serving_path)  # before the graph: a bad name costs no resolving
    trace = _trace(body.arrival_times, body.arrival_cv)
    loads = body.qps if body.qps is not None else [trace.rate_qps] if trace is not None else None
    if loads is None:
        raise ProblemError(422, "give the load to serve in requests per second (or arrival_times, whose own rate "
                                "is then used)", field="qps", kind="missing-load")
    asked = GridAsked(loads, body.slo_p99_ms, body.max_gpus, body.plan_for, body.scheduler, body.arrival_cv, trace,
                      body.batch_limit, body.delay_limit_us, body.max_instances)
    asked.check_combinations(422)
    graph = st.resolver.resolve(body)
    device = predictions.resolve_device_id(st.registry, body.device)
    refusal = device.planning_refusal()
    if refusal is not None:
        raise ProblemError(422, refusal, field="device", kind="not-planned")
    base = predictions.resolve_variant(st.registry, Variant(device=device.device_id, precision=body.precision,
                                                            mode=body.mode), host=body.host, store=st.host_store)
    rows, said = _plan_rows(st, graph, base, path, asked, status=422)
    response = jsonify(rows)
    response.headers.update({**serving_path_header(path), **host_header([said.host])})
    return response


def _trace(times: list[float] | None, arrival_cv: float) -> LoadTrace | None:
    """The request's recorded load, or a 422 naming ``arrival_times`` (or ``arrival_cv``, given beside it)."""
    if times is None:
        return None
    if arrival_cv != 1:
        raise ProblemError(422, "give arrival_cv or arrival_times, not both (a trace has its own gaps)",
                           field="arrival_cv", kind="conflicting-arrivals")
    try:
        return trace_from_times(times)
    except ValueError as exc:
        raise ProblemError(422, str(exc), field="arrival_times", kind="invalid-trace") from None


@dataclass(frozen=True)
class GridAsked:
    """What a request asks the planner besides its graph, variant and serving path (the GET's query
    and the POST's body alike): loads by objectives, and how to plan them."""

    loads: list[float]
    objectives: list[float]
    max_gpus: int
    plan_for: PlanFor
    scheduler: Scheduler
    arrival_cv: float
    trace: LoadTrace | None
    batch_limit: int | None
    delay_limit_us: int | None
    max_instances: int | None

    def check_combinations(self, status: int) -> None:
        """A ``status`` problem naming the longer list when the grid has more than MAX_COMBINATIONS cells."""
        cells = len(self.loads) * len(self.objectives)
        if cells > MAX_COMBINATIONS:
            raise ProblemError(status, f"{len(self.loads)} qps x {len(self.objectives)} slo_p99_ms values make "
                                       f"{cells} combinations; at most {MAX_COMBINATIONS} a request",
                               field="qps" if len(self.loads) >= len(self.objectives) else "slo_p99_ms",
                               kind="too-many-combinations")


def _plan_rows(st: ServiceState, graph: Graph, base: ResolvedVariant, path: ServingPath | None, asked: GridAsked, *,
               status: int) -> tuple[list[dict[str, Any]], Prediction]:
    """Each (load, objective)'s plan as a response row, and batch 1's prediction (what the plans say of
    their host); a grid past ``LATPRED_MAX_SIMULATED`` is a ``status`` work-budget problem."""
    batches, delays = limited_choices(asked.batch_limit, asked.delay_limit_us)
    # the predictions first: a graph that cannot be predicted is refused by them, naming it
    counts = instances_asked(base.mode, asked.scheduler, asked.max_instances, asked.batch_limit)
    predicted, said = _latency(st, graph, base, largest_batch(batches, counts), status)
    instances = instances_to_weigh(graph, base.device, base.precision, base.mode, max(batches), asked.max_instances,
                                   asked.batch_limit, asked.scheduler)
    latency, stalls = planned_service(predicted, path, asked.plan_for)
    try:
        plans = plan_grid(latency, asked.loads, asked.objectives, max_gpus=asked.max_gpus,
                          budget=st.config.max_simulated, scheduler=asked.scheduler, stalls=stalls,
                          arrival_cv=asked.arrival_cv, arrival_trace=asked.trace, max_batch_choices=batches,
                          delay_us_choices=delays, instance_choices=instances)
    except GridOverBudget as exc:  # a trace's length sets its runs' cost: it is what to shorten
        raise ProblemError(status, f"{exc} (LATPRED_MAX_SIMULATED)",
                           field="qps" if asked.trace is None else "arrival_times", kind="work-budget",
                           max_simulated=exc.budget, simulated=exc.simulated) from None
    return [_row(p, graph, base, said, asked.plan_for, path) for p in plans], said


def _latency(st: ServiceState, graph: Graph, base: ResolvedVariant, largest: int,
             status: int) -> tuple[LatencyModel, Prediction]:
    """The predicted median of every batch size up to ``largest`` (what a plan weighs: a max batch, or
    several instances' batches run together), with its
    interval (from the prediction cache where it can be), and the spread of the measured runs on this
    kind of device in this mode (``service_time.run_spread``, as ``latpred capacity``); the
    predictions' work is checked against the budget first. With it, batch 1's prediction: what every
    plan says of its host (the profile used, which may stand in for the one asked) and warnings."""
    variants = [replace(base, batch=b) for b in range(1, largest + 1)]
    work_budget.check([graph], variants, st.config.max_work, field="model", max_results=st.config.max_results,
                      status=status)
    try:
        out = {v.batch: predictions.predict(graph, v, "model", cache=st.predictions, layers=False) for v in variants}
    except ProblemError as exc:  # a batch the graph cannot take is the model's problem: no batch was asked for
        if exc.field and exc.field.startswith("model"):
            exc.field = "model"
        raise
    medians = {b: p.total_ms for b, p in out.items()}
    intervals = {b: (p.low_ms, p.high_ms) for b, p in out.items()}
    return LatencyModel(medians.__getitem__, sigma=run_spread(base.device.kind, base.mode),
                        interval_ms=intervals.__getitem__), out[1]


def _row(result: Plan, graph: Graph, base: ResolvedVariant, said: Prediction, plan_for: PlanFor,
         path: ServingPath | None) -> dict[str, Any]:
    return CapacityPlan(
        model=graph.name, device=base.device.device_id, precision=base.precision, mode=base.mode,
        qps=result.qps, slo_p99_ms=result.slo_p99_ms, gpus=result.gpus, instances_per_gpu=result.instances,
        instance_sharing=result.instance_sharing,
        max_batch=result.max_batch,
        max_queue_delay_us=result.max_queue_delay_us, per_gpu_qps=result.per_gpu_qps, p50_ms=result.p50_ms,
        p99_ms=result.p99_ms, plan_for=plan_for, scheduler=result.scheduler, arrival_cv=result.arrival_cv,
        arrival_trace=result.arrival_trace,
        p99_low_ms=result.p99_low_ms, p99_high_ms=result.p99_high_ms,
        throughput_qps=result.throughput_qps, utilisation=result.utilisation,
        mean_batch_size=result.mean_batch_size, meets=result.meets, reason=result.reason,
        triton_config=triton_config(result), model_version=str(base.predictor.bundle.version), host=said.host,
        warnings=list(said.warnings),
        serving_path=path.answer_dict() if path is not None else None,
        candidates_evaluated=result.candidates_evaluated, simulated_requests=result.simulated_requests,
    ).model_dump()


def _cell(row: dict[str, Any], column: str) -> Any:
    """A CSV cell: decimals fixed (bare, so a sheet reads a number), the config on one line."""
    value = row[column]
    if column == "triton_config":
        return " ".join(line.strip() for line in value.splitlines())
    if column == "serving_path":
        return value["name"] if value is not None else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return fixed(value)
    return "" if value is None else value


def _txt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _render(rows: list[dict[str, Any]], fmt: str, value: str) -> Response:
    """The plans as ``fmt``; CSV and txt cells escaped as ``/v1/latency``'s (``spreadsheet_cells``:
    a stored graph's name is whatever stored it chose)."""
    if fmt == "txt":
        return Response("\n".join(safe_cell(_txt(row[value])) for row in rows), mimetype="text/plain")
    if fmt == "csv":
        out = io.StringIO()
        writer = SpreadsheetWriter(out, lineterminator="\r\n")
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow([_cell(row, c) for c in CSV_COLUMNS])
        return Response(out.getvalue(), mimetype="text/csv")
    return jsonify(rows)

