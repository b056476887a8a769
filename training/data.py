"""Load a device's dataset for training: validated rows, features, targets and shape groups."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.catalogue import PARAMETERS
from predictor.dataset_schema import refuse_repeated_ids, validate_rows
from predictor.devices import DeviceSpec, resolve_device
from predictor.features import feature_frame
from predictor.host_profile import HOSTS_FOLDER, host_kind
from predictor.model_run_schema import (
    ARCHIVE_FOLDER,
    HOST_RUNS_FOLDER,
    MODEL_RUNS_FOLDER,
    NAS_RUNS_FOLDER,
    validate_model_runs,
)


def shard_paths(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob("part-*.parquet"))


def dataset_fingerprint(dataset_dir: Path) -> dict[str, Any]:
    """``fingerprint.json`` of a device's dataset, as a JSON object with its ``device_id``; a
    ValueError naming the file where it is not one (a list was a TypeError traceback, malformed
    JSON a message without the file)."""
    path = Path(dataset_dir) / "fingerprint.json"
    try:
        fingerprint = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no fingerprint (the collectors write one beside the rows)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable fingerprint ({exc})") from None
    if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get("device_id"), str):
        raise ValueError(f"{path}: not a fingerprint (a JSON object with the device_id the collectors write)")
    return fingerprint


def trained_on_files(dataset_dir: Path) -> list[Path]:
    """Every file of a device's dataset that training reads, in a fixed order: the live shards of
    operator rows, zoo runs and NAS runs (``nas-train``'s are fitted on, ``nas-dev``'s calibrate
    the interval), the host profiles and the sweep logs that pair a probe with the one after it
    (``training.hosts``). Archived rows and the ``host_runs/`` shards are read by nothing in
    training, so they are not among them."""
    root = Path(dataset_dir)
    shards = [p for folder in ("ops", MODEL_RUNS_FOLDER, NAS_RUNS_FOLDER) for p in shard_paths(root / folder)]
    logs = [p for p in (root / "sweep_log.jsonl", *sorted((root / HOST_RUNS_FOLDER).glob("*/sweep_log.jsonl")))
            if p.is_file()]
    return shards + sorted((root / HOSTS_FOLDER).glob("*.json")) + logs


def dataset_hash(dataset_dir: Path) -> str:
    """sha256 over the names (relative to the dataset) and bytes of ``trained_on_files``, in
    order: names the exact data a model saw."""
    root = Path(dataset_dir)
    digest = hashlib.sha256()
    for path in trained_on_files(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def read_frame(directory: Path, validate: Callable[[pd.DataFrame], pd.DataFrame], key: str) -> pd.DataFrame:
    """Every shard of ``directory``, validated; refuses a ``key`` held twice (an interrupted
    compaction), which would otherwise count those rows twice in a fit."""
    paths = shard_paths(directory)
    if not paths:
        raise FileNotFoundError(f"no parquet shards in {directory}")
    frame = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    refuse_repeated_ids(frame, key, directory)
    return validate(frame)


def shape_group(rows: pd.DataFrame) -> pd.Series:
    """One id per shape (family, variant, parameters): every precision, layout and batch of a
    shape lands on the same side of a split, so no shape leaks from train to test."""
    params = rows[list(PARAMETERS)].astype("Int64").fillna(-1).astype("int64").astype(str)
    return rows["family"] + "|" + rows["variant"] + "|" + params.agg(",".join, axis=1)


@dataclass
class OpData:
    """Measured rows with their features and targets."""

    rows: pd.DataFrame
    features: pd.DataFrame
    groups: pd.Series
    device: DeviceSpec
    #: per row, the cost of its family's kind in the host profile measured beside it
    #: (training.hosts): what its dispatch is learned relative to; NaN for rows measured before
    #: the probe existed, which the dispatch model leaves out
    host_cost_us: np.ndarray

    @property
    def roofline_us(self) -> np.ndarray:
        return np.power(10.0, self.features["log_roofline_us"].to_numpy())


def load_ops(dataset_dir: Path, families: list[str] | None = None, limit: int | None = None,
             seed: int = 0, basis: Callable[[DeviceSpec], DeviceSpec] | None = None) -> OpData:
    """The ok operator rows of a dataset (optionally a family subset or a random sample), their
    features computed on ``basis(device)``: a bundle's ``Bundle.feature_spec`` (a transfer bundle's
    datasheet basis), the transfer model's ``training.transfer.transfer_basis``; the device as it is by default.

    Host costs are worked out on every ok row before any subset is taken: whether a sweep's
    calls ran far from its probes, and the host of the rows measured before the probe existed,
    are judged on the whole sweep, so a sample gets the same references as the full fit."""
    dataset_dir = Path(dataset_dir)
    device = resolve_device(dataset_fingerprint(dataset_dir)["device_id"])
    rows = read_frame(dataset_dir / "ops", validate_rows, "config_id")
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    costs = host_costs(rows, dataset_dir)
    if families:
        rows = rows[rows["family"].isin(families)]
    if limit is not None and len(rows) > limit:
        rows = rows.sample(n=limit, random_state=seed)
    costs = costs[rows.index.to_numpy()]
    rows = rows.reset_index(drop=True)
    return OpData(rows, feature_frame(rows, basis(device) if basis else device), shape_group(rows), device, costs)


def host_costs(rows: pd.DataFrame, dataset_dir: Path) -> np.ndarray:
    """Per row, its kind's cost in its reference host profile: the one probed beside it, or for
    rows measured before the probe existed, the one ``training.hosts.unprobed_costs`` infers
    from their own small elementwise calls. NaN where neither can be had, and for the rows of a
    sweep whose calls ran far from its probes (``training.hosts.off_probe_sweeps``): the
    dispatch model learns from the rest."""
    from training.hosts import off_probe_sweeps, reference_profiles, unprobed_costs

    references = reference_profiles(dataset_dir)
    kinds = rows["family"].map(host_kind)
    probed = np.array([references[h].cost(k) if isinstance(h, str) and h in references else np.nan
                       for h, k in zip(rows["host_profile"], kinds)], dtype=float)
    off = off_probe_sweeps(rows, probed)
    costs = np.full(len(rows), np.nan)
    costs[~off] = unprobed_costs(rows[~off], kinds.to_numpy()[~off], probed[~off])
    return costs


def load_model_runs(dataset_dir: Path, folder: str = MODEL_RUNS_FOLDER) -> pd.DataFrame:
    """The ok whole-model runs of a dataset, one per (model, batch, precision, mode): the zoo's
    (``models/``), or the NAS suites' (``folder="nas"``).

    They come from one protocol, interleaved rounds (``latpred collect models``), in one folder:
    rows of earlier protocols, which host and clock drift biased (up to 2x for sequential eager
    rows), are archived, not merged, so nothing here decides between two measurements of a unit.
    A unit measured twice is refused rather than silently picked.
    """
    runs = read_frame(Path(dataset_dir) / folder, validate_model_runs, "run_id")
    runs = runs[runs["status"] == "ok"].reset_index(drop=True)
    unit = ["model", "batch", "precision", "mode"]
    twice = runs[runs.duplicated(unit, keep=False)]
    if len(twice):
        first = twice.iloc[0]
        raise ValueError(f"{len(twice)} whole-model rows measure a unit more than once (first: {first['model']} "
                         f"b{first['batch']} {first['precision']} {first['mode']}): archive the superseded "
                         f"rows under {Path(dataset_dir) / ARCHIVE_FOLDER}")
    return runs
