"""``/livez``, ``/readyz`` and ``/metrics``: for orchestrators and Prometheus, outside ``/v1``."""

from __future__ import annotations

from flask import Response
from flask_openapi3 import APIBlueprint, Tag

from service.openapi import problems
from service.predictions import not_ready
from service.schemas.catalog import Live, Ready
from service.state import state

api = APIBlueprint("health", __name__, abp_tags=[Tag(name="health", description="liveness, readiness, metrics")])


@api.get("/livez", responses={200: Live})
def livez() -> dict:
    """The process answers (it may still be loading its models)."""
    return {"status": "alive"}


@api.get("/readyz", responses={200: Ready, **problems(503)})
def readyz() -> dict:
    """Ready once the model bundles are loaded; names the version served.

    503 (problem+json, with Retry-After) while they load or if none could be loaded. A worker
    whose bundle folder does not verify but which serves the last good bundle is ready, and says
    so in `fallbacks`.
    """
    snap = state().registry.snapshot
    versions = snap.versions()
    if not versions:
        raise not_ready(state().registry.state_detail())
    return {"status": "ready", "model_version": next(iter(versions.values())), "model_versions": versions,
            "fallbacks": dict(snap.fallbacks)}


@api.get("/metrics", responses={200: {"description": "Prometheus text format", "content": {
    "text/plain": {"schema": {"type": "string"}}}}})
def metrics() -> Response:
    """Prometheus metrics: requests and latency per endpoint, predictions, unsupported ops, model version."""
    body, content_type = state().metrics.render()
    return Response(body, content_type=content_type)
