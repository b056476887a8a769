"""Predict a whole model's latency from its graph: per-layer times, composed per mode.

Kernel nodes are predicted by the bundle's models (kernel time as a ratio to the roofline,
host dispatch time as a ratio to its kind's cost in a host profile), with conformal intervals.
Fallback nodes, which no model covers, are estimated from their bytes at the device's bandwidth
and listed in ``unsupported``: nothing is dropped silently.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections import Counter
from collections.abc import Collection, Iterable, Sequence

import numpy as np

from predictor.bundle import Bundle, BundleError, TargetModel
from predictor.compose import GROUPS, CompositionConstants, LayerArrays, compose, family_group, layer_times
from predictor.devices import DeviceSpec, resolve_device
from predictor.features import FEATURE_COLUMNS, feature_codes, features_and_cold_weight
from predictor.graph import CAST_OPS, Graph
from predictor.host_profile import (
    CALIBRATION_KEYS,
    CALIBRATION_PRECISIONS,
    HOST_KINDS,
    HostProfile,
    estimate_profile,
    host_kind,
    parse_profile,
    parse_reference_key,
)
from predictor.host_references import Calibration, calibrate, reference_graph
from predictor.host_spread import eager_interval_log, unsteady_warning
from predictor.kernel_config import KernelConfig, kernel_config
from predictor.operator_host import on_host, speed_ratio
from predictor.precision import get_precision
from predictor.prediction import LayerPrediction, Prediction, UnsupportedOp
from predictor.variant import Variant, check_variant

#: a kernel cache key: the node's configuration in the mode asked, the batch, the node's precision
KernelKey = tuple[KernelConfig, int, str]
#: what a kernel configuration costs alone: kernel time, its interval's low and high, cold weight read (us)
KernelEntry = tuple[float, float, float, float]
CACHE_LIMIT = 200_000  # remembered kernel configurations (about 100 bytes each)
PREFETCH_LIMIT = CACHE_LIMIT // 4  # configurations one prefetch evaluates at most

#: The share of peak memory bandwidth an operator without a learned model is assumed to reach
#: (the generic kernels such calls run, gathers, fills and scans, reach about half), with
#: ``min_kernel_us`` as the floor of any launch. A prior, not a fit: the zoo has too few such
#: calls for a learned scale, which once went to 5x and priced every tiny fill at 11 us.
FALLBACK_BANDWIDTH_SHARE = 0.5


def _node_kinds(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per node, what no variant changes: its scale group, whether it is a fallback, whether
    another call launches it, a fallback's elements per sample, and the host profile kind its
    dispatch is relative to (made once per graph, but a NAS loop's every graph is new:
    comprehensions, not a loop of appends)."""
    nodes = graph.nodes
    kinds = [(n.family, n.kind) for n in nodes]
    index = {kind: GROUPS.index(family_group(*kind)) for kind in set(kinds)}
    host_index = {family: HOST_KINDS.index(host_kind(family)) for family, _ in set(kinds)}
    return (np.array([index[kind] for kind in kinds], dtype=np.intp),
            np.array([kind == "fallback" for _, kind in kinds], dtype=bool),
            np.array([bool(n.launched_by) for n in nodes], dtype=bool),
            np.array([n.elements_per_sample for n in nodes], dtype=float),
            np.array([host_index[family] for family, _ in kinds], dtype=np.intp))


def _union(sets: dict[int, frozenset[KernelConfig]]) -> frozenset[KernelConfig]:
    """The union of ``sets``' values (most often one set, returned as it is)."""
    if len(sets) == 1:
        return next(iter(sets.values()))
    return frozenset().union(*sets.values())


@functools.lru_cache(maxsize=4096)
def _checked_variant(batch: int, precision: str, mode: str) -> None:
    """``check_variant``, remembered for the variants that passed (a refusal is raised each time):
    a NAS loop asks the same few variants for thousands of graphs, and each check builds a
    pydantic model."""
    check_variant(batch, precision, mode)


#: The widening of an eager interval on an estimated host profile where a bundle does not say
#: what its hosts measured (training writes ``estimated_host_extra_log``): log(1.5).
ESTIMATED_EXTRA_LOG = 0.405


#: calibrated (and estimated) host profiles a predictor remembers before it starts over
CALIBRATED_HOSTS_KEPT = 256


def _probed_on(host: HostProfile) -> str | None:
    """The id of the device ``host`` was probed beside, or None where it names no GPU (a CPU's
    profile, an estimate) or one the catalog cannot tell."""
    if not host.gpu:
        return None
    try:
        return resolve_device(host.gpu).device_id
    except ValueError:
        return None


def host_description(host: HostProfile, calibration: Calibration | None) -> str:
    """What an eager prediction says of its host: the profile, and how its reference forwards
    scaled it."""
    return host.summary() if calibration is None else f"{host.summary()}; {calibration.describe()}"


def default_host(bundle: Bundle) -> HostProfile | None:
    """The host profile a bundle names as the one that measured its runs, or None."""
    return _bundle_profile(bundle, "host_profile")


def _bundle_profile(bundle: Bundle, key: str) -> HostProfile | None:
    """The host profile the bundle's metadata holds under ``key`` (``host_profile``, or on a CPU
    ``operator_host``: the one its operator rows were measured on), or None."""
    data = bundle.metadata.get(key)
    if data is None:
        return None
    try:
        return parse_profile(data)
    except ValueError as exc:
        raise BundleError(f"bundle {bundle.directory}: its {key} is invalid ({exc}); retrain it") from None


#: a kernel interval's half-width (log) for a family the bundle gives none
OTHER_FAMILY_INTERVAL_LOG = 0.3


def kernel_interval_logs(kernel: TargetModel) -> dict[str, float]:
    """Family ('*' for any other) -> the half-width, in log space, of a kernel time's 90% interval
    under the bundle's ``kernel`` model: what a prediction's and ``latpred check``'s intervals use."""
    return {"*": OTHER_FAMILY_INTERVAL_LOG, **kernel.interval_log}


#: where the roofline estimate is among the features (each kernel is predicted as a ratio to it)
ROOFLINE_COLUMN = FEATURE_COLUMNS.index("log_roofline_us")
#: one feature row as packed doubles: a cold graph's hundred-odd rows become a matrix from their
#: bytes in half the time ``np.array`` takes over lists that mix ints and floats
_FEATURE_ROW = struct.Struct(f"{len(FEATURE_COLUMNS)}d")


def _columns(features: np.ndarray, columns: list[str]) -> np.ndarray:
    """``features`` (FEATURE_COLUMNS order) as a booster's columns: the same matrix when they
    agree, as in every bundle today."""
    if tuple(columns) == FEATURE_COLUMNS:
        return features
    return features[:, [FEATURE_COLUMNS.index(c) for c in columns]]


#: What a prediction says of where its device's numbers come from: 'measured' where the bundle was
#: fitted on the device's own runs, 'transferred' where a transfer bundle predicts it from its specs.
MEASURED, TRANSFERRED = "measured", "transferred"


class Predictor:
    """Predicts graphs on one device with one bundle."""

    def __init__(self, bundle: Bundle, device: DeviceSpec, constants: CompositionConstants | None = None,
                 calibrate_hosts: bool = False) -> None:
        """``constants`` overrides the bundle's composition constants (training refits them).
        ``calibrate_hosts`` scales an eager prediction's host costs by the profile's reference
        forwards (predictor.host_references); off by default, since on the runs measured so far
        the costs as probed came out closer (``latpred validate --hosts``)."""
        if bundle.transfer is None and bundle.device_id != device.device_id:
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
        #: 'measured' or 'transferred' (a transfer bundle on a device it has no runs of)
        self.provenance = MEASURED if bundle.measured_on(device.device_id) else TRANSFERRED
        #: the composition fitted for this device (a transfer bundle holds one per measured device)
        self.composition = bundle.composition_for(device.device_id)
        # A transfer bundle computes every call's features (roofline, waves over the SMs, what
        # fits in L2) from the device's datasheet: the basis every device shares (Bundle.feature_spec).
        self._feature_device = bundle.feature_spec(device)
        #: how the bundle's trees run ('compiled (lleaves)' or 'booster (why)'): compiled on the
        #: first predictor over a bundle (seconds per model where the cache lacks it)
        self.trees = bundle.compile_trees()
        self.constants = constants or CompositionConstants(**self.composition.get("constants", {}))
        #: the host an eager prediction is for when none is asked: the one that measured the
        #: bundle's whole-model runs (None for a bundle fitted in memory, which training predicts
        #: run by run, each with its own host)
        self.host: HostProfile | None = default_host(bundle)
        #: on a CPU, the host its operator rows were measured on: a forward's operators run at the
        #: speed of its own host against this one (predictor.operator_host; None: as measured)
        self.operator_host = _bundle_profile(bundle, "operator_host") if device.kind == "cpu" else None
        #: the power of the host's speed its operators follow (0: they run as measured, whatever the host)
        self.operator_speed_exponent = float(bundle.metadata.get("operator_speed_exponent", 0.0))
        #: (KernelConfig, batch, precision) -> (kernel, low, high, cold weight read)
        self._cache: dict[KernelKey, KernelEntry] = {}
        #: the same keys -> the dispatch ratio, for the calls an eager forward issues
        self._dispatch: dict[KernelKey, float] = {}
        #: family ('*' for any other) -> the factors of a kernel time's interval, exp(-q) and exp(q)
        self._interval_factors = {family: (math.exp(-q), math.exp(q))
                                  for family, q in kernel_interval_logs(bundle.targets["kernel"]).items()}
        #: whether an eager prediction uses its host's costs as calibrated by the profile's reference
        #: forwards, or as probed (their calibration is then only read for its warning)
        self.calibrate_hosts = calibrate_hosts
        #: (a profile's JSON, other constants' or None, the forwards read) -> it calibrated by them
        self._calibrated: dict[tuple[str, str | None, tuple[str, ...]], tuple[HostProfile, Calibration | None]] = {}
        #: (a GPU-less profile's JSON, the bundle's host) -> the estimate a GPU's forward is predicted from
        self._estimates: dict[tuple[str, str], HostProfile] = {}

    def __repr__(self) -> str:
        return (f"Predictor({self.device.device_id}, bundle {self.bundle.version}, "
                f"trees: {self.bundle.trees})")

    @staticmethod
    def _node_keys(graph: Graph, batch: int, precision: str, mode: str) -> list[KernelKey | None]:
        """Each node's kernel configuration (None where no kernel runs), made once per graph and
        (batch, precision, mode): a batch request walks every graph to prefetch and to predict."""
        return graph.derived(("kernel keys", batch, precision, mode),
                             lambda: Predictor._make_node_keys(graph, batch, precision, mode))

    @staticmethod
    def _make_node_keys(graph: Graph, batch: int, precision: str, mode: str) -> list[KernelKey | None]:
        configs = Predictor._kernel_configs(graph, mode)
        upcast, noop_casts = graph.precision_plan(precision)
        if not (upcast or noop_casts):  # most graphs: every kernel at the precision asked
            return [None if c is None else (c, batch, precision) for c in configs]
        return [None if c is None or (noop_casts and n.op in CAST_OPS)
                else (c, batch, "fp32" if upcast and graph.computes_in_float32(n) else precision)
                for n, c in zip(graph.nodes, configs)]

    @staticmethod
    def _kernel_configs(graph: Graph, mode: str) -> list[KernelConfig | None]:
        """Each node's kernel configuration in ``mode`` (None where no kernel runs): they depend
        on the mode only, so other batches and precisions reuse them."""
        return graph.derived(("kernel configs", mode), lambda: [
            kernel_config(n, n.variant_in(mode)) if n.kind == "kernel" else None for n in graph.nodes])

    def _evaluate(self, needed: Iterable[KernelKey], dispatch_needed: Iterable[KernelKey] = ()
                  ) -> tuple[dict[KernelKey, KernelEntry], dict[KernelKey, float]]:
        """(kernel, low, high, cold weight read) per configuration of ``needed``, and the dispatch
        ratio per configuration of ``dispatch_needed`` (eager calls), from the caches or the
        bundle's trees (compiled where they could be, ``Bundle.compile_trees``).

        Models repeat layers (a transformer's blocks, a ResNet's stages) and NAS loops and
        spreadsheets ask for the same layers again and again, so each configuration is
        evaluated once and remembered: the boosters dominate prediction time otherwise. The
        dispatch model runs only for calls an eager forward issues: a captured graph's replay
        issues none, and a NAS loop's cold CUDA-graph candidate then walks one forest less.
        """
        cache, dispatches = self._cache, self._dispatch  # one reference each: a clear swaps in a new dict
        needed, dispatch_needed = set(needed), set(dispatch_needed)
        found = {key: cache[key] for key in needed if key in cache}
        found_dispatch = {key: dispatches[key] for key in dispatch_needed if key in dispatches}
        wanted = [key for key in needed if key not in found]
        wanted_dispatch = [key for key in dispatch_needed if key not in found_dispatch]
        # Past the limit start again, keeping what this call uses: a request whose kernels were
        # all evaluated must not evaluate them anew (the service's work budget counts them as done).
        if wanted and len(cache) + len(wanted) > CACHE_LIMIT:
            cache = self._cache = dict(found)
        if wanted_dispatch and len(dispatches) + len(wanted_dispatch) > CACHE_LIMIT:
            dispatches = self._dispatch = dict(found_dispatch)
        if not (wanted or wanted_dispatch):
            return found, found_dispatch
        rows_of = {key: i for i, key in enumerate(wanted)}
        for key in wanted_dispatch:
            rows_of.setdefault(key, len(rows_of))
        rows, cold = [], []
        device, pack = self._feature_device, _FEATURE_ROW.pack
        for c, batch, precision in rows_of:
            row, read = features_and_cold_weight(c.family, c.params, c.variant, c.layout, batch, precision, device)
            rows.append(pack(*row))
            cold.append(read)
        features = np.frombuffer(b"".join(rows), dtype=np.float64).reshape(len(rows), len(FEATURE_COLUMNS))
        if wanted:
            kernel = self.bundle.targets["kernel"]
            own = features[:len(wanted)]
            roof = np.power(10.0, own[:, ROOFLINE_COLUMN]).tolist()
            k_log = kernel.predict_log_array(_columns(own, kernel.feature_columns)).tolist()
            bounds = self._interval_factors
            for key, r, k, read in zip(wanted, roof, k_log, cold):
                down, up = bounds.get(key[0].family) or bounds["*"]
                t = r * math.exp(k)
                found[key] = cache[key] = (t, t * down, t * up, read)
        if wanted_dispatch:
            dispatch = self.bundle.targets["dispatch"]
            own = features[[rows_of[key] for key in wanted_dispatch]]
            d_log = dispatch.predict_log_array(_columns(own, dispatch.feature_columns)).tolist()
            for key, d in zip(wanted_dispatch, d_log):
                found_dispatch[key] = dispatches[key] = math.exp(d)
        return found, found_dispatch

    def forget_evaluated(self) -> None:
        """Forget every kernel configuration evaluated so far: a benchmark's cold prediction."""
        self._cache, self._dispatch = {}, {}

    def prefetch(self, requests: list[tuple[Graph, int | None, str, str]]) -> None:
        """Evaluate the kernels of many (graph, batch, precision, mode) requests in one pass.

        A NAS loop's batch of new candidates brings many configurations never seen before;
        asked graph by graph, each booster runs once per family per graph, and that fixed cost
        dominates. Invalid requests are skipped here: ``predict`` refuses them by name.
        """
        needed: set[KernelKey] = set()
        dispatch_needed: set[KernelKey] = set()  # the eager requests' keys
        for graph, batch, precision, mode in requests:
            batch = graph.batch if batch is None else batch
            try:
                check_variant(batch, precision, mode)
            except ValueError:
                continue
            name = get_precision(precision).name
            if self.device.refusal(name, mode) is not None:  # (a CPU asked for a CUDA graph)
                continue
            graph = graph.at_precision(name, batch)
            keys = [key for key in self._node_keys(graph, batch, name, mode) if key is not None]
            needed.update(keys)
            if mode == "eager":
                dispatch_needed.update(keys)
            if len(needed) >= PREFETCH_LIMIT:  # more would evict what was just evaluated
                break
        if needed:
            self._evaluate(needed, dispatch_needed)

    def new_kernels(self, requests: Iterable[tuple[Graph, int | None, str, str]]) -> tuple[int, int]:
        """(distinct kernel configurations, those not evaluated yet) that predicting every
        (graph, batch, precision, mode) request would need: what a request will cost, known
        before any tree runs (a service refuses what is over its budget on this).

        Cheaper than the node keys ``prefetch`` builds: a cache key is (configuration, batch,
        precision), so each graph's distinct configurations are collected once per precision and
        mode, whatever the batches, and only each (batch, precision)'s union of them is looked up.
        A configuration counts as new where its kernel time is not evaluated yet or, asked
        eagerly, its dispatch ratio. Invalid requests count nothing: ``predict`` refuses them by name."""
        by_key: dict[tuple[int, str], dict[int, frozenset[KernelConfig]]] = {}
        eager_by_key: dict[tuple[int, str], dict[int, frozenset[KernelConfig]]] = {}
        for graph, batch, precision, mode in requests:
            batch = graph.batch if batch is None else batch
            try:
                if type(batch) is int and type(precision) is str and type(mode) is str:
                    _checked_variant(batch, precision, mode)
                else:
                    check_variant(batch, precision, mode)
                name = get_precision(precision).name
                if self.device.refusal(name, mode) is not None:
                    continue
                graph = graph.at_precision(name, batch)
            except ValueError:
                continue
            for node_precision, configs in self._kernel_sets(graph, name, mode).items():
                by_key.setdefault((batch, node_precision), {})[id(configs)] = configs
                if mode == "eager":
                    eager_by_key.setdefault((batch, node_precision), {})[id(configs)] = configs
        distinct = new = 0
        cache, dispatches = self._cache, self._dispatch
        for (batch, precision), sets in by_key.items():
            union = _union(sets)
            distinct += len(union)
            eager = _union(eager_by_key.get((batch, precision), {}))
            if not (cache or dispatches):
                new += len(union)
            else:
                new += sum((key := (c, batch, precision)) not in cache or (c in eager and key not in dispatches)
                           for c in union)
        return distinct, new

    @staticmethod
    def _kernel_sets(graph: Graph, precision: str, mode: str) -> dict[str, frozenset[KernelConfig]]:
        """``graph``'s (already at ``precision``) distinct kernel configurations in ``mode``, by
        the precision each runs at: its kernel keys without the batch, made once per graph."""
        def make() -> dict[str, frozenset[KernelConfig]]:
            configs = Predictor._kernel_configs(graph, mode)
            upcast, noop_casts = graph.precision_plan(precision)
            if not (upcast or noop_casts):  # most graphs: every kernel at the precision asked
                return {precision: frozenset(c for c in set(configs) if c is not None)}
            by: dict[str, set[KernelConfig]] = {}
            for n, c in zip(graph.nodes, configs):
                if c is not None and not (noop_casts and n.op in CAST_OPS):
                    by.setdefault("fp32" if upcast and graph.computes_in_float32(n) else precision, set()).add(c)
            return {p: frozenset(cs) for p, cs in by.items()}

        return graph.derived(("kernel sets", precision, mode), make)

    def predict_many(self, graphs: Sequence[Graph], variants: Sequence[Variant] = (Variant(),),
                     host: HostProfile | None = None) -> list[Prediction]:
        """Every graph on every variant, graph-major (graph i on variant j is result
        ``i * len(variants) + j``), without per-layer breakdowns: a NAS loop's batch of
        candidates; eager ones issued by ``host`` (default: the bundle's). Their new kernels are
        evaluated in one pass per family before any graph is composed. A variant that names
        another device than this predictor's is refused."""
        # Each is walked three times (devices, prefetch, predictions): a generator, which a NAS loop
        # may well pass whatever the annotation says, would be spent by the first and answer [].
        graphs, variants = list(graphs), list(variants)
        for j, v in enumerate(variants):
            if v.device is None:
                continue
            try:
                device_id = resolve_device(v.device).device_id
            except ValueError as exc:
                raise ValueError(f"variants[{j}].device: {exc}") from None
            if device_id != self.device.device_id:
                raise ValueError(f"variants[{j}].device: {v.device!r} is not {self.device.device_id}, the device "
                                 "this predictor serves")
        self.prefetch([(g, v.batch, v.precision, v.mode) for g in graphs for v in variants])
        return [self.predict(g, v.batch, v.precision, v.mode, with_layers=False, host=host)
                for g in graphs for v in variants]

    def reference_layers(self, key: str) -> LayerArrays:
        """One reference forward's layers, eager (``nas-1002|b1|fp16``: predictor.host_references)."""
        model, batch, precision = parse_reference_key(key)
        graph = reference_graph(model).at_precision(get_precision(precision).name, batch)
        return self.layers(graph, batch, precision, "eager")

    def probed_elsewhere(self, host: HostProfile) -> str | None:
        """What to say when an eager forward's host was probed beside another GPU than this
        device: a transfer bundle's default hosts are the H200 machine's, so an H100's answer
        without ``host`` is for that machine's host (the service resolves the default before it
        predicts, so this reads the profile, not whether one was asked). None where it was this
        GPU, or the GPU this partition is carved from, or the profile names no GPU (a CPU's, or an
        estimate)."""
        probed = _probed_on(host)
        if probed is None or self.device.kind != "gpu":
            return None
        if self.device.device_id == probed or self.device.device_id.startswith(f"{probed}-sm"):
            return None
        return (f"the host profile {host.id} was probed beside {host.gpu}, not this GPU: its eager "
                "latency is for that machine's host; name this machine's (--host, or 'host' in the request)")

    def references_apply(self, host: HostProfile) -> bool:
        """Whether ``host``'s reference forwards were timed on this predictor's device: forwards
        timed on another GPU (or on the H200 for one of its partitions, or for a device never
        measured) say nothing about how this device's forwards would run."""
        if not host.reference_ms or self.provenance != MEASURED:
            return False
        return _probed_on(host) == self.device.device_id

    def host_for_device(self, host: HostProfile) -> tuple[HostProfile, str | None]:
        """The profile an eager forward on this device is predicted from when ``host`` is asked,
        and a warning where it is not ``host`` itself. A profile of a host issuing a GPU's kernels
        (probed beside a GPU, or estimated from such a profile) times CUDA launches; one probed
        without a GPU times a CPU's own operators. On a CPU device the first gives way to the CPU's
        own profile, and on a GPU the second to an estimate of its host, the bundle's host scaled by
        its CPU score (what ``latpred host probe --cpu-only`` makes there, labelled estimated, with a
        wider interval)."""
        if self.host is None:
            return host, None
        launches = host.times_gpu_launches  # (None: an estimate that names no reference, used as given)
        if self.device.kind == "cpu":
            if launches is not True:
                return host, None
            how = (f"was probed beside a GPU ({host.gpu})" if host.gpu else
                   f"was estimated from {host.estimated_from}, a host issuing a GPU's kernels")
            return self.host, (f"the host profile {host.id} {how}: a CPU's forward is predicted from its own "
                               f"profile, {self.host.id}")
        if launches is not False:
            return host, None
        measured = host.label == "measured"
        gpu_less = (f"the host profile {host.id} was probed without a GPU, so its costs are a CPU's own "
                    "operators, not CUDA launches") if measured else (
                    f"the host profile {host.id} was estimated from {host.estimated_from}, a CPU's own operators, "
                    "not CUDA launches")
        if host.cpu_score_ns is None or self.host.cpu_score_ns is None:
            lacking = host.id if host.cpu_score_ns is None else f"the bundle's {self.host.id}"
            return host, (f"{gpu_less}, and {lacking} has no cpu_score_ns to estimate a GPU's host from: its "
                          "costs are used as probed; probe where the GPU is, or estimate with 'latpred host probe "
                          "--cpu-only'")
        key = (host.model_dump_json(), self.host.id)
        if key not in self._estimates:
            if len(self._estimates) >= CALIBRATED_HOSTS_KEPT:  # (a service may be posted many hosts)
                self._estimates.clear()
            self._estimates[key] = estimate_profile(
                self.host, host.cpu_score_ns, cpu_model=host.cpu_model, cpu_cores=host.cpu_cores,
                hostname=host.hostname, measured_at=host.measured_at,
                note=f"estimated for a GPU from {host.id}, " + ("probed without one" if measured else
                                                                 f"itself estimated from {host.estimated_from}"))
        estimate = self._estimates[key]
        return estimate, (f"{gpu_less}: this eager forward is predicted from {estimate.id}, {self.host.id} scaled "
                          f"by {host.id}'s CPU score (estimated, as 'latpred host probe --cpu-only' makes)")

    def calibrated_host(self, host: HostProfile, constants: CompositionConstants | None = None,
                        keys: Collection[str] = CALIBRATION_KEYS) -> tuple[HostProfile, Calibration | None]:
        """``host`` scaled by its reference forwards of ``keys`` (default: the fp32 ones, which
        predictions read) as ``constants`` (default: this predictor's) predict them; the same
        profile where it carries none, or where they were timed on another device
        (``references_apply``). Remembered per profile, constants and keys (a service asks for one
        stored host thousands of times; validation, for each held-out model's constants)."""
        if not self.references_apply(host):
            return host, None
        c = constants or self.constants
        read = tuple(sorted(set(keys)))  # the same forwards in any order are one calibration
        key = (host.model_dump_json(), None if c is self.constants else json.dumps(c.as_dict(), sort_keys=True), read)
        if key not in self._calibrated:
            if len(self._calibrated) >= CALIBRATED_HOSTS_KEPT:  # (a service may be posted many hosts)
                self._calibrated.clear()
            self._calibrated[key] = calibrate(host, lambda ref, h: compose(self.reference_layers(ref), c, "eager", h)
                                              / 1e3, read)
        return self._calibrated[key]

    def layers(self, graph: Graph, batch: int, precision: str, mode: str = "eager",
               with_dispatch: bool | None = None) -> LayerArrays:
        """What each node of ``graph`` costs alone at ``batch`` and ``precision`` in ``mode`` (a
        node may run another kernel variant when the model is captured as a CUDA graph), in graph
        order, as arrays for predictor.compose. ``graph`` must already be at ``precision``
        (``Graph.at_precision``), as ``predict`` and training's runs make it. Each kernel's
        dispatch ratio is evaluated ``with_dispatch`` (default: in eager mode only; a captured
        graph's replay issues no call, and its arrays carry zeros)."""
        prec = get_precision(precision)
        keys = self._node_keys(graph, batch, prec.name, mode)
        if with_dispatch is None:
            with_dispatch = mode == "eager"
        none = (0.0, 0.0, 0.0, 0.0)  # kernel, low, high, cold weight read
        cache, dispatches = self._cache, self._dispatch
        try:  # after a prefetch every kernel is in the cache: no need to collect the graph's needs
            rows = [none if key is None else cache[key] for key in keys]
            dispatch = [0.0 if key is None else dispatches[key] for key in keys] if with_dispatch else None
        except KeyError:
            kernel_keys = [key for key in keys if key is not None]
            evaluated, ratios = self._evaluate(kernel_keys, kernel_keys if with_dispatch else ())
            rows = [none if key is None else evaluated[key] for key in keys]
            dispatch = [0.0 if key is None else ratios[key] for key in keys] if with_dispatch else None
        group, is_fallback, is_launched, fallback_elements, kinds = graph.derived(("node kinds",),
                                                                                 lambda: _node_kinds(graph))
        values = np.array(rows).reshape(len(keys), 4).T
        is_kernel = np.array([key is not None for key in keys], dtype=bool)
        bytes_per_us = FALLBACK_BANDWIDTH_SHARE * self._feature_device.memory_bandwidth / 1e6 / prec.element_bytes
        kernel = np.where(is_fallback, fallback_elements * batch / bytes_per_us, values[0])
        ratio = np.zeros(len(keys)) if dispatch is None else np.array(dispatch, dtype=float)
        return LayerArrays(kernel, values[1], values[2], ratio, values[3], group, is_kernel,
                           is_fallback, is_launched & is_kernel, kinds)

    def on_host(self, arrays: LayerArrays, host: HostProfile | None) -> LayerArrays:
        """``arrays`` as their operators run on ``host``: on a CPU whose bundle names the host
        its operator rows were measured on, scaled by ``host``'s speed against it to the bundle's
        power (predictor.operator_host); elsewhere as they are (a GPU's kernels do not follow the
        host)."""
        if self.operator_host is None or host is None or not self.operator_speed_exponent:
            return arrays
        return on_host(arrays, speed_ratio(host, self.operator_host) ** self.operator_speed_exponent)

    def spread_sized(self) -> bool:
        """Whether an eager interval here is sized by its host's forward spread: on a measured GPU,
        where the line of predictor.host_spread was fitted (the H200's host conditions). A CPU's
        forward is its own operators, not a host issuing to a GPU, and a transferred device's width
        carries what its datasheet cannot tell: both keep their bundle's one width."""
        return self.device.kind == "gpu" and self.provenance != TRANSFERRED

    def interval_log(self, mode: str, host: HostProfile | None = None) -> float:
        """The half-width in log space of a prediction's 90% interval: the bundle's for ``mode``;
        for an eager one on ``host``, sized by how steadily it ran forwards where its profile says
        (predictor.host_spread; on a measured GPU), and widened on an estimated profile by what
        scaling a measured profile by the CPU's speed missed on the measured hosts."""
        widths = self.composition.get("interval_log", {})
        q = float(widths.get(mode, 0.25))
        if mode == "eager" and host is not None:
            if self.spread_sized():
                q = eager_interval_log(host, q, float(widths.get("cudagraph", 0.0)))
            if host.label == "estimated":
                q += self.composition.get("estimated_host_extra_log", ESTIMATED_EXTRA_LOG)
        return q

    def predict(self, graph: Graph, batch: int | None = None, precision: str = "fp32",
                mode: str = "cudagraph", with_layers: bool = True, host: HostProfile | None = None) -> Prediction:
        """Latency of ``graph`` (at its own batch unless ``batch`` overrides it); without its
        per-layer breakdown when ``with_layers`` is false (a NAS loop wants the totals of
        thousands of graphs; their layer objects cost a tenth of a new graph's prediction).
        An eager forward is issued by ``host`` (default: the host that measured the bundle),
        which the prediction names; its interval follows how steadily the host ran its reference
        forwards where its profile says (``interval_log``), and an estimated profile widens it."""
        batch = graph.batch if batch is None else batch
        if type(batch) is int and type(precision) is str and type(mode) is str:
            _checked_variant(batch, precision, mode)
        else:  # (not hashable, or a bool or float the check refuses): checked, never remembered
            check_variant(batch, precision, mode)
        name = get_precision(precision).name
        refusal = self.device.refusal(name, mode)
        if refusal is not None:  # a CPU: eager, fp32
            raise ValueError(refusal)
        graph = graph.at_precision(name, batch)
        arrays = self.layers(graph, batch, precision, mode)
        c = self.constants
        warnings: list[str] = []
        asked = host
        if host is not None and mode == "eager":
            host, mismatch = self.host_for_device(host)
            if mismatch is not None:
                warnings.append(mismatch)
        host = host or self.host
        eager = mode == "eager"
        if host is None and eager:
            raise ValueError("this bundle names no host profile: give one (--host, or 'host' in the request)")
        named = host
        if eager and host is not None and (other := self.probed_elsewhere(host)) is not None:
            warnings.append(other)
        calibration = None
        if eager and host is not None:
            # Solved either way: forwards far from what the costs predict are said even when the
            # costs are used as probed (the probe then likely saw another host than a forward sees).
            calibrated, calibration = self.calibrated_host(host)
            if self.calibrate_hosts:
                host = calibrated
        arrays = self.on_host(arrays, host)
        total = compose(arrays, c, mode, host)
        fallbacks = bool(arrays.is_fallback.any())
        # (a captured graph's replay issues no call: its layers' host column is zero)
        times = (layer_times(arrays, c, host if eager and host is not None else np.zeros(len(HOST_KINDS)))
                 if with_layers or fallbacks else None)
        layers = [LayerPrediction(n.name, n.op, n.kind, n.family, k, lo, hi, host, list(n.merged))
                  for n, k, lo, hi, host in zip(graph.nodes, times.kernel_us.tolist(), times.low_us.tolist(),
                                                 times.high_us.tolist(), times.host_us.tolist())] \
            if with_layers and times is not None else []
        q = self.interval_log(mode, named)
        if eager and named is not None and self.spread_sized() and (unsteady := unsteady_warning(named)) is not None:
            warnings.append(unsteady)
        unsupported = []
        if calibration is not None and calibration.warning():
            warnings.append(str(calibration.warning()))
        elif self.calibrate_hosts and eager and named is not None and named.reference_ms and calibration is None:
            if not self.references_apply(named):
                warnings.append(f"the host's reference forwards were timed on {named.gpu or 'no GPU'}, not "
                                f"{self.device.name}: its costs are used as probed")
            else:
                warnings.append(f"none of the host's {len(named.reference_ms)} reference forwards is in "
                                f"{', '.join(CALIBRATION_PRECISIONS)}, the precision calibration reads: its "
                                "costs are used as probed")
        if fallbacks and times is not None:
            fallback = Counter(n.op for n, is_fallback in zip(graph.nodes, arrays.is_fallback.tolist()) if is_fallback)
            unsupported = [UnsupportedOp(op=op, count=count, costed_as="roofline on bytes moved")
                           for op, count in fallback.most_common()]
            share = float(times.kernel_us[arrays.is_fallback].sum()) / max(float(times.kernel_us.sum()), 1e-9)
            warnings.append(f"{sum(fallback.values())} call(s) of {len(fallback)} op type(s) have no "
                            f"learned model and were estimated by the roofline ({share:.0%} of kernel time)")
        # What an importer had to assume about what PyTorch runs (an ONNX file cannot show a folded
        # BatchNorm's bias, or whether a mask reaches attention under capture): said, not hidden.
        warnings += [f"assumed: {a}" for a in graph.meta.get("assumptions", []) if isinstance(a, str)]
        if self.provenance == TRANSFERRED:
            warnings.append(f"transferred: {self.device.name} was never measured; its latency is predicted from its "
                            "datasheet by the transfer model trained on the measured devices, with a wider interval")
        return Prediction(
            model=graph.name, device=self.device.device_id, batch=batch, precision=precision,
            mode=mode, total_ms=total / 1e3, low_ms=total * math.exp(-q) / 1e3,
            high_ms=total * math.exp(q) / 1e3, model_version=self.bundle.version,
            host=(host_description(named, calibration if self.calibrate_hosts else None)
                  + (f" for {asked.id}" if asked is not None and asked.id != named.id else "")
                  if eager and named is not None else None),
            provenance=self.provenance,
            layers=layers, unsupported=unsupported, warnings=warnings,
        )
