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


def logged_probes(dataset_dir: Path) -> list[list[str]]:
    """The host profile ids each logged sweep or run names (before, after, and for whole-model
    runs since round sampling, the run's own), from the sweep logs of the dataset and of its
    host-condition folders (``host_runs/<condition>/sweep_log.jsonl``)."""
    dataset_dir = Path(dataset_dir)
    logs = [dataset_dir / "sweep_log.jsonl", *sorted((dataset_dir / HOST_RUNS_FOLDER).glob("*/sweep_log.jsonl"))]
    found = []
    for log in logs:
        if log.is_file():
            for number, line in enumerate(log.read_text().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    ids = json.loads(line).get("settings", {}).get("host_profiles")
                    if ids and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
                        raise ValueError(f"host_profiles is {ids!r}, not a list of profile ids")
                except (ValueError, AttributeError) as exc:
                    raise ValueError(f"{log}, line {number}: not a sweep log entry ({exc})") from None
                if ids and len(ids) >= 2:
                    found.append(list(ids))
    return found


def probe_pairs(dataset_dir: Path) -> dict[str, str]:
    """Probe before -> probe after, as logged (a third id, the run's own profile, is a reference
    as it is)."""
    return {ids[0]: ids[1] for ids in logged_probes(dataset_dir)}


def reference_profiles(dataset_dir: Path) -> dict[str, HostProfile]:
    """Probe-before id -> the profile rows that name it are measured against."""
    store = HostStore(Path(dataset_dir) / HOSTS_FOLDER)
    profiles = {p.id: p for p in store.all()}
    pairs = probe_pairs(dataset_dir)
    return {i: mean_profile(p, profiles[pairs[i]]) if pairs.get(i) in profiles else p for i, p in profiles.items()}


#: the calls an operator sweep makes that show its host's speed and little else: elementwise
#: families on kernels too short for the GPU to hold the host up
PROBE_LIKE_FAMILIES = ("binary", "activation")
PROBE_LIKE_KERNEL_US = 5.0


#: small elementwise calls a probed sweep must have for its calls to be set against its probes
MIN_SWEEP_CALLS = 200
#: how far a sweep's own small elementwise calls may run from its probes' elementwise cost for
#: its host times to be learned against those probes
MAX_SWEEP_TO_PROBE = 1.15


def off_probe_sweeps(rows: pd.DataFrame, probed: np.ndarray) -> np.ndarray:
    """Per row, whether its sweep's small elementwise calls (at least ``MIN_SWEEP_CALLS``) ran,
    at the median, more than ``MAX_SWEEP_TO_PROBE`` away, either way, from the elementwise cost
    of its reference profile (the geometric mean of its sweep's probes, ``reference_profiles``).
    Such rows keep their kernel times, but their host times are learned against no profile
    (training.data.host_costs leaves them out of the dispatch model).

    Learning host time relative to the probe assumes a sweep's calls stand to its probes as
    they do in every other sweep. On the H200 the sweep the dispatch model's probed rows come
    from (2026-12-01 04:02, beside the zoo's eager runs that composition is fitted on) ran its
    small calls at 1.07x its probes; the three NAS-scale sweeps of that evening at 1.21x, 1.31x
    (its probes read 7.1 and 11.2 us: that host did move) and 1.32x, the last on a host whose
    probes held within 12% (7.0 and 6.3 us) and whose CPU score (446 ns) matched the morning's
    (452 ns). Why is not known. Learned against their probes, their rows took eager zoo
    predictions from 81% to 77% within +-10% leave-one-model-out; rescaling each sweep's profile
    to the speed its own calls show did no better (77%); leaving their host times out, 81%."""
    small = _probe_like(rows)
    dispatch = rows["dispatch_us"].to_numpy(dtype=float)
    profiles = rows["host_profile"].to_numpy(dtype=object)
    off = np.zeros(len(rows), dtype=bool)
    for profile in {p for p in profiles if isinstance(p, str)}:
        sweep = (profiles == profile) & np.isfinite(probed)
        calls = sweep & small
        if calls.sum() >= MIN_SWEEP_CALLS:
            ratio = float(np.median(dispatch[calls]) / np.median(probed[calls]))
            off |= sweep & (abs(math.log(ratio)) > math.log(MAX_SWEEP_TO_PROBE))
    return off


def _probe_like(rows: pd.DataFrame) -> np.ndarray:
    return (rows["family"].isin(PROBE_LIKE_FAMILIES) & (rows["kernel_us"] < PROBE_LIKE_KERNEL_US)).to_numpy()


def unprobed_costs(rows: pd.DataFrame, kinds: np.ndarray, probed: np.ndarray) -> np.ndarray:
    """``probed`` (per row, its kind's cost in the profile probed beside it; NaN without one)
    completed for the rows measured before the probe existed, which are most of the operator
    dataset (124,000 of 141,000 rows on the H200, whose eager whole-model accuracy fell from 82%
    to 77% of runs within +-10% leave-one-model-out when the dispatch model lost them).

    Their host is inferred from their own small elementwise calls, which every sweep makes: their
    median dispatch against the probed rows' median gives the unprobed host's speed relative to
    the probed one, and each kind costs the probed rows' median cost of that kind scaled by it.
    The H200's sweeps of 2026-11-29 and -30 come out 1.05-1.09x the probed sweep's host, day by
    day, so they are treated as one host. NaN stays NaN where either side has no such calls."""
    small = _probe_like(rows)
    dispatch = rows["dispatch_us"].to_numpy(dtype=float)
    known = np.isfinite(probed)
    if not (small & known).any() or not (small & ~known).any():
        return probed
    # the unprobed host's speed against the probed one's, measured the same way on the same kind of call
    speed = float(np.median(dispatch[small & ~known]) / np.median(dispatch[small & known]))
    typical = {k: float(np.median(probed[known & (kinds == k)])) for k in set(kinds[known])}
    inferred = np.array([typical.get(k, np.nan) * speed for k in kinds])
    return np.where(known, probed, inferred)


def estimate_of(reference: HostProfile, measured: HostProfile) -> HostProfile:
    """What ``latpred host probe --cpu-only`` would have estimated on the host that measured
    ``measured``: ``reference`` scaled by that host's CPU score (how far estimates land)."""
    return estimate_profile(reference, float(measured.cpu_score_ns or 0), cpu_model=measured.cpu_model,
                            cpu_cores=measured.cpu_cores, measured_at=measured.measured_at)


def operator_host(rows: pd.DataFrame, references: dict[str, HostProfile]) -> HostProfile | None:
    """The reference profile most operator ``rows`` name: on a CPU, the host whose speed their
    times are (predictor.operator_host), which a bundle names so that a forward on another host
    is scaled from it. None where no row names a known profile."""
    named = rows["host_profile"][rows["host_profile"].isin(list(references))]
    return references[str(named.value_counts().index[0])] if not named.empty else None


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


def bundle_hosts(runs: pd.DataFrame, references: dict[str, HostProfile], dataset_dir: Path) -> BundleHosts:
    """The default host is the reference profile most of ``runs``' eager runs name (the host that
    measured the runs composition is fitted on); the others are the references of every logged
    sweep and run of the dataset."""
    eager = runs.loc[(runs["mode"] == "eager") & runs["host_profile"].isin(list(references)), "host_profile"]
    if eager.empty:
        raise ValueError("no eager whole-model run names a host profile: composition has no host to be "
                         "fitted with (measure the zoo with this latpred: `latpred collect models`)")
    default = references[str(eager.value_counts().index[0])]
    logged = [references.get(ids[2] if len(ids) > 2 and ids[2] in references else ids[0])
              for ids in logged_probes(dataset_dir)]
    pairs = list({p.id: p for p in logged if p is not None and p.cpu_score_ns}.values())
    errors = [abs(math.log(estimate_of(default, p).costs_us[k] / p.costs_us[k])) for p in pairs for k in HOST_KINDS]
    extra = float(np.quantile(errors, 0.9)) if errors else math.log(1.5)
    known = sorted({p.id: p for p in [default, *pairs]}.values(), key=lambda p: p.id)
    return BundleHosts(default, known, extra)
