"""How a contended core slows eager forwards, and how far any model of it could come (issue #12).

For every H200 machine whose zoo ran eagerly both as it is and with a busy loop pinned to the
issuing core (``datasets/nvidia-h200/host_runs/machine-N[-date]`` and ``machine-N-contended``), the
same units (model, batch, precision) are paired, and this prints:

- the contended ÷ as-is latency by the as-is forward's length: the scheduler lets a forward run a
  time slice before it preempts it, so short forwards keep their speed and long ones share the core;
- the best any per-machine model of that can do, fitted on the very runs it scores (an oracle, so
  an upper bound, not a prediction): one factor for every run, and a time-slice model in which a
  forward of as-is length T takes T + round(T / S) * W (random phase: the median forward is
  preempted round(T / S) times; slice S and wait W in ms, grid-searched per machine).

A probe that measured a host's slice and wait exactly could at best reach the time-slice line; a
prediction also carries the as-is forward's own error (82-90% within +-10% on a quiet host).

Run: .venv/bin/python benchmarks/contention_slices.py [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from training.host_validation import host_conditions  # noqa: E402

DATASET = Path("datasets/nvidia-h200")
#: as-is forward lengths (ms) the ratios are binned by
BINS = (0.0, 1.5, 3.0, 15.0, 30.0, np.inf)
#: the time-slice model's grid: slice and wait, ms
SLICES = np.arange(0.5, 8.0001, 0.1)
WAITS = np.arange(0.5, 20.0001, 0.1)
UNITS = ["model", "batch", "precision"]


def machine_pairs(conditions: dict[str, pd.DataFrame]) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(machine, as-is runs, contended runs) for each machine measured both ways, from
    ``training.host_validation.host_conditions``: the as-is condition is ``machine-N`` or
    ``machine-N-<date>``, never a run measured again."""
    pairs = []
    for name in sorted(n for n in conditions if n.startswith("machine-") and n.endswith("-contended")):
        machine = name.removesuffix("-contended")
        as_is = [n for n in sorted(conditions) if re.fullmatch(rf"{machine}(-\d{{4}}-\d\d-\d\d)?", n)]
        if as_is:
            pairs.append((machine, conditions[as_is[0]], conditions[name]))
    return pairs


def paired_runs(as_is: pd.DataFrame, contended: pd.DataFrame) -> pd.DataFrame:
    """Each unit's eager latency (ms) as is (``t``) and contended (``c``)."""
    columns = [*UNITS, "latency_ms"]
    return as_is[columns].merge(contended[columns], on=UNITS, suffixes=("_t", "_c")).rename(
        columns={"latency_ms_t": "t", "latency_ms_c": "c"})


def within(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Per prediction (rows of ``predicted``, broadcast), the share of runs within +-10%."""
    return np.mean(np.abs(predicted / measured - 1) <= 0.1, axis=-1)


def best_factor(t: np.ndarray, c: np.ndarray) -> tuple[float, float]:
    """The one factor (1 to 4, by 0.01) that puts most contended runs within +-10% of t * factor."""
    factors = np.arange(1.0, 4.0001, 0.01)
    shares = within(factors[:, None] * t[None, :], c)
    i = int(np.argmax(shares))
    return float(shares[i]), float(factors[i])


def best_slices(t: np.ndarray, c: np.ndarray) -> tuple[float, float, float]:
    """(share within +-10%, slice, wait) of the time-slice model's best point on the grid."""
    best = (-1.0, 0.0, 0.0)
    for s in SLICES:
        preempted = np.round(t / s)
        shares = within(t[None, :] + WAITS[:, None] * preempted[None, :], c)
        i = int(np.argmax(shares))
        if shares[i] > best[0]:
            best = (float(shares[i]), float(s), float(WAITS[i]))
    return best


def report(dataset: Path) -> list[str]:
    lines = [f"# .venv/bin/python benchmarks/contention_slices.py  ({datetime.now(UTC):%Y-%m-%d}; "
             f"{shlex.join(sys.argv[1:]) or 'defaults'})",
             "# the zoo's eager runs, batch 1/8/32, fp32/fp16/bf16, paired unit by unit (model, batch, precision)",
             "", "## contended / as-is latency, median (and p10-p90), by the as-is forward's length"]
    pairs = machine_pairs(host_conditions(dataset))
    labels = [f"{lo:g}-{hi:g} ms" if np.isfinite(hi) else f">{lo:g} ms" for lo, hi in zip(BINS, BINS[1:])]
    ratio_rows, fit_rows = [], []
    for machine, as_is, contended in pairs:
        runs = paired_runs(as_is, contended)
        t, c = runs["t"].to_numpy(), runs["c"].to_numpy()
        ratio = pd.Series(c / t)
        binned = pd.cut(runs["t"], BINS, labels=labels)
        cells = {}
        for label in labels:
            r = ratio[binned == label]
            cells[label] = (f"{r.median():.2f} ({r.quantile(0.1):.2f}-{r.quantile(0.9):.2f}) n={len(r)}"
                            if len(r) else "")
        ratio_rows.append({"machine": machine, "runs": len(runs), **cells})
        factor_share, factor = best_factor(t, c)
        slice_share, s, w = best_slices(t, c)
        fit_rows.append({"machine": machine, "runs": len(runs), "as-is times unchanged": f"{within(t, c):.0%}",
                         "one factor (oracle)": f"{factor_share:.0%} (x{factor:.2f})",
                         "time slices (oracle)": f"{slice_share:.0%} (slice {s:.1f} ms, wait {w:.1f} ms)"})
    lines += [pd.DataFrame(ratio_rows).to_string(index=False), "",
              "## share of contended runs within +-10%, each model fitted per machine on the runs it scores "
              "(an upper bound for a probe that measured it), from the measured as-is times",
              pd.DataFrame(fit_rows).to_string(index=False)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/contention_slices.txt"))
    args = parser.parse_args()
    publish(report(DATASET), args.out)


if __name__ == "__main__":
    main()
