"""Where the transfer model's miss on the H100 partitions' NAS graphs is: kernels or composition.

On the H100's 40- and 72-SM partitions, while neither was fitted (transfer bundle 20261205-172853),
the transfer bundle predicted the NAS suites about 1.1x too slow, while their zoo came out within
10%. Since 2026-12-06 the 72-SM one is in the fit, with its rows of the NAS shapes
(benchmarks/nas_shapes_ops.sh), and the 40-SM one is the blind check. This splits the miss on ``nas-dev``
(which may be tuned on; ``nas-test`` is never read here), CUDA graph, fp16, torch trace:

1. the kernels alone: each run's kernel predictions summed before composition adds anything, over
   the measured run, median by batch, beside the same on the H200 and the H100 (whose composition
   adds launches, short kernels' and cold weights' shares on top);
2. composition: the partitions' runs composed with each measured device's constants in turn, and
   with the constants the bundle gives a device never measured;
3. the partitions' own zoo-shape operator rows (fp16; the 72-SM one's fitted on): predicted over
   measured, median by measured kernel time. Their NAS-shape rows (both partitions swept since)
   are left out here, told apart by shard as nas_shape_rows.py does, which scores them.

Run: .venv/bin/python benchmarks/partition_nas_gap.py   (about 10 s; results/partition_nas_gap.txt)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("LATPRED_DEVICE_CATALOG", "datasets/h100_partitions.catalog.toml")
if __package__ in (None, ""):  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.nas_shape_rows import SWEEPS, shard_rows  # noqa: E402
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from predictor.compose import GROUPS, CompositionConstants, compose, cudagraph_terms  # noqa: E402
from predictor.devices import resolve_device  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from training.composition import RunArrays  # noqa: E402
from training.ops_check import kernel_predictions  # noqa: E402
from training.suites import nas_dev_arrays  # noqa: E402

PARTITIONS = ("nvidia-h100-80gb-hbm3-sm72", "nvidia-h100-80gb-hbm3-sm40")
#: (device, bundle) pairs whose kernels-alone share is printed beside the partitions'
WHOLE = (("nvidia-h200", "nvidia-h200"), ("nvidia-h200", "transfer"), ("nvidia-h100-80gb-hbm3", "transfer"))
BATCHES = (1, 8, 32)
SIZE_BINS = (0, 5, 10, 20, 50, 100, np.inf)


def graph_runs(predictor: Predictor, device: str) -> list[RunArrays]:
    """The device's ``nas-dev`` runs in CUDA-graph mode at fp16, through the torch trace."""
    return [r for r in nas_dev_arrays(predictor, Path("datasets") / device)
            if r.mode == "cudagraph" and r.precision == "fp16"]


def kernels_alone(runs: list[RunArrays], constants: CompositionConstants) -> str:
    """The kernels' predicted sum over the measured run, median per batch."""
    terms = np.array([cudagraph_terms(r.layers, constants)[:len(GROUPS)].sum() for r in runs])
    measured = np.array([r.measured_us for r in runs])
    batch = np.array([r.batch for r in runs])
    return "  ".join(f"b{b} {np.median(terms[batch == b] / measured[batch == b]):.3f}" for b in BATCHES)


def main() -> None:
    transfer = Bundle.load(DEFAULT_BUNDLE_DIR / "transfer")
    print(f"# transfer bundle {transfer.version}; nas-dev, CUDA graph, fp16, torch trace")
    print("\n== 1. the kernels alone, summed before composition, over the measured run (median)")
    for device, bundle in WHOLE:
        predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / bundle), resolve_device(device))
        runs = graph_runs(predictor, device)
        print(f"{device:<30} {bundle + ' bundle':<20} {len(runs):>4} runs  {kernels_alone(runs, predictor.constants)}")
    constants = {device: CompositionConstants(**fit["constants"])
                 for device, fit in transfer.metadata["transfer"]["devices"].items()}
    constants["(a device never measured)"] = CompositionConstants(**transfer.metadata["composition"]["constants"])
    tables = []
    for device in PARTITIONS:
        predictor = Predictor(transfer, resolve_device(device))
        runs = graph_runs(predictor, device)
        print(f"{device:<30} {'transfer bundle':<20} {len(runs):>4} runs  {kernels_alone(runs, predictor.constants)}")
        measured = np.array([r.measured_us for r in runs])
        for name, c in constants.items():
            ratio = np.array([compose(r.layers, c, r.mode) for r in runs]) / measured
            tables.append({"partition": device.rsplit("-", 1)[1], "constants of": name,
                           "within10": f"{np.mean(np.abs(ratio - 1) <= 0.1):.0%}",
                           "MAPE": f"{np.mean(np.abs(ratio - 1)):.1%}", "median": f"{np.median(ratio):.3f}"})
    print("\n== 2. the partitions' runs composed with each measured device's constants")
    print(pd.DataFrame(tables).to_string(index=False))
    print("\n== 3. the partitions' zoo-shape operator rows (fp16; the 72-SM one's in the fit): predicted / measured,"
          " median by measured us")
    for device in PARTITIONS:
        folder = Path("datasets") / device
        table = kernel_predictions(folder, transfer)  # the shards in order: the zoo's shapes first
        table = table.iloc[:shard_rows(folder, 0, SWEEPS[device][0][1])]
        size = pd.cut(table["measured_us"], SIZE_BINS)
        ratio = (table["predicted_us"] / table["measured_us"]).groupby(size, observed=True).agg(["median", "size"])
        print(device)
        print(ratio.round(3).to_string())


if __name__ == "__main__":
    main()
