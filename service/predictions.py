"""Running the predictor for a request: resolve the variant, predict, remember named graphs.

No latency is computed here: ``Predictor.predict`` does it all. This module resolves the names a
request uses (a device by part of its name, the default device, a host profile by id), turns
predictor's ValueErrors into problems that name the field, and caches the predictions of named
graphs.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from predictor.devices import DEVICES, DeviceSpec, PrecisionUnsupported, resolve_device
from predictor.graph import Graph
from predictor.host_lookup import host_by_id
from predictor.host_profile import ID_PATTERN, HostProfile, HostProfileError, HostStore, UnknownHostError
from predictor.predict import Predictor
from predictor.prediction import Prediction
from predictor.variant import Variant
from service.metrics import Metrics
from service.problems import ProblemError, join_path
from service.registry import ModelRegistry, NotReady


@dataclass(frozen=True)
class ResolvedVariant:
    """A request's Variant with its device resolved to the predictor that serves it."""

    predictor: Predictor
    device: DeviceSpec
    batch: int | None
    precision: str
    mode: str
    #: the host an eager forward is issued by (the bundle's default where the request named none;
    #: None only where the bundle names none either)
    host: HostProfile | None = None
    #: the host's id and a digest of its content: what caches and ETags key eager results by
    host_key: str | None = None
    #: where the variant is in the request ('variants[2]'; '' for a top-level one), for problems
    prefix: str = ""

    def cache_key(self) -> tuple:
        """What makes two predictions of one graph the same: a CUDA graph has no host in it, so
        only eager ones are keyed by the host (different hosts never share an eager result)."""
        return (self.predictor.bundle.version, self.device.device_id, self.batch, self.precision, self.mode,
                self.host_key if self.mode == "eager" else None)


#: how ``Predictor.predict`` starts its refusal when neither the request nor the bundle names a host
NO_HOST = "this bundle names no host profile"


def not_ready(detail: str) -> ProblemError:
    return ProblemError(503, detail, headers={"Retry-After": "2"}, kind="not-ready")


def resolve_device_id(registry: ModelRegistry, device: str | None, field: str = "device") -> DeviceSpec:
    """A device by id or part of its name; without one, the only GPU that has a bundle of its
    own (the devices the transfer bundle predicts, and CPUs, are asked for by name)."""
    if device is None:
        registry.wait_first_load(registry.load_wait_s)
        snapshot = registry.snapshot
        if not snapshot.loaded or not snapshot.predictors:
            raise not_ready(registry.state_detail())
        own = [d for d, p in snapshot.predictors.items() if p.bundle.transfer is None and p.device.kind == "gpu"]
        if len(own) != 1:
            raise ProblemError(422, f"name a device: one of {', '.join(snapshot.predictors)}", field=field)
        return DEVICES[own[0]]
    try:
        return resolve_device(device)
    except ValueError as exc:
        raise ProblemError(404, str(exc), field=field, kind="unknown-device") from None


def host_key(profile: HostProfile | None) -> str | None:
    """A profile's id and the start of its content's sha256: an id names one profile in a store
    (never overwritten), but a bundle reload or a cleared store could reuse it for another."""
    if profile is None:
        return None
    return f"{profile.id}:{hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]}"


def unreadable_host(host_id: str, exc: Exception, field: str) -> ProblemError:
    """The problem for a stored profile whose file cannot be read as one (damaged, or written by a
    newer latpred): the server's store, not the request, is at fault, and the answer says which
    file and why instead of an unexplained 500."""
    return ProblemError(500, f"the stored host profile {host_id!r} cannot be read ({unreadable_why(exc)}): replace "
                             "its file in the service's host store (POST /v1/hosts never overwrites one)", field=field,
                        kind="unreadable-host")


def unreadable_why(exc: Exception) -> str:
    """Why a stored profile's file cannot be read, naming the file by its name alone: the store's
    folder on the server is no business of a client's (the listing is not guarded by the key)."""
    text = str(exc)
    head, sep, rest = text.partition(": ")
    return f"{Path(head).name}{sep}{rest}" if sep and head.endswith(".json") else text


def resolve_host_id(predictor: Predictor, host: str | None, store: HostStore | None,
                    field: str = "host", others: Sequence[Predictor] = ()) -> HostProfile | None:
    """The profile ``host`` names (an id: one the predictor's bundle carries, else one of the
    ``others``' bundles, else one of ``store``; never a file); without ``host``, the bundle's
    default."""
    if host is None:
        return predictor.host
    try:
        return host_by_id(host, [predictor.bundle, *(p.bundle for p in others)],
                          [store] if store is not None else [])
    except HostProfileError as exc:  # a stored file that is not a profile this latpred reads
        raise unreadable_host(host, exc, field) from None
    except UnknownHostError as exc:
        known_form = bool(re.match(ID_PATTERN, host))  # an id that is not there, or no id at all
        raise ProblemError(404 if known_form else 422, f"{exc}; GET /v1/hosts lists them, POST /v1/hosts adds one",
                           field=field, kind="unknown-host" if known_form else "invalid-host") from None


def resolve_variant(registry: ModelRegistry, variant: Variant, prefix: str = "", host: str | None = None,
                    store: HostStore | None = None) -> ResolvedVariant:
    """Resolve a (validated) variant's device and host once, so a batch of many graphs does not
    do it per graph. Batch, precision and mode were checked where the request was parsed
    (predictor.variant). Without ``host`` the variant's host is the bundle's default, if it names
    one; where it names none, the predictor says whether the prediction needs one."""
    spec = resolve_device_id(registry, variant.device, join_path(prefix, "device"))
    try:
        predictor = registry.predictor(spec.device_id)
    except NotReady as exc:
        raise not_ready(str(exc)) from None
    if predictor is None:
        raise ProblemError(404, f"no model bundle is loaded for {spec.device_id} ({spec.name}): "
                                "GET /v1/devices lists the devices that have one",
                           field=join_path(prefix, "device"), kind="no-bundle")
    # (the other bundles too: a GPU's host id asked beside a CPU, whose bundle carries its own probes)
    others = list(registry.snapshot.predictors.values()) if host is not None else []
    profile = resolve_host_id(predictor, host, store, join_path(prefix, "host"), others)
    return ResolvedVariant(predictor, spec, variant.batch, variant.precision, variant.mode, profile,
                           host_key(profile), prefix)


class PredictionCache:
    """Predictions of named graphs (zoo names, stored ids), which spreadsheets, dashboards and
    NAS baselines ask for again and again: a hit costs a dict lookup instead of a prediction.

    Keyed by the graph object's identity: the resolver hands out one object per name or id,
    and each entry holds its graph, so an id cannot be reused by another graph while cached.
    The bundle version is part of the key, so a reload never serves stale results; so is an eager
    variant's host profile, so two hosts never share a result.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: OrderedDict[tuple, tuple[Graph, Prediction]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, graph: Graph, variant: ResolvedVariant) -> tuple[tuple, Prediction | None]:
        key = (id(graph), *variant.cache_key())
        entry = self._entries.get(key)
        return key, (entry[1] if entry is not None and entry[0] is graph else None)

    def put(self, key: tuple, graph: Graph, result: Prediction) -> None:
        """Remember ``result`` (least recently stored entries go first once full)."""
        with self._lock:
            self._entries[key] = (graph, result)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


def predict(graph: Graph, variant: ResolvedVariant, field: str = "", cache: PredictionCache | None = None,
            layers: bool = True) -> Prediction:
    """Predict, turning predictor's refusals (a bad batch, parameters out of range) into a 422.
    ``cache`` only for named graphs (an inline graph is a new object every request); it keeps
    predictions without their layers (a layer list is hundreds of objects), so only requests
    that do not want layers use it."""
    if cache is not None and not layers:
        key, hit = cache.get(graph, variant)
        if hit is not None:
            return hit
        result = predict(graph, variant, field, layers=False)
        cache.put(key, graph, result)
        return result
    try:
        result = variant.predictor.predict(graph, variant.batch, variant.precision, variant.mode, with_layers=layers,
                                           host=variant.host)
    except (ValueError, ArithmeticError) as exc:
        # The refusals that name a request field: the graph's own batch out of range, and no host
        # profile where the bundle names no default (the request's variant names none either).
        where = join_path(field, "batch") if str(exc).startswith("batch") else (field or None)
        if variant.host is None and str(exc).startswith(NO_HOST):
            where = join_path(variant.prefix, "host")
        for name in ("mode", "precision"):  # what a device cannot run (a CPU: eager, fp32)
            if str(exc).startswith(f"{name}: "):
                where = join_path(variant.prefix, name)
        if isinstance(exc, PrecisionUnsupported):  # (a T4 has no bf16)
            where = join_path(variant.prefix, "precision")
        raise ProblemError(422, str(exc) or type(exc).__name__, field=where, kind="cannot-predict") from None
    if not (math.isfinite(result.total_ms) and math.isfinite(result.low_ms) and math.isfinite(result.high_ms)):
        raise ProblemError(422, "the graph's sizes are outside the range the models can predict (the result "
                                "is not a finite number)", field=field or None, kind="cannot-predict")
    return result


def record(metrics: Metrics, result: Prediction) -> None:
    """Count a prediction and the unsupported operators it met."""
    metrics.predictions.labels(result.device, result.mode).inc()
    if result.unsupported:
        metrics.count_unsupported(result.unsupported)
