"""``latpred check``: the shipped predictions of runs measured on a user's machine, scored, on
committed runs; which bundle predicts them and whether it was fitted on that device; and the
refusals, each saying what to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from latpred import main
from predictor.bundle import DEFAULT_BUNDLE_DIR
from predictor.device_bundles import load_predictor
from predictor.zoo import load_zoo_graph
from training.data import load_model_runs
from training.runs_check import check_runs

ROOT = Path(__file__).resolve().parents[2]
PARTITION = ROOT / "datasets" / "nvidia-h200-sm72"  # measured, predicted by the transfer bundle
SLICE = ["mobilenet_v3_small", "resnet34"]


def runs_folder(tmp_path: Path, rows: pd.DataFrame) -> Path:
    """A device folder as ``latpred collect models`` leaves one: its runs in ``models/``."""
    (tmp_path / "models").mkdir(parents=True)
    rows.to_parquet(tmp_path / "models" / "part-00000.parquet", index=False)
    return tmp_path


def test_a_partitions_runs_are_predicted_by_the_transfer_bundle_through_every_importer() -> None:
    result = check_runs(PARTITION, models=SLICE)
    measured = load_model_runs(PARTITION)
    measured = measured[measured["model"].isin(SLICE)]
    assert result.device.device_id == "nvidia-h200-sm72"
    assert result.bundle_dir == DEFAULT_BUNDLE_DIR / "transfer"
    assert result.fitted_on_device and result.provenance == "measured"  # the transfer bundle saw its runs
    predictions = result.report.predictions
    assert set(predictions["importer"]) == {"torch", "onnx-dynamo", "onnx-legacy"}
    torch_rows = predictions[predictions["importer"] == "torch"]
    assert len(torch_rows) == len(measured)  # every run predicted, none dropped
    assert sorted(torch_rows["measured_ms"]) == sorted(measured["latency_ms"])
    assert (torch_rows["low_ms"] < torch_rows["predicted_ms"]).all()
    assert (torch_rows["predicted_ms"] < torch_rows["high_ms"]).all()
    overall = result.report.overall.set_index("importer")
    assert overall.loc["torch", "runs"] == len(measured) and 0 <= float(overall.loc["torch", "within10"]) <= 1
    # the shipped predictions, nothing refitted: what 'latpred predict --device' answers for each run
    shipped = load_predictor("nvidia-h200-sm72")
    for row in torch_rows.itertuples():
        answer = shipped.predict(load_zoo_graph(row.model), row.batch, row.precision, row.mode, with_layers=False)
        assert row.predicted_ms == pytest.approx(answer.total_ms, rel=1e-9)


def test_a_device_no_bundle_was_fitted_on_is_said_to_be_transferred(tmp_path: Path) -> None:
    """The plumbing for a catalog GPU latpred never measured: the runs below are the partition's,
    relabelled, so their scores mean nothing; which bundle predicts them and what it says do."""
    rows = load_model_runs(PARTITION)
    rows = rows[rows["model"].isin(SLICE)].assign(device_id="nvidia-l4", device_name="NVIDIA L4")
    result = check_runs(runs_folder(tmp_path, rows))
    assert result.device.device_id == "nvidia-l4" and not result.fitted_on_device
    assert result.provenance == "transferred" and result.bundle_dir == DEFAULT_BUNDLE_DIR / "transfer"


def test_the_command_names_the_bundle_and_what_the_figure_is_worth(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["check", str(PARTITION), "--models", ",".join(SLICE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("nvidia-h200-sm72 (NVIDIA H200 (72 SMs)), predicted by ")
    assert "fitted on this device's own runs: where these are among them, a development figure" in result.output
    assert (out / "predictions.csv").is_file() and (out / "scatter.png").is_file()


def test_runs_of_a_device_outside_the_catalog_are_refused_by_name(tmp_path: Path) -> None:
    rows = load_model_runs(PARTITION).head(3).assign(device_id="acme-x1")
    with pytest.raises(ValueError, match="'acme-x1' is not in latpred's catalog.*latpred devices"):
        check_runs(runs_folder(tmp_path, rows))


def test_runs_of_two_devices_are_refused(tmp_path: Path) -> None:
    rows = load_model_runs(PARTITION).head(4).reset_index(drop=True)
    rows.loc[2:, "device_id"] = "nvidia-h200"
    with pytest.raises(ValueError, match="runs of 2 devices"):
        check_runs(runs_folder(tmp_path, rows))


def test_a_folder_without_runs_says_how_to_measure_some(tmp_path: Path) -> None:
    shutil.copy(PARTITION / "fingerprint.json", tmp_path / "fingerprint.json")
    result = CliRunner().invoke(main, ["check", str(tmp_path)])
    assert result.exit_code != 0
    assert "no whole-model runs" in result.output and "latpred collect models --out ROOT" in result.output
