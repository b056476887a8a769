"""Finding the host profile a prediction is for: a file, or an id among the profiles known here.

Known profiles are the ones a bundle carries (the host that measured it, its default, and the
other hosts of its dataset) and the ones stored in a ``HostStore`` (``latpred host probe --save``
writes to the user's; the service keeps its own, filled by ``POST /v1/hosts``). The CLI and the
service resolve ``--host`` / ``host`` the same way, with errors that name what was asked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from predictor.bundle import Bundle
from predictor.host_profile import ID_PATTERN, HostProfile, HostStore, UnknownHostError, load_profile, parse_profile

#: where ``latpred host probe --save`` stores profiles and ``--host ID`` looks (``LATPRED_HOSTS_DIR``)
USER_HOSTS_ENV = "LATPRED_HOSTS_DIR"


def user_store() -> HostStore:
    """The user's own store of host profiles: ``$LATPRED_HOSTS_DIR``, or ~/.config/latpred/hosts."""
    folder = os.environ.get(USER_HOSTS_ENV) or Path.home() / ".config" / "latpred" / "hosts"
    return HostStore(Path(folder))


def bundle_profiles(bundle: Bundle) -> dict[str, HostProfile]:
    """The profiles a bundle carries, by id: its default first."""
    found: dict[str, HostProfile] = {}
    default = bundle.metadata.get("host_profile")
    for data in [default, *bundle.metadata.get("host_profiles", {}).values()]:
        if data is not None:
            profile = parse_profile(data)
            found.setdefault(profile.id, profile)
    return found


def resolve_host(spec: str, bundle: Bundle | Sequence[Bundle], stores: Sequence[HostStore] = ()) -> HostProfile:
    """The profile ``spec`` names: a JSON file (a path that exists, or one ending in .json), or
    an id (``host_by_id``). An id may end in .json too (``POST /v1/hosts`` stores ``box.json``):
    a name ending so that is no file here, and has no separator, is looked up as an id. Raises
    ``UnknownHostError`` for an id found nowhere, ``HostProfileError`` for a file that is not a
    valid profile."""
    path = Path(spec)
    if os.sep in spec or path.is_file():
        return load_profile(path)
    if spec.endswith(".json"):
        try:
            return host_by_id(spec, bundle, stores)
        except UnknownHostError:  # neither an id nor a file: the file's error names what is missing
            return load_profile(path)
    return host_by_id(spec, bundle, stores)


def host_by_id(host_id: str, bundle: Bundle | Sequence[Bundle], stores: Sequence[HostStore] = ()) -> HostProfile:
    """The profile with id ``host_id``: one the bundle carries (or the first of several bundles
    that does: a GPU's host named beside a CPU's bundle), else one of ``stores`` holds. An id
    only, never a path (a service must not read a file a request names); ``UnknownHostError``
    names the id and the known ones, or says it is not an id at all."""
    if not re.match(ID_PATTERN, host_id):
        raise UnknownHostError(f"{host_id!r} is not a host profile id (letters, digits, '.', '_', '-'; at most 64)")
    known: list[str] = []
    seen: set[int] = set()
    for one in [bundle] if isinstance(bundle, Bundle) else bundle:  # in order, each bundle once, until found
        if id(one) in seen:
            continue
        seen.add(id(one))
        carried = bundle_profiles(one)
        if host_id in carried:
            return carried[host_id]
        known += carried
    for store in stores:
        try:
            return store.get(host_id)
        except UnknownHostError:
            continue
    known += [i for store in stores for i in store.ids()]
    listed = ", ".join(list(dict.fromkeys(known))[:12]) or "none"
    raise UnknownHostError(f"no host profile {host_id!r} is known (known: {listed}; "
                           "probe one with 'latpred host probe')")
