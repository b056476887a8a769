"""Fit the per-layer models: XGBoost and LightGBM, both, on a grouped split; keep the better,
then fit it again on every row for the bundle.

Targets are learned in log space: kernel time as its ratio to the roofline time (so the model
learns how far from the hardware's floor a kernel runs, which transfers across sizes), host
dispatch time as its ratio to the cost of its kind in the host profile probed beside the row (so
the model learns how an operator's dispatch relates to its host's, and another host's profile
scales it back; rows without a profile are left out of that target). The held-out fold's
residuals give each family's conformal interval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from predictor.bundle import TargetModel
from predictor.features import FEATURE_COLUMNS
from training.data import OpData
from training.metrics import ape, grouped_metrics, summarize_ape

LIBRARIES = ("xgboost", "lightgbm")
INTERVAL_COVERAGE = 0.90

XGB_PARAMS: dict[str, Any] = {"n_estimators": 600, "max_depth": 8, "learning_rate": 0.08,
                              "subsample": 0.8, "colsample_bytree": 0.8, "tree_method": "hist"}
LGBM_PARAMS: dict[str, Any] = {"n_estimators": 600, "num_leaves": 127, "learning_rate": 0.08,
                               "subsample": 0.8, "subsample_freq": 1, "colsample_bytree": 0.8,
                               "verbose": -1}


def test_mask(groups: pd.Series, folds: int = 5, test_fold: int = 0) -> np.ndarray:
    """Deterministic grouped split: a shape's hash picks its fold."""
    fold = groups.map(lambda g: int(hashlib.md5(g.encode()).hexdigest(), 16) % folds)
    return (fold == test_fold).to_numpy()


STRUCTURES = ("single", "per_family")
#: Per-family models each see a fraction of the rows: half the trees fit them as well.
PER_FAMILY_SCALE = 0.5


@dataclass
class FitResult:
    """One fitted target with one library and structure, and how it did on held-out shapes."""

    target: str
    library: str
    booster: Any  # one booster, or {family: booster}
    overall: dict[str, float]
    per_family: pd.DataFrame
    interval_log: dict[str, float] = field(default_factory=dict)

    @property
    def structure(self) -> str:
        return "per_family" if isinstance(self.booster, dict) else "single"

    @property
    def label(self) -> str:
        return f"{self.library}/{self.structure}"


def fit_booster(library: str, x: pd.DataFrame, y: np.ndarray, threads: int, seed: int,
                scale: float = 1.0, params: Mapping[str, Any] | None = None,
                weight: np.ndarray | None = None) -> Any:
    """One XGBoost or LightGBM booster fitted to ``y`` (rows weighted by ``weight``, if given), with
    the library's tree count times ``scale`` (at least 50 trees) and ``params`` over its defaults;
    the bare booster, which saves in the library's own format."""
    defaults = XGB_PARAMS if library == "xgboost" else LGBM_PARAMS
    settings = {**defaults, **(params or {})}
    settings["n_estimators"] = max(50, int(scale * settings["n_estimators"]))
    if library == "xgboost":
        import xgboost

        model = xgboost.XGBRegressor(**settings, n_jobs=threads, random_state=seed)
        model.fit(x, y, sample_weight=weight)
        return model.get_booster()
    import lightgbm

    model = lightgbm.LGBMRegressor(**settings, n_jobs=threads, random_state=seed)
    model.fit(x, y, sample_weight=weight)
    return model.booster_


#: Host dispatch times are noisy (CV tens of percent): 90 trees fit them as well as 210 did
#: (18% within +-10% either way) and predict in half the time.
TARGET_SCALE = {"kernel": 1.0, "dispatch": 0.15}


def fit_target(data: OpData, target: str, library: str, threads: int = 2, seed: int = 0,
               scale: float = 1.0, structure: str = "single", params: Mapping[str, Any] | None = None,
               weight: np.ndarray | None = None) -> FitResult:
    """Fit ``target`` ('kernel' or 'dispatch') with ``library`` on the train fold, score on test.

    ``structure`` is one model with the family as a feature ('single'), or one model per
    operator family ('per_family'); ``train`` fits both and keeps whichever validates better.
    ``params`` replace the library's defaults where given, ``weight`` weights the rows (None: all
    alike): the transfer model's forest is smaller, and its devices' rows are weighted.
    """
    measured, offset, y = _target(data, target)
    usable = np.isfinite(y)
    test = test_mask(data.groups) & usable
    x = data.features[list(FEATURE_COLUMNS)]
    booster = _fit_structure(data, target, library, structure, ~test & usable, threads, seed, scale, params, weight)
    model = TargetModel(library, booster, {}, list(FEATURE_COLUMNS))
    log_pred = model.predict_log(x[test]) + offset[test]
    errors = ape(np.exp(log_pred), measured[test])
    families = data.rows["family"][test].rename("family")
    residual = pd.Series(np.abs(log_pred - np.log(measured[test])), index=families.index)
    interval = {f: float(r.quantile(INTERVAL_COVERAGE)) for f, r in residual.groupby(families)}
    interval["*"] = float(residual.quantile(INTERVAL_COVERAGE))
    return FitResult(target, library, booster, summarize_ape(errors),
                     grouped_metrics(errors, families.reset_index(drop=True)), interval)


def _target(data: OpData, target: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(measured us, log offset, learned value): kernel time as log ratio to the roofline,
    dispatch time as log ratio to its kind's host cost (NaN where the row has no profile)."""
    measured = data.rows["kernel_us" if target == "kernel" else "dispatch_us"].to_numpy(dtype=float)
    offset = np.log(data.roofline_us) if target == "kernel" else np.log(data.host_cost_us)
    return measured, offset, np.log(measured) - offset


def _fit_structure(data: OpData, target: str, library: str, structure: str, rows: np.ndarray,
                   threads: int, seed: int, scale: float, params: Mapping[str, Any] | None = None,
                   weight: np.ndarray | None = None) -> Any:
    """One booster ('single') or one per family ('per_family') fitted on the ``rows`` mask."""
    _, _, y = _target(data, target)
    rows = rows & np.isfinite(y)
    if not rows.any():
        raise ValueError(f"no operator row can teach '{target}': dispatch is learned relative to the host profile "
                         "probed beside a row, and none of these rows names one (sweep with this latpred: "
                         "`latpred collect ops` probes the host before and after)")
    x = data.features[list(FEATURE_COLUMNS)]
    trees = scale * TARGET_SCALE[target]
    if structure == "single":
        return fit_booster(library, x[rows], y[rows], threads, seed, trees, params,
                           None if weight is None else weight[rows])
    if structure == "per_family":
        families = data.rows["family"].to_numpy()
        masks = {f: rows & (families == f) for f in sorted(set(families[rows]))}
        return {f: fit_booster(library, x[m], y[m], threads, seed, trees * PER_FAMILY_SCALE, params,
                               None if weight is None else weight[m]) for f, m in masks.items()}
    raise ValueError(f"unknown model structure {structure!r}: expected one of {STRUCTURES}")


def refit_on_all_rows(data: OpData, fit: FitResult, threads: int = 2, seed: int = 0,
                      scale: float = 1.0, params: Mapping[str, Any] | None = None,
                      weight: np.ndarray | None = None) -> FitResult:
    """The chosen fit again on every row: the held-out fold chose the library and structure and
    measured the error and the interval (kept from ``fit``), and is too valuable to leave out of
    the shipped model; a fifth of the zoo's own layer shapes fall in it."""
    booster = _fit_structure(data, fit.target, fit.library, fit.structure, np.ones(len(data.rows), bool),
                             threads, seed, scale, params, weight)
    return FitResult(fit.target, fit.library, booster, fit.overall, fit.per_family, fit.interval_log)


def better(a: FitResult, b: FitResult) -> FitResult:
    """The fit with more held-out predictions within +-10% (median error breaks ties)."""
    key = lambda r: (r.overall["within_10pct"], -r.overall["median_ape"])  # noqa: E731
    return a if key(a) >= key(b) else b
