"""``GET /v1/latency``: predictions for spreadsheets, in a URL short enough for Excel.

Excel's ``WEBSERVICE`` only GETs (URLs up to 2,048 characters) and wants one value:
``format=txt`` answers one plain number. Google Sheets' ``IMPORTDATA`` reads CSV:
``format=csv`` answers a header and one row per combination of the comma-separated values.
Answers carry an ETag (from the normalised query, the model versions and the host profiles'
contents) and Cache-Control, and a matching If-None-Match gets a 304 without predicting anything.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from dataclasses import replace
from typing import Any

from flask import Response, jsonify, request
from flask_openapi3 import APIBlueprint, Tag
from pydantic import ValidationError

from predictor.prediction import Prediction
from predictor.spreadsheet_cells import SpreadsheetWriter, fixed, safe_cell
from predictor.validation import validation_message
from predictor.variant import DEFAULT_MODE, DEFAULT_PRECISION, Variant
from service import predictions, work_budget
from service.etags import etag_of, matches
from service.host_header import HOST_HEADER, HOST_HEADER_DOC, host_header
from service.openapi import budgeted, documents, problems
from service.problems import ProblemError
from service.query_values import as_bad_request
from service.schemas.latency import CSV_COLUMNS, LatencyQuery
from service.state import state

api = APIBlueprint("latency", __name__, url_prefix="/v1",
                   abp_tags=[Tag(name="spreadsheets", description="GET URLs for Excel and Google Sheets")])

#: How answers are written, in the ETag: a cache that kept an answer written before CSV cells were
#: escaped (``spreadsheet_cells``) must not be told with a 304 that it is still good; nor one that kept
#: an eager answer for a profile probed without a GPU (or estimated from one), now predicted from its
#: estimate, nor a CPU's answer for an estimate of a GPU's host, now predicted from the CPU's own profile
#: (Predictor.host_for_device), nor one without the warning that its host was probed beside another
#: GPU (Predictor.probed_elsewhere).
RENDERING = ("escaped-cells-1 provenance gpu-less-hosts-estimated cpu-keeps-its-own-over-gpu-estimates "
             "default-host-elsewhere")

OK_RESPONSE = {
    "description": "json: a list of predictions (without layers); csv: a header and one row per combination; "
                   "txt: one number (ms) per combination, one per line",
    "content": {
        "application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Prediction"}}},
        "text/csv": {"schema": {"type": "string"}},
        "text/plain": {"schema": {"type": "string"}},
    },
    "headers": {HOST_HEADER: HOST_HEADER_DOC},
}


def _split(value: str | None, field: str) -> list[str]:
    if value is None:
        return []
    parts = [p.strip(" ") for p in value.split(",")]  # spaces only, as the document's patterns say
    if any(not p for p in parts):
        raise ProblemError(400, f"'{field}' has an empty item in {value!r}", field=field)
    return parts


def _values(value: str | None, field: str, default: str | None) -> list[Any]:
    """A comma-separated parameter's values, each checked by predictor's Variant rule for its
    field (a batch is digits, then a number in range; precision and mode are case-insensitive
    here, spreadsheets being typed by hand); ``default`` where the parameter is absent."""
    items = _split(value, field)
    if not items:
        return [default]
    out = []
    for item in items:
        # (a negative batch checked as the number it is: "must be at least 1", not "not an integer")
        raw: Any = int(item) if field == "batch" and re.fullmatch(r"-?[0-9]+", item) else item.lower()
        try:
            out.append(getattr(Variant.model_validate({field: raw}), field))
        except ValidationError as exc:
            raise ProblemError(400, validation_message(exc), field=field) from None
    return out


@api.get("/latency", responses={200: OK_RESPONSE, 304: {"description": "Not Modified (ETag matched)"},
                                **problems(400, 404, 503)})
@documents(Prediction)
@budgeted(400)
def latency(query: LatencyQuery) -> Response:
    """Latency for spreadsheets: every combination of the comma-separated parameter values.

    `model` (zoo names) and/or `graph` (stored ids; with neither, the grid is empty: a CSV of
    its header only); `device`, `batch` (default: the graph's own),
    `precision` (default fp16), `mode` (default cudagraph), `host` (host profile ids for eager
    rows; default: the bundle's). `format=csv` answers the columns model, device, batch,
    precision, mode, total_ms, low_ms, high_ms, model_version, host (the profile of an eager row,
    empty for a CUDA graph), provenance (measured, or transferred: a device never measured,
    predicted from its datasheet); `format=txt` one number (total_ms), or for a grid one per line in
    the CSV's row order. A grid whose estimated work is over the server's budget
    (`LATPRED_MAX_WORK`) is a 400 `work-budget` problem, before anything is predicted: ask for
    fewer combinations a URL.
    """
    with as_bad_request():
        return _latency(query)


def _latency(query: LatencyQuery) -> Response:
    st = state()
    models = _split(query.model, "model")
    graph_ids = _split(query.graph, "graph")
    # Resolve everything before predicting anything: a typo in the last value costs nothing.
    graphs = [("model", m, st.resolver.from_zoo(m, "model")) for m in models] + \
             [("graph", gid, st.resolver.from_id(gid, "graph")) for gid in graph_ids]
    devices = [predictions.resolve_device_id(st.registry, d) for d in (_split(query.device, "device") or (None,))]
    batches = _values(query.batch, "batch", None)
    precisions = _values(query.precision, "precision", DEFAULT_PRECISION)
    modes = _values(query.mode, "mode", DEFAULT_MODE)
    hosts: list[str | None] = list(_split(query.host, "host")) or [None]
    count = len(graphs) * len(devices) * len(batches) * len(precisions) * len(modes) * len(hosts)
    if count > st.config.max_results:
        raise ProblemError(400, f"these parameters make {count} combinations; at most {st.config.max_results} "
                                "per request (LATPRED_MAX_RESULTS)", field="batch")
    variants = {}
    for spec, h in itertools.product(devices, hosts):
        # the device and host once per pair (a stored profile is a file read), then each combination
        base = predictions.resolve_variant(st.registry, Variant(device=spec.device_id), host=h, store=st.host_store)
        for b, p, m in itertools.product(batches, precisions, modes):
            variants[(spec.device_id, b, p, m, h)] = replace(base, batch=b, precision=p, mode=m)
    versions = sorted({v.predictor.bundle.version for v in variants.values()})
    # the profiles' contents, not only their ids: an eager answer changes with the host's costs
    host_keys = sorted({str(v.host_key) for v in variants.values() if v.mode == "eager"})
    contents = [st.resolver.zoo_digest(name) if kind == "model" else name for kind, name, _ in graphs]
    canonical = json.dumps([[g[0], g[1].lower()] for g in graphs] + [contents, [d.device_id for d in devices],
                           batches, precisions, modes, hosts, query.format, versions, host_keys, RENDERING])
    etag = etag_of(canonical)
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={st.config.cache_max_age}"}
    if matches(request.headers.get("If-None-Match"), etag):
        return Response(status=304, headers=headers)
    # every graph on every variant: the grid (a 422 here is answered as a 400, by latency())
    field = "batch" if len(variants) > 1 or not graphs else graphs[0][0]
    work_budget.check([graph for _, _, graph in graphs], list(variants.values()), st.config.max_work, field=field,
                      max_results=st.config.max_results)
    rows = []
    for (_, _, graph), spec in itertools.product(graphs, devices):
        for b, p, m, h in itertools.product(batches, precisions, modes, hosts):
            result = predictions.predict(graph, variants[(spec.device_id, b, p, m, h)], cache=st.predictions,
                                         layers=False)
            predictions.record(st.metrics, result)
            rows.append(result.to_json(with_layers=False))
    response = _render(rows, query.format)
    response.headers.update({**headers, **host_header(row["host"] for row in rows)})
    return response


def _render(rows: list[dict[str, Any]], fmt: str) -> Response:
    """The predictions as ``fmt``: CSV cells escaped and quoted so that no spreadsheet runs one as a
    formula (``spreadsheet_cells``: a graph's name is whatever stored it chose); txt's one
    number likewise, though it is only ever a number."""
    if fmt == "txt":
        return Response("\n".join(safe_cell(f"{row['total_ms']:.4f}") for row in rows), mimetype="text/plain")
    if fmt == "csv":
        out = io.StringIO()
        writer = SpreadsheetWriter(out, lineterminator="\r\n")
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow([fixed(row[c]) if isinstance(row[c], float) else row[c] for c in CSV_COLUMNS])
        return Response(out.getvalue(), mimetype="text/csv")
    return jsonify(rows)
