"""Score a validation suite through every importer: what a user of each path would see.

Per (importer, mode, precision, batch): the share of runs within +-10%, MAPE, Spearman's rank
correlation across the suite's models (a NAS loop needs the order right more than the numbers),
and how often the prediction's 90% interval covers the measurement (a calibrated interval covers
about 90%). The zoo is predicted leave-one-model-out (constants fitted without the model); the NAS
suites with the shipped bundle as it is, since nothing was fitted on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.bundle import Bundle
from predictor.compose import CompositionConstants
from predictor.devices import DeviceSpec, resolve_device
from predictor.predict import Predictor
from training.composition import held_out_constants, run_arrays
from training.hosts import reference_profiles
from training.metrics import ape, covered
from training.suites import Suite

GROUP = ["importer", "mode", "precision", "batch"]


@dataclass
class SuiteReport:
    """One suite's predictions (a row per importer and run) and their scores."""

    suite: str
    predictions: pd.DataFrame
    table: pd.DataFrame  # per importer x mode x precision x batch
    overall: pd.DataFrame  # per importer x mode
    missing: dict[str, list[str]]  # importer -> models it could not import


def _held_out_constants(predictor: Predictor, suite: Suite, hosts: dict[str, Any]) -> dict[str, CompositionConstants]:
    """Per model, the composition constants fitted as training fits them, without that model:
    on the other models' torch-trace runs and the suite's ``fit_extra`` runs."""
    extra = run_arrays(predictor, *suite.fit_extra, hosts) if suite.fit_extra else []
    return held_out_constants(run_arrays(predictor, suite.graphs["torch"], suite.runs, hosts), extra)


def predict_suite(suite: Suite, bundle: Path | Bundle, dataset: Path | None = None,
                  references: bool = False, device: DeviceSpec | None = None) -> pd.DataFrame:
    """A prediction per importer and measured run, with its interval; runs of a model an importer
    has no graph for are left out of that importer's rows (and listed in ``suite.missing``). An
    eager run is predicted for the host profile probed beside it (``dataset``'s), or for the
    bundle's host where it names none (the NAS suites' runs predate the probe): its costs as
    probed, as a prediction uses them, or calibrated by the profile's reference forwards where
    ``references`` is true (predictor.host_references). ``device``: the device the runs were
    measured on, where the bundle predicts more than its own (the transfer bundle). ``bundle``: its
    folder, or the bundle loaded already."""
    bundle = bundle if isinstance(bundle, Bundle) else Bundle.load(bundle)
    device = device or resolve_device(bundle.device_id)
    shipped = Predictor(bundle, device, calibrate_hosts=references)
    hosts = reference_profiles(dataset) if dataset is not None else {}
    held = _held_out_constants(shipped, suite, hosts) if suite.leave_one_out else {}
    rows = []
    r: Any  # a row's namedtuple: pandas-stubs types its fields as any scalar
    for name, runs in suite.runs.groupby("model"):
        model = str(name)
        # one predictor per held-out model: its cache serves that model's graphs through every importer
        predictor = Predictor(bundle, device, held[model], calibrate_hosts=references) if model in held else shipped
        for importer, graphs in suite.graphs.items():
            graph = graphs.get(model)
            if graph is None:
                continue
            for r in runs.itertuples(index=False):
                p = predictor.predict(graph, int(r.batch), str(r.precision), str(r.mode), with_layers=False,
                                      host=hosts.get(r.host_profile) if isinstance(r.host_profile, str) else None)
                rows.append({"importer": importer, "model": model, "batch": int(r.batch), "precision": r.precision,
                             "mode": r.mode, "measured_ms": float(r.latency_ms), "predicted_ms": p.total_ms,
                             "low_ms": p.low_ms, "high_ms": p.high_ms})
    return pd.DataFrame(rows)


def _scores(group: pd.DataFrame) -> dict[str, float]:
    from scipy.stats import spearmanr

    errors = ape(group["predicted_ms"], group["measured_ms"])
    rho = float(spearmanr(group["predicted_ms"], group["measured_ms"]).statistic) if len(group) > 2 else np.nan
    return {"runs": len(group), "within10": float(np.mean(errors <= 0.1)), "MAPE": float(np.mean(errors)),
            "spearman": rho, "coverage90": float(covered(group).mean())}


def score_suite(suite: Suite, predictions: pd.DataFrame) -> SuiteReport:
    """The per-group and per-(importer, mode) scores of ``predictions``."""
    table = pd.DataFrame([{**dict(zip(GROUP, key)), **_scores(g)} for key, g in predictions.groupby(GROUP)])
    overall = pd.DataFrame([{"importer": imp, "mode": mode, **_scores(g)}
                            for (imp, mode), g in predictions.groupby(["importer", "mode"])])
    if len(overall):  # Spearman over a whole mode mixes batches: the per-group minimum says more
        overall["spearman"] = [float(table[(table["importer"] == i) & (table["mode"] == m)]["spearman"].min())
                               for i, m in zip(overall["importer"], overall["mode"])]
        overall = overall.rename(columns={"spearman": "min spearman"})
    return SuiteReport(suite.name, predictions, table, overall, {k: v for k, v in suite.missing.items() if v})


def validate_suite(suite: Suite, bundle: Path | Bundle, dataset: Path | None = None,
                   references: bool = False, device: DeviceSpec | None = None) -> SuiteReport:
    """Predict and score ``suite`` through every importer it has graphs for (eager runs from their
    profiles' costs as probed, or calibrated by their reference forwards where ``references``);
    ``device``: the device the runs were measured on, where the bundle predicts more than its own
    (the transfer bundle on a catalog GPU). ``bundle``: its folder, or the bundle loaded already."""
    return score_suite(suite, predict_suite(suite, bundle, dataset, references, device))
