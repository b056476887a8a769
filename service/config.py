"""The service's settings, read once from the environment so every worker agrees.

Each limit exists to keep one request from hurting the others: a body cap bounds memory, a node
cap bounds the work of one graph, a result cap bounds the work of one batch or spreadsheet grid,
and a work budget bounds their product (``service.work_budget``: nodes x variants, new kernels
weighted).
A bad value is refused at start-up with the variable named, rather than found at the first request.

What the service writes (stored graphs, host profiles, the last good bundle of each device)
lives under one data directory, ``LATPRED_DATA_DIR``, by default the user's XDG data folder
(``~/.local/share/latpred``), never the working directory: a server started from another folder
must find the same graphs, and a checkout must not fill up with what clients sent. The graph
store is capped in total and per graph, since anyone who may write could otherwise fill the disk.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from predictor.bundle import DEFAULT_BUNDLE_DIR
from predictor.capacity.planner import DEFAULT_BUDGET as DEFAULT_MAX_SIMULATED, REQUESTS as PLAN_RUN_REQUESTS

MIB = 1 << 20
GIB = 1 << 30
#: booleans a ``LATPRED_*`` switch may be set to (case-insensitive); "" counts as unset.
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: ``LATPRED_MAX_WORK``'s default, in node evaluations (``service.work_budget``): 1-2 s of CPU
#: where ``benchmarks/work_budget.py`` calibrated it (0.5-1 us a unit). Every documented use fits under it (README's
#: grids, a NAS batch of 100 new 100-node graphs x 4 variants, the benchmarks' requests, one graph
#: at LATPRED_MAX_NODES with every kernel new); 5,000 distinct nodes x 40 batches (4.2 million) does not.
DEFAULT_MAX_WORK = 2_000_000


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/latpred``, else ``~/.local/share/latpred`` (the XDG default): a per-user
    place that does not depend on the folder the server was started from. A relative
    ``XDG_DATA_HOME`` is ignored, as the XDG specification asks."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_DATA_HOME") or ""
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "latpred"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "share" / "latpred"


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE or raw == "":
        return False
    raise ValueError(f"environment variable {name}={env.get(name)!r} is not a boolean "
                     "(1/0, true/false, yes/no, on/off)")


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return Path(raw).expanduser() if raw else None


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
    """Where bundles, stored graphs and host profiles live, who may write, and the per-request limits."""

    bundle_dir: Path = DEFAULT_BUNDLE_DIR
    #: the folder the service writes to; the stores below default to folders in it.
    data_dir: Path = field(default_factory=default_data_dir)
    #: stored graphs (``POST /v1/graphs``); default ``data_dir / "graphs"``.
    graph_store: Path = None  # type: ignore[assignment]  # filled from data_dir in __post_init__
    #: host profiles posted to ``/v1/hosts``, one JSON file per id (never overwritten), which
    #: predictions name by ``host`` besides the profiles the bundles carry; default ``data_dir / "hosts"``.
    host_store: Path = None  # type: ignore[assignment]  # filled from data_dir in __post_init__
    #: the key the writing endpoints (graph and host profile upload, model reload) want; reads stay open.
    api_key: str | None = None
    #: with no key, allow writes from anyone (an explicit choice: without it and without a key,
    #: writes are refused, so a server reachable by others is never writable by accident).
    open_writes: bool = False
    #: bytes of stored graph JSON kept in all; past it the least recently used graphs are evicted.
    graph_store_max_bytes: int = GIB
    #: bytes of canonical JSON one stored graph may have (a graph at the node cap is about 10 MB).
    graph_max_bytes: int = 16 * MIB
    #: request bodies above this are refused with 413 before they are read.
    max_body_bytes: int = 64 * MIB
    #: a graph with more nodes is refused (the largest zoo graph has about 1,400).
    max_nodes: int = 50_000
    #: results one batch request or one spreadsheet grid may ask for.
    max_results: int = 10_000
    #: node evaluations one prediction request may cost, estimated before predicting (service.work_budget).
    max_work: int = DEFAULT_MAX_WORK
    #: requests one capacity request (``GET /v1/capacity``, a grid of plans) may simulate: by default
    #: one plan's own budget (``predictor.capacity.planner.DEFAULT_BUDGET``, a few seconds of CPU).
    max_simulated: int = DEFAULT_MAX_SIMULATED
    #: seconds and bytes (address space above its own) one ONNX upload's import may take, in a
    #: child process that is killed past either (service.onnx_budget): the bombs of issue #13
    #: take under 0.2 s and 50 MiB, a 100,000-node export about a second
    onnx_import_seconds: int = 5
    onnx_import_max_bytes: int = GIB
    #: seconds a spreadsheet GET may be cached (its ETag changes with the model version anyway).
    cache_max_age: int = 300
    #: graphs kept parsed in memory per worker (the zoo is always kept).
    graph_cache_size: int = 256
    #: seconds a prediction waits for a worker's first bundle load before answering 503.
    load_wait_s: int = 30

    def __post_init__(self) -> None:
        if self.graph_store is None:
            object.__setattr__(self, "graph_store", Path(self.data_dir) / "graphs")
        if self.host_store is None:
            object.__setattr__(self, "host_store", Path(self.data_dir) / "hosts")
        if self.graph_max_bytes > self.graph_store_max_bytes:
            raise ValueError(f"LATPRED_GRAPH_MAX_BYTES={self.graph_max_bytes} is more than the whole store may hold "
                             f"(LATPRED_GRAPH_STORE_MAX_BYTES={self.graph_store_max_bytes})")

    @property
    def last_good_dir(self) -> Path:
        """Where the last bundle of each device that verified is kept (``service.last_good``), for
        workers that start while the bundle folder is broken; in ``data_dir``, which every worker shares."""
        return Path(self.data_dir) / "last-good-bundles"

    @property
    def writes_need_key(self) -> bool:
        """Whether a writing endpoint wants a key: always, unless no key is set and writes are open."""
        return bool(self.api_key) or not self.open_writes

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ServiceConfig:
        """Settings from ``LATPRED_*`` variables, defaults otherwise."""
        env = os.environ if env is None else env
        data_dir = _path(env, "LATPRED_DATA_DIR") or default_data_dir(env)
        return ServiceConfig(
            bundle_dir=Path(env.get("LATPRED_BUNDLES") or DEFAULT_BUNDLE_DIR),
            data_dir=data_dir,
            graph_store=_path(env, "LATPRED_GRAPH_STORE") or data_dir / "graphs",
            host_store=_path(env, "LATPRED_HOST_STORE") or data_dir / "hosts",
            api_key=env.get("LATPRED_API_KEY") or None,
            open_writes=_bool(env, "LATPRED_OPEN_WRITES"),
            graph_store_max_bytes=_int(env, "LATPRED_GRAPH_STORE_MAX_BYTES", GIB),
            graph_max_bytes=_int(env, "LATPRED_GRAPH_MAX_BYTES", 16 * MIB),
            max_body_bytes=_int(env, "LATPRED_MAX_BODY_BYTES", 64 * MIB),
            max_nodes=_int(env, "LATPRED_MAX_NODES", 50_000),
            max_results=_int(env, "LATPRED_MAX_RESULTS", 10_000),
            max_work=_int(env, "LATPRED_MAX_WORK", DEFAULT_MAX_WORK),
            max_simulated=_int(env, "LATPRED_MAX_SIMULATED", DEFAULT_MAX_SIMULATED,
                               minimum=PLAN_RUN_REQUESTS),
            onnx_import_seconds=_int(env, "LATPRED_ONNX_IMPORT_SECONDS", 5),
            onnx_import_max_bytes=_int(env, "LATPRED_ONNX_IMPORT_MAX_BYTES", GIB, minimum=64 * MIB),
            cache_max_age=_int(env, "LATPRED_CACHE_MAX_AGE", 300, minimum=0),
            graph_cache_size=_int(env, "LATPRED_GRAPH_CACHE", 256, minimum=0),
            load_wait_s=_int(env, "LATPRED_LOAD_WAIT_S", 30, minimum=0),
        )
