"""``latpred check``: how close latpred comes on runs measured on your own machine.

Why: a user choosing a GPU, or trusting a NAS loop's latency budget, should not take the README's
H200 figures on faith for their device and host. ``latpred collect models --out ROOT`` times zoo
models on their GPU (or CPU) in interleaved rounds and probes the host beside them; this predicts
each of those runs with the shipped bundle as it is (the device's own bundle, or the transfer
bundle for a catalog GPU that latpred never measured), eager runs for the host profile probed
beside them, through the torch trace and each ONNX export of the model, and scores them as
``latpred validate --suite`` does: within +-10%, MAPE, Spearman and interval coverage per
importer, mode, precision and batch.

Nothing is refitted: these are the predictions the user gets. Where the bundle was fitted on runs
of the same device (the H200's bundle on an H200, the transfer bundle on a device it was trained
across), the figure is a development one, and the check says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from predictor.bundle import DEFAULT_BUNDLE_DIR
from predictor.device_bundles import bundle_folder
from predictor.devices import DEVICES, DeviceSpec
from predictor.model_run_schema import MODEL_RUNS_FOLDER
from training.data import shard_paths
from training.suite_validation import SuiteReport, predict_suite, score_suite
from training.suites import DEFAULT_SUITES_DIR, load_runs_suite


@dataclass(frozen=True)
class RunsCheck:
    """The shipped predictions of one dataset's runs, scored, and what they are worth."""

    device: DeviceSpec
    bundle_dir: Path
    bundle_version: str
    #: whether the bundle was fitted on this device's own runs: then the scores are a development
    #: figure (the models saw the device, if not these very runs)
    fitted_on_device: bool
    report: SuiteReport

    @property
    def provenance(self) -> str:
        """'measured' (the bundle was fitted on this device) or 'transferred' (from its specs)."""
        return "measured" if self.fitted_on_device else "transferred"


def runs_device(runs: pd.DataFrame, dataset: Path) -> DeviceSpec:
    """The catalog device every run of ``dataset`` was measured on; a ValueError that says what to
    do where the runs name several devices or one the catalog lacks."""
    ids = sorted(set(runs["device_id"]))
    if len(ids) != 1:
        raise ValueError(f"{dataset}: runs of {len(ids)} devices ({', '.join(ids)}): check one device's folder "
                         "at a time")
    device_id = ids[0]
    if device_id not in DEVICES:
        raise ValueError(f"{dataset}: device {device_id!r} is not in latpred's catalog, so no bundle predicts it: "
                         "'latpred devices' lists those it knows (add it to predictor/device_catalog.toml with its "
                         "datasheet to predict it by transfer)")
    return DEVICES[device_id]


def check_runs(dataset: Path, bundle_root: Path = DEFAULT_BUNDLE_DIR, bundle: Path | None = None,
               suites_dir: Path = DEFAULT_SUITES_DIR, models: list[str] | None = None) -> RunsCheck:
    """Predict every whole-model run in ``dataset`` (a device folder ``latpred collect models``
    wrote) with the bundle that predicts its device (``bundle`` overrides), and score them."""
    from predictor.bundle import Bundle

    folder = Path(dataset) / MODEL_RUNS_FOLDER
    how = "measure some with 'latpred collect models --out ROOT' and check ROOT/<device-id>"
    if not shard_paths(folder):
        raise ValueError(f"{dataset}: no whole-model runs ({folder} holds no shards): {how}")
    suite = load_runs_suite(Path(dataset), suites_dir, models, name="your runs")
    if suite.runs.empty:
        raise ValueError(f"{dataset}: no whole-model run under {folder} finished (status ok): {how}")
    device = runs_device(suite.runs, Path(dataset))
    bundle_dir = Path(bundle) if bundle is not None else bundle_folder(device.device_id, bundle_root)
    loaded = Bundle.load(bundle_dir)
    predictions = predict_suite(suite, bundle_dir, Path(dataset), device=device)
    return RunsCheck(device, bundle_dir, loaded.version, loaded.measured_on(device.device_id),
                     score_suite(suite, predictions))
