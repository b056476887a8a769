"""How far a CPU device's own speed moves between two measurements of the same calls and forwards.

    .venv/bin/python benchmarks/cpu_host_speed.py   # results/cpu_host_speed.txt

On a CPU the operators are the host's work, so when the host under a virtual machine changes (or is
busy), the device itself runs faster or slower. This sets the EPYC's operator rows measured on
2026-12-04 (``datasets/cpu-amd-epyc/ops_superseded/2026-12-04``) against the same configurations
measured again on 2026-12-05 (``ops/``, the same sampler seed), and its NAS runs of 2026-12-04
(``nas/``) against the same architectures measured again (``suite_reruns/nas-2026-12-05``), each
beside the speed its host probes read (predictor.operator_host.speed_ratio: the geometric mean of
the computing kinds' per-call costs, the second over the first).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import publish  # noqa: E402
from predictor.host_profile import HostProfile  # noqa: E402
from predictor.operator_host import speed_ratio  # noqa: E402
from training.hosts import reference_profiles  # noqa: E402

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc"
RESULTS = Path(__file__).resolve().parent / "results" / "cpu_host_speed.txt"


def _shards(folder: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))], ignore_index=True)


def _host_speeds(first: pd.Series, second: pd.Series, references: dict[str, HostProfile]) -> np.ndarray:
    """Per row, its second host's speed against its first's (NaN where a probe is unknown)."""
    return np.array([speed_ratio(references[b], references[a]) if a in references and b in references else np.nan
                     for a, b in zip(first, second)])


def _quantiles(values: pd.Series) -> str:
    q = values.quantile([0.1, 0.5, 0.9])
    return f"{q[0.5]:.2f} ({q[0.1]:.2f}-{q[0.9]:.2f})"


def compare(first: pd.DataFrame, second: pd.DataFrame, on: list[str], value: str, by: str,
            references: dict[str, HostProfile]) -> pd.DataFrame:
    """Per ``by`` group: how many matched, the second's ``value`` over the first's, and the ratio
    of their hosts' speeds (median and 10th-90th percentiles)."""
    matched = first.merge(second, on=on, suffixes=("_first", "_second"))
    matched["ratio"] = matched[f"{value}_second"] / matched[f"{value}_first"]
    matched["host"] = _host_speeds(matched["host_profile_first"], matched["host_profile_second"], references)
    groups = [("all", matched), *matched.groupby(f"{by}_first" if f"{by}_first" in matched else by)]
    return pd.DataFrame([{by: name, "matched": len(g), "second / first": _quantiles(g["ratio"]),
                          "host speed, second / first": _quantiles(g["host"].dropna())} for name, g in groups])


def main() -> None:
    references = {**reference_profiles(DATASET), **reference_profiles(DATASET / "suite_reruns" / "nas-2026-12-05")}
    ops = compare(_shards(DATASET / "ops_superseded" / "2026-12-04"), _shards(DATASET / "ops"),
                  ["config_id"], "kernel_us", "family", references)
    runs = compare(_shards(DATASET / "nas"), _shards(DATASET / "suite_reruns" / "nas-2026-12-05" / "nas"),
                   ["model", "batch", "precision", "mode"], "latency_ms", "batch", references)
    publish(["# .venv/bin/python benchmarks/cpu_host_speed.py   (this workplace's AMD EPYC, 2 vCPUs; eager fp32)",
             "# operator rows of 2026-12-04 (first) against the same configurations measured again on 2026-12-05",
             "# (second); ratios: median (10th-90th percentile)",
             ops.to_string(index=False), "",
             "# NAS forwards (nas-train, nas-dev and nas-test, batch 1 and 8) of 2026-12-04 against the same",
             "# architectures measured again on 2026-12-05",
             runs.to_string(index=False)], RESULTS)


if __name__ == "__main__":
    main()
