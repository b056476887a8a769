"""``latpred validate``: predictions against the measured whole-model runs, leave-one-model-out.

The bundle's per-layer models predict every node of each zoo model; composition constants are
refitted without the model being predicted. Ours is reported beside two baselines from the same
run (pure roofline, the static analysis most tools stop at; and latency proportional to FLOPs),
per mode x precision x batch, with a predicted-vs-measured scatter plot.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.bundle import Bundle
from predictor.devices import resolve_device
from predictor.predict import Predictor
from training.composition import leave_one_model_out, run_arrays
from training.data import load_model_runs
from training.hosts import reference_profiles
from training.metrics import ape
from training.suites import DEFAULT_SUITES_DIR, nas_train_arrays, nas_train_runs

METHODS = {"predicted_ms": "latpred", "roofline_ms": "roofline", "flops_ms": "flops-proportional"}


@dataclass
class ValidationReport:
    predictions: pd.DataFrame
    table: pd.DataFrame  # mode, precision, batch, then MAPE and within-10% per method
    overall: pd.DataFrame  # mode x method


def score(predictions: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, overall = [], []
    for (mode, precision, batch), group in predictions.groupby(["mode", "precision", "batch"]):
        row = {"mode": mode, "precision": precision, "batch": batch, "runs": len(group)}
        for column, method in METHODS.items():
            if group[column].isna().all():
                continue
            errors = ape(group[column], group["measured_ms"])
            row[f"{method} MAPE"] = float(np.mean(errors))
            row[f"{method} within10"] = float(np.mean(errors <= 0.1))
        rows.append(row)
    for mode, group in predictions.groupby("mode"):
        for column, method in METHODS.items():
            if group[column].isna().all():
                continue
            errors = ape(group[column], group["measured_ms"])
            overall.append({"mode": mode, "method": method, "runs": len(group), "MAPE": float(np.mean(errors)),
                            "median APE": float(np.median(errors)), "within10": float(np.mean(errors <= 0.1))})
    return pd.DataFrame(rows), pd.DataFrame(overall)


def validate(bundle_dir: Path, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> ValidationReport:
    from training.train import zoo_graphs

    bundle = Bundle.load(bundle_dir)
    predictor = Predictor(bundle, resolve_device(bundle.device_id))
    runs = load_model_runs(dataset)
    fit = leave_one_model_out(run_arrays(predictor, zoo_graphs(sorted(runs["model"].unique())), runs,
                                         reference_profiles(dataset)),
                              nas_train_arrays(predictor, dataset, suites_dir))
    table, overall = score(fit.predictions)
    return ValidationReport(fit.predictions, table, overall)


def scatter_plot(predictions: pd.DataFrame, path: Path, title: str = "latpred, leave-one-model-out") -> Path:
    """Predicted vs measured, log-log, one colour per mode, with the +-10% band: one panel, or
    one per importer where the predictions name theirs (``latpred validate --suite``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted(predictions["importer"].unique()) if "importer" in predictions else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 6), squeeze=False)
    lo = float(min(predictions["measured_ms"].min(), predictions["predicted_ms"].min()) * 0.8)
    hi = float(max(predictions["measured_ms"].max(), predictions["predicted_ms"].max()) * 1.2)
    line = np.array([lo, hi])
    for ax, importer in zip(axes[0], panels):
        part = predictions if importer is None else predictions[predictions["importer"] == importer]
        for mode, colour in (("cudagraph", "tab:blue"), ("eager", "tab:orange")):
            runs = part[part["mode"] == mode]
            ax.scatter(runs["measured_ms"], runs["predicted_ms"], s=10, alpha=0.6, label=mode, color=colour)
        ax.plot(line, line, "k-", lw=1)
        ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, label="±10%")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (ms)",
               ylabel="predicted (ms)", title=title if importer is None else f"{title}: {importer}")
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def strict_validate(bundle_dir: Path, dataset: Path, scale: float = 0.3, threads: int = 2,
                    suites_dir: Path = DEFAULT_SUITES_DIR) -> ValidationReport:
    """Leave-one-model-out with the per-layer models refitted too: for each zoo model, the
    operator rows drawn from its layers (sources ``model:<name>`` and ``perturbed:<name>``) are
    dropped, the per-layer models are fitted on the rest, and the composition constants on the
    other models' runs. Slower (one fit per model), and closer to a model never seen at all; a
    shape shared by several models is attributed to one of them only, so some overlap remains."""
    from training.bundle_export import in_memory_bundle
    from training.composition import fit_constants, predict_run
    from training.data import load_ops
    from training.fit import FitResult, fit_booster
    from training.train import zoo_graphs

    served = Bundle.load(bundle_dir)
    device = resolve_device(served.device_id)
    data = load_ops(dataset)
    runs = load_model_runs(dataset)
    graphs = zoo_graphs(sorted(runs["model"].unique()))
    extra_graphs, extra_runs = nas_train_runs(dataset, suites_dir)  # re-predicted by each fold's models
    references = reference_profiles(dataset)
    families = data.rows["family"].to_numpy()
    measured_kernel = np.log(data.rows["kernel_us"].to_numpy()) - np.log(data.roofline_us)
    # dispatch relative to the host profile beside each row, as training learns it (rows without one: none)
    measured_dispatch = np.log(data.rows["dispatch_us"].to_numpy()) - np.log(data.host_cost_us)
    probed = np.isfinite(measured_dispatch)
    x = data.features
    rows = []
    for held in sorted(graphs):
        keep = ~data.rows["source"].isin([f"model:{held}", f"perturbed:{held}"]).to_numpy()
        kernel = {f: fit_booster("lightgbm", x[keep & (families == f)], measured_kernel[keep & (families == f)],
                                 threads, 0, scale * 0.5) for f in sorted(set(families[keep]))}
        dispatch = fit_booster("lightgbm", x[keep & probed], measured_dispatch[keep & probed], threads, 0,
                               scale * 0.15)
        fits = {"kernel": FitResult("kernel", "lightgbm", kernel, {}, pd.DataFrame(),
                                    served.targets["kernel"].interval_log),
                "dispatch": FitResult("dispatch", "lightgbm", dispatch, {}, pd.DataFrame(), {})}
        predictor = Predictor(in_memory_bundle(served.device_id, fits), device)
        arrays = run_arrays(predictor, graphs, runs, references)
        constants = fit_constants([r for r in arrays if r.model != held]
                                  + run_arrays(predictor, extra_graphs, extra_runs, references))
        for r in arrays:
            if r.model == held:
                rows.append({"model": r.model, "batch": r.batch, "precision": r.precision, "mode": r.mode,
                             "measured_ms": r.measured_us / 1e3, "predicted_ms": predict_run(r, constants) / 1e3,
                             "roofline_ms": r.roofline_us / 1e3, "flops_ms": np.nan})
    predictions = pd.DataFrame(rows)
    table, overall = score(predictions)
    return ValidationReport(predictions, table, overall)
