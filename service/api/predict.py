"""``POST /v1/predict`` (one graph) and ``POST /v1/predict/batch`` (many graphs x many variants).

A graph comes as JSON IR, a zoo name or a stored id in a JSON body, or as an ONNX file in a
multipart/form-data upload (file field ``onnx``, the variant in form fields). The batch endpoint
is for NAS loops: every graph is resolved once and every variant checked once, then each pair is
predicted; a pair that fails carries a problem object in its place and the others still run.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import request
from flask_openapi3 import APIBlueprint, Tag
from pydantic import ValidationError

from predictor.graph import GRAPH_ADAPTER, Graph
from predictor.prediction import Prediction
from service import predictions, work_budget
from service.graph_names import check_graph_name
from service.openapi import budgeted, documents, json_response, problems, request_bodies
from service.predictions import ResolvedVariant
from service.problems import ProblemError, validation_problem
from service.request_body import JSON, json_body, onnx_upload, strict_loads
from service.schemas.predict import BatchRequest, BatchResponse, PredictForm, PredictRequest
from service.state import state

log = logging.getLogger("latpred.service")
api = APIBlueprint("predict", __name__, url_prefix="/v1",
                   abp_tags=[Tag(name="predict", description="latency of graphs on devices")])


@api.post("/predict", responses={200: json_response(Prediction), **problems(400, 404, 413, 415, 422, 503)})
@request_bodies(json=PredictRequest, form=PredictForm)
@documents(Prediction)
@budgeted(422)
def predict() -> dict[str, Any]:
    """Predict one graph's latency on one device, batch, precision and mode.

    JSON body: exactly one of `graph` (JSON IR), `model` (zoo name) or `graph_id` (stored), plus
    the variant and, for eager mode, optionally the `host` profile's id (default: the bundle's;
    the answer's `host` names the one used). Or multipart/form-data with the ONNX file in field
    `onnx`, the variant (and `host`) as form fields, and the model's symbolic dims in `dims`
    (`{"sequence": 256}` or `sequence=256`; a JSON body has no `dims`: its graph's shapes are
    numbers already). Answers the total with its interval, the per-layer breakdown (unless
    `layers` is false), the operators no model covers, warnings, and the inputs that produced it.
    A graph whose estimated work is over the server's budget (`LATPRED_MAX_WORK`) is a 422
    `work-budget` problem, before anything is predicted.
    """
    st = state()
    named = False
    body: PredictRequest | PredictForm
    if request.mimetype == JSON:
        body = json_body(PredictRequest)
        graph = st.resolver.resolve(body)
        named = body.graph is None
        source = "graph" if body.graph is not None else "model" if body.model is not None else "graph_id"
    else:
        fields: dict[str, Any] = {k: v for k, v in request.form.items()}
        upload = onnx_upload()
        form = PredictForm.model_validate({**fields, "onnx": upload})
        graph = st.resolver.from_onnx(upload.read(), form.name, form.batch, form.dims)
        body = form
        source = "onnx"
    variant = predictions.resolve_variant(st.registry, body, host=body.host, store=st.host_store)
    work_budget.check([graph], [variant], st.config.max_work, field=source, max_results=st.config.max_results)
    result = predictions.predict(graph, variant, cache=st.predictions if named else None, layers=body.layers)
    predictions.record(st.metrics, result)
    return result.to_json(body.layers)


@api.post("/predict/batch", responses={200: BatchResponse, **problems(400, 404, 413, 415, 422, 503)})
@request_bodies(json=BatchRequest)
@budgeted(422)
def predict_batch() -> dict[str, Any]:
    """Predict many graphs, each on every variant, in one request (for NAS loops).

    One result per (graph, variant), graph-major: `results[i * len(variants) + j]` is graph i on
    variant j; each variant may name its `host` profile. A graph or variant that cannot be
    predicted gives `problem` objects in its results instead of failing the request; a
    malformed request is still a 4xx, and so is one whose estimated work is over the server's
    budget (`LATPRED_MAX_WORK`: a 422 `work-budget` problem, before anything is predicted; send
    fewer graphs or variants a request).
    """
    st = state()
    body, refused = _batch_body()
    for i, source in enumerate(body.graphs):  # the document's name rule: a broken one refuses the whole body
        if source.graph is not None and i not in refused:
            check_graph_name(source.graph.name, f"graphs[{i}].graph.name")
    total = len(body.graphs) * len(body.variants)
    if total > st.config.max_results:
        raise ProblemError(422, f"{len(body.graphs)} graphs x {len(body.variants)} variants = {total} results; "
                                f"this server answers at most {st.config.max_results} per request "
                                "(LATPRED_MAX_RESULTS)", field="graphs", kind="too-many-results")
    st.registry.wait_first_load(st.registry.load_wait_s)
    if not st.registry.snapshot.loaded:
        raise predictions.not_ready(st.registry.state_detail())
    variants: list[ResolvedVariant | ProblemError] = []
    for j, v in enumerate(body.variants):
        try:
            variants.append(predictions.resolve_variant(st.registry, v, prefix=f"variants[{j}]", host=v.host,
                                                        store=st.host_store))
        except ProblemError as exc:
            if exc.status == 503:
                raise
            variants.append(exc)
    graphs: list[Graph | ProblemError] = []
    named = [source.graph is None for source in body.graphs]
    for i, source in enumerate(body.graphs):
        try:
            graphs.append(refused[i] if i in refused else st.resolver.resolve(source, prefix=f"graphs[{i}]"))
        except ProblemError as exc:
            graphs.append(exc)
    work_budget.check([g for g in graphs if not isinstance(g, ProblemError)],
                      [v for v in variants if not isinstance(v, ProblemError)], st.config.max_work,
                      field="graphs", max_results=st.config.max_results)
    _prefetch(graphs, variants)
    results: list[dict[str, Any]] = []
    failed = 0
    for i, graph in enumerate(graphs):
        for j, variant in enumerate(variants):
            item: dict[str, Any] = {"graph": i, "variant": j}
            problem = graph if isinstance(graph, ProblemError) else variant if isinstance(variant, ProblemError) \
                else None
            if problem is None:
                try:
                    result = predictions.predict(graph, variant, field=f"graphs[{i}]",  # type: ignore[arg-type]
                                                 cache=st.predictions if named[i] else None,
                                                 layers=body.layers)
                    predictions.record(st.metrics, result)
                    item["prediction"] = result.to_json(body.layers)
                except ProblemError as exc:
                    problem = exc
                except Exception as exc:  # one item's bug must not lose the other results
                    log.exception("batch item graphs[%d] x variants[%d] failed", i, j)
                    problem = ProblemError(500, f"unexpected {type(exc).__name__}: the error was logged",
                                           field=f"graphs[{i}]")
            if problem is not None:
                failed += 1
                item["problem"] = problem.to_dict()
            results.append(item)
    if failed:
        st.metrics.prediction_errors.inc(failed)
    return {"results": results, "count": len(results), "failed": failed}


#: what stands in the request for an inline graph refused on its own (its item answers the problem)
_REFUSED_SOURCE = {"model": "refused-inline-graph"}


def _batch_body() -> tuple[BatchRequest, dict[int, ProblemError]]:
    """The batch request, parsed and checked once; and, by index, the inline graphs that only
    the IR's own checks refuse (a kernel's parameters, a node name used twice), each its item's
    problem, as for a zoo name that does not exist: the other graphs are still answered. A body
    that breaks the schema anywhere is refused whole. Only a refused body is parsed again."""
    try:
        return json_body(BatchRequest), {}
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if not all(e["type"] == "value_error" and e["loc"][:1] == ("graphs",) and e["loc"][2:3] == ("graph",)
                   for e in errors):
            raise
        items = sorted({int(e["loc"][1]) for e in errors})
    data = strict_loads(request.get_data(cache=True))
    refused: dict[int, ProblemError] = {}
    for i in items:
        name = data["graphs"][i]["graph"].get("name")
        if isinstance(name, str):  # the document's name rule refuses the whole body, as in predict_batch
            check_graph_name(name, f"graphs[{i}].graph.name")
        try:
            GRAPH_ADAPTER.validate_python(data["graphs"][i]["graph"])
        except ValidationError as graph_exc:
            refused[i] = validation_problem(graph_exc, prefix=f"graphs[{i}].graph")
            data["graphs"][i] = _REFUSED_SOURCE
    return BatchRequest.model_validate(data), refused


def _prefetch(graphs: list[Graph | ProblemError], variants: list[ResolvedVariant | ProblemError]) -> None:
    """Let each device's predictor evaluate the whole request's new kernels in one pass."""
    by_predictor: dict[int, tuple[Any, list[tuple[Graph, int | None, str, str]]]] = {}
    for variant in variants:
        if isinstance(variant, ProblemError):
            continue
        entry = by_predictor.setdefault(id(variant.predictor), (variant.predictor, []))
        entry[1].extend((g, variant.batch, variant.precision, variant.mode)
                        for g in graphs if not isinstance(g, ProblemError))
    for predictor, requests in by_predictor.values():
        try:
            predictor.prefetch(requests)
        except Exception:  # a graph the boosters refuse is reported per item by predict()
            log.exception("prefetching a batch failed; predicting item by item")
