"""The ``latpred`` command line: device fingerprint, collect's refusals, and the dataset card."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from collectors.fingerprint import read_fingerprint
from predictor.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_device_cpu(runner: CliRunner) -> None:
    result = runner.invoke(main, ["device", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "kind: cpu" in result.output
    assert read_fingerprint("cpu").device_id in result.output


def test_device_json(runner: CliRunner) -> None:
    result = runner.invoke(main, ["device", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["kind"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert len(info["fingerprint"]) == 16 and info["device_id"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible")
def test_device_cuda_without_gpu_fails(runner: CliRunner) -> None:
    result = runner.invoke(main, ["device", "--device", "cuda"])
    assert result.exit_code != 0
    assert "no CUDA GPU" in result.output


def test_root_cli_does_not_import_torch() -> None:
    code = "import predictor.cli, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_help_lists_commands_without_torch() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom predictor.cli import main\n"
            "r = CliRunner().invoke(main, ['--help'])\nprint(r.exit_code, 'torch' in sys.modules)\n"
            "print(r.output)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    first, rest = out.stdout.split("\n", 1)
    assert first == "0 False"
    assert "collect" in rest and "device" in rest


def test_collect_ops_refuses_an_unknown_precision(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "ops", "--device", "cpu", "--out", str(tmp_path),
                                  "--precisions", "fp8"])
    assert result.exit_code != 0
    assert "fp8" in result.output and "fp16" in result.output


def test_collect_ops_refuses_an_unknown_family(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "ops", "--device", "cpu", "--out", str(tmp_path),
                                  "--families", "conv3d"])
    assert result.exit_code != 0 and "conv3d" in result.output


def test_collect_ops_without_shapes_says_how_to_get_them(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "ops", "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "layer_shapes.json" in result.output
    assert "latpred collect shapes" in result.output
    assert not list(tmp_path.iterdir())  # refused before writing anything


def test_collect_models_refuses_a_held_out_model(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "models", "--device", "cpu", "--out", str(tmp_path),
                                  "--models", "resnet18"])
    assert result.exit_code != 0
    assert "resnet18" in result.output and "not in the measured zoo" in result.output
    assert not list(tmp_path.iterdir())


def test_collect_card_counts_rows(runner: CliRunner, tmp_path: Path) -> None:
    shutil.copy(REPO / "datasets" / "layer_shapes.json", tmp_path / "layer_shapes.json")
    swept = runner.invoke(main, ["collect", "ops", "--device", "cpu", "--out", str(tmp_path),
                                 "--families", "binary,mean", "--precisions", "fp32,bf16",
                                 "--target", "7", "--max-bytes", "2e5", "--max-flops", "1e7",
                                 "--flush-every", "3"])
    assert swept.exit_code == 0, swept.output
    assert "7 measured" in swept.output

    dataset = tmp_path / read_fingerprint("cpu").device_id
    result = runner.invoke(main, ["collect", "card", str(dataset)])
    assert result.exit_code == 0, result.output
    card = (dataset / "README.md").read_text()
    assert "- rows: 7 (" in card
    assert "| binary |" in card or "| mean |" in card
    assert "Whole-model runs" in card and "none collected yet" in card


def test_collect_card_refuses_a_missing_folder(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "card", str(tmp_path / "nowhere")])
    assert result.exit_code != 0 and "nowhere" in result.output


def test_collect_ops_refuses_an_unknown_variant_or_layout(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from predictor.cli import main

    runner = CliRunner()
    result = runner.invoke(main, ["collect", "ops", "--out", str(tmp_path), "--families", "conv2d",
                                  "--variants", "no-bias"])
    assert result.exit_code != 0 and "no-bias" in result.output and "nobias" in result.output
    result = runner.invoke(main, ["collect", "ops", "--out", str(tmp_path), "--families", "conv2d",
                                  "--layouts", "nwhc"])
    assert result.exit_code != 0 and "nwhc" in result.output and "nhwc" in result.output
