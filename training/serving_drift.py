"""A measured server's drift, read off its own batches, for the simulator to replay.

``predictor.capacity.service_drift`` models how a host's batch times move together in time; this
module measures it in a serving folder (``training.serving_check.ServingData``). Each batch's time
is scored against its size (``log(time / size's median) / size's sigma``, the batches the host
stalled left out: their pauses are replayed apart, ``training.serving_stalls``), pairs of batches of
one load are binned by how far apart they started, and the binned correlations are fitted with two
components, a fast one and a slow one, each a share of the variance with its correlation time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictor.capacity.host_stalls import STALLED_OVER
from predictor.capacity.service_drift import DriftComponent, ServiceDrift
from training.serving_check import ServingData, measured_service
from training.serving_stalls import PAUSES_UP_TO_LEVEL, batch_series

#: edges (ms) of the bins pairs of batches fall in by how far apart they started
LAG_EDGES_MS = (2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0)
#: pairs are taken among batches at most this many apart in a load (enough to span the last edge
#: at the shortest batch times measured, about 1.5 ms)
MAX_APART = 1400
#: a bin with fewer pairs than this says nothing the fit should follow
MIN_PAIRS = 200
#: the correlation times (ms) the fit chooses among: a fast component and a slow one
FAST_TIMES_MS = (2.0, 3.0, 5.0, 8.0, 12.0, 20.0, 30.0)
SLOW_TIMES_MS = (50.0, 80.0, 120.0, 200.0, 300.0, 500.0, 800.0, 1200.0)


@dataclass(frozen=True)
class LagCorrelation:
    """Batches' correlation by how far apart they started: per bin of ``LAG_EDGES_MS``, the mean
    lag of its pairs (ms), their correlation, and how many pairs there were."""

    lag_ms: np.ndarray
    correlation: np.ndarray
    pairs: np.ndarray


def batch_scores(series: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], medians_s: dict[int, float]
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per load (``batch_series``'s (start s, time s, size)): its steady batches' starts and scores,
    ``log(time / size's median)`` over the spread of that size's steady batches in all ``series``
    (a batch over ``STALLED_OVER`` times its median was stalled, and is left out)."""
    logs: list[np.ndarray] = []
    keep: list[np.ndarray] = []
    for _, took, size in series:
        median = np.asarray([medians_s[int(b)] for b in size])
        logs.append(np.log(took / median))
        keep.append(took <= STALLED_OVER * median)
    sizes = np.concatenate([s for _, _, s in series]) if series else np.zeros(0, dtype=int)
    steady_logs = np.concatenate([x[k] for x, k in zip(logs, keep)]) if series else np.zeros(0)
    steady_sizes = sizes[np.concatenate(keep)] if series else sizes
    sigma = {int(b): float(steady_logs[steady_sizes == b].std(ddof=1)) for b in np.unique(steady_sizes)
             if np.count_nonzero(steady_sizes == b) > 2}
    scored = []
    for (start, _, size), x, k in zip(series, logs, keep):
        spread = np.asarray([sigma.get(int(b), math.nan) for b in size])
        ok = k & (spread > 0)
        scored.append((start[ok], x[ok] / spread[ok]))
    return scored


def lag_correlation(scores: Sequence[tuple[np.ndarray, np.ndarray]], edges_ms: Sequence[float] = LAG_EDGES_MS,
                    max_apart: int = MAX_APART) -> LagCorrelation:
    """The scores' correlation by lag, pooled over loads (each load's scores centred on its own mean,
    so that a load run at another speed throughout counts as that load's level, not as drift)."""
    edges = np.asarray(edges_ms, dtype=float) * 1e-3
    bins = len(edges) - 1
    products, lags, pairs = np.zeros(bins), np.zeros(bins), np.zeros(bins)
    square_sum, count = 0.0, 0
    for start, score in scores:
        if len(score) < 2:
            continue
        centred = score - score.mean()
        square_sum += float(centred @ centred)
        count += len(centred)
        for apart in range(1, min(max_apart, len(centred) - 1) + 1):
            lag = start[apart:] - start[:-apart]
            which = np.searchsorted(edges, lag, side="right") - 1
            inside = (which >= 0) & (which < bins)
            if not inside.any():
                if lag.min() >= edges[-1]:
                    break
                continue
            np.add.at(products, which[inside], (centred[apart:] * centred[:-apart])[inside])
            np.add.at(lags, which[inside], lag[inside])
            np.add.at(pairs, which[inside], 1)
    variance = square_sum / count if count else math.nan
    if not variance > 0:  # every batch alike (or none): nothing correlates, nothing to fit
        return LagCorrelation(np.full(bins, math.nan), np.full(bins, math.nan), np.zeros(bins))
    with np.errstate(invalid="ignore", divide="ignore"):
        return LagCorrelation(lags / pairs * 1e3, products / pairs / variance, pairs)


def fit_drift(measured: LagCorrelation, min_pairs: int = MIN_PAIRS) -> ServiceDrift:
    """Two components (a fast correlation time among ``FAST_TIMES_MS``, a slow one among
    ``SLOW_TIMES_MS``) whose correlation, ``sum(share * exp(-lag / time))``, is nearest the measured
    one over the bins with at least ``min_pairs`` pairs, each bin weighed alike; the shares are
    non-negative and sum to at most 1. No bin to fit: no drift."""
    from scipy.optimize import nnls

    use = (measured.pairs >= min_pairs) & np.isfinite(measured.correlation)
    lag, target = measured.lag_ms[use], measured.correlation[use]
    if len(lag) < 2:
        return ServiceDrift(())
    best: tuple[float, tuple[DriftComponent, ...]] = (math.inf, ())
    for fast, slow in itertools.product(FAST_TIMES_MS, SLOW_TIMES_MS):
        basis = np.column_stack([np.exp(-lag / fast), np.exp(-lag / slow)])
        shares, _ = nnls(basis, target)
        if shares.sum() > 1:  # the best fit within the bound lies on it: share_fast + share_slow = 1
            edge, rest = basis[:, 0] - basis[:, 1], target - basis[:, 1]
            fast_share = float(np.clip(edge @ rest / (edge @ edge), 0.0, 1.0)) if edge @ edge > 0 else 0.5
            shares = np.array([fast_share, 1.0 - fast_share])
        error = float(np.sum((basis @ shares - target) ** 2))
        if error < best[0]:
            fast_share = round(float(shares[0]), 4)  # the slow share from it: rounding keeps the sum <= 1
            slow_share = min(round(float(shares[1]), 4), round(1.0 - fast_share, 4))
            best = (error, (DriftComponent(fast_share, fast), DriftComponent(slow_share, slow)))
    return ServiceDrift(tuple(c for c in best[1] if c.share > 0))


def drift_scores(data: ServingData, models: Sequence[str], max_level: float = PAUSES_UP_TO_LEVEL
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``batch_scores`` of each of ``models``' loads up to ``max_level`` (where the pauses are read
    too: above it the server's own backlog moves its batches), each model against its own sizes'
    medians."""
    scores = []
    for model in models:
        timed = measured_service(data.service[data.service["model"] == model])
        medians_s = {b: m * 1e-3 for b, m in timed.medians_ms.items()}
        scores.extend(batch_scores(batch_series(data, model, max_level), medians_s))
    return scores


def models_drift(data: ServingData, models: Sequence[str], max_level: float = PAUSES_UP_TO_LEVEL
                 ) -> tuple[ServiceDrift, LagCorrelation]:
    """The drift of the host while it served ``models``' loads up to ``max_level``, and the
    correlations it was fitted to (``drift_scores`` of every model, pooled)."""
    measured = lag_correlation(drift_scores(data, models, max_level))
    return fit_drift(measured), measured


__all__: Sequence[str] = ["FAST_TIMES_MS", "LAG_EDGES_MS", "MAX_APART", "MIN_PAIRS", "SLOW_TIMES_MS",
                          "LagCorrelation", "batch_scores", "drift_scores", "fit_drift", "lag_correlation",
                          "models_drift"]
