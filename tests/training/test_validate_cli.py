"""``latpred devices`` and ``latpred predict`` through the real CLI and the committed bundle;
the validation scores and scatter plot of ``latpred validate``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner, Result

from latpred import main
from predictor.zoo import load_zoo_graph
from training.validate import METHODS, scatter_plot, score

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def json_lines(result: Result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_devices_lists_the_h200_with_its_bundle(tmp_path: Path) -> None:
    result = run("devices")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("nvidia-h200"))
    assert "NVIDIA H200" in line and "132 SMs" in line and "bundle nvidia-h200" in line
    assert "\tmeasured\t" in line and "/h\t" in line  # provenance and price
    l4 = next(x for x in result.stdout.splitlines() if x.startswith("nvidia-l4\t"))
    assert "\ttransferred\t" in l4 and l4.endswith("transfer bundle")
    partition = next(x for x in result.stdout.splitlines() if x.startswith("nvidia-h200-sm72\t"))
    assert "\tmeasured\t" in partition and partition.endswith("transfer bundle")
    empty = run("devices", "--bundles", str(tmp_path))
    assert empty.exit_code == 0 and "no bundle" in empty.stdout


def test_predict_json_prints_one_object_per_graph() -> None:
    result = run("predict", "resnet50", "--batch", "8", "--format", "json")
    assert result.exit_code == 0, result.output
    (data,) = json_lines(result)
    assert {"model", "total_ms", "low_ms", "high_ms", "layers", "unsupported"} <= set(data)
    assert data["model"] == "resnet50" and data["batch"] == 8
    assert data["precision"] == "fp16" and data["mode"] == "cudagraph"  # the CLI's defaults
    assert data["low_ms"] <= data["total_ms"] <= data["high_ms"]
    assert len(data["layers"]) == len(load_zoo_graph("resnet50").nodes)


def test_predict_two_paths_gives_two_lines() -> None:
    result = run("predict", "resnet50", "gpt2", "--batch", "2", "--format", "json", "--mode", "eager")
    assert result.exit_code == 0, result.output
    lines = json_lines(result)
    assert [x["model"] for x in lines] == ["resnet50", "gpt2"]
    assert all(x["mode"] == "eager" and x["batch"] == 2 for x in lines)
    assert lines[1]["unsupported"]  # gpt2's cat and arange are listed, not dropped


def test_predict_csv_prints_a_header_and_a_row() -> None:
    result = run("predict", "resnet50", "--batch", "8", "--format", "csv", "--precision", "bf16")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    rows = [r for r in rows if r]
    assert rows[0] == ["model", "device", "batch", "precision", "mode", "total_ms", "low_ms", "high_ms",
                       "unsupported_ops", "host"]
    assert len(rows) == 2
    row = dict(zip(rows[0], rows[1]))
    assert (row["model"], row["device"], row["batch"], row["precision"]) == ("resnet50", "nvidia-h200", "8", "bf16")
    (data,) = json_lines(run("predict", "resnet50", "--batch", "8", "--format", "json", "--precision", "bf16"))
    assert float(row["total_ms"]) == pytest.approx(data["total_ms"], abs=1e-4)
    assert row["unsupported_ops"] == "0"


def test_predict_table_shows_warnings_for_fallbacks() -> None:
    result = run("predict", "gpt2")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("gpt2")
    assert "warning:" in result.stdout and "roofline" in result.stdout


def test_an_unknown_model_name_fails_naming_it() -> None:
    result = run("predict", "resnet51", "--format", "json")
    assert result.exit_code != 0
    assert "'resnet51'" in result.output and "resnet50" in result.output  # names it and the choices
    assert result.stdout.strip() == ""


def test_one_bad_path_does_not_hide_the_good_ones() -> None:
    result = run("predict", "resnet18", "resnet51", "--format", "json")
    assert result.exit_code != 0
    assert [x["model"] for x in json_lines(result)] == ["resnet18"]
    assert "1 of 2 graph(s) could not be predicted" in result.output


def test_an_unknown_device_fails_naming_the_known_ones() -> None:
    result = run("predict", "resnet50", "--device", "mi300x")
    assert result.exit_code != 0
    assert "mi300x" in result.output and "nvidia-h200" in result.output


def test_a_catalog_device_never_measured_is_predicted_from_its_datasheet() -> None:
    result = run("predict", "resnet50", "--device", "l4", "--format", "json")
    assert result.exit_code == 0, result.output
    (data,) = json_lines(result)
    assert data["device"] == "nvidia-l4" and data["provenance"] == "transferred"
    assert any(w.startswith("transferred:") for w in data["warnings"])


def test_a_missing_bundle_fails_clearly(tmp_path: Path) -> None:
    result = run("predict", "resnet50", "--bundle", str(tmp_path / "none"))
    assert result.exit_code != 0
    assert "metadata.json is missing" in result.output


@pytest.mark.parametrize("batch", ["0", "70000", "two"])
def test_a_bad_batch_is_refused(batch: str) -> None:
    result = run("predict", "resnet50", "--batch", batch)
    assert result.exit_code == 2 and "--batch" in result.output


def test_a_json_ir_file_predicts_as_the_zoo_name(tmp_path: Path) -> None:
    path = tmp_path / "my_resnet.json"
    load_zoo_graph("resnet50").save(path)
    args = ("--batch", "4", "--format", "json", "--precision", "fp32", "--mode", "eager")
    from_file = run("predict", str(path), *args)
    from_zoo = run("predict", "resnet50", *args)
    assert from_file.exit_code == 0 and from_zoo.exit_code == 0, from_file.output + from_zoo.output
    (a,), (b,) = json_lines(from_file), json_lines(from_zoo)
    assert a["total_ms"] == b["total_ms"]
    assert a["layers"] == b["layers"]


@pytest.mark.parametrize("content,message", [
    (b'{"name": "x", "nodes": [', "not valid JSON"),
    (b'{"name": "x", "nodes": [{"name": "a", "op": "relu", "kind": "kernel"}]}', "needs a family"),
    (b"\xff\xfe\x00\x01garbage", "broken.json"),
])
def test_a_corrupt_json_file_gives_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    result = run("predict", str(path))
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert f"error: {path}" in result.output and message in result.output


def test_a_missing_json_file_is_named(tmp_path: Path) -> None:
    result = run("predict", str(tmp_path / "absent.json"))
    assert result.exit_code != 0 and "absent.json: no such graph file" in result.output


def predictions_frame() -> pd.DataFrame:
    """Hand-made leave-one-model-out predictions: within +-10% is easy to count by eye."""
    return pd.DataFrame([
        # mode, precision, batch, measured, ours, roofline, flops
        ("cudagraph", "fp16", 1, 1.00, 1.05, 0.20, 2.00),  # ours within
        ("cudagraph", "fp16", 1, 2.00, 2.50, 0.50, 2.10),  # ours out (25%), flops within (5%)
        ("cudagraph", "fp16", 8, 4.00, 3.70, 1.00, 8.00),  # ours within (7.5%)
        ("eager", "fp16", 1, 10.0, 9.50, 0.20, 5.00),     # ours within (5%)
        ("eager", "fp16", 1, 8.00, 12.0, 0.20, 8.50),     # ours out (50%), flops within (6.25%)
        ("eager", "fp16", 1, 5.00, 5.20, 0.10, 1.00),     # ours within (4%)
    ], columns=["mode", "precision", "batch", "measured_ms", "predicted_ms", "roofline_ms", "flops_ms"]).assign(
        model=["m1", "m2", "m1", "m1", "m2", "m3"])


def test_score_counts_within_ten_percent_per_group_and_overall() -> None:
    table, overall = score(predictions_frame())
    assert len(table) == 3  # (cudagraph, fp16, 1), (cudagraph, fp16, 8), (eager, fp16, 1)
    first = table[(table["mode"] == "cudagraph") & (table["batch"] == 1)].iloc[0]
    assert first["runs"] == 2
    assert first["latpred within10"] == pytest.approx(0.5)
    assert first["latpred MAPE"] == pytest.approx((0.05 + 0.25) / 2)
    assert first["roofline within10"] == 0.0
    assert first["flops-proportional within10"] == pytest.approx(0.5)
    eager = table[table["mode"] == "eager"].iloc[0]
    assert eager["runs"] == 3 and eager["latpred within10"] == pytest.approx(2 / 3)
    by = {(r["mode"], r["method"]): r for r in overall.to_dict("records")}
    assert set(by) == {(m, method) for m in ("cudagraph", "eager") for method in METHODS.values()}
    assert by["cudagraph", "latpred"]["within10"] == pytest.approx(2 / 3)
    assert by["cudagraph", "latpred"]["runs"] == 3
    assert by["eager", "latpred"]["median APE"] == pytest.approx(0.05)
    assert by["eager", "flops-proportional"]["within10"] == pytest.approx(1 / 3)
    assert by["eager", "roofline"]["MAPE"] == pytest.approx(np.mean([0.98, 0.975, 0.98]))


def test_scatter_plot_writes_a_png(tmp_path: Path) -> None:
    path = scatter_plot(predictions_frame(), tmp_path / "plots" / "scatter.png")
    assert path == tmp_path / "plots" / "scatter.png"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5_000  # a real figure, not an empty file
