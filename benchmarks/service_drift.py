"""How the measured Triton hosts' batch times move together: the drift the simulator replays.

For every Triton serving folder given (default: ``datasets/nvidia-h100-80gb-hbm3/serving-triton*``),
prints the correlation of two batches' times (each over its size's median, in spreads of that size,
the stalled batches left out: ``training/serving_drift.py``) by how far apart they started, in bins of
``LAG_EDGES_MS``, pooled over the folder's loads up to 0.8, and the two-component drift fitted to them
(``predictor/capacity/service_drift.py``) with its correlation at each bin's mean lag; then the same
per model, for folders that served several (what ``simulator_vs_server.py --drift`` replays).

Run: .venv/bin/python benchmarks/service_drift.py [FOLDER ...] (about ten seconds). Saved:
results/service_drift.txt.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.capacity.service_drift import ServiceDrift  # noqa: E402
from training.serving_check import load_serving  # noqa: E402
from training.serving_drift import LAG_EDGES_MS, MIN_PAIRS, LagCorrelation, models_drift  # noqa: E402
from training.serving_stalls import PAUSES_UP_TO_LEVEL  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FOLDERS = sorted((ROOT / "datasets" / "nvidia-h100-80gb-hbm3").glob("serving-triton*"))
RESULTS = Path(__file__).resolve().parent / "results" / "service_drift.txt"


def drift_words(drift: ServiceDrift) -> str:
    """"28% for 20 ms + 30% for 300 ms (persistent 58%)"."""
    return f"{drift.in_words()} (persistent {drift.persistent_share:.0%})"


def rows(label: str, drift: ServiceDrift, measured: LagCorrelation) -> list[str]:
    """The measured correlation per bin (blank where too few pairs), and the fit's at the same lags."""
    cells = [f"{c:+9.2f}" if p >= MIN_PAIRS else f"{'-':>9}" for c, p in zip(measured.correlation, measured.pairs)]
    fitted = [f"{drift.correlation(float(lag)):+9.2f}" if p >= MIN_PAIRS else f"{'-':>9}"
              for lag, p in zip(measured.lag_ms, measured.pairs)]
    return [f"{label:<40} measured {' '.join(cells)}", f"{'':<40} fitted   {' '.join(fitted)}   {drift_words(drift)}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, default=DEFAULT_FOLDERS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    bins = " ".join(f"{f'{lo:g}-{hi:g}':>9}" for lo, hi in zip(LAG_EDGES_MS, LAG_EDGES_MS[1:]))
    out = [f"# .venv/bin/python benchmarks/service_drift.py {' '.join(sys.argv[1:])}".rstrip()
           + f"   ({datetime.date.today().isoformat()})",
           f"# loads up to {PAUSES_UP_TO_LEVEL:g}; columns: ms between two batches' starts; '-': fewer than "
           f"{MIN_PAIRS} pairs in the bin", "", f"{'set / model':<40} {'':<8} {bins}"]
    for folder in args.folders:
        data = load_serving(folder)
        out += rows(folder.name, *models_drift(data, data.models))
        if len(data.models) > 1:
            for model in data.models:
                out += rows(f"  {model}", *models_drift(data, [model]))
    publish(out, args.out)


if __name__ == "__main__":
    main()
