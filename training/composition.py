"""Learn the composition constants from whole-model runs, and check them leave-one-model-out.

For every measured run of a zoo model (model, batch, precision, mode) the per-layer models
predict each node of the model's shipped graph once. cudagraph: one kernel-time scale per
family group and a gap per kernel are fitted by non-negative least squares on relative error
(a layer inside a model is not the same layer measured alone: no bias, another layout, another
cache state). eager: host-time scale and a per-call host cost are chosen on a grid, the
synchronisation cost as the median residual. Validation fits the constants on all models but
one and predicts that one, for each model in turn; two baselines are computed in the same run:
the pure roofline sum, and latency proportional to FLOPs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from predictor.catalogue import flops as op_flops
from predictor.compose import GROUPS, CompositionConstants, eager_us, family_group
from predictor.features import roofline_us
from predictor.graph import Graph
from predictor.predict import Predictor
from predictor.precision import get_precision

HOST_SCALES = (0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
CALL_HOST_US = (0.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0)
MAX_SYNC_US = 500.0


@dataclass
class RunArrays:
    """One measured run with everything composition needs, predicted once."""

    model: str
    batch: int
    precision: str
    mode: str
    measured_us: float
    kernel_us: np.ndarray  # unscaled per-layer predictions
    group: np.ndarray  # scale group index per node
    dispatch_us: np.ndarray  # predicted dispatch for kernel nodes, 0 elsewhere
    is_fallback: np.ndarray
    roofline_us: float
    flops: float

    def group_sums(self) -> np.ndarray:
        return np.bincount(self.group, weights=self.kernel_us, minlength=len(GROUPS))


def run_arrays(predictor: Predictor, graphs: dict[str, Graph], runs: pd.DataFrame) -> list[RunArrays]:
    """Predict every node of every run's graph once, with neutral constants."""
    neutral = CompositionConstants(host_scale=1.0, call_host_us=0.0, fallback_host_us=0.0)
    predictor = Predictor(predictor.bundle, predictor.device, constants=neutral)
    cache: dict[tuple[str, int, str, str], tuple] = {}
    out = []
    for r in runs.itertuples(index=False):
        if r.model not in graphs:
            continue
        key = (r.model, int(r.batch), r.precision, r.mode)
        if key not in cache:
            graph = graphs[r.model]
            layers = predictor.layers(graph, int(r.batch), r.precision, r.mode)
            prec = get_precision(r.precision)
            # The baselines see the graph as latpred does: captured variants, fp32 islands, no-op casts.
            kernel_nodes = [n for n in graph.nodes if n.kind == "kernel" and graph.runs_kernel(n, prec.name)]
            roof = sum(roofline_us(n.family, n.params, n.variant_in(r.mode), int(r.batch),
                                   graph.precision_of(n, prec.name), predictor.device) for n in kernel_nodes)
            flops = sum(op_flops(n.family, n.params, n.variant_in(r.mode), int(r.batch)) for n in kernel_nodes)
            cache[key] = (
                np.array([x.kernel_us for x in layers]),
                np.array([GROUPS.index(family_group(x.family, x.kind)) for x in layers]),
                np.array([x.host_us if x.kind == "kernel" else 0.0 for x in layers]),
                np.array([x.kind == "fallback" for x in layers]),
                roof, flops,
            )
        k, g, d, fb, roof, flops = cache[key]
        out.append(RunArrays(r.model, int(r.batch), r.precision, r.mode, float(r.latency_ms) * 1e3,
                             k, g, d, fb, roof, flops))
    return out


def fit_graph_constants(runs: list[RunArrays]) -> tuple[dict[str, float], float]:
    """NNLS of measured = sum_g s_g * K_g + gap * kernels, each run weighted by 1/measured."""
    from scipy.optimize import nnls

    a = np.array([np.append(r.group_sums(), (r.kernel_us > 0).sum()) / r.measured_us for r in runs])
    used = a[:, :-1].sum(axis=0) > 0
    coef, _ = nnls(a[:, np.r_[used, True]], np.ones(len(runs)))
    scales = dict.fromkeys(GROUPS, 1.0)
    for group, value in zip([g for g, u in zip(GROUPS, used) if u], coef[:-1]):
        scales[group] = float(max(value, 0.2))
    return scales, float(coef[-1])


def _scaled(r: RunArrays, scales: dict[str, float]) -> np.ndarray:
    return r.kernel_us * np.array([scales[g] for g in GROUPS])[r.group]


def _eager(r: RunArrays, c: CompositionConstants, host_scale: float, call_us: float) -> float:
    host = r.dispatch_us * host_scale + call_us + r.is_fallback * c.fallback_host_us
    return eager_us(_scaled(r, c.group_scale), host, replace(c, sync_us=0.0))


def predict_run(r: RunArrays, c: CompositionConstants) -> float:
    if r.mode == "cudagraph":
        k = _scaled(r, c.group_scale)
        return float(k.sum() + c.gap_us * (k > 0).sum())
    return _eager(r, c, c.host_scale, c.call_host_us) + c.sync_us


def fit_constants(runs: list[RunArrays]) -> CompositionConstants:
    """All constants, fitted on ``runs``."""
    graph_runs = [r for r in runs if r.mode == "cudagraph"]
    scales, gap = fit_graph_constants(graph_runs) if graph_runs else (dict.fromkeys(GROUPS, 1.0), 1.0)
    c = CompositionConstants(group_scale=scales, gap_us=gap)
    eager_runs = [r for r in runs if r.mode == "eager"]
    if not eager_runs:
        return c
    measured = np.array([r.measured_us for r in eager_runs])
    best = None
    for hs, call in itertools.product(HOST_SCALES, CALL_HOST_US):
        sim = np.array([_eager(r, c, hs, call) for r in eager_runs])
        sync = float(np.clip(np.median(measured - sim), 0.0, MAX_SYNC_US))
        err = np.abs(sim + sync - measured) / measured
        key = (float((err <= 0.1).mean()), -float(np.median(err)))
        if best is None or key > best[0]:
            best = (key, hs, call, sync)
    _, hs, call, sync = best
    return replace(c, host_scale=hs, call_host_us=call, sync_us=sync)


@dataclass
class CompositionFit:
    constants: CompositionConstants
    interval_log: dict[str, float]
    predictions: pd.DataFrame  # leave-one-model-out predictions and baselines, one row per run


def leave_one_model_out(runs: list[RunArrays]) -> CompositionFit:
    """Fit on all models but one and predict that one, for each model; then fit on all."""
    rows = []
    for held in sorted({r.model for r in runs}):
        train_runs = [r for r in runs if r.model != held]
        c = fit_constants(train_runs)
        per_flop = {}
        for key in {(r.mode, r.precision) for r in train_runs}:
            ratios = [r.measured_us / r.flops for r in train_runs if (r.mode, r.precision) == key and r.flops > 0]
            per_flop[key] = float(np.median(ratios)) if ratios else math.nan
        for r in runs:
            if r.model == held:
                rows.append({"model": r.model, "batch": r.batch, "precision": r.precision, "mode": r.mode,
                             "measured_ms": r.measured_us / 1e3, "predicted_ms": predict_run(r, c) / 1e3,
                             "roofline_ms": r.roofline_us / 1e3,
                             "flops_ms": per_flop.get((r.mode, r.precision), math.nan) * r.flops / 1e3})
    predictions = pd.DataFrame(rows)
    log_err = np.abs(np.log(predictions["predicted_ms"] / predictions["measured_ms"]))
    interval = {m: float(log_err[predictions["mode"] == m].quantile(0.9)) for m in ("eager", "cudagraph")}
    return CompositionFit(fit_constants(runs), interval, predictions)
