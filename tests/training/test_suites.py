"""The validation suites on a committed slice: every importer scored, nothing dropped unseen,
and the zoo's torch-trace path the same leave-one-model-out prediction as ``latpred validate``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from latpred import main
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.device_bundles import bundle_folder
from predictor.devices import resolve_device
from predictor.predict import Predictor
from training.composition import leave_one_model_out, run_arrays
from training.hosts import reference_profiles
from training.suite_validation import predict_suite, score_suite, validate_suite
from training.suites import (
    DEFAULT_SUITES_DIR,
    load_suite,
    nas_archs,
    nas_dev_arrays,
    nas_train_arrays,
    require_nas_suites,
)

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "datasets" / "nvidia-h200"
SUITES = ROOT / DEFAULT_SUITES_DIR
BUNDLE = DEFAULT_BUNDLE_DIR / "nvidia-h200"
SLICE = ["distilbert-base", "mobilenet_v3_small", "resnet34"]


@pytest.fixture(scope="module")
def zoo_report():  # type: ignore[no-untyped-def]
    suite = load_suite("zoo", DATASET, SUITES, SLICE)
    return suite, validate_suite(suite, BUNDLE, DATASET)


def test_the_zoo_slice_is_scored_through_the_torch_trace_and_each_onnx_exporter(zoo_report) -> None:  # type: ignore[no-untyped-def]
    suite, report = zoo_report
    exported = {json.loads(line)["model"] for line in (SUITES / "zoo/onnx/exports.jsonl").read_text().splitlines()}
    assert set(SLICE) <= exported
    assert set(report.predictions["importer"]) == {"torch", "onnx-dynamo", "onnx-legacy"}
    runs_per_model = suite.runs.groupby("model").size()
    for importer, part in report.predictions.groupby("importer"):
        # every measured run of every model the importer has a graph for, and no other
        expected = sum(runs_per_model[m] for m in SLICE if m not in suite.missing.get(importer, []))
        assert len(part) == expected, importer
    assert (report.predictions["low_ms"] < report.predictions["predicted_ms"]).all()
    assert (report.predictions["predicted_ms"] < report.predictions["high_ms"]).all()


def test_scores_are_what_the_predictions_say(zoo_report) -> None:  # type: ignore[no-untyped-def]
    suite, report = zoo_report
    p = report.predictions
    group = p[(p["importer"] == "torch") & (p["mode"] == "cudagraph") & (p["precision"] == "fp16") & (p["batch"] == 8)]
    row = report.table[(report.table["importer"] == "torch") & (report.table["mode"] == "cudagraph")
                       & (report.table["precision"] == "fp16") & (report.table["batch"] == 8)].iloc[0]
    errors = (group["predicted_ms"] - group["measured_ms"]).abs() / group["measured_ms"]
    assert row["runs"] == len(group) == len(SLICE)
    assert row["MAPE"] == pytest.approx(errors.mean())
    assert row["within10"] == pytest.approx((errors <= 0.1).mean())
    covered = (group["low_ms"] <= group["measured_ms"]) & (group["measured_ms"] <= group["high_ms"])
    assert row["coverage90"] == pytest.approx(covered.mean())
    again = score_suite(suite, p)
    assert again.table.equals(report.table)


def test_the_torch_path_is_latpred_validates_leave_one_model_out(zoo_report) -> None:  # type: ignore[no-untyped-def]
    suite, report = zoo_report
    bundle = Bundle.load(BUNDLE)
    predictor = Predictor(bundle, resolve_device(bundle.device_id))
    arrays = run_arrays(predictor, suite.graphs["torch"], suite.runs, reference_profiles(DATASET))
    extra = nas_train_arrays(predictor, DATASET, SUITES)
    # the NAS training runs join every fit, each eager one on the host probed beside it
    assert {r.mode for r in extra} == {"eager", "cudagraph"}
    assert all(r.host is not None for r in extra if r.mode == "eager")
    reference = leave_one_model_out(arrays, extra).predictions
    ours = report.predictions[report.predictions["importer"] == "torch"]
    keys = ["model", "batch", "precision", "mode"]
    merged = ours.merge(reference, on=keys, suffixes=("", "_ref"))
    assert len(merged) == len(ours) == len(reference)
    np.testing.assert_allclose(merged["predicted_ms"], merged["predicted_ms_ref"], rtol=1e-9)


def test_the_interval_calibrates_on_every_nas_dev_run_and_never_reads_nas_test() -> None:
    bundle = Bundle.load(BUNDLE)
    arrays = nas_dev_arrays(Predictor(bundle, resolve_device(bundle.device_id)), DATASET, SUITES)
    archs = nas_archs(SUITES)
    split = dict(zip(archs["name"], archs["split"]))
    assert {split[r.model] for r in arrays} == {"nas-dev"}
    dev = load_suite("nas-dev", DATASET, SUITES)
    assert len(arrays) == len(dev.runs) and {r.mode for r in arrays} == {"eager", "cudagraph"}
    assert all(r.host is not None for r in arrays if r.mode == "eager")  # each on the host probed beside it
    assert bundle.metadata["composition"]["interval_calibrated_on"]["nas_dev_runs"] == len(arrays)


def test_an_unknown_suite_or_model_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown suite 'nas'"):
        load_suite("nas", DATASET, SUITES)
    with pytest.raises(ValueError, match="no measured runs of not-a-model"):
        load_suite("zoo", DATASET, SUITES, ["resnet34", "not-a-model"])


def test_validate_suite_cli_writes_tables_and_a_scatter_plot(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", "--suite", "zoo", "--models", "resnet34,mobilenet_v3_small",
                                       "--dataset", str(DATASET), "--suites", str(SUITES), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "suite zoo: 2 models" in result.output and "onnx-legacy" in result.output
    assert (tmp_path / "zoo" / "scatter.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (tmp_path / "zoo" / "by_importer_mode_precision_batch.csv").stat().st_size > 0


def test_validate_finds_the_repository_datasets_from_any_directory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults of --dataset and --suites are the repository's, wherever the command runs
    (they were relative to the working directory: run elsewhere, validate refused a missing folder)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate", "--suite", "zoo", "--models", "resnet34", "--out", "out"])
    assert result.exit_code == 0, result.output
    assert "suite zoo: 1 model," in result.output
    assert (tmp_path / "out" / "zoo" / "scatter.png").exists()


def test_a_gpu_without_a_bundle_of_its_own_is_scored_by_the_bundle_that_serves_it(tmp_path: Path) -> None:
    """The H100's NAS runs through ``latpred validate --suite``: the transfer bundle, asked about
    the H100 (not about the device the bundle is named after), as the service and the CLI predict it."""
    h100 = ROOT / "datasets" / "nvidia-h100-80gb-hbm3"
    result = CliRunner().invoke(main, ["validate", "--suite", "nas-test", "--models", "nas-6", "--device",
                                       "nvidia-h100-80gb-hbm3", "--dataset", str(h100), "--suites", str(SUITES),
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = pd.read_csv(tmp_path / "nas-test" / "predictions.csv")
    device = resolve_device("nvidia-h100-80gb-hbm3")
    expected = predict_suite(load_suite("nas-test", h100, SUITES, ["nas-6"]), bundle_folder(device.device_id), h100,
                             device=device)
    assert len(written) == len(expected) == 3 * 18  # torch and two ONNX exports, 18 runs each
    np.testing.assert_allclose(written["predicted_ms"], expected["predicted_ms"], rtol=1e-9)


def test_a_one_device_bundle_named_by_bundle_predicts_its_own_device(tmp_path: Path) -> None:
    """``--bundle`` of a CPU with ``--device`` left at its default (the H200): the bundle's device."""
    epyc = ROOT / "datasets" / "cpu-amd-epyc"
    result = CliRunner().invoke(main, ["validate", "--suite", "nas-test", "--models", "nas-6", "--bundle",
                                       str(DEFAULT_BUNDLE_DIR / "cpu-amd-epyc"), "--dataset", str(epyc),
                                       "--suites", str(SUITES), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(tmp_path / "nas-test" / "predictions.csv")["mode"]) == {"eager"}


def test_training_refuses_a_dataset_with_nas_runs_whose_suites_it_cannot_find(tmp_path: Path) -> None:
    """Run from another folder, the suites' default path finds nothing: training must say so before
    it fits, not fit composition on the zoo alone and calibrate the interval without nas-dev."""
    empty = tmp_path / "suites"
    empty.mkdir()
    result = CliRunner().invoke(main, ["train", "--dataset", str(DATASET), "--suites", str(empty), "--no-track",
                                       "--bundles", str(tmp_path / "bundles")])
    assert result.exit_code != 0
    assert "holds NAS runs" in result.output and str(empty / "nas-train" / "archs.jsonl") in result.output
    assert not (tmp_path / "bundles").exists()  # refused before any fit or export
    # validation fits composition as training does, so it refuses the same way
    refused = CliRunner().invoke(main, ["validate", "--dataset", str(DATASET), "--suites", str(empty),
                                        "--out", str(tmp_path / "out")])
    assert refused.exit_code != 0 and "holds NAS runs" in refused.output
    # a dataset that measured no NAS suite needs none
    partition = ROOT / "datasets" / "nvidia-h200-sm72"
    assert not (partition / "nas").exists()
    require_nas_suites(partition, empty)


def test_validate_calibrates_by_references_only_with_a_suite() -> None:
    result = CliRunner().invoke(main, ["validate", "--hosts", "--references", "--dataset", str(DATASET),
                                       "--suites", str(SUITES)])
    assert result.exit_code == 2 and "--references goes with --suite" in result.output


def test_a_suite_is_predicted_from_its_probes_costs_unless_calibration_is_asked() -> None:
    """nas-test measured again on machine 19 (2026-12-05), its groups' profiles carrying reference
    forwards: by default each eager run is predicted from its profile's costs as probed, as the
    shipped predictor predicts; with ``references`` from them calibrated, as a calibrating one does."""
    rerun = DATASET / "suite_reruns" / "nas-test-machine-19-2026-12-05"
    suite = load_suite("nas-test", rerun, SUITES, ["nas-6", "nas-18"])
    probed = validate_suite(suite, BUNDLE, rerun).predictions
    calibrated = validate_suite(suite, BUNDLE, rerun, references=True).predictions
    assert len(probed) == len(calibrated) == len(suite.runs) * len(suite.graphs) and set(probed["mode"]) == {"eager"}
    run = suite.runs.iloc[0]
    profile = reference_profiles(rerun)[run["host_profile"]]
    assert profile.reference_ms
    bundle = Bundle.load(BUNDLE)
    graph = suite.graphs["torch"][run["model"]]
    args = (graph, int(run["batch"]), str(run["precision"]), "eager")
    row = (probed["importer"] == "torch") & (probed["model"] == run["model"]) & (probed["batch"] == run["batch"]) \
        & (probed["precision"] == run["precision"])
    shipped = Predictor(bundle, resolve_device("h200")).predict(*args, with_layers=False, host=profile)
    calibrating = Predictor(bundle, resolve_device("h200"), calibrate_hosts=True)
    assert float(probed.loc[row, "predicted_ms"].iloc[0]) == pytest.approx(shipped.total_ms, rel=1e-9)
    assert float(calibrated.loc[row, "predicted_ms"].iloc[0]) == pytest.approx(
        calibrating.predict(*args, with_layers=False, host=profile).total_ms, rel=1e-9)
    assert not np.allclose(probed["predicted_ms"], calibrated["predicted_ms"])
