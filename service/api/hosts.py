"""``/v1/hosts``: the host profiles an eager prediction can be for, and adding one.

Eager latency is a function of the GPU *and* the host that issues its kernels (two H200
machines of one kind came out 0.38x to 1.14x apart eagerly), so a prediction names its host by
id. The ids a request can use are the profiles the served bundles carry and the ones posted
here (``latpred host probe`` measures one in seconds). A stored profile is never overwritten:
predictions and datasets name profiles by id, so an id must keep meaning one profile.
"""

from __future__ import annotations

import re
from typing import Any

from flask import request
from flask_openapi3 import APIBlueprint, Tag
from flask_openapi3.types import ResponseDict

from predictor.device_bundles import TRANSFER_BUNDLE
from predictor.host_lookup import bundle_profiles
from predictor.host_profile import HostConflictError, HostProfile, HostProfileError, UnknownHostError, parse_profile
from service import predictions
from service.auth import guarded
from service.openapi import problem_ref, problems, request_bodies
from service.problems import ProblemError
from service.request_body import strict_loads
from service.schemas.hosts import HostAnswer, HostPath, HostsResponse
from service.state import state

api = APIBlueprint("hosts", __name__, url_prefix="/v1", abp_tags=[Tag(
    name="hosts", description="host profiles: what one call of each kind costs the CPU that issues an eager "
                              "forward's kernels")])

CONFLICT: ResponseDict = {409: {"description": "Conflict", "content": problem_ref()}}
NOT_FOUND: ResponseDict = {404: {"description": "Not Found", "content": problem_ref()}}
#: the field a HostProfileError's message starts with ("costs_us: missing kind(s) conv: ...")
_LEADING_FIELD = re.compile(r"^([A-Za-z_][\w.\[\]]*): ")


def _url(host_id: str) -> str:
    return f"/v1/hosts/{host_id}"


def _carried() -> list[tuple[str, HostProfile, bool]]:
    """(bundle, profile, whether it is the bundle's default) for every profile the served
    bundles carry, each bundle's default first; a bundle is named by its device, or 'transfer'.
    Waits for the first load: before it, a listing
    would say the bundles carry nothing, and a POST could take an id a bundle is about to bring."""
    registry = state().registry
    registry.wait_first_load(registry.load_wait_s)
    snapshot = registry.snapshot
    if not snapshot.loaded:
        raise predictions.not_ready(registry.state_detail())
    found: list[tuple[str, HostProfile, bool]] = []
    seen: set[int] = set()
    for device, predictor in snapshot.predictors.items():
        if id(predictor.bundle) in seen:  # the transfer bundle predicts many devices: its profiles once
            continue
        seen.add(id(predictor.bundle))
        owner = TRANSFER_BUNDLE if predictor.bundle.transfer is not None else device
        default = predictor.host.id if predictor.host is not None else None
        found.extend((owner, p, p.id == default) for p in bundle_profiles(predictor.bundle).values())
    return found


def _answer(profile: HostProfile, source: str, devices: list[str], created: bool | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"profile": profile.model_dump(mode="json"), "source": source, "devices": devices,
                            "url": _url(profile.id)}
    if created is not None:
        body["created"] = created
    return body


@api.post("/hosts", responses={200: HostAnswer, 201: HostAnswer, **CONFLICT,
                               **problems(400, 413, 415, 422, 503)})
@request_bodies(json=HostProfile)
@guarded
def upload_host() -> tuple[dict[str, Any], int, dict[str, str]]:
    """Store a host profile (the JSON `latpred host probe` writes); predictions then name it by `host`.

    201 for a new id, 200 when the same profile is already known (stored, or carried by a
    bundle). A different profile under a known id is a 409: profiles are never overwritten,
    since predictions and datasets name them by id; give it another id. An invalid profile is a
    422 naming the field (an unknown `schema_version` first). Needs the API key, unless the
    server's writes are open (`LATPRED_OPEN_WRITES=1`, no key).
    """
    st = state()
    try:
        profile = parse_profile(strict_loads(request.get_data(cache=True)))
    except HostProfileError as exc:
        message = str(exc)
        match = _LEADING_FIELD.match(message)
        raise ProblemError(422, message, field=match.group(1) if match else None,
                           kind="invalid-host-profile") from None
    url = _url(profile.id)
    carried = [(device, p) for device, p, _ in _carried() if p.id == profile.id]
    if carried:
        if any(p != profile for _, p in carried):
            raise ProblemError(409, f"a model bundle carries a different host profile {profile.id!r}: profiles are "
                                    "never overwritten; give this one another id", field="id",
                               kind="host-conflict")
        return _answer(profile, "bundle", [d for d, _ in carried], created=False), 200, {"Location": url}
    try:
        created = st.host_store.put(profile)
    except HostConflictError as exc:
        raise ProblemError(409, str(exc), field="id", kind="host-conflict") from None
    return _answer(profile, "stored", [], created=created), 201 if created else 200, {"Location": url}


@api.get("/hosts", responses={200: HostsResponse, **problems(503)})
def list_hosts() -> dict[str, Any]:
    """The host profiles a prediction's `host` can name: the bundles' and the stored ones.

    Each bundle's profiles come first, its default marked (the host an eager prediction is for
    when a request names none), then the stored ones by id. A bundle's profile wins over a
    stored one of the same id. A stored file this latpred cannot read as a profile (damaged, or
    written by a newer latpred) is listed under `unreadable` with why, not among the profiles.
    """
    fields = ("id", "label", "cpu_model", "cpu_cores", "gpu", "measured_at", "costs_us", "forward_spread")
    rows = [{**profile.model_dump(mode="json", include=set(fields)), "source": "bundle", "device": device,
             "default": default, "url": _url(profile.id)} for device, profile, default in _carried()]
    store = state().host_store  # (its profiles by id: a stray file in the folder is none, and no 500)
    unreadable = []
    for host_id in store.ids():
        try:
            profile = store.get(host_id)
        except HostProfileError as exc:  # one damaged (or newer) file must not take the listing down
            unreadable.append({"id": host_id, "problem": predictions.unreadable_why(exc)})
            continue
        rows.append({**profile.model_dump(mode="json", include=set(fields)), "source": "stored", "device": None,
                     "default": False, "url": _url(profile.id)})
    return {"hosts": rows, "unreadable": unreadable}


@api.get("/hosts/<host_id>", responses={200: HostAnswer, **NOT_FOUND, **problems(400, 503)})
def get_host(path: HostPath) -> dict[str, Any]:
    """One host profile by id: a bundle's, else a stored one."""
    carried = [(device, p) for device, p, _ in _carried() if p.id == path.host_id]
    if carried:
        first = carried[0][1]
        return _answer(first, "bundle", [d for d, p in carried if p == first])
    try:
        return _answer(state().host_store.get(path.host_id), "stored", [])
    except HostProfileError as exc:
        raise predictions.unreadable_host(path.host_id, exc, "host_id") from None
    except UnknownHostError:
        raise ProblemError(404, f"no host profile {path.host_id!r} is known: GET /v1/hosts lists them",
                           field="host_id") from None
