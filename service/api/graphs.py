"""``POST /v1/graphs`` stores a graph; ``GET /v1/graphs/{graph_id}`` returns it.

A stored graph is named by the sha256 of its canonical IR JSON, so a spreadsheet can name a
custom model in a short URL (``/v1/latency?graph=<id>``) and a NAS loop can send an id instead
of the same node list again. An ONNX upload is converted to IR on upload.
"""

from __future__ import annotations

from typing import Any

from flask import Response, request
from flask_openapi3 import APIBlueprint, Tag

from service.auth import guarded
from service.graph_store import GraphTooLargeError
from service.openapi import problem_ref, problems, request_bodies
from service.problems import ProblemError
from service.request_body import JSON, json_body, onnx_upload
from service.schemas.graphs import GraphIRBody, GraphPath, GraphStored, GraphUploadForm
from service.state import state

api = APIBlueprint("graphs", __name__, url_prefix="/v1",
                   abp_tags=[Tag(name="graphs", description="stored graphs, named by content hash")])


@api.post("/graphs", responses={200: GraphStored, 201: GraphStored, **problems(400, 413, 415, 422)})
@request_bodies(json=GraphIRBody, form=GraphUploadForm)
@guarded
def upload_graph() -> tuple[dict[str, Any], int, dict[str, str]]:
    """Store a graph (JSON IR body, or an ONNX file in multipart field `onnx`); returns its id.

    The id is the sha256 of the graph's canonical IR JSON: storing the same graph again returns
    the same id (200 instead of 201). A graph over `LATPRED_GRAPH_MAX_BYTES` of canonical JSON is
    a 413; past `LATPRED_GRAPH_STORE_MAX_BYTES` in all, the least recently used graphs are
    evicted (their ids are then unknown: store them again). Needs the API key, unless the
    server's writes are open (`LATPRED_OPEN_WRITES=1`, no key).
    """
    st = state()
    if request.mimetype == JSON:
        graph = st.resolver.from_ir(json_body(GraphIRBody).root, field="graph")
        field = "nodes"  # the body is the graph, and its nodes are nearly all of its bytes
    else:
        upload = onnx_upload()
        form = GraphUploadForm.model_validate({**request.form.to_dict(), "onnx": upload})
        graph = st.resolver.from_onnx(upload.read(), form.name, form.batch, form.dims)
        field = "onnx"
    try:
        gid, created = st.store.put(graph)
    except GraphTooLargeError as exc:
        raise ProblemError(413, f"the graph is {exc.size} bytes as canonical IR JSON; this server stores graphs "
                                f"of at most {exc.limit} bytes (LATPRED_GRAPH_MAX_BYTES)", field=field,
                           kind="graph-too-large-to-store", limit=exc.limit) from None
    url = f"/v1/graphs/{gid}"
    body = {"id": gid, "name": graph.name, "nodes": len(graph.nodes), "batch": graph.batch, "created": created,
            "url": url}
    return body, 201 if created else 200, {"Location": url}


@api.get("/graphs/<graph_id>", responses={200: {"description": "the stored graph IR", "content": {
    "application/json": {"schema": {"type": "object"}}}}, 404: {"description": "Not Found",
                                                                "content": problem_ref()}, **problems(400)})
def get_graph(path: GraphPath) -> Response:
    """The stored graph's canonical IR JSON."""
    try:
        data = state().store.raw(path.graph_id)
    except KeyError:
        raise ProblemError(404, f"no stored graph with id {path.graph_id} (never stored, or evicted as the least "
                                "recently used when the store was full: store it again)", field="graph_id") from None
    return Response(data, mimetype="application/json",
                    headers={"Cache-Control": "public, max-age=31536000, immutable"})
