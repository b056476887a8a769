"""``POST /v1/select`` and ``GET /v1/select``: which device should serve this model.

One graph at one batch size, precision and mode, predicted on every device a bundle serves (its
own, or the transfer bundle from its datasheet), ranked by cost per million inferences under the
constraints asked (``predictor.selection``: no ranking is computed here). The GET takes a zoo name
or a stored graph's id, for spreadsheets: ``format=csv`` answers one row per device in rank order,
``format=txt`` the chosen device's id (``none`` when no device meets the constraints).
"""

from __future__ import annotations

import io
import re
from typing import Any

from flask import Response, jsonify
from flask_openapi3 import APIBlueprint, Tag

from predictor.capacity.serving_path import ServingPath
from predictor.graph import Graph
from predictor.host_profile import HostProfile
from predictor.predict import Predictor
from predictor.selection import Constraints, DeviceChoice, Selection, select
from predictor.selection_csv import write_selection_csv
from predictor.variant import DEFAULT_MODE, DEFAULT_PRECISION
from service import predictions, work_budget
from service.host_header import HOST_HEADER, HOST_HEADER_DOC, host_header
from service.openapi import budgeted, problems, request_bodies
from service.predictions import ResolvedVariant
from service.problems import ProblemError
from service.query_values import as_bad_request, numbers, variant_field
from service.request_body import json_body
from service.schemas.capacity import QPS_ITEM, SLO_ITEM
from service.schemas.select import (
    DEVICE_ITEM,
    MAX_DEVICES,
    MAX_QUERY_SLO_MS,
    MAX_QUERY_THROUGHPUT,
    DeviceChoiceOut,
    SelectionOut,
    SelectQuery,
    SelectRequest,
)
from service.serving_paths import SERVING_PATH_HEADER, named_serving_path, serving_path_header
from service.state import ServiceState, state

api = APIBlueprint("select", __name__, url_prefix="/v1",
                   abp_tags=[Tag(name="select", description="which device should serve a model: devices ranked "
                                                            "by cost per million inferences")])

CSV_RESPONSE = {
    "description": "json: the selection; csv: a header and one row per device, in rank order; txt: the chosen "
                   "device's id, or 'none'",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SelectionOut"}},
                "text/csv": {"schema": {"type": "string"}}, "text/plain": {"schema": {"type": "string"}}},
    "headers": {
        SERVING_PATH_HEADER: {"description": "the serving path the latencies include (the `serving_path` asked for), "
                                             "or `none`: the devices' time alone",
                              "schema": {"type": "string"}},
        HOST_HEADER: HOST_HEADER_DOC,
    },
}


@api.post("/select", responses={200: SelectionOut, **problems(400, 404, 413, 415, 422, 503)})
@request_bodies(json=SelectRequest)
@budgeted(422)
def select_post() -> dict[str, Any]:
    """Rank the devices for one graph: which should serve it, and at what cost per million inferences.

    JSON body: exactly one of `graph` (JSON IR), `model` (zoo name) or `graph_id` (stored), the
    `batch` (default: the graph's own), `precision` (fp16), `mode` (cudagraph; `host` names the host
    profile of an eager prediction), `serving_path` (a shipped serving path's name, e.g.
    `pytriton-h100`: a server's own time per batch added to every device's, echoed as its stored
    form; an unknown name is a 400 that lists the known ones), and optional constraints:
    `slo_p99_ms` (the p99 of one batch's latency, with the mode's run-to-run spread, or the path's
    spread where that is wider), `min_throughput_qps` (inferences a second one
    device must serve), `devices` (ids to choose among; default every device a bundle predicts).
    Every device must fit the model in memory (an estimate of weights, activations and the
    runtime). Devices that meet every constraint come first, cheapest per inference first (those
    without a price after them, fastest first), then the others, nearest first, each with the
    reasons; `best` is null and `verdict` names the nearest device when none meets them. Each device
    says whether it was `measured` or `transferred` (never measured: predicted from its datasheet,
    with a wider interval), and its p99 at either end of its prediction's interval. `settled` says
    whether the devices' verdicts on the constraints that the choice depends on hold at either end
    of their intervals (the order by cost is the medians' between measured devices; a transferred
    device that could cost less at the fast end of its interval is a doubt); when not, `doubts`
    names each device, the end of its interval and what it meets or misses there.
    """
    st = state()
    body = json_body(SelectRequest)
    path = named_serving_path(body.serving_path)  # before the graph: a bad name costs no resolving
    graph = st.resolver.resolve(body)
    source = "graph" if body.graph is not None else "model" if body.model is not None else "graph_id"
    constraints = _constraints(body.slo_p99_ms, body.min_throughput_qps)
    selection = _select(st, graph, body.batch, body.precision, body.mode, body.host, constraints, body.devices, source,
                        path)
    return _json(selection)


@api.get("/select", responses={200: CSV_RESPONSE, **problems(400, 404, 503)})
@budgeted(400)
def select_get(query: SelectQuery) -> Response:
    """Hardware selection for spreadsheets: the devices ranked for a zoo model or a stored graph.

    As `POST /v1/select`, with `model` a zoo name or a stored graph's id and numbers as plain
    decimals. `format=csv` answers the columns rank, device, name, provenance, meets, reasons,
    latency_ms, low_ms, high_ms, p99_ms, throughput_qps, memory_gib, device_memory_gib,
    price_per_hour, cost_per_million, model, batch, precision, mode, host, model_version,
    p99_low_ms, p99_high_ms (the p99 at either end of the prediction's interval), settled (the
    selection's, as in the JSON answer), serving_path (its name; empty without one), one row
    per device in rank order; `format=txt` the chosen device's id, or `none` when no device meets
    the constraints. Every format of the GET carries the `Latpred-Serving-Path` header (the path's
    name, or `none`) and the `Latpred-Host` header (the host profiles the devices' eager
    predictions used, or `none`). `slo_p99_ms` and `min_throughput_qps` take one value each.
    """
    with as_bad_request():
        st = state()
        name = query.model.strip(" ")
        graph = st.resolver.from_name(name, "model")
        precision = variant_field("precision", query.precision, DEFAULT_PRECISION)
        mode = variant_field("mode", query.mode, DEFAULT_MODE)
        slo = _one(numbers(query.slo_p99_ms, "slo_p99_ms", SLO_ITEM, 0.001, MAX_QUERY_SLO_MS), "slo_p99_ms") \
            if query.slo_p99_ms is not None else None
        throughput = _one(numbers(query.min_throughput_qps, "min_throughput_qps", QPS_ITEM, 0.001,
                                  MAX_QUERY_THROUGHPUT), "min_throughput_qps") \
            if query.min_throughput_qps is not None else None
        devices = _device_list(query.devices) if query.devices is not None else None
        path = named_serving_path(query.serving_path)
        selection = _select(st, graph, query.batch, precision, mode, query.host.strip(" ") if query.host else None,
                            _constraints(slo, throughput), devices, "model", path)
    headers = {**serving_path_header(path), **host_header(c.host for c in selection.ranked)}
    if query.format == "txt":
        return Response(selection.best.device if selection.best else "none", mimetype="text/plain", headers=headers)
    if query.format == "csv":
        return Response(_csv(selection), mimetype="text/csv", headers=headers)
    response = jsonify(_json(selection))
    response.headers.update(headers)
    return response


def _one(values: list[float], field: str) -> float:
    """The one value a selection takes (``numbers`` reads a comma-separated list, as capacity's
    grid does): several are refused naming the field, not cut to the first."""
    if len(values) > 1:
        raise ProblemError(400, f"{field}: one value, not {len(values)}: a selection answers one objective (ask "
                                "GET /v1/capacity for a grid of them)", field=field)
    return values[0]


def _device_list(value: str) -> list[str]:
    items = [item.strip(" ").lower() for item in value.split(",")]
    if len(items) > MAX_DEVICES:
        raise ProblemError(400, f"devices: {len(items)} ids; at most {MAX_DEVICES} a request", field="devices")
    for item in items:
        if not re.fullmatch(DEVICE_ITEM, item):
            raise ProblemError(400, f"devices: {item!r} is not a device id (GET /v1/devices lists them)",
                               field="devices")
    return list(dict.fromkeys(items))


def _constraints(slo: float | None, throughput: float | None) -> Constraints:
    try:
        return Constraints(slo_p99_ms=slo, min_throughput_qps=throughput)
    except ValueError as exc:  # the schemas bound both; this names the field should they ever disagree
        field = str(exc).split(":", 1)[0]
        raise ProblemError(422, str(exc), field=field) from None


def _candidates(st: ServiceState, devices: list[str] | None) -> list[Predictor]:
    """The predictors to rank: every device a bundle predicts, or those named by id or part of a
    name (each must be predicted by a bundle)."""
    st.registry.wait_first_load(st.registry.load_wait_s)
    snapshot = st.registry.snapshot
    if not snapshot.loaded or not snapshot.predictors:
        raise predictions.not_ready(st.registry.state_detail())
    if devices is None:
        return list(snapshot.predictors.values())
    # by id or part of a name, as `device` is everywhere else and `latpred select --devices` takes them
    devices = list(dict.fromkeys(predictions.resolve_device_id(st.registry, d, "devices").device_id
                                 for d in devices))
    unknown = [d for d in devices if d not in snapshot.predictors]
    if unknown:
        raise ProblemError(404, f"devices: no bundle predicts {', '.join(unknown)} (GET /v1/devices lists the "
                                "devices and whether a bundle predicts them)", field="devices", kind="no-bundle")
    return [snapshot.predictors[d] for d in devices]


def _host(st: ServiceState, candidates: list[Predictor], host: str | None, mode: str) -> HostProfile | None:
    """The host an eager prediction is for: the one named (a stored id, or one a bundle carries),
    else each bundle's default (None)."""
    if host is None or mode != "eager":
        return None
    return predictions.resolve_host_id(candidates[0], host, st.host_store, others=candidates[1:])


def _select(st: ServiceState, graph: Graph, batch: int | None, precision: str, mode: str, host: str | None,
            constraints: Constraints, devices: list[str] | None, source: str,
            path: ServingPath | None = None) -> Selection:
    """The selection, or a problem (422; the GET answers it as a 400, ``as_bad_request``)."""
    candidates = _candidates(st, devices)
    profile = _host(st, candidates, host, mode)
    batch = graph.batch if batch is None else batch
    variants = [ResolvedVariant(p, p.device, batch, precision, mode, profile) for p in candidates]
    work_budget.check([graph], variants, st.config.max_work, field=source, max_results=st.config.max_results)
    try:
        return select(graph, candidates, batch, precision, mode, constraints, profile, path)
    except ValueError as exc:  # the graph cannot take the batch, or its sizes are out of the models' range
        raise ProblemError(422, f"{source}: {exc}", field=source, kind="cannot-predict") from None


def _choice_out(rank: int, c: DeviceChoice) -> DeviceChoiceOut:
    return DeviceChoiceOut(
        rank=rank, device=c.device, name=c.name, provenance=c.provenance,  # type: ignore[arg-type]
        meets=c.meets, reasons=list(c.reasons), latency_ms=c.latency_ms, low_ms=c.low_ms, high_ms=c.high_ms,
        p99_ms=c.p99_ms, p99_low_ms=c.p99_low_ms, p99_high_ms=c.p99_high_ms, throughput_qps=c.throughput_qps,
        memory_bytes=c.memory_bytes,
        device_memory_bytes=c.device_memory_bytes, price_per_hour=c.price_per_hour,
        cost_per_million=c.cost_per_million, model_version=c.model_version, host=c.host, warnings=list(c.warnings))


def _json(s: Selection) -> dict[str, Any]:
    return SelectionOut(
        model=s.model, batch=s.batch, precision=s.precision, mode=s.mode, host=s.host,
        slo_p99_ms=s.constraints.slo_p99_ms, min_throughput_qps=s.constraints.min_throughput_qps,
        serving_path=s.serving_path.answer_dict() if s.serving_path is not None else None,
        best=s.best.device if s.best else None, verdict=s.verdict, settled=s.settled, doubts=list(s.doubts),
        ranked=[_choice_out(i + 1, c) for i, c in enumerate(s.ranked)], skipped=dict(s.skipped),
    ).model_dump()


def _csv(s: Selection) -> str:
    """One row per device in rank order, as ``latpred select --format csv`` writes them
    (``predictor.selection_csv``)."""
    out = io.StringIO()
    write_selection_csv(s, out)
    return out.getvalue()
