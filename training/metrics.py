"""Accuracy metrics, reported overall and per group: MAPE, median and p90 absolute
percentage error, and the share of predictions within +-10% of the measurement."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike


def ape(predicted: ArrayLike, measured: ArrayLike) -> np.ndarray:
    return np.abs(np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured)


def covered(predictions: pd.DataFrame) -> pd.Series:
    """Per row, whether its interval (``low_ms`` to ``high_ms``) holds ``measured_ms``."""
    measured = predictions["measured_ms"]
    return (predictions["low_ms"] <= measured) & (measured <= predictions["high_ms"])


def summarize_ape(errors: ArrayLike) -> dict[str, float]:
    errors = np.asarray(errors)
    return {"mape": float(errors.mean()), "median_ape": float(np.median(errors)),
            "p90_ape": float(np.quantile(errors, 0.9)), "within_10pct": float((errors <= 0.10).mean()),
            "count": int(len(errors))}


def grouped_metrics(errors: ArrayLike, groups: pd.Series | list[pd.Series]) -> pd.DataFrame:
    """One row of metrics per group (e.g. per family, or per mode x precision x batch)."""
    frame = pd.DataFrame({"ape": np.asarray(errors)})
    keys = groups if isinstance(groups, list) else [groups]
    names = []
    for i, key in enumerate(keys):
        name = key.name or f"group{i}"
        frame[name] = np.asarray(key)
        names.append(name)
    return pd.DataFrame([{**dict(zip(names, k if isinstance(k, tuple) else (k,))), **summarize_ape(g["ape"])}
                         for k, g in frame.groupby(names)])
