"""The committed table of zoo predictions that pins composition and prediction.

Refactoring composition or the graph IR must not move a single prediction: every zoo graph, in
both modes, at every precision and three batches, totals and per-layer sums, is written here
once (``python -m tests.predictor.pinned_predictions``, only when a change is *meant* to move
predictions, such as a retrained bundle) and compared by ``test_pinned_predictions``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.devices import resolve_device
from predictor.precision import PRECISIONS
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph, zoo_names

PINNED = Path(__file__).parent / "data" / "pinned_predictions.csv"
BATCHES = (1, 8, 32)
MODES = ("cudagraph", "eager")
KEYS = ("model", "mode", "precision", "batch")
VALUES = ("total_ms", "low_ms", "high_ms", "kernel_us_sum", "low_us_sum", "high_us_sum", "host_us_sum")


def predictions() -> list[dict[str, object]]:
    """Every zoo graph x mode x precision x batch, predicted with the shipped H200 bundle."""
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    rows: list[dict[str, object]] = []
    for name in zoo_names():
        graph = load_zoo_graph(name)
        for mode in MODES:
            for precision in PRECISIONS:
                for batch in BATCHES:
                    p = predictor.predict(graph, batch, precision, mode)
                    rows.append({"model": name, "mode": mode, "precision": precision, "batch": batch,
                                 "total_ms": p.total_ms, "low_ms": p.low_ms, "high_ms": p.high_ms,
                                 "kernel_us_sum": sum(x.kernel_us for x in p.layers),
                                 "low_us_sum": sum(x.low_us for x in p.layers),
                                 "high_us_sum": sum(x.high_us for x in p.layers),
                                 "host_us_sum": sum(x.host_us for x in p.layers)})
    return rows


def write(path: Path = PINNED) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*KEYS, *VALUES])
        writer.writeheader()
        for row in predictions():
            writer.writerow({k: repr(float(v)) if k in VALUES else v for k, v in row.items()})


def read(path: Path = PINNED) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


if __name__ == "__main__":
    write()
    print(f"wrote {PINNED}")
