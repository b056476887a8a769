"""``latpred check``: the shipped predictions of runs measured on a user's machine, scored, on
committed runs; which bundle predicts them and whether it was fitted on that device; and the
refusals, each saying what to do."""

from __future__ import annotations

import json
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
    errors = (torch_rows["predicted_ms"] / torch_rows["measured_ms"] - 1).abs()
    assert overall.loc["torch", "runs"] == len(measured)
    assert overall.loc["torch", "within10"] == pytest.approx((errors <= 0.1).mean())
    assert result.warnings == ()  # CUDA-graph runs of a GPU, every importer there: nothing to say
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


def test_eager_runs_without_their_host_profiles_are_counted_and_the_command_warns(tmp_path: Path) -> None:
    """Eager runs copied without the ``hosts/`` folder beside them are predicted for the bundle's
    host: the check counts them and says so, where they would otherwise pass for a check."""
    cpu = ROOT / "datasets" / "cpu-amd-epyc"
    models = ["alexnet", "resnet34"]
    rows = load_model_runs(cpu)
    rows = rows[rows["model"].isin(models)]
    folder = runs_folder(tmp_path / "bare", rows)
    unprobed = f"{len(rows)} eager run(s) name no host profile"
    assert any(w.startswith(unprobed) for w in check_runs(folder).warnings)
    shutil.copytree(cpu / "hosts", folder / "hosts")
    assert not any("host profile" in w for w in check_runs(folder).warnings)
    shutil.rmtree(folder / "hosts")
    result = CliRunner().invoke(main, ["check", str(folder), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert f"warning: {unprobed}" in result.output


def test_failed_and_throttled_runs_are_said_not_passed_over(tmp_path: Path) -> None:
    """A failed run is not scored, and a score over the rest can look better than the machine is;
    a throttled one is scored as measured: both are said (they were passed over without a word)."""
    rows = load_model_runs(PARTITION)
    rows = rows[rows["model"].isin(SLICE)].reset_index(drop=True)
    rows.loc[:2, ["status", "error", "latency_ms", "p10_ms", "p90_ms", "cv", "repetitions"]] = \
        ["failed", "OutOfMemoryError: CUDA out of memory", None, None, None, None, None]
    rows.loc[0, "error"] = None  # (read back as NaN: it printed 'nan')
    rows.loc[3:4, ["throttled", "clock_reasons"]] = [True, 0x4]  # the power cap alone: a GPU at full load
    rows.loc[5, ["throttled", "clock_reasons"]] = [True, 0x4 | 0x40]  # and hot
    result = check_runs(runs_folder(tmp_path, rows))
    failed = rows.iloc[0]
    assert (f"3 run(s) failed and are not scored (e.g. {failed['model']} batch {failed['batch']} "
            f"{failed['precision']} {failed['mode']}: no error recorded)") in result.warnings
    slowed = [w for w in result.warnings if "slowed its clocks" in w]
    assert len(slowed) == 1 and slowed[0].startswith("1 run(s) ran while the GPU slowed its clocks") \
        and "0x44" in slowed[0], result.warnings
    assert not any("nan" in w for w in result.warnings)
    assert len(result.report.predictions[result.report.predictions["importer"] == "torch"]) == len(rows) - 3


def test_runs_at_a_precision_the_device_cannot_be_predicted_at_are_left_out_and_said(tmp_path: Path) -> None:
    """A T4 has no bf16 tensor cores: its bf16 runs (collect measures bf16 by default) are left
    out, with why, and the rest are scored (the partition's runs relabelled: plumbing only)."""
    rows = load_model_runs(PARTITION)
    rows = rows[rows["model"].isin(SLICE)].assign(device_id="tesla-t4")
    rows.loc[rows.index[:2], "precision"] = "bf16"
    result = check_runs(runs_folder(tmp_path, rows))
    assert any(w.startswith("2 cudagraph bf16 run(s) left out: NVIDIA T4 has no bf16 tensor cores")
               for w in result.warnings)
    assert (result.report.predictions["importer"] == "torch").sum() == len(rows) - 2


def test_models_latpred_has_no_graph_of_are_refused_by_name(tmp_path: Path) -> None:
    rows = load_model_runs(PARTITION).head(3).assign(model="mynet")
    with pytest.raises(ValueError, match=r"none of its models \(mynet\) is a zoo model"):
        check_runs(runs_folder(tmp_path, rows))


def test_shards_that_are_not_latpreds_runs_are_refused_naming_the_folder(tmp_path: Path) -> None:
    rows = load_model_runs(PARTITION).head(3)
    for broken in (rows.drop(columns=["run_id"]), rows.assign(precision="fp8")):
        folder = runs_folder(tmp_path / str(len(broken.columns)) / broken.iloc[0]["precision"], broken)
        result = CliRunner().invoke(main, ["check", str(folder)])
        assert result.exit_code == 1 and f"Error: {folder / 'models'}: " in result.output, result.output


def test_without_the_zoos_onnx_exports_the_check_says_it_scored_the_torch_trace_alone(tmp_path: Path) -> None:
    result = check_runs(PARTITION, models=SLICE[:1], suites_dir=tmp_path)
    assert set(result.report.predictions["importer"]) == {"torch"}
    assert any(w.startswith("no ONNX exports of the zoo under") for w in result.warnings)


def test_another_cpu_of_a_measured_brand_is_said_to_be_another_machine(tmp_path: Path) -> None:
    cpu = ROOT / "datasets" / "cpu-amd-epyc"
    rows = load_model_runs(cpu)
    folder = runs_folder(tmp_path, rows[rows["model"] == "alexnet"])
    shutil.copytree(cpu / "hosts", folder / "hosts")
    fingerprint = json.loads((cpu / "fingerprint.json").read_text())
    (folder / "fingerprint.json").write_text(json.dumps({**fingerprint, "cpu_cores": 8}))
    assert any(w.startswith("this CPU has 8 cores, the cpu-amd-epyc that latpred measured 2")
               for w in check_runs(folder).warnings)
    (folder / "fingerprint.json").write_text(json.dumps(fingerprint))
    assert check_runs(folder).warnings == ()


def test_a_folder_with_an_operator_sweep_has_every_row_scored_per_family(tmp_path: Path) -> None:
    """The partition's fp16 sweep: each ok row is predicted once, as the shipped bundle predicts
    that call, and the per-family figures are those rows' (none dropped, none invented)."""
    result = check_runs(PARTITION, models=SLICE[:1])
    assert result.kernels is not None
    ops = pd.read_parquet(PARTITION / "ops")
    ok = ops[ops["status"] == "ok"]
    kernels = result.kernels.set_index(["family", "precision"])
    assert kernels.loc[("all", "all"), "rows"] == len(ok)
    assert kernels.drop(("all", "all"))["rows"].to_dict() == ok.groupby(["family", "precision"]).size().to_dict()
    assert ((kernels["within10"] >= 0) & (kernels["within10"] <= 1)).all()
    assert ((kernels["coverage90"] >= 0) & (kernels["coverage90"] <= 1)).all()
    out = tmp_path / "out"
    shown = CliRunner().invoke(main, ["check", str(PARTITION), "--models", SLICE[0], "--out", str(out)])
    assert shown.exit_code == 0, shown.output
    assert f"operator rows of {PARTITION}: {len(ok)} kernel times" in shown.output
    assert "the rows this bundle's models were fitted on, a fit, not a check" in shown.output
    assert (out / "kernels_by_family_precision.csv").is_file()
    assert check_runs(runs_folder(tmp_path / "runs-only", load_model_runs(PARTITION).head(3))).kernels is None


def test_a_transferred_devices_kernels_are_predicted_from_its_datasheet(tmp_path: Path) -> None:
    """The partition's sweep relabelled as an L4's and as an H100's (the numbers then mean nothing
    as a check): the transfer bundle predicts each from its own specs, so the L4, with under a tenth of
    the H100's memory bandwidth and an eighth of its tensor rate, is predicted slower on every large
    call, and over twice as slow on each whose bytes no L2 of theirs holds. (Where both L2s hold a
    call, the L2 roofline charges the L4 2.2x the H100's time, SMs times clock, and the trees put 17 of
    655 such calls at 1.16-1.98x, transfer bundle 20261206-001053: an extrapolation the README names.)"""
    from predictor.bundle import Bundle
    from predictor.catalogue import bytes_moved, get_family
    from predictor.device_bundles import bundle_folder
    from predictor.devices import DEVICES
    from predictor.precision import PRECISIONS
    from training.data import load_ops
    from training.ops_check import kernel_predictions

    fingerprint = json.loads((PARTITION / "fingerprint.json").read_text())
    predicted = {}
    for device_id in ("nvidia-l4", "nvidia-h100-80gb-hbm3"):
        folder = tmp_path / device_id
        shutil.copytree(PARTITION / "ops", folder / "ops")
        shutil.copytree(PARTITION / "hosts", folder / "hosts")
        (folder / "fingerprint.json").write_text(json.dumps({**fingerprint, "device_id": device_id}))
        predicted[device_id] = kernel_predictions(folder, Bundle.load(bundle_folder(device_id)))
    l4, h100 = predicted["nvidia-l4"], predicted["nvidia-h100-80gb-hbm3"]
    large = h100["measured_us"] > 100
    assert large.sum() > 50
    assert (l4["predicted_us"][large] > h100["predicted_us"][large]).all()
    rows = load_ops(PARTITION).rows  # the rows kernel_predictions predicted, in its order
    assert (rows["kernel_us"].to_numpy() == h100["measured_us"].to_numpy()).all()
    moved = pd.Series([bytes_moved(r.family, {p: int(getattr(r, p)) for p in get_family(r.family).params}, r.variant,
                                   int(r.batch), PRECISIONS[r.precision].element_bytes)
                       for r in rows.itertuples(index=False)])
    beyond_l2 = large & (moved > max(DEVICES["nvidia-l4"].l2_bytes, DEVICES["nvidia-h100-80gb-hbm3"].l2_bytes))
    assert beyond_l2.sum() > 50
    assert (l4["predicted_us"][beyond_l2] > 2 * h100["predicted_us"][beyond_l2]).all()


def test_a_folders_fingerprint_and_sweep_log_are_refused_naming_the_file(tmp_path: Path) -> None:
    """A fingerprint that is a JSON list was a TypeError traceback in training, a malformed one or a
    malformed sweep-log line a message that named no file."""
    from training.data import dataset_fingerprint
    from training.hosts import logged_probes

    (tmp_path / "fingerprint.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"fingerprint\.json: not a fingerprint \(a JSON object"):
        dataset_fingerprint(tmp_path)
    (tmp_path / "fingerprint.json").write_text("{'device_id': ")
    with pytest.raises(ValueError, match=r"fingerprint\.json: not a readable fingerprint"):
        dataset_fingerprint(tmp_path)
    (tmp_path / "sweep_log.jsonl").write_text('{"settings": {"host_profiles": ["a", "b"]}}\n\nnot json\n')
    with pytest.raises(ValueError, match=r"sweep_log\.jsonl, line 3: not a sweep log entry"):
        logged_probes(tmp_path)


def test_an_out_that_cannot_be_a_folder_is_refused_before_any_prediction(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file")
    result = CliRunner().invoke(main, ["check", str(PARTITION), "--out", str(tmp_path / "taken")])
    assert result.exit_code == 2 and "cannot be made a folder for the tables" in result.output, result.output
