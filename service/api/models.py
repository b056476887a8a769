"""``GET /v1/models`` (zoo graphs and loaded bundles) and ``POST /v1/models/reload``."""

from __future__ import annotations

from typing import Any

from flask_openapi3 import APIBlueprint, Tag

from service.auth import guarded
from service.openapi import problems
from service.problems import ProblemError
from service.registry import Snapshot
from service.schemas.catalog import ModelsResponse, ReloadResponse
from service.state import state

api = APIBlueprint("models", __name__, url_prefix="/v1", abp_tags=[Tag(name="catalog")])


def _served(snap: Snapshot) -> dict[str, Any]:
    return {"bundles": [{"device": d, "version": v} for d, v in snap.versions().items()],
            "errors": dict(snap.errors), "fallbacks": dict(snap.fallbacks)}


@api.get("/models", responses={200: ModelsResponse})
def models() -> dict[str, Any]:
    """Zoo graph names (usable as `model`) and the model bundle loaded per device."""
    return {"zoo": state().resolver.zoo_names(), **_served(state().registry.snapshot)}


@api.post("/models/reload", responses={200: ReloadResponse, **problems(409)})
@guarded
def reload_models() -> dict[str, Any]:
    """Verify the bundles on disk and switch to them at once.

    Each bundle is verified whole before it is switched to: its model files against their
    checksums, its load, and a smoke prediction of a small zoo graph in each mode. A bundle that
    fails is not switched to: the answer is 409 (problem+json) naming the device, the file and
    the reason, its device keeps serving its last good bundle, and a worker that starts later
    loads that one, not the broken folder. Devices whose bundles verify are switched either way.
    Every gunicorn worker follows within about a second. Needs the API key, unless the server's
    writes are open (`LATPRED_OPEN_WRITES=1`, no key).
    """
    registry = state().registry
    snap = registry.load()
    if set(snap.ids) - set(snap.fallbacks):  # some bundle verified: the other workers take it too
        registry.announce_reload()
    if snap.errors:
        reasons = "; ".join(f"{device}: {why}" for device, why in snap.errors.items())
        kept = "; ".join(f"{device}: {what}" for device, what in snap.fallbacks.items())
        raise ProblemError(409, f"the bundle on disk does not verify, so it was not switched to: {reasons}"
                           + (f". Still served: {kept}" if kept else ""),
                           kind="bundle-invalid", title="Bundle does not verify", failed=dict(snap.errors),
                           bundles=_served(snap)["bundles"], fallbacks=dict(snap.fallbacks))
    return {"zoo": state().resolver.zoo_names(), **_served(snap), "reloaded": True}
