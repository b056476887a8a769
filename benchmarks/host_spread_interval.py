"""How steadily each host condition ran, and how an eager interval sized by it covers the runs.

Every zoo eager run of every host condition of the H200 dataset (``latpred validate --hosts``'s:
the live runs and ``host_runs/*``) is predicted from its own profile's costs, leave-one-model-out.
Per condition this prints the runs' own repeatability (the median over runs of p90/p10 of a run's
forwards), the spread its profile measured (``forward_spread``: the reference forwards through the
run's rounds; only profiles of schema version 3 have one), the share within +-10%, the 90%
quantile of |log(predicted / measured)|, and how often the 90% interval covers the measurement:
with the bundle's one eager width, with a width from the runs' own spread (what a probe that
measured the runs' steadiness exactly would give) and as a prediction makes it (from each run's
profile: its spread where it has one, predictor.host_spread, else the bundle's width).

It also fits that width, ``q90 = a + b ln(spread)``, by least squares over the conditions not held
out, and prints it beside the constants ``predictor.host_spread`` ships. Held out by default:
machines 20 and 21, to test the line on machines it was not fitted on (machine 21's profiles are
the first that carry a spread).

Run: .venv/bin/python benchmarks/host_spread_interval.py [--held-out machine-20,machine-21] [--out FILE]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.bundle import DEFAULT_BUNDLE_DIR, read_metadata  # noqa: E402
from predictor.host_profile import HostStore  # noqa: E402
from predictor.host_spread import SPREAD_INTERVAL_BASE_LOG, SPREAD_INTERVAL_SLOPE, spread_interval_log  # noqa: E402
from training.host_validation import host_conditions, predict_conditions  # noqa: E402
from training.metrics import ape, covered  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATASET = REPO / "datasets" / "nvidia-h200"
OUT = REPO / "benchmarks" / "results" / "host_spread_interval.txt"


def condition_runs(dataset: Path) -> pd.DataFrame:
    """Every eager run of every condition with its own spread (p90/p10 of its forwards) and its
    profile's id."""
    frames = []
    for name, runs in host_conditions(dataset).items():
        runs = runs.copy()
        runs["condition"] = name
        frames.append(runs)
    runs = pd.concat(frames, ignore_index=True)
    runs["run_spread"] = runs["p90_ms"] / runs["p10_ms"]
    return runs[["condition", "model", "batch", "precision", "run_spread", "host_profile"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held-out", default="machine-20,machine-21",
                        help="conditions whose name starts with one of these are not fitted on")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    bundle_dir = DEFAULT_BUNDLE_DIR / "nvidia-h200"
    predictions, _ = predict_conditions(bundle_dir, DATASET)
    own = predictions[predictions["method"] == "own probe"]
    table = own.merge(condition_runs(DATASET), on=["condition", "model", "batch", "precision"], how="left")
    store = HostStore(DATASET / "hosts")
    spreads = {h: store.get(h).forward_spread for h in table["host_profile"].dropna().unique()}
    table["profile_spread"] = table["host_profile"].map(spreads)
    table["error_log"] = np.abs(np.log(table["predicted_ms"] / table["measured_ms"]))
    table["within10"] = ape(table["predicted_ms"], table["measured_ms"]) <= 0.1
    table["covered"] = covered(table)
    metadata = read_metadata(bundle_dir)
    fixed = float(metadata["composition"]["interval_log"]["eager"])
    held = tuple(x for x in args.held_out.split(",") if x)
    rows = []
    for condition, g in table.groupby("condition", sort=False):
        run_spread = float(g["run_spread"].median())
        profile = g["profile_spread"].dropna()
        profile_spread = float(profile.median()) if len(profile) else float("nan")
        errors = g["error_log"].to_numpy()
        rows.append({
            "condition": condition, "held out": str(condition).startswith(held), "runs": len(g),
            "run spread": run_spread, "profile spread": profile_spread,
            "within10": float(g["within10"].mean()), "q90": float(np.quantile(errors, 0.9)),
            "covered: one width": float(np.mean(errors <= fixed)),
            "by run spread": float(np.mean(errors <= spread_interval_log(run_spread))),
            "as predicted": float(g["covered"].mean())})
    report = pd.DataFrame(rows).sort_values("run spread")
    fitted = report[~report["held out"]]
    slope, base = np.polyfit(np.log(fitted["run spread"]), fitted["q90"], 1)
    lines = [f"# .venv/bin/python {shlex.join(['benchmarks/host_spread_interval.py', *sys.argv[1:]])}   "
             f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, this workplace's CPU; bundle {metadata['version']}; "
             f"the bundle's one eager width {fixed:.3f} in log space; "
             f"held out of the fit: {', '.join(held) or 'none'})",
             report.to_string(index=False, float_format=lambda v: f"{v:.3f}"),
             "",
             f"fit over {len(fitted)} conditions: q90 = {base:.3f} + {slope:.3f} ln(run spread)",
             f"shipped (predictor.host_spread): q90 = {SPREAD_INTERVAL_BASE_LOG:.3f} + {SPREAD_INTERVAL_SLOPE:.3f} "
             "ln(spread), applied to the profile's spread"]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
