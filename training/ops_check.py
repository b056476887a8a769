"""``latpred check``'s operator part: kernel time of a device's operator rows, as shipped predicts it.

Why: a whole model's error is a sum of its kernels' errors, partly cancelling. Where a device
folder holds an operator sweep (``latpred collect ops``), each family's kernel error says where a
model's error comes from, and on a GPU latpred never measured it is the transfer model's own
error per family, which no whole-model figure shows. Nothing is refitted: each row is predicted
as a prediction of a graph would predict that call (the features on the device's datasheet for a
transfer bundle, on its measured figures for its own bundle), with the family's 90% interval.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.bundle import Bundle, TargetModel
from predictor.predict import kernel_interval_logs
from training.data import OpData, load_ops, shard_paths

OPS_FOLDER = "ops"


def has_ops(dataset: Path) -> bool:
    """Whether ``dataset`` holds an operator sweep to check."""
    return bool(shard_paths(Path(dataset) / OPS_FOLDER))


def predicted_kernel_us(kernel: TargetModel, ops: OpData) -> np.ndarray:
    """Each row's kernel time (us) as ``kernel`` predicts it: its ratio to the row's roofline
    (predictor.predict), times that roofline."""
    return np.exp(kernel.predict_log(ops.features)) * ops.roofline_us


def kernel_predictions(dataset: Path, bundle: Bundle) -> pd.DataFrame:
    """Per measured operator row of ``dataset``: family, precision, measured and predicted kernel
    time (us) and the prediction's 90% interval."""
    ops = load_ops(dataset, basis=bundle.feature_spec)
    kernel = bundle.targets["kernel"]
    predicted = predicted_kernel_us(kernel, ops)
    families = ops.rows["family"].to_numpy()
    widths = kernel_interval_logs(kernel)
    half = np.array([widths.get(f, widths["*"]) for f in families], dtype=float)
    return pd.DataFrame({"family": families, "precision": ops.rows["precision"].to_numpy(),
                         "measured_us": ops.rows["kernel_us"].to_numpy(dtype=float), "predicted_us": predicted,
                         "low_us": predicted * np.exp(-half), "high_us": predicted * np.exp(half)})


def score_kernels(table: pd.DataFrame) -> pd.DataFrame:
    """Per family and precision, and over all rows: rows, share within +-10%, MAPE, the median of
    predicted / measured (a bias the others hide) and the 90% interval's coverage."""
    ratio = table["predicted_us"] / table["measured_us"]
    measured = table["measured_us"]
    scored = table.assign(within10=(ratio - 1).abs() <= 0.10, ape=(ratio - 1).abs(), ratio=ratio,
                          covered=(table["low_us"] <= measured) & (measured <= table["high_us"]))

    def summary(group: pd.DataFrame) -> pd.Series:
        return pd.Series({"rows": len(group), "within10": group["within10"].mean(), "MAPE": group["ape"].mean(),
                          "median ratio": group["ratio"].median(), "coverage90": group["covered"].mean()})

    per = [summary(g).rename((str(f), str(p))) for (f, p), g in scored.groupby(["family", "precision"])]
    rows = pd.DataFrame(per + [summary(scored).rename(("all", "all"))])
    rows.index = pd.MultiIndex.from_tuples(rows.index, names=["family", "precision"])
    return rows.reset_index().astype({"rows": int})
