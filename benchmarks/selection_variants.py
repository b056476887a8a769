"""Hardware selection's alternatives that were not shipped, scored as selection_accuracy.py scores:

    .venv/bin/python benchmarks/selection_variants.py   # results/selection_variants.txt (seconds)

- choosing with a margin: the objective made looser or tighter by a share before choosing (a
  device is then chosen when its predicted p99 is within objective / (1 + margin));
- counting doubts about cost too: besides ``Selection.doubts`` (which devices meet the
  constraints, at either end of their intervals), a choice is also in doubt when a device that
  meets the constraints could be cheaper per inference at the fast end of its interval than the
  chosen one at the slow end of its own.

Cases, truth and predictors: the shipped ones of ``training/selection_check.py`` (development: the
models were fitted on these devices' rows and runs).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import publish  # noqa: E402
from predictor import device_bundles  # noqa: E402
from predictor.selection import Constraints, DeviceChoice, Selection, select  # noqa: E402
from training.selection_check import MODE, PRECISION, measured_units, truths  # noqa: E402
from training.transfer import GPU_DATASETS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "selection_variants.txt"
MARGINS = (-0.04, -0.02, 0.0, 0.02, 0.04, 0.06, 0.08, 0.10)


def cost_in_doubt(selection: Selection) -> bool:
    """Whether a device meeting the constraints could be cheaper at the fast end of its interval
    than the chosen one at the slow end of its own."""
    best = selection.best
    if best is None or best.cost_per_million is None:
        return False

    def cost_at(c: DeviceChoice, ms: float) -> float:
        return math.inf if c.cost_per_million is None else c.cost_per_million * ms / c.latency_ms

    return any(c.meets and c.device != best.device and cost_at(c, c.low_ms) < cost_at(best, best.high_ms)
               for c in selection.ranked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.perf_counter()
    units = measured_units(GPU_DATASETS)
    predictors = {d: p for d, p in device_bundles.load_all().items() if d in set(units["device"])}
    by_margin: dict[tuple[str, float], list[bool]] = defaultdict(list)
    by_doubt: dict[tuple[str, bool], list[bool]] = defaultdict(list)
    for truth in truths(units):
        label = "none" if truth.factor is None else f"{truth.factor}x"
        candidates = [predictors[d] for d in truth.devices]
        for margin in MARGINS if truth.slo_p99_ms is not None else (0.0,):
            asked = None if truth.slo_p99_ms is None else truth.slo_p99_ms / (1 + margin)
            selection = select(truth.graph, candidates, truth.batch, PRECISION, MODE, Constraints(slo_p99_ms=asked))
            right = truth.case(selection).right
            by_margin[(label, margin)].append(right)
            if margin == 0.0:
                by_doubt[("selection.doubts", selection.settled)].append(right)
                by_doubt[("and cost", selection.settled and not cost_in_doubt(selection))].append(right)
    lines = ["# .venv/bin/python benchmarks/selection_variants.py  "
             f"({time.strftime('%Y-%m-%d')}, {len(units)} measured runs; shipped predictors, development)", "",
             "## choosing with a margin: share of right choices per objective (margin > 0: the objective "
             "made tighter)", f"{'objective':>9} " + " ".join(f"{m:>+7.2f}" for m in MARGINS)]
    for label in ("1.1x", "1.5x", "2.0x", "3.0x"):
        cells = " ".join(f"{sum(v) / len(v):7.3f}" for v in (by_margin[(label, m)] for m in MARGINS))
        lines.append(f"{label:>9} {cells}")
    overall = [by_margin[("none", 0.0)] + sum((by_margin[(label, m)] for label in ("1.1x", "1.5x", "2.0x", "3.0x")),
                                              start=[]) for m in MARGINS]
    lines.append(f"{'all':>9} " + " ".join(f"{sum(v) / len(v):7.3f}" for v in overall))
    lines += ["", "## what counts as a doubt: settled cases, right among them, right among the others",
              f"{'doubts':<18} {'settled':>8} {'right if settled':>17} {'right if not':>13}"]
    for name in ("selection.doubts", "and cost"):
        settled, other = by_doubt[(name, True)], by_doubt[(name, False)]
        lines.append(f"{name:<18} {len(settled):>8} {sum(settled) / max(1, len(settled)):>17.3f} "
                     f"{sum(other) / max(1, len(other)):>13.3f}")
    lines.append(f"\n({time.perf_counter() - started:.0f} s)")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
