"""``GET /v1/models`` (zoo graphs and loaded bundles) and ``POST /v1/models/reload``."""

from __future__ import annotations

from typing import Any

from flask_openapi3 import APIBlueprint, Tag

from service.auth import guarded
from service.registry import Snapshot
from service.schemas.catalog import ModelsResponse, ReloadResponse
from service.state import state

api = APIBlueprint("models", __name__, url_prefix="/v1", abp_tags=[Tag(name="catalog")])


def _describe(snap: Snapshot) -> dict[str, Any]:
    return {"zoo": state().resolver.zoo_names(),
            "bundles": [{"device": d, "version": v} for d, v in snap.versions().items()],
            "errors": dict(snap.errors)}


@api.get("/models", responses={200: ModelsResponse})
def models() -> dict[str, Any]:
    """Zoo graph names (usable as `model`) and the model bundle loaded per device."""
    return _describe(state().registry.snapshot)


@api.post("/models/reload", responses={200: ReloadResponse})
@guarded
def reload_models() -> dict[str, Any]:
    """Reload the model bundles from disk and swap them in at once.

    Every gunicorn worker follows within about a second. A device whose new bundle fails to load
    keeps the old one, and `errors` says why. Needs the API key, unless the server's writes are open
    (`LATPRED_OPEN_WRITES=1`, no key).
    """
    registry = state().registry
    snap = registry.load()
    registry.announce_reload()
    return {**_describe(snap), "reloaded": True}
