"""The shipped serving paths a request may name, for every endpoint that takes ``serving_path``.

``GET /v1/capacity`` and ``POST|GET /v1/select`` both add a server's own time per batch when a
request names a shipped path (``predictor/capacity/serving_paths``); one lookup, so that both refuse an
unknown name alike and neither ever reads a file a request names.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping, Sequence

from predictor.capacity.serving_path import ServingPath, stored_serving_paths
from service.problems import ProblemError

#: the response header that names the serving path an answer includes ("none": the device's time
#: alone), so that format=txt, whose body is numbers or an id only, says it too
SERVING_PATH_HEADER = "Latpred-Serving-Path"


@functools.cache
def shipped_serving_paths() -> Mapping[str, ServingPath]:
    """The shipped serving paths, read once and shared read-only by every request (package data:
    they change with a new install, which restarts the service)."""
    return types.MappingProxyType(stored_serving_paths())


def named_serving_path(value: str | None) -> ServingPath | None:
    """The shipped serving path ``value`` names (spaces around it allowed, as around every value
    of a sheet's query), None without one, or a 400 naming ``serving_path`` that lists the names:
    only a name is looked up, so a file path is just a name that is not there."""
    if value is None:
        return None
    name = value.strip(" ")
    paths = shipped_serving_paths()
    if name not in paths:
        known = sorted(paths)
        raise ProblemError(400, f"serving_path: no shipped serving path named {name[:100]!r} (there are: "
                                f"{', '.join(known)})", field="serving_path", kind="unknown-serving-path",
                           serving_paths=known)
    return paths[name]


def serving_path_header(path: ServingPath | None) -> dict[str, str]:
    """The header that names the path an answer includes."""
    return {SERVING_PATH_HEADER: path.name if path is not None else "none"}


__all__: Sequence[str] = ["SERVING_PATH_HEADER", "named_serving_path", "serving_path_header",
                          "shipped_serving_paths"]
