"""What a server adds to each batch beyond the model's own time: its serving path.

latpred predicts what the GPU takes for a batch. A real server takes longer: Triton's time for a
batch (its trace's ``COMPUTE_START`` to ``COMPUTE_END``, and the instance's turnaround to the next
batch) is the model's time plus the work of handing the batch to the model and the answers back.
Measured through PyTriton (tritonserver 2.51, nvidia-pytriton 0.7.0) on eight H100 hosts
(``datasets/nvidia-h100-80gb-hbm3/serving-triton*``, ``benchmarks/serving_path.py``), that work was
1.1-2.5 ms a batch plus 0.15-0.27 ms a request in it (per host), over CUDA-graph replays of 0.6-15 ms:
latency planned from the GPU's time alone put p99 at 0.01-0.44x of what Triton served (no load of 105
within 10%). The per-request part held from host to host; the per-batch part was a property of the
host (the models one host served agreed within 0.1-0.5 ms, the hosts spanned 1.1-2.5 ms), which is
why a path measured on the serving host (``latpred serving-path`` on loads that ``latpred collect
serving --server triton`` measured there, of the empty model or any other) beats one fitted across
hosts, and why a fitted path carries the hosts' range as its interval. A tenth host
(``serving-triton-blind8``) paid 2.6 ms a batch + 0.32 ms a request fitted on its models (2.78 +
0.35 on its empty model), above every other: plans made for it with the path fitted on the other
hosts all came out optimistic, so a fitted path carries
that caution (``ServingPath.caution``) into every plan's answer.

A :class:`ServingPath` adds ``per_batch_ms + per_request_ms * requests`` to every batch's median,
widens the batch's spread to at least the path's (``sigma``, the spread of whole served batches),
and adds the path's fast and slow ends (``low``, ``high``) to the prediction's interval ends. It can
also carry the host's pauses (:class:`~predictor.capacity.host_stalls.HostStalls`) and its drift
(:class:`~predictor.capacity.service_drift.ServiceDrift`: how its batches' times move together),
which the simulator replays in wall-clock time. One request is one sample, as everywhere in the planner.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.service_drift import ServiceDrift
from predictor.capacity.simulator import HostEnd, LatencyModel, PlanFor

SCHEMA_VERSION = 1
#: where the shipped paths live, one JSON file each, named by the path's ``name``
STORED_DIR = Path(__file__).resolve().parent / "serving_paths"
#: a server that spends more than a second on each batch before the model runs is a unit mistake
MAX_PER_BATCH_MS = 1000.0
#: ... and more than 100 ms on each request
MAX_PER_REQUEST_MS = 100.0
#: a served batch whose time spreads wider than this lognormal sigma is no service time to plan on
MAX_SIGMA = 2.0
#: the model that runs nothing (``collectors.batching_server.EmptyModel``): served, each batch's time is
#: the server's path alone; it has no graph, so nothing predicts it
EMPTY_MODEL = "empty"
Label = Literal["measured", "fitted"]
LABELS: tuple[str, ...] = ("measured", "fitted")


def _number(value: Any, name: str, high: float) -> float:
    """``value`` as a float in [0, high], or a ValueError that names ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value <= high:
        raise ValueError(f"{name}: must be a number in [0, {high:g}], not {value!r}")
    return float(value)


@dataclass(frozen=True)
class PathCost:
    """What a path adds to a batch of ``requests`` one-sample requests: ``per_batch_ms +
    per_request_ms * requests``."""

    per_batch_ms: float
    per_request_ms: float

    def added_ms(self, requests: int) -> float:
        return self.per_batch_ms + self.per_request_ms * requests

    def checked(self, prefix: str) -> PathCost:
        """Itself, or a ValueError naming ``prefix``'s field that is absurd."""
        _number(self.per_batch_ms, f"{prefix}per_batch_ms", MAX_PER_BATCH_MS)
        _number(self.per_request_ms, f"{prefix}per_request_ms", MAX_PER_REQUEST_MS)
        return self


@dataclass(frozen=True)
class ServingPath:
    """A server's own time per batch on one host (``label`` "measured": probed there) or across
    hosts (``fitted``), with its fast and slow ends and, optionally, the host's pauses and drift
    (``stalls``)."""

    name: str
    server: str
    label: Label
    cost: PathCost
    low: PathCost
    high: PathCost
    sigma: float
    stalls: HostStalls = field(default_factory=lambda: HostStalls(0.0, ()))
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.replace("-", "").replace("_", "") \
                .replace(".", "").isalnum():
            raise ValueError(f"name: must be letters, digits, '-', '_' and '.', not {self.name!r}")
        if self.label not in LABELS:
            raise ValueError(f"label: must be one of {LABELS}, not {self.label!r}")
        self.cost.checked("")
        self.low.checked("low.")
        self.high.checked("high.")
        for requests in (1, 1024):
            if not self.low.added_ms(requests) <= self.cost.added_ms(requests) <= self.high.added_ms(requests):
                raise ValueError(f"low, high: the path's fast end must not be slower than its median, nor its slow "
                                 f"end faster (at {requests} requests a batch: {self.low.added_ms(requests):.4g}, "
                                 f"{self.cost.added_ms(requests):.4g}, {self.high.added_ms(requests):.4g} ms)")
        _number(self.sigma, "sigma", MAX_SIGMA)
        if not isinstance(self.stalls, HostStalls):
            raise ValueError(f"pauses: must be a HostStalls, not {type(self.stalls).__name__}")

    @property
    def caution(self) -> str | None:
        """What a plan made with this path cannot promise, in words (None for a host's own path):
        a path fitted on other hosts holds only on a host like theirs. The second H100 plan set's
        host paid 2.78 ms a batch + 0.35 ms a request, outside every fitted host's, and all six of
        its plans came out optimistic (benchmarks/results/plan_check_2.txt)."""
        if self.label != "fitted":
            return None
        return ("fitted on other hosts: on a host slower or faster than all of them a plan is off by more than its "
                "range says (benchmarks/results/plan_check_2.txt); fit your own host's from Triton serving the "
                "empty model (latpred serving-path FOLDER --models empty --out mine.json) and plan with it "
                "(latpred capacity ... --serving-path mine.json)")

    def added_ms(self, requests: int, end: HostEnd = "median") -> float:
        """What the path adds to a batch of ``requests`` requests, at its median or either end."""
        return {"median": self.cost, "low": self.low, "high": self.high}[end].added_ms(requests)

    def around(self, model: LatencyModel) -> LatencyModel:
        """``model`` (the prediction's latency per batch) as this server serves it: each median
        plus the path's cost, the spread at least the path's, the interval's ends plus the path's
        ends (a model without an interval gets the path's alone). Apply it before
        ``LatencyModel.for_plan``, which then plans for the slow end of both. The path is the
        model's ``host``: several instances on one GPU share the prediction's part of a batch, each
        doing its own path's work (``LatencyModel``)."""
        if model.plan_for != "median":
            raise ValueError("model: put the serving path around the prediction's medians, then plan for its slow end")
        if model.host is not None:
            raise ValueError("model: already includes a serving path; put one path around the prediction")
        interval = model.interval_ms

        def median(batch: int) -> float:
            return float(model.median_ms(batch)) + self.added_ms(batch)

        def ends(batch: int) -> tuple[float, float]:
            low, high = interval(batch) if interval is not None else (model.median_ms(batch),) * 2
            return float(low) + self.added_ms(batch, "low"), float(high) + self.added_ms(batch, "high")

        return LatencyModel(median, max(model.sigma, self.sigma), interval_ms=ends, host=self)

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``from_dict`` reads it back)."""
        return {"schema_version": SCHEMA_VERSION, "name": self.name, "server": self.server, "label": self.label,
                "per_batch_ms": self.cost.per_batch_ms, "per_request_ms": self.cost.per_request_ms,
                "low": {"per_batch_ms": self.low.per_batch_ms, "per_request_ms": self.low.per_request_ms},
                "high": {"per_batch_ms": self.high.per_batch_ms, "per_request_ms": self.high.per_request_ms},
                "sigma": self.sigma,
                "pauses": {"rate_per_s": self.stalls.rate_per_s, "pauses_ms": list(self.stalls.pauses_ms)},
                "drift": self.stalls.drift.to_dict() if self.stalls.drift is not None else None,
                "note": self.note}

    def answer_dict(self) -> dict[str, Any]:
        """The path as an answer shows it (the CLIs' JSON, the service's): its stored form and
        ``caution`` (null for a host's own path), so that JSON tells what the text prints;
        ``from_dict`` reads it back, the caution being the label's."""
        return {**self.to_dict(), "caution": self.caution}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingPath:
        """A path from its stored form (or an answer's, whose ``caution`` follows from the label
        and is not read), or a ValueError that names the field at fault."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a serving path is a JSON object, not {type(data).__name__}")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"schema_version: this latpred reads serving paths of version {SCHEMA_VERSION}, not "
                             f"{data.get('schema_version')!r}")
        known = {"schema_version", "name", "server", "label", "per_batch_ms", "per_request_ms", "low", "high", "sigma",
                 "pauses", "drift", "note", "caution"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{unknown[0]}: not a field of a serving path (fields: {', '.join(sorted(known))})")
        missing = [k for k in ("name", "server", "label", "per_batch_ms", "per_request_ms", "low", "high", "sigma")
                   if k not in data]
        if missing:
            raise ValueError(f"{missing[0]}: missing")

        def ends(key: str) -> PathCost:
            value = data[key]
            if not isinstance(value, Mapping) or set(value) != {"per_batch_ms", "per_request_ms"}:
                raise ValueError(f"{key}: must be an object with per_batch_ms and per_request_ms, not {value!r}")
            return PathCost(_number(value["per_batch_ms"], f"{key}.per_batch_ms", MAX_PER_BATCH_MS),
                            _number(value["per_request_ms"], f"{key}.per_request_ms", MAX_PER_REQUEST_MS))

        pauses = data.get("pauses", {"rate_per_s": 0.0, "pauses_ms": []})
        if not isinstance(pauses, Mapping) or set(pauses) != {"rate_per_s", "pauses_ms"} \
                or not isinstance(pauses["pauses_ms"], list):
            raise ValueError(f"pauses: must be an object with rate_per_s and a list pauses_ms, not {pauses!r}")
        try:
            stalls = HostStalls(pauses["rate_per_s"], tuple(pauses["pauses_ms"]))
        except ValueError as exc:
            raise ValueError(f"pauses.{exc}") from None
        if data.get("drift") is not None:  # absent or null: a host whose batches' times are independent
            stalls = HostStalls(stalls.rate_per_s, stalls.pauses_ms, ServiceDrift.from_dict(data["drift"]))
        for key in ("server", "note"):
            if not isinstance(data.get(key, ""), str):
                raise ValueError(f"{key}: must be a string, not {data[key]!r}")
        return cls(name=data["name"], server=data["server"], label=data["label"],
                   cost=PathCost(_number(data["per_batch_ms"], "per_batch_ms", MAX_PER_BATCH_MS),
                                 _number(data["per_request_ms"], "per_request_ms", MAX_PER_REQUEST_MS)),
                   low=ends("low"), high=ends("high"), sigma=_number(data["sigma"], "sigma", MAX_SIGMA),
                   stalls=stalls, note=data.get("note", ""))


def planned_service(model: LatencyModel, path: ServingPath | None,
                    plan_for: PlanFor = "median") -> tuple[LatencyModel, HostStalls | None]:
    """What a plan is made on, the same for ``latpred capacity`` and ``GET /v1/capacity``: the
    prediction with ``path`` around its medians, then moved to ``plan_for`` (so a slow-end plan takes
    both slow ends), and the host's pauses and drift to replay in every run (None without a path)."""
    served = path.around(model) if path is not None else model
    return served.for_plan(plan_for), (path.stalls if path is not None else None)


def stored_serving_paths(folder: Path = STORED_DIR) -> dict[str, ServingPath]:
    """The shipped paths by name."""
    paths = {}
    for file in sorted(folder.glob("*.json")):
        path = ServingPath.from_dict(json.loads(file.read_text()))
        paths[path.name] = path
    return paths


def stored_serving_path(name: str, folder: Path = STORED_DIR) -> ServingPath:
    """A shipped path by name, or a ValueError that lists the names there are."""
    paths = stored_serving_paths(folder)
    if name not in paths:
        raise ValueError(f"serving_path: no serving path named {name!r} (there are: {', '.join(sorted(paths))})")
    return paths[name]


def read_serving_path(file: Path) -> ServingPath:
    """A path from a JSON file (``latpred serving-path`` writes one), or a ValueError naming
    the file and the field at fault."""
    try:
        data = json.loads(Path(file).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: not a readable JSON serving path ({exc})") from None
    try:
        return ServingPath.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{file}: {exc}") from None


def serving_path(spec: str, folder: Path = STORED_DIR) -> ServingPath:
    """A path from the command line: a JSON file when ``spec`` ends in .json, else a shipped name."""
    return read_serving_path(Path(spec)) if spec.endswith(".json") else stored_serving_path(spec, folder)


__all__: Sequence[str] = ["EMPTY_MODEL", "LABELS", "MAX_PER_BATCH_MS", "MAX_PER_REQUEST_MS", "MAX_SIGMA",
                          "SCHEMA_VERSION", "STORED_DIR", "PathCost", "ServingPath", "planned_service",
                          "read_serving_path", "serving_path", "stored_serving_path", "stored_serving_paths"]
