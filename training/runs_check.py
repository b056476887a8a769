"""``latpred check``: how close latpred comes on runs measured on your own machine.

Why: a user choosing a GPU, or trusting a NAS loop's latency budget, should not take the README's
H200 figures on faith for their device and host. ``latpred collect models --out ROOT`` times zoo
models on their GPU (or CPU) in interleaved rounds and probes the host beside them; this predicts
each of those runs with the shipped bundle as it is (the device's own bundle, or the transfer
bundle for a catalog GPU that latpred never measured), eager runs for the host profile probed
beside them, through the torch trace and each ONNX export of the model, and scores them as
``latpred validate --suite`` does: within +-10%, MAPE, Spearman and interval coverage per
importer, mode, precision and batch. Where the folder holds an operator sweep too, its kernel
times are scored per family (``training.ops_check``).

Nothing is refitted: these are the predictions the user gets. Where the bundle was fitted on runs
of the same device (the H200's bundle on an H200, the transfer bundle on a device it was trained
across), a score on the very runs it was fitted on is a development figure, and the check says so.
What would make a score say less than it seems (eager runs without their host profiles, no ONNX
exports to import, runs at a precision the device cannot be predicted at, another CPU of the same
brand) is said in ``warnings``, never passed over.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.clock_reasons import SW_POWER_CAP
from predictor.dataset_schema import DatasetSchemaError
from predictor.device_bundles import bundle_folder
from predictor.devices import DEVICES, DeviceSpec
from predictor.model_run_schema import MODEL_RUNS_FOLDER, validate_model_runs
from predictor.predict import MEASURED, TRANSFERRED
from training.data import dataset_fingerprint, read_frame, shard_paths
from training.hosts import reference_profiles
from training.ops_check import has_ops, kernel_predictions, score_kernels
from training.suite_validation import SuiteReport, predict_suite, score_suite
from training.suites import DEFAULT_SUITES_DIR, Suite, load_runs_suite


@dataclass(frozen=True)
class RunsCheck:
    """The shipped predictions of one dataset's runs, scored, and what they are worth."""

    device: DeviceSpec
    bundle_dir: Path
    bundle_version: str
    #: whether the bundle was fitted on this device's own runs: then a score on the runs it was
    #: fitted on is a development figure
    fitted_on_device: bool
    report: SuiteReport
    #: what limits what the scores say (runs left out and why, hosts not known, importers missing)
    warnings: tuple[str, ...] = ()
    #: where the folder holds an operator sweep: its kernel times scored per family and precision
    #: (training.ops_check), where a whole model's error comes from
    kernels: pd.DataFrame | None = None

    @property
    def provenance(self) -> str:
        """The bundle's word for the device (predictor.predict): measured or transferred."""
        return MEASURED if self.fitted_on_device else TRANSFERRED


def runs_device(runs: pd.DataFrame, dataset: Path) -> DeviceSpec:
    """The catalog device every run of ``dataset`` was measured on; a ValueError that says what to
    do where the runs name several devices or one the catalog lacks."""
    ids = sorted(set(runs["device_id"]))
    if len(ids) != 1:
        raise ValueError(f"{dataset}: runs of {len(ids)} devices ({', '.join(ids)}): check one device's folder "
                         "at a time")
    device_id = ids[0]
    if device_id in DEVICES:
        return DEVICES[device_id]
    if device_id.startswith("cpu-"):
        how = f"a CPU is predicted by a bundle of its own (latpred train --dataset {dataset})"
    else:
        how = "add it to predictor/device_catalog.toml with its datasheet to predict it by transfer"
    raise ValueError(f"{dataset}: device {device_id!r} is not in latpred's catalog, so no bundle predicts it "
                     f"('latpred devices' lists those it knows): {how}")


def _load_runs_suite(dataset: Path, suites_dir: Path, models: list[str] | None) -> Suite:
    """The folder's runs with every importer's graphs; what the folder lacks, as a ValueError
    that names it and says how to measure some."""
    folder = dataset / MODEL_RUNS_FOLDER
    how = "measure some with 'latpred collect models --out ROOT' and check ROOT/<device-id>"
    if not shard_paths(folder):
        raise ValueError(f"{dataset}: no whole-model runs ({folder} holds no shards): {how}")
    try:
        suite = load_runs_suite(dataset, suites_dir, models, name="your runs")
    except DatasetSchemaError as exc:
        raise ValueError(f"{folder}: {exc}") from None
    if suite.runs.empty:
        raise ValueError(f"{dataset}: no whole-model run under {folder} finished (status ok): {how}")
    return suite


def _unpredictable(device: DeviceSpec, precision: str, mode: str) -> str | None:
    """Why ``device`` cannot be predicted at ``precision`` in ``mode``, or None: what a prediction
    would refuse (a CPU's modes and precisions, a GPU without tensor cores of that precision)."""
    why = device.refusal(precision, mode)
    if why is None:
        try:
            device.datasheet_spec().peak_flops("linear", precision)
        except ValueError as exc:
            why = str(exc)
    return why


def _predictable_runs(suite: Suite, device: DeviceSpec) -> tuple[Suite, list[str]]:
    """The suite without the runs the device cannot be predicted at, and a warning per kind left out."""
    keep = pd.Series(True, index=suite.runs.index)
    warnings = []
    for (precision, mode), runs in suite.runs.groupby(["precision", "mode"]):
        why = _unpredictable(device, str(precision), str(mode))
        if why is not None:
            keep[runs.index] = False
            warnings.append(f"{len(runs)} {mode} {precision} run(s) left out: {why}")
    if not keep.any():
        raise ValueError(f"no run can be predicted on {device.device_id}: {'; '.join(warnings)}")
    return replace(suite, runs=suite.runs[keep].reset_index(drop=True)), warnings


def unscored_warnings(dataset: Path, models: list[str] | None) -> list[str]:
    """What the folder holds that its scores do not say: runs that failed (they are not
    scored, and a score over the rest can look better than the machine is) and runs the GPU
    throttled (scored as measured: their times may be slow)."""
    rows = read_frame(dataset / MODEL_RUNS_FOLDER, validate_model_runs, "run_id")
    if models:
        rows = rows[rows["model"].isin(models)]
    said = []
    failed = rows[rows["status"] != "ok"]
    if len(failed):
        r = failed.iloc[0]
        error = r["error"] if isinstance(r["error"], str) and r["error"] else "no error recorded"
        said.append(f"{len(failed)} run(s) failed and are not scored (e.g. {r['model']} batch {r['batch']} "
                    f"{r['precision']} {r['mode']}: {error[:120]})")
    # The power cap alone is a GPU at full load, as most runs at large batch are (378 of the H200's
    # 648): said are the thermal and hardware slowdowns that would make a run read slow.
    reasons = rows["clock_reasons"].fillna(0).astype("int64")
    slowed = rows[(rows["status"] == "ok") & rows["throttled"] & ((reasons & ~SW_POWER_CAP) != 0)]
    if len(slowed):
        r = slowed.iloc[0]
        said.append(f"{len(slowed)} run(s) ran while the GPU slowed its clocks for heat or a hardware limit "
                    f"(NVML clock reasons {int(r['clock_reasons']):#x} for {r['model']} batch {r['batch']} "
                    f"{r['precision']} {r['mode']}): scored as measured, they may read slow")
    return said


def unprobed_eager(runs: pd.DataFrame, dataset: Path) -> int:
    """How many eager runs name no host profile that ``dataset/hosts`` holds: a prediction for
    them falls back to the bundle's host (``predict_suite``)."""
    eager = runs[runs["mode"] == "eager"]
    probed = set(reference_profiles(dataset))
    return int(sum(not (isinstance(h, str) and h in probed) for h in eager["host_profile"]))


def _other_cpu(device: DeviceSpec, dataset: Path) -> str | None:
    """A warning where a CPU's folder says it has other cores than the catalog's CPU of that id:
    a CPU's id comes from its brand string alone, so another machine of the brand gets the same."""
    path = dataset / "fingerprint.json"
    if device.kind != "cpu" or not path.is_file():
        return None
    cores = dataset_fingerprint(dataset).get("cpu_cores")
    if isinstance(cores, int) and cores != device.sm_count:
        return (f"this CPU has {cores} cores, the {device.device_id} that latpred measured {device.sm_count}: its "
                "bundle predicts another machine of the brand, and the scores are a check of that")
    return None


def check_runs(dataset: Path, bundle_root: Path = DEFAULT_BUNDLE_DIR, bundle: Path | None = None,
               suites_dir: Path = DEFAULT_SUITES_DIR, models: list[str] | None = None) -> RunsCheck:
    """Predict every whole-model run in ``dataset`` (a device folder ``latpred collect models``
    wrote) with the bundle that predicts its device (``bundle`` overrides), and score them."""
    dataset = Path(dataset)
    suite = _load_runs_suite(dataset, suites_dir, models)
    device = runs_device(suite.runs, dataset)
    suite, warnings = _predictable_runs(suite, device)
    bundle_dir = Path(bundle) if bundle is not None else bundle_folder(device.device_id, bundle_root)
    loaded = Bundle.load(bundle_dir)
    predictions = predict_suite(suite, loaded, dataset, device=device)
    if predictions.empty:
        raise ValueError(f"{dataset}: none of its models ({', '.join(sorted(set(suite.runs['model'])))}) is a zoo "
                         "model latpred has graphs of ('latpred collect models' measures those)")
    if not any(importer.startswith("onnx-") for importer in suite.graphs):
        warnings.append(f"no ONNX exports of the zoo under {suites_dir / 'zoo' / 'onnx'}: scored through the torch "
                        "trace alone (--suites names the folder)")
    unprobed = unprobed_eager(suite.runs, dataset)
    if unprobed:
        warnings.append(f"{unprobed} eager run(s) name no host profile in {dataset / 'hosts'}: predicted for the "
                        "bundle's host, not the one that ran them (keep the hosts/ folder that 'latpred collect "
                        "models' wrote beside models/)")
    other_cpu = _other_cpu(device, dataset)
    if other_cpu:
        warnings.append(other_cpu)
    warnings += unscored_warnings(dataset, models)
    kernels = score_kernels(kernel_predictions(dataset, loaded)) if has_ops(dataset) else None
    return RunsCheck(device, bundle_dir, loaded.version, loaded.measured_on(device.device_id),
                     score_suite(suite, predictions), tuple(warnings), kernels)
