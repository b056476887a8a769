"""The service's settings, read once from the environment so every worker agrees.

Each limit exists to keep one request from hurting the others: a body cap bounds memory, a node
cap bounds the work of one graph, a result cap bounds the work of one batch or spreadsheet grid.
A bad value is refused at start-up with the variable named, rather than found at the first request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from predictor.bundle import DEFAULT_BUNDLE_DIR

MIB = 1 << 20


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"environment variable {name}={raw!r} must be at least {minimum}")
    return value


@dataclass(frozen=True)
class ServiceConfig:
    """Where bundles, stored graphs and host profiles live, the API key, and the per-request limits."""

    bundle_dir: Path = DEFAULT_BUNDLE_DIR
    graph_store: Path = Path("runs/graph_store")
    #: host profiles posted to ``/v1/hosts``, one JSON file per id (never overwritten), which
    #: predictions name by ``host`` besides the profiles the bundles carry.
    host_store: Path = Path("runs/host_store")
    #: guards the writing endpoints (graph and host profile upload, model reload) when set; reads stay open.
    api_key: str | None = None
    #: request bodies above this are refused with 413 before they are read.
    max_body_bytes: int = 64 * MIB
    #: a graph with more nodes is refused (the largest zoo graph has about 1,400).
    max_nodes: int = 50_000
    #: results one batch request or one spreadsheet grid may ask for.
    max_results: int = 10_000
    #: seconds a spreadsheet GET may be cached (its ETag changes with the model version anyway).
    cache_max_age: int = 300
    #: graphs kept parsed in memory per worker (the zoo is always kept).
    graph_cache_size: int = 256
    #: seconds a prediction waits for a worker's first bundle load before answering 503.
    load_wait_s: int = 30

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ServiceConfig:
        """Settings from ``LATPRED_*`` variables, defaults otherwise."""
        env = os.environ if env is None else env
        return ServiceConfig(
            bundle_dir=Path(env.get("LATPRED_BUNDLES") or DEFAULT_BUNDLE_DIR),
            graph_store=Path(env.get("LATPRED_GRAPH_STORE") or "runs/graph_store"),
            host_store=Path(env.get("LATPRED_HOST_STORE") or "runs/host_store"),
            api_key=env.get("LATPRED_API_KEY") or None,
            max_body_bytes=_int(env, "LATPRED_MAX_BODY_BYTES", 64 * MIB),
            max_nodes=_int(env, "LATPRED_MAX_NODES", 50_000),
            max_results=_int(env, "LATPRED_MAX_RESULTS", 10_000),
            cache_max_age=_int(env, "LATPRED_CACHE_MAX_AGE", 300, minimum=0),
            graph_cache_size=_int(env, "LATPRED_GRAPH_CACHE", 256, minimum=0),
            load_wait_s=_int(env, "LATPRED_LOAD_WAIT_S", 30, minimum=0),
        )
