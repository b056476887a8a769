"""``latpred train``: fit per-layer models, learn composition, validate, export, track.

Both libraries are fitted for both targets on a grouped split and the better one is kept per
target; composition constants are learned from the whole-model runs and checked
leave-one-model-out; the bundle is exported and the run logged to MLflow.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.graph import Graph
from predictor.host_profile import HostProfile
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph, zoo_names
from training.bundle_export import export_bundle, in_memory_bundle
from training.composition import CompositionFit, leave_one_model_out, run_arrays
from training.data import OpData, dataset_fingerprint, dataset_hash, load_model_runs, load_ops
from training.datasets_dir import H200_DATASET
from training.fit import FitResult, better, fit_target, refit_on_all_rows
from training.hosts import bundle_hosts, operator_host, reference_profiles
from training.metrics import ape, summarize_ape
from training.suites import DEFAULT_SUITES_DIR, nas_dev_arrays, nas_train_arrays, require_nas_suites

#: What is fitted and compared per target: both libraries as one model with the family as a
#: feature, and per-family models (with the faster-fitting library; dispatch times are too noisy
#: for per-family models to pay).
CANDIDATES: dict[str, list[tuple[str, str]]] = {
    "kernel": [("xgboost", "single"), ("lightgbm", "single"), ("lightgbm", "per_family")],
    "dispatch": [("xgboost", "single"), ("lightgbm", "single")],
}


@dataclass
class TrainSettings:
    dataset: Path = H200_DATASET
    bundle_root: Path = DEFAULT_BUNDLE_DIR
    store: Path = Path("mlruns/latpred.db")
    threads: int = 2
    limit: int | None = None
    scale: float = 1.0
    seed: int = 0
    track: bool = True
    #: Install the new bundle where predictions load it even if it validates worse than the one there.
    force: bool = False
    #: the suites folder: composition also fits on its ``nas-train`` runs, and calibrates its
    #: interval on ``nas-dev``'s
    suites: Path = DEFAULT_SUITES_DIR
    #: on a CPU, the power of its host's speed a forward's operators are scaled by
    #: (predictor.operator_host; 0: as measured, whatever the host)
    host_speed_exponent: float = 0.0


@dataclass
class TrainReport:
    chosen: dict[str, FitResult]
    candidates: dict[str, dict[str, FitResult]]
    composition: CompositionFit
    bundle_dir: Path
    tracking: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    #: False when the served bundle validated better and this one went to '<device>.candidate'.
    installed: bool = True


def served_score(bundle_dir: Path) -> float:
    """Whole-model accuracy the served bundle recorded (-1 if there is none, or it is unreadable)."""
    try:
        return float(json.loads((bundle_dir / "metadata.json").read_text())["metrics"]["lomo_within_10pct"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1.0


def zoo_graphs(models: list[str]) -> dict[str, Graph]:
    names = set(zoo_names())
    return {m: load_zoo_graph(m) for m in models if m in names}


def _operator_host_metadata(data: OpData, references: dict[str, HostProfile], exponent: float) -> dict[str, Any]:
    """What a CPU bundle says of its operators' host (predictor.operator_host): the host most of
    its rows were measured on and the power of a host's speed its forwards follow; nothing where
    they run as measured (exponent 0, and every GPU, whose kernels do not follow the host)."""
    if not exponent:
        return {}
    if data.device.kind != "cpu":
        raise ValueError(f"host_speed_exponent: {data.device.device_id} is a GPU, whose kernels take what "
                         "they take whichever host issues them (its host time follows the host profile already)")
    operator = operator_host(data.rows, references)
    if operator is None:
        raise ValueError("host_speed_exponent: no operator row names a host profile of the dataset's hosts/ "
                         "folder, so the bundle could not say whose speed its operator times are: measure them "
                         "with this latpred's 'collect ops', which probes the host beside them")
    return {"operator_host": operator.model_dump(mode="json"), "operator_speed_exponent": exponent}


def train(settings: TrainSettings) -> TrainReport:
    started = time.perf_counter()
    require_nas_suites(settings.dataset, settings.suites)  # before minutes of fitting, not after
    data: OpData = load_ops(settings.dataset, limit=settings.limit, seed=settings.seed)
    references = reference_profiles(settings.dataset)
    operator_metadata = _operator_host_metadata(data, references, settings.host_speed_exponent)
    candidates: dict[str, dict[str, FitResult]] = {}
    chosen: dict[str, FitResult] = {}
    for target, options in CANDIDATES.items():
        fits = [fit_target(data, target, lib, settings.threads, settings.seed, settings.scale, structure)
                for lib, structure in options]
        candidates[target] = {fit.label: fit for fit in fits}
        chosen[target] = refit_on_all_rows(data, functools.reduce(better, fits), settings.threads,
                                           settings.seed, settings.scale)
    device_id = data.device.device_id
    runs = load_model_runs(settings.dataset)
    graphs = zoo_graphs(sorted(runs["model"].unique()))
    predictor = Predictor(in_memory_bundle(device_id, chosen, operator_metadata), data.device)
    composition = leave_one_model_out(run_arrays(predictor, graphs, runs, references),
                                      nas_train_arrays(predictor, settings.dataset, settings.suites),
                                      nas_dev_arrays(predictor, settings.dataset, settings.suites))
    hosts = bundle_hosts(runs, references, settings.dataset)
    lomo = composition.predictions
    metrics: dict[str, float] = {}
    for target, fit in chosen.items():
        metrics.update({f"{target}_{k}": v for k, v in fit.overall.items() if k != "count"})
        for row in fit.per_family.to_dict("records"):  # per family, as the issue asks to report
            metrics.update({f"{target}_{row['family']}_{k}": float(row[k])
                            for k in ("mape", "median_ape", "p90_ape", "within_10pct")})
    for mode in sorted(set(lomo["mode"])):  # (a CPU has eager runs only)
        errors = ape(lomo.loc[lomo["mode"] == mode, "predicted_ms"], lomo.loc[lomo["mode"] == mode, "measured_ms"])
        metrics.update({f"lomo_{mode}_{k}": v for k, v in summarize_ape(errors).items() if k != "count"})
    metrics["lomo_within_10pct"] = float((ape(lomo["predicted_ms"], lomo["measured_ms"]) <= 0.1).mean())
    fingerprint = dataset_fingerprint(Path(settings.dataset))
    version = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    metadata = {
        "version": version, "dataset_hash": dataset_hash(settings.dataset), "fingerprint": fingerprint,
        "rows": len(data.rows), "metrics": metrics,
        "composition": {"constants": composition.constants.as_dict(), "interval_log": composition.interval_log,
                        "fitted_on": composition.fitted_on, "interval_calibrated_on": composition.calibrated_on,
                        "estimated_host_extra_log": hosts.estimated_extra_log},
        "host_profile": hosts.default.model_dump(mode="json"),
        "host_profiles": {p.id: p.model_dump(mode="json") for p in hosts.known},
        **operator_metadata,
    }
    served = Path(settings.bundle_root) / device_id
    installed = settings.force or metrics["lomo_within_10pct"] >= served_score(served)
    destination = served if installed else served.with_name(f"{device_id}.candidate")
    bundle_dir = export_bundle(destination, device_id, chosen, metadata)
    Bundle.load(bundle_dir)  # refuse to report success on a bundle that does not load
    report = TrainReport(chosen, candidates, composition, bundle_dir, installed=installed)
    if settings.track:
        from training.tracking import track_training

        params = {"dataset": str(settings.dataset), "rows": len(data.rows), "limit": settings.limit,
                  "scale": settings.scale, "seed": settings.seed, "host_speed_exponent": settings.host_speed_exponent,
                  **{f"{t}_model": f.label for t, f in chosen.items()}}
        tags = {"dataset_hash": metadata["dataset_hash"], "fingerprint": fingerprint.get("fingerprint", ""),
                "device_id": device_id, "bundle_version": version}
        report.tracking = track_training(settings.store, device_id, params, metrics, tags, bundle_dir,
                                         force=settings.force)
    report.seconds = time.perf_counter() - started
    return report
