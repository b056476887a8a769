"""Running the predictor for a request: resolve the variant, predict, remember named graphs.

No latency is computed here: ``Predictor.predict`` does it all. This module resolves the names a
request uses (a device by part of its name, the default device), turns predictor's ValueErrors
into problems that name the field, and caches the predictions of named graphs.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from predictor.devices import DEVICES, DeviceSpec, resolve_device
from predictor.graph import Graph
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


def not_ready(detail: str) -> ProblemError:
    return ProblemError(503, detail, headers={"Retry-After": "2"}, kind="not-ready")


def resolve_device_id(registry: ModelRegistry, device: str | None, field: str = "device") -> DeviceSpec:
    """A device by id or part of its name; without one, the only device that has a bundle."""
    if device is None:
        registry.wait_first_load(registry.load_wait_s)
        snapshot = registry.snapshot
        loaded = list(snapshot.predictors)
        if not snapshot.loaded or not loaded:
            raise not_ready(registry.state_detail())
        if len(loaded) != 1:
            raise ProblemError(422, f"name a device: one of {', '.join(loaded) or 'none loaded'}", field=field)
        return DEVICES[loaded[0]]
    try:
        return resolve_device(device)
    except ValueError as exc:
        raise ProblemError(422, str(exc), field=field, kind="unknown-device") from None


def resolve_variant(registry: ModelRegistry, variant: Variant, prefix: str = "") -> ResolvedVariant:
    """Resolve a (validated) variant's device once, so a batch of many graphs does not do it per
    graph. Batch, precision and mode were checked where the request was parsed (predictor.variant)."""
    spec = resolve_device_id(registry, variant.device, join_path(prefix, "device"))
    try:
        predictor = registry.predictor(spec.device_id)
    except NotReady as exc:
        raise not_ready(str(exc)) from None
    if predictor is None:
        raise ProblemError(422, f"no model bundle is loaded for {spec.device_id} ({spec.name}): "
                                "GET /v1/devices lists the devices that have one",
                           field=join_path(prefix, "device"), kind="no-bundle")
    return ResolvedVariant(predictor, spec, variant.batch, variant.precision, variant.mode)


class PredictionCache:
    """Predictions of named graphs (zoo names, stored ids), which spreadsheets, dashboards and
    NAS baselines ask for again and again: a hit costs a dict lookup instead of a prediction.

    Keyed by the graph object's identity: the resolver hands out one object per name or id,
    and each entry holds its graph, so an id cannot be reused by another graph while cached.
    The bundle version is part of the key, so a reload never serves stale results.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: OrderedDict[tuple, tuple[Graph, Prediction]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, graph: Graph, variant: ResolvedVariant) -> tuple[tuple, Prediction | None]:
        key = (id(graph), variant.predictor.bundle.version, variant.device.device_id, variant.batch,
               variant.precision, variant.mode)
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
        result = variant.predictor.predict(graph, variant.batch, variant.precision, variant.mode, with_layers=layers)
    except (ValueError, ArithmeticError) as exc:
        # The one refusal that names a request field: the graph's own batch out of range.
        where = join_path(field, "batch") if str(exc).startswith("batch") else (field or None)
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
