"""A transfer bundle (the shipped one, or ``--bundle``) on the NAS-shape operator rows
``nas_shapes_ops.sh`` swept on an H100 and its partitions, against the same folders' earlier
(zoo-shape) rows.

Why: ``partition_nas_gap.py`` found the partitions' NAS miss in the kernels; these rows, which no
fit had of any partition until those of the whole H100 and its 72-SM partition entered the transfer
model's on 2026-12-06, showed it directly (since then, for those two, a fit; results/nas_shape_rows.txt
keeps the check taken before). The 40- and 104-SM partitions' rows (swept 2026-12-06) are in no
fit: a blind check of kernels, described by datasets/h100_partitions.catalog.toml (the 104-SM one
has no zoo-shape rows). Rows are told apart by shard: each sweep wrote the shards from
its entry in SWEEPS on. Writes nothing; prints a table:
    .venv/bin/python benchmarks/nas_shape_rows.py [--bundle DIR]   (results/nas_shape_rows.txt)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("LATPRED_DEVICE_CATALOG", "datasets/h100_partitions.catalog.toml")  # the blind partitions

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from training.data import shard_paths  # noqa: E402
from training.ops_check import kernel_predictions  # noqa: E402

#: device folder -> (label, first shard) of each nas_shapes_ops.sh sweep there, in shard order; the
#: shards before the first are the folder's earlier (zoo-shape) rows
SWEEPS: dict[str, list[tuple[str, int]]] = {
    "nvidia-h100-80gb-hbm3": [("NAS shapes 12-05 23:04", 47), ("NAS shapes 12-06 05:28", 56)],
    "nvidia-h100-80gb-hbm3-sm72": [("NAS shapes 12-05 23:04", 5), ("NAS shapes 12-06 05:28", 14)],
    "nvidia-h100-80gb-hbm3-sm40": [("NAS shapes 12-06 01:22", 4), ("NAS shapes 12-06 06:29", 18)],
    "nvidia-h100-80gb-hbm3-sm104": [("NAS shapes 12-06 01:22", 0), ("NAS shapes 12-06 06:26", 14)],
}


def shard_rows(folder: Path, first: int, stop: int | None) -> int:
    """Rows in the folder's shards numbered from ``first`` up to, not including, ``stop``."""
    end = 10**9 if stop is None else stop
    paths = [p for p in shard_paths(folder / "ops") if first <= int(p.stem.split("-")[1]) < end]
    return sum(len(pd.read_parquet(p, columns=["config_id"])) for p in paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE_DIR / "transfer",
                        help="a transfer bundle (default: the shipped one; an earlier one from git to compare)")
    bundle = Bundle.load(parser.parse_args().bundle)
    print(f"transfer bundle {bundle.version}; kernel time predicted / measured per operator row "
          "(new rows fp16; earlier ones every precision swept)")
    fitted = set(bundle.metadata["transfer"]["trained_on"])
    print(f"{'device':28s} {'device in fit':13s} {'rows':22s} {'n':>6s} {'within10':>9s} {'MAPE':>6s} {'median':>7s} "
          f"{'median <50us':>13s}")
    for name, sweeps in SWEEPS.items():
        folder = Path("datasets") / name
        table = kernel_predictions(folder, bundle)  # the shards in order, every row kept
        firsts = [0] + [first for _, first in sweeps]
        labels = ["earlier (zoo shapes)"] + [label for label, _ in sweeps]
        counts = [shard_rows(folder, first, stop) for first, stop in zip(firsts, firsts[1:] + [None])]
        assert len(table) == sum(counts), f"{name}: {len(table)} rows predicted, {sum(counts)} in the shards"
        status = "yes" if name in fitted else "no"  # a device the bundle was fitted on (not rows swept after it)
        offsets = np.cumsum([0] + counts)
        for what, start, stop in zip(labels, offsets, offsets[1:]):
            part = table.iloc[start:stop]
            if part.empty:
                continue
            ratio = (part["predicted_us"] / part["measured_us"]).to_numpy()
            small = (part["measured_us"] < 50).to_numpy()
            print(f"{name:28s} {status:13s} {what:22s} {len(part):6d} {np.mean(np.abs(ratio - 1) <= 0.1):9.1%} "
                  f"{np.mean(np.abs(ratio - 1)):6.1%} {np.median(ratio):7.3f} {np.median(ratio[small]):13.3f}")


if __name__ == "__main__":
    main()
