"""Which host profile each measured row is learned and predicted against.

Every sweep and whole-model run probes the host before and after (collectors.campaign): rows
name the probe before them (``host_profile``), the sweep log names both. A row's reference is
the geometric mean of the pair (predictor.host_profile.mean_profile), or the probe before where
no pair is logged; rows measured before the probe existed have none, and are left out of what
needs one (the dispatch model's targets, eager composition).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.host_profile import HOST_KINDS, HOSTS_FOLDER, HostProfile, HostStore, estimate_profile, mean_profile
from predictor.model_run_schema import HOST_RUNS_FOLDER


def probe_pairs(dataset_dir: Path) -> dict[str, str]:
    """Probe before -> probe after, from the sweep logs of the dataset and of its host-condition
    folders (``host_runs/<condition>/sweep_log.jsonl``)."""
    dataset_dir = Path(dataset_dir)
    logs = [dataset_dir / "sweep_log.jsonl", *sorted((dataset_dir / HOST_RUNS_FOLDER).glob("*/sweep_log.jsonl"))]
    pairs: dict[str, str] = {}
    for log in logs:
        if not log.is_file():
            continue
        for line in log.read_text().splitlines():
            ids = json.loads(line).get("settings", {}).get("host_profiles") if line.strip() else None
            if ids and len(ids) == 2:
                pairs[ids[0]] = ids[1]
    return pairs


def reference_profiles(dataset_dir: Path) -> dict[str, HostProfile]:
    """Probe-before id -> the profile rows that name it are measured against."""
    store = HostStore(Path(dataset_dir) / HOSTS_FOLDER)
    profiles = {p.id: p for p in store.all()}
    pairs = probe_pairs(dataset_dir)
    return {i: mean_profile(p, profiles[pairs[i]]) if pairs.get(i) in profiles else p for i, p in profiles.items()}


@dataclass
class BundleHosts:
    """The host profiles a bundle carries: its default, every reference profile of its dataset
    (so ``--host <id>`` finds the hosts that measured it), and how far a CPU-only estimate lands."""

    default: HostProfile
    known: list[HostProfile]
    #: the 90th percentile of |log(estimated / measured cost)| over the kinds of the dataset's
    #: measured pairs, each estimated from the default by the CPU score: how much wider an
    #: eager interval on an estimated profile is
    estimated_extra_log: float


def bundle_hosts(runs: pd.DataFrame, references: dict[str, HostProfile]) -> BundleHosts:
    """The default host is the reference profile most of ``runs``' eager runs name (the host that
    measured the runs composition is fitted on)."""
    eager = runs.loc[(runs["mode"] == "eager") & runs["host_profile"].isin(list(references)), "host_profile"]
    if eager.empty:
        raise ValueError("no eager whole-model run names a host profile: composition has no host to be "
                         "fitted with (measure the zoo with this latpred: `latpred collect models`)")
    default = references[str(eager.value_counts().index[0])]
    pairs = [p for p in references.values() if "_" in p.id and p.cpu_score_ns]
    estimates = [(p, estimate_profile(default, float(p.cpu_score_ns or 0), cpu_model=p.cpu_model,
                                      cpu_cores=p.cpu_cores, measured_at=p.measured_at)) for p in pairs]
    errors = [abs(math.log(e.costs_us[k] / p.costs_us[k])) for p, e in estimates for k in HOST_KINDS]
    extra = float(np.quantile(errors, 0.9)) if errors else math.log(1.5)
    known = sorted({p.id: p for p in [default, *pairs]}.values(), key=lambda p: p.id)
    return BundleHosts(default, known, extra)
