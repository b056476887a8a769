"""Which reference forwards a calibration should read, and what a probe that keeps fewer costs
eager accuracy (issue #12's 15 s).

Under its budget ``latpred host probe`` warms the reference forwards it times (the six fp32 ones,
``predictor.host_profile.CALIBRATION_KEYS``) up in ``collectors.reference_forwards.warmup_order``
and drops those it has no time for (on a contended H200 core, when it timed all 18, it kept 1-15
of them: results/probe_budget.txt). This replays such cuts on the runs the dataset measured with
reference forwards (the zoo under every host condition of ``host_runs/`` whose profiles carry
them, all 18, and the live runs where they do): each run's profile is calibrated by the first k
forwards of that order and the run predicted with the composition constants fitted without its
model (as ``latpred validate --hosts`` scores). k = 0 is the profile's costs alone (no
calibration), k = 6 what a whole probe gives. Beside the cuts, calibrations from other sets of the
18 the profiles carry: all of them (what predictions read until commit f751b6a, 2026-12-03), fp32 and bf16,
one precision, one batch.

    .venv/bin/python benchmarks/reference_cut.py [--dataset datasets/nvidia-h200]

Prints, per condition and k, the share of runs within +-10%, the MAPE and the median
predicted/measured, and over all conditions. A development figure: these conditions were
scored before, and nothing here is ``nas-test``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CUTS = (0, 1, 3, 6)
#: sets of the 18 by what they hold, beside the cuts: which forwards the calibration does better without
SUBSETS = {"all 18": lambda p, b: True, "fp32+bf16": lambda p, b: p != "fp16", "fp16": lambda p, b: p == "fp16",
           "bf16": lambda p, b: p == "bf16", "batch 1": lambda p, b: b == 1, "batch 8": lambda p, b: b == 8}


def main() -> None:
    from collectors.reference_forwards import warmup_order
    from predictor.bundle import DEFAULT_BUNDLE_DIR
    from predictor.host_references import calibration_forwards
    from training.composition import predict_run
    from training.host_validation import held_out_runs, host_conditions
    from training.metrics import ape

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=Path("datasets/nvidia-h200"))
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE_DIR / "nvidia-h200")
    args = parser.parse_args()

    scored = held_out_runs(args.bundle, args.dataset)
    predictor, held = scored.predictor, scored.held
    rows = []
    factors: dict[str, dict[str, float]] = {}  # condition -> {profile id: ...}: with the bundle's constants
    for condition, runs in host_conditions(args.dataset).items():
        for r in scored.runs(runs):
            if r.host is None or not r.host.reference_ms:
                continue
            order = warmup_order(list(calibration_forwards(r.host)))
            kept = {str(k): order[:k] for k in CUTS if k <= len(order)}
            for name, holds in SUBSETS.items():
                kept[name] = [key for key in r.host.reference_ms if holds(*_precision_batch(key))]
            for name, read in (("fp32 (as calibrate_hosts=True reads)", order), ("all 18", kept["all 18"])):
                calibration = predictor.calibrated_host(r.host, keys=read)[1]
                if calibration is not None:
                    factors.setdefault(condition, {})[f"{name}: {r.host.id}"] = calibration.scale
            for k, keys in kept.items():
                host = predictor.calibrated_host(r.host, held[r.model], keys=tuple(keys))[0]
                rows.append({"condition": condition, "k": k, "measured_ms": r.measured_us / 1e3,
                             "predicted_ms": predict_run(r, held[r.model], host) / 1e3})
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise SystemExit(f"no eager run in {args.dataset} has a profile with reference forwards")

    def scores(group: pd.DataFrame) -> dict[str, float]:
        errors = ape(group["predicted_ms"], group["measured_ms"])
        return {"runs": len(group), "within10": float(np.mean(errors <= 0.1)), "MAPE": float(np.mean(errors)),
                "median pred/meas": float((group["predicted_ms"] / group["measured_ms"]).median())}

    per = pd.DataFrame([{"condition": c, "k": k, **scores(g)}
                        for (c, k), g in frame.groupby(["condition", "k"], sort=False)])
    overall = pd.DataFrame([{"k": k, **scores(g)} for k, g in frame.groupby("k", sort=False)])
    pd.set_option("display.width", 160)
    print("eager runs predicted from their profiles calibrated by the first k of the fp32 reference forwards in the "
          "probe's warm-up order (k = 0: the costs alone, as predictions use them; 6: as calibrate_hosts=True "
          "does), or by another set of the 18 the profiles carry; constants fitted without the run's model")
    print(per.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nall conditions with reference forwards")
    print(overall.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nthe factor on each run profile's costs, calibrated with the bundle's constants (what a prediction "
          "for that host applies)")
    for condition, by in factors.items():
        print(f"  {condition}: " + "; ".join(f"{k} x{v:.2f}" for k, v in sorted(by.items())))


def _precision_batch(key: str) -> tuple[str, int]:
    from predictor.host_profile import parse_reference_key

    _name, batch, precision = parse_reference_key(key)
    return precision, batch


if __name__ == "__main__":
    main()
