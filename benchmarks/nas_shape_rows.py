"""The shipped transfer bundle on the NAS-shape operator rows ``nas_shapes_ops.sh`` swept on an
H100 and its 72-SM partition, against the same folders' earlier (zoo-shape) rows.

Why: ``partition_nas_gap.py`` found the partitions' NAS miss in the kernels; these rows, which no
fit had of any partition until they entered the transfer model's on 2026-12-06, showed it directly
(since then, a fit; results/nas_shape_rows.txt keeps the check taken before). Rows are told apart
by shard: the sweep of 2026-12-05 wrote the shards from FIRST_NEW_SHARD on. Writes nothing; prints a table:
    .venv/bin/python benchmarks/nas_shape_rows.py   (results/nas_shape_rows.txt)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from training.ops_check import kernel_predictions

#: device folder -> the first shard nas_shapes_ops.sh wrote there (2026-12-05 23:04 UTC)
FIRST_NEW_SHARD = {"nvidia-h100-80gb-hbm3": 47, "nvidia-h100-80gb-hbm3-sm72": 5}


def shard_rows(folder: Path, new: bool, first: int) -> int:
    """Rows in the folder's shards from ``first`` on (``new``) or before it."""
    paths = [p for p in sorted((folder / "ops").glob("part-*.parquet")) if (int(p.stem.split("-")[1]) >= first) == new]
    return sum(len(pd.read_parquet(p, columns=["config_id"])) for p in paths)


def main() -> None:
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / "transfer")
    print(f"transfer bundle {bundle.version}; kernel time predicted / measured per operator row "
          "(new rows fp16; earlier ones every precision swept)")
    print(f"{'device':28s} {'rows':22s} {'n':>6s} {'within10':>9s} {'MAPE':>6s} {'median':>7s} {'median <50us':>13s}")
    for name, first in FIRST_NEW_SHARD.items():
        folder = Path("datasets") / name
        table = kernel_predictions(folder, bundle)  # the shards in order, every row kept
        earlier, new = shard_rows(folder, False, first), shard_rows(folder, True, first)
        assert len(table) == earlier + new, f"{name}: {len(table)} rows predicted, {earlier + new} in the shards"
        for what, part in (("earlier (zoo shapes)", table.iloc[:earlier]), ("new (NAS shapes)", table.iloc[earlier:])):
            ratio = (part["predicted_us"] / part["measured_us"]).to_numpy()
            small = (part["measured_us"] < 50).to_numpy()
            print(f"{name:28s} {what:22s} {len(part):6d} {np.mean(np.abs(ratio - 1) <= 0.1):9.1%} "
                  f"{np.mean(np.abs(ratio - 1)):6.1%} {np.median(ratio):7.3f} {np.median(ratio[small]):13.3f}")


if __name__ == "__main__":
    main()
