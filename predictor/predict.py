"""Predict a whole model's latency from its graph: per-layer times, composed per mode.

Kernel nodes are predicted by the bundle's models (kernel time as a ratio to the roofline,
host dispatch time directly), with conformal intervals. Fallback nodes, which no model covers,
are estimated from their bytes at the device's bandwidth and listed in ``unsupported``: nothing
is dropped silently.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from predictor.bundle import Bundle, BundleError
from predictor.compose import MODES, CompositionConstants, cudagraph_us, eager_us, short_kernel_us
from predictor.devices import DeviceSpec
from predictor.features import FEATURE_COLUMNS, cold_weight_us, feature_codes, feature_row
from predictor.graph import CAST_OPS, Graph
from predictor.precision import get_precision

MAX_BATCH = 65_536
CACHE_LIMIT = 200_000  # remembered kernel configurations (about 100 bytes each)
PREFETCH_LIMIT = CACHE_LIMIT // 4  # configurations one prefetch evaluates at most

#: The share of peak memory bandwidth an operator without a learned model is assumed to reach
#: (the generic kernels such calls run, gathers, fills and scans, reach about half), with
#: ``min_kernel_us`` as the floor of any launch. A prior, not a fit: the zoo has too few such
#: calls for a learned scale, which once went to 5x and priced every tiny fill at 11 us.
FALLBACK_BANDWIDTH_SHARE = 0.5


def _signature(node: Any, variant: str, batch: int, precision: str) -> tuple:
    """What a kernel prediction depends on: the node's configuration, batch and precision."""
    return (node.family, variant, node.layout, tuple(sorted(node.params.items())), batch, precision)


@dataclass
class LayerPrediction:
    """One node's share: kernel time (with interval) and host issue time, in microseconds."""

    name: str
    op: str
    kind: str
    family: str | None
    kernel_us: float
    low_us: float
    high_us: float
    host_us: float
    #: source nodes kernel detection merged into this one (e.g. ONNX's MatMul/Softmax/MatMul).
    merged: list[str] = field(default_factory=list)


@dataclass
class Prediction:
    """A whole-model prediction and everything that produced it."""

    model: str
    device: str
    batch: int
    precision: str
    mode: str
    total_ms: float
    low_ms: float
    high_ms: float
    model_version: str
    layers: list[LayerPrediction]
    unsupported: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self, with_layers: bool = True) -> dict[str, Any]:
        """The prediction as JSON-ready data. Layers are shallow copies: ``dataclasses.asdict``
        deep-copies hundreds of layers, milliseconds a graph, which a batch of thousands (the
        service's NAS endpoint) cannot afford."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "layers"}
        if with_layers:
            data["layers"] = [dict(vars(layer)) for layer in self.layers]
        return data


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def check_batch(batch: int) -> None:
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be an integer from 1 to {MAX_BATCH}, got {batch!r}")


def check_request(batch: int, precision: str, mode: str) -> None:
    """Refuse bad inputs with a message that names the field."""
    get_precision(precision)
    check_mode(mode)
    check_batch(batch)


def _matrix(rows: list[dict[str, float]], columns: list[str]) -> np.ndarray:
    """Feature rows as a float64 matrix with ``columns`` in order (a bundle's order)."""
    return np.array([[r[c] for c in columns] for r in rows], dtype=np.float64)


class Predictor:
    """Predicts graphs on one device with one bundle."""

    def __init__(self, bundle: Bundle, device: DeviceSpec, constants: CompositionConstants | None = None) -> None:
        """``constants`` overrides the bundle's composition constants (training refits them)."""
        if bundle.device_id != device.device_id:
            raise ValueError(f"bundle was trained on {bundle.device_id}, not {device.device_id}")
        missing = [c for c in bundle.metadata.get("feature_columns", []) if c not in FEATURE_COLUMNS]
        if missing:
            raise BundleError(f"bundle {bundle.directory} needs features this latpred does not compute "
                              f"({', '.join(missing)}): retrain it with 'latpred train'")
        if bundle.metadata.get("feature_codes") != feature_codes():
            raise BundleError(f"bundle {bundle.directory} was trained with other operator codes (a family "
                              "or variant was added since): retrain it with 'latpred train'")
        self.bundle = bundle
        self.device = device
        self.constants = constants or CompositionConstants(**bundle.composition.get("constants", {}))
        self._cache: dict[tuple, tuple[float, float, float, float, float]] = {}

    @staticmethod
    def _node_keys(graph: Graph, batch: int, precision: str, mode: str) -> list[tuple | None]:
        """Each node's kernel configuration (None where no kernel runs), computed once per node:
        a graph's nodes are walked twice per prediction, and thousands of graphs a minute."""
        upcast, noop_casts = graph.precision_plan(precision)
        keys: list[tuple | None] = []
        for n in graph.nodes:
            if n.kind != "kernel" or (noop_casts and n.op in CAST_OPS):
                keys.append(None)
                continue
            node_precision = "fp32" if upcast and n.dtype == "float32" else precision
            keys.append(_signature(n, n.variant_in(mode), batch, node_precision))
        return keys

    @staticmethod
    def _needed(graph: Graph, keys: list[tuple | None], needed: dict[tuple, Any]) -> None:
        """Add the distinct kernel configurations of ``graph`` to ``needed`` (key -> a node)."""
        for n, key in zip(graph.nodes, keys):
            if key is not None:
                needed.setdefault(key, n)

    def _evaluate(self, needed: dict[tuple, Any]) -> dict[tuple, tuple[float, float, float, float, float]]:
        """(kernel, low, high, dispatch, cold weight read) per configuration, from the cache or
        the boosters.

        Models repeat layers (a transformer's blocks, a ResNet's stages) and NAS loops and
        spreadsheets ask for the same layers again and again, so each configuration is
        evaluated once and remembered: the boosters dominate prediction time otherwise.
        """
        cache = self._cache  # one reference: a concurrent clear swaps in a new dict, never empties ours
        if len(cache) + len(needed) > CACHE_LIMIT:
            cache = self._cache = {}
        found = {key: cache[key] for key in needed if key in cache}
        wanted = {key: value for key, value in needed.items() if key not in found}
        if wanted:
            nodes = list(wanted.values())
            # key: (family, variant, layout, params, batch, precision); see _signature
            rows = [feature_row(n.family, n.params, key[1], n.layout, key[4], key[5], self.device)
                    for key, n in wanted.items()]
            roof = np.power(10.0, np.array([r["log_roofline_us"] for r in rows]))
            kernel, dispatch = self.bundle.targets["kernel"], self.bundle.targets["dispatch"]
            x = _matrix(rows, kernel.feature_columns)
            k_log = kernel.predict_log_array(x)
            same = dispatch.feature_columns == kernel.feature_columns
            d_log = dispatch.predict_log_array(x if same else _matrix(rows, dispatch.feature_columns))
            widths = self.bundle.targets["kernel"].interval_log
            default = widths.get("*", 0.3)
            for key, node, r, k, d in zip(wanted, nodes, roof, k_log, d_log):
                q = widths.get(node.family, default)
                t = float(r * math.exp(k))
                cold = cold_weight_us(node.family, node.params, key[1], key[4], key[5], self.device)
                found[key] = cache[key] = (t, t * math.exp(-q), t * math.exp(q), float(math.exp(d)), cold)
        return found

    def prefetch(self, requests: list[tuple[Graph, int | None, str, str]]) -> None:
        """Evaluate the kernels of many (graph, batch, precision, mode) requests in one pass.

        A NAS loop's batch of new candidates brings many configurations never seen before;
        asked graph by graph, each booster runs once per family per graph, and that fixed cost
        dominates. Invalid requests are skipped here: ``predict`` refuses them by name.
        """
        needed: dict[tuple, Any] = {}
        for graph, batch, precision, mode in requests:
            batch = graph.batch if batch is None else batch
            try:
                check_request(batch, precision, mode)
            except ValueError:
                continue
            name = get_precision(precision).name
            graph = graph.at_precision(name)
            self._needed(graph, self._node_keys(graph, batch, name, mode), needed)
            if len(needed) >= PREFETCH_LIMIT:  # more would evict what was just evaluated
                break
        if needed:
            self._evaluate(needed)

    def layers(self, graph: Graph, batch: int, precision: str, mode: str = "eager") -> list[LayerPrediction]:
        """Per-node predictions at ``batch`` and ``precision``, in graph order, for ``mode``
        (a node may run another kernel variant when the model is captured as a CUDA graph)."""
        prec = get_precision(precision)
        graph = graph.at_precision(prec.name)
        keys = self._node_keys(graph, batch, prec.name, mode)
        needed: dict[tuple, Any] = {}
        self._needed(graph, keys, needed)
        kernel_us = self._evaluate(needed)
        c = self.constants
        scales: dict[tuple[str | None, str], float] = {}
        out = []
        for n, key in zip(graph.nodes, keys):
            extra = 0.0  # what a kernel adds inside a model to its time alone: short kernels, cold weights
            scale = scales.get((n.family, n.kind))
            if scale is None:
                scale = scales[(n.family, n.kind)] = c.scale(n.family, n.kind)
            if n.kind == "kernel" and key is None:
                t = lo = hi = 0.0  # a cast to the precision the model already runs in: a no-op
                host = c.view_host_us
            elif n.kind == "kernel":
                t, lo, hi, host, cold = kernel_us[key]
                host = c.launch_host_us if n.launched_by else host * c.host_scale + c.call_host_us
                extra = short_kernel_us(t, c) + c.cold_weight_share * cold
            elif n.kind == "fallback":
                t = max(c.min_kernel_us, n.elements_per_sample * batch * prec.element_bytes
                        / (FALLBACK_BANDWIDTH_SHARE * self.device.memory_bandwidth) * 1e6)
                lo, hi, host = t * 0.5, t * 2.0, c.fallback_host_us + c.call_host_us
            else:
                t = lo = hi = 0.0
                host = c.view_host_us
            out.append(LayerPrediction(n.name, n.op, n.kind, n.family, t * scale + extra, lo * scale + extra,
                                       hi * scale + extra, host, list(n.merged)))
        return out

    def predict(self, graph: Graph, batch: int | None = None, precision: str = "fp32",
                mode: str = "cudagraph") -> Prediction:
        """Latency of ``graph`` (at its own batch unless ``batch`` overrides it)."""
        batch = graph.batch if batch is None else batch
        check_request(batch, precision, mode)
        layers = self.layers(graph, batch, precision, mode)
        kernels = [layer.kernel_us for layer in layers]
        c = self.constants
        if mode == "cudagraph":
            total = cudagraph_us(kernels, c)
        else:
            total = eager_us(kernels, [layer.host_us for layer in layers], c)
        q = self.bundle.composition.get("interval_log", {}).get(mode, 0.25)
        fallback = Counter(layer.op for layer in layers if layer.kind == "fallback")
        unsupported = [{"op": op, "count": count, "costed_as": "roofline on bytes moved"}
                       for op, count in fallback.most_common()]
        warnings = []
        if unsupported:
            share = sum(layer.kernel_us for layer in layers if layer.kind == "fallback") / max(sum(kernels), 1e-9)
            warnings.append(f"{sum(fallback.values())} call(s) of {len(fallback)} op type(s) have no "
                            f"learned model and were estimated by the roofline ({share:.0%} of kernel time)")
        return Prediction(
            model=graph.name, device=self.device.device_id, batch=batch, precision=precision,
            mode=mode, total_ms=total / 1e3, low_ms=total * math.exp(-q) / 1e3,
            high_ms=total * math.exp(q) / 1e3, model_version=self.bundle.version,
            layers=layers, unsupported=unsupported, warnings=warnings,
        )
