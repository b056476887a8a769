"""Score eager predictions under each host condition the dataset measured, each run from its own probe.

Conditions: the live zoo runs (``models/``, the host the bundle was fitted with) and every folder
of ``host_runs/`` (another machine, a contended core). Each eager run is predicted three ways,
with the composition constants fitted without its model (leave-one-model-out, as the zoo is
scored):

- ``own probe``: the host profile probed beside the run (training.hosts.reference_profiles), its
  costs as probed, as a prediction uses them;
- ``calibrated``: the same profile calibrated by its reference forwards (predictor.host_references;
  only for runs whose profile has them), as ``Predictor(calibrate_hosts=True)`` predicts;
- ``fixed host``: the bundle's one host for every run, as a bundle that baked one machine's host
  into a fitted scale would predict: the baseline the issue asks to report beside;
- ``estimated``: a CPU-only estimate of the run's host, the bundle's profile scaled by the run's
  probe's CPU score (what a user without a GPU on the target gets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.bundle import Bundle
from predictor.compose import CompositionConstants
from predictor.devices import resolve_device
from predictor.graph import Graph
from predictor.host_profile import HostProfile
from predictor.model_run_schema import HOST_RUNS_FOLDER, MODEL_RUNS_FOLDER
from predictor.predict import Predictor, default_host
from training.composition import RunArrays, held_out_constants, predict_run, run_arrays
from training.data import load_model_runs
from training.hosts import estimate_of, reference_profiles
from training.metrics import ape, covered
from training.suites import DEFAULT_SUITES_DIR, nas_train_arrays

LIVE_CONDITION = "bundle host (models/)"
METHODS = ("own probe", "calibrated", "fixed host", "estimated")


@dataclass
class HostReport:
    predictions: pd.DataFrame  # one row per condition, eager run and method
    table: pd.DataFrame  # per condition x method (and batch)
    overall: pd.DataFrame  # per condition x method
    #: per condition and probe: its elementwise cost against the bundle host's, and how far the
    #: CPU-only estimate of it lands (estimated / measured cost, over the kinds)
    profiles: pd.DataFrame


def host_conditions(dataset: Path) -> dict[str, pd.DataFrame]:
    """Condition name -> its eager runs: the live zoo runs and each ``host_runs/<name>`` that has
    eager runs (a folder of CUDA-graph runs only, such as ``machine-5-cudagraph``, checks that
    CUDA-graph latency does not follow the host, and has nothing to score here)."""
    dataset = Path(dataset)
    conditions = {LIVE_CONDITION: load_model_runs(dataset, MODEL_RUNS_FOLDER)}
    for folder in sorted(p for p in (dataset / HOST_RUNS_FOLDER).glob("*") if p.is_dir()):
        conditions[folder.name] = load_model_runs(dataset, f"{HOST_RUNS_FOLDER}/{folder.name}")
    eager = {name: runs[runs["mode"] == "eager"].reset_index(drop=True) for name, runs in conditions.items()}
    return {name: runs for name, runs in eager.items() if name == LIVE_CONDITION or not runs.empty}


@dataclass
class HeldOutRuns:
    """What scoring a condition's runs leave-one-model-out needs: the bundle's predictor, the zoo's
    graphs, each run's host profile and the composition constants fitted without each model."""

    bundle: Bundle
    predictor: Predictor
    graphs: dict[str, Graph]
    references: dict[str, HostProfile]
    held: dict[str, CompositionConstants]

    def runs(self, runs: pd.DataFrame) -> list[RunArrays]:
        """``runs`` as run arrays, those with a host profile and held-out constants only."""
        return [r for r in run_arrays(self.predictor, self.graphs, runs, self.references)
                if r.host is not None and r.model in self.held]


def held_out_runs(bundle_dir: Path, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> HeldOutRuns:
    """The bundle's predictor and the constants fitted without each zoo model (on the live zoo
    runs and ``nas-train``'s, as training fits them)."""
    from training.train import zoo_graphs

    bundle = Bundle.load(bundle_dir)
    predictor = Predictor(bundle, resolve_device(bundle.device_id))
    references = reference_profiles(dataset)
    live = load_model_runs(dataset)
    graphs = zoo_graphs(sorted(live["model"].unique()))
    held = held_out_constants(run_arrays(predictor, graphs, live, references),
                              nas_train_arrays(predictor, dataset, suites_dir))
    return HeldOutRuns(bundle, predictor, graphs, references, held)


def predict_conditions(bundle_dir: Path, dataset: Path,
                       suites_dir: Path = DEFAULT_SUITES_DIR) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every eager run of every condition, predicted by each method (``METHODS``); and each
    condition's probes beside the bundle's host and their CPU-only estimates."""
    scored = held_out_runs(bundle_dir, dataset, suites_dir)
    predictor, held = scored.predictor, scored.held
    default = default_host(scored.bundle)
    if default is None:
        raise ValueError(f"bundle {bundle_dir} names no host profile: retrain it with this latpred")
    rows: list[dict] = []
    profiles: list[dict] = []
    seen: set[str] = set()
    for condition, runs in host_conditions(dataset).items():
        for r in scored.runs(runs):
            assert r.host is not None  # (HeldOutRuns.runs keeps only those)
            hosts = {"own probe": r.host}
            calibrated, calibration = predictor.calibrated_host(r.host, held[r.model])
            if calibration is not None:  # (forwards of this device's, some in fp32)
                hosts["calibrated"] = calibrated
            hosts.update({"fixed host": default, "estimated": estimate_of(default, r.host)})
            if r.host.id not in seen:
                seen.add(r.host.id)
                ratios = np.array([hosts["estimated"].costs_us[k] / r.host.costs_us[k] for k in r.host.costs_us])
                profiles.append({"condition": condition, "probe": r.host.id, "elementwise us": r.host.costs_us[
                    "elementwise"], "vs bundle host": r.host.costs_us["elementwise"] / default.costs_us["elementwise"],
                    "estimate/probe median": float(np.median(ratios)), "min": float(ratios.min()),
                    "max": float(ratios.max())})
            for method, host in hosts.items():
                predicted_ms = predict_run(r, held[r.model], host) / 1e3
                q = predictor.interval_log("eager", host)  # (sized by the host's spread where it has one)
                rows.append({"condition": condition, "method": method, "model": r.model, "batch": r.batch,
                             "precision": r.precision, "host": host.id, "measured_ms": r.measured_us / 1e3,
                             "predicted_ms": predicted_ms, "low_ms": predicted_ms * math.exp(-q),
                             "high_ms": predicted_ms * math.exp(q)})
    return pd.DataFrame(rows), pd.DataFrame(profiles)


def _scores(group: pd.DataFrame) -> dict[str, float]:
    errors = ape(group["predicted_ms"], group["measured_ms"])
    ratio = group["predicted_ms"] / group["measured_ms"]
    return {"runs": len(group), "within10": float(np.mean(errors <= 0.1)), "MAPE": float(np.mean(errors)),
            "median ratio": float(ratio.median()), "coverage90": float(covered(group).mean())}


def validate_hosts(bundle_dir: Path, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> HostReport:
    """Predict and score every condition's eager runs by every method."""
    predictions, profiles = predict_conditions(bundle_dir, dataset, suites_dir)
    table = pd.DataFrame([{"condition": c, "method": m, "batch": b, **_scores(g)}
                          for (c, m, b), g in predictions.groupby(["condition", "method", "batch"], sort=False)])
    overall = pd.DataFrame([{"condition": c, "method": m, **_scores(g)}
                            for (c, m), g in predictions.groupby(["condition", "method"], sort=False)])
    return HostReport(predictions, table, overall, profiles)
