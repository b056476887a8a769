"""The collectors' commands through the ``latpred`` root: device fingerprint, collect's refusals,
whole-model runs into the live folder, and the dataset card."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from collectors.fingerprint import read_fingerprint
from collectors.zoo_models import ZOO, ZooModel
from latpred import main
from predictor.catalogue import get_family
from predictor.model_run_schema import MODEL_RUNS_FOLDER

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


def test_collect_help_lists_every_measuring_step_without_torch() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom latpred import main\n"
            "r = CliRunner().invoke(main, ['collect', '--help'])\nprint(r.exit_code, 'torch' in sys.modules)\n"
            "print(r.output)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    first, rest = out.stdout.split("\n", 1)
    assert first == "0 False"
    for step in ("shapes", "graphs", "ops", "models", "profile", "card"):
        assert f"  {step} " in rest, rest


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


@pytest.fixture
def tiny_zoo(monkeypatch: pytest.MonkeyPatch) -> str:
    """A zoo model that builds in milliseconds without torchvision."""
    def build() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten())

    monkeypatch.setitem(ZOO, "tiny-cnn", ZooModel("tiny-cnn", "vision", build, image_size=8))
    return "tiny-cnn"


def test_collect_models_writes_interleaved_runs_into_the_live_folder(runner: CliRunner, tmp_path: Path,
                                                                     tiny_zoo: str) -> None:
    args = ["collect", "models", "--device", "cpu", "--out", str(tmp_path), "--models", tiny_zoo,
            "--precisions", "fp32", "--rounds", "2", "--reps", "2"]
    first = runner.invoke(main, [*args, "--batches", "1,2"])
    assert first.exit_code == 0, first.output
    assert "eager: 2 rows" in first.output and "models: 2 rows written, 0 already on disk" in first.output
    dataset = tmp_path / read_fingerprint("cpu").device_id
    (shard,) = sorted((dataset / MODEL_RUNS_FOLDER).glob("part-*.parquet"))  # the one live folder
    rows = pd.read_parquet(shard)
    assert sorted(rows["run_id"]) == [f"tiny-cnn|b{b}|fp32|eager|interleaved-all" for b in (1, 2)]
    assert (rows["repetitions"] == 4).all()
    # resumed by run id: a unit on disk is not measured again, a new batch is
    again = runner.invoke(main, [*args, "--batches", "1,2,4"])
    assert again.exit_code == 0, again.output
    assert "models: 1 rows written, 2 already on disk" in again.output
    assert len(list((dataset / MODEL_RUNS_FOLDER).glob("part-*.parquet"))) == 2
    log = [json.loads(line) for line in (dataset / "sweep_log.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["measured"], e["settings"]["protocol"]) for e in log] == [
        ("models", 2, "interleaved-all"), ("models", 1, "interleaved-all")]


def test_card_says_which_runs_are_live_and_which_are_archived(runner: CliRunner, tmp_path: Path,
                                                               tiny_zoo: str) -> None:
    collected = runner.invoke(main, ["collect", "models", "--device", "cpu", "--out", str(tmp_path), "--models",
                                     tiny_zoo, "--batches", "1,2", "--precisions", "fp32", "--rounds", "1"])
    assert collected.exit_code == 0, collected.output
    dataset = tmp_path / read_fingerprint("cpu").device_id
    # an earlier protocol's rows of the same units, archived: run ids without a protocol suffix
    old = pd.read_parquet(dataset / MODEL_RUNS_FOLDER / "part-00000.parquet")
    old["run_id"] = old["run_id"].str.replace("|interleaved-all", "", regex=False)
    (dataset / "archive" / "sequential").mkdir(parents=True)
    old.to_parquet(dataset / "archive" / "sequential" / "part-00000.parquet", index=False)
    (dataset / "archive" / "README.md").write_text("Drift biased the sequential rows.\n")
    result = runner.invoke(main, ["collect", "card", str(dataset)])
    assert result.exit_code == 0, result.output
    card = (dataset / "README.md").read_text()
    assert "- live rows, in `models/`: 2 (2 measured) over 1 models; the only rows training reads" in card
    assert "- protocol, by run-id suffix: `interleaved-all` (2)" in card
    assert "device time in the sweep log for this protocol:" in card and "over 1 run(s)" in card
    assert "| archive/sequential/ | 2 | sequential | eager |" in card and "| 2 of 2 |" in card
    assert "Drift biased the sequential rows." in card
    # a CPU's card speaks of what a CPU runs: eager forwards, calls timed whole, no CUDA graphs or events
    assert "- median CV: eager " in card and "Latency in ms (eager), by model" in card
    assert "On a CPU a call computes its kernels before it returns" in card
    assert "cudagraph" not in card and "CUDA graph" not in card


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible")
def test_collect_models_refuses_cudagraph_without_a_gpu_before_writing(runner: CliRunner, tmp_path: Path,
                                                                      tiny_zoo: str) -> None:
    result = runner.invoke(main, ["collect", "models", "--device", "cpu", "--out", str(tmp_path),
                                  "--models", tiny_zoo, "--modes", "cudagraph"])
    assert result.exit_code != 0 and "need a CUDA GPU" in result.output
    assert not list(tmp_path.iterdir())
    result = runner.invoke(main, ["collect", "models", "--device", "cpu", "--out", str(tmp_path),
                                  "--models", tiny_zoo, "--modes", "eager,jit"])
    assert result.exit_code != 0 and "jit" in result.output and "cudagraph" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible")
def test_collect_profile_needs_a_gpu(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "profile", "--out", str(tmp_path / "profile")])
    assert result.exit_code != 0 and "needs a CUDA GPU" in result.output
    assert not list(tmp_path.iterdir())
    unknown = runner.invoke(main, ["collect", "profile", "--out", str(tmp_path), "--models", "resnet18"])
    assert unknown.exit_code != 0 and "not in the measured zoo" in unknown.output


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


def test_collect_ops_refuses_an_unknown_variant_or_layout(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["collect", "ops", "--out", str(tmp_path), "--families", "conv2d",
                                  "--variants", "no-bias"])
    assert result.exit_code != 0 and "no-bias" in result.output and "nobias" in result.output
    result = runner.invoke(main, ["collect", "ops", "--out", str(tmp_path), "--families", "conv2d",
                                  "--layouts", "nwhc"])
    assert result.exit_code != 0 and "nwhc" in result.output and "nhwc" in result.output


def test_nas_shapes_sweep_and_compact(runner: CliRunner, tmp_path: Path) -> None:
    refused = runner.invoke(main, ["collect", "shapes", "--out", str(tmp_path), "--nas-seeds", "140-1001"])
    assert refused.exit_code != 0 and "140-999" in refused.output and "training seeds only" in refused.output
    assert not (tmp_path / "layer_shapes.json").exists()

    made = runner.invoke(main, ["collect", "shapes", "--out", str(tmp_path), "--nas-seeds", "1002"])
    assert made.exit_code == 0, made.output
    assert "nas-1002 (" in made.output
    catalogue = json.loads((tmp_path / "layer_shapes.json").read_text())
    assert catalogue["meta"]["nas_seeds"] == "1002"
    assert all(s["layout"] and s["sources"] == {"nas-1002": s["sources"]["nas-1002"]} for s in catalogue["shapes"])
    other = runner.invoke(main, ["collect", "shapes", "--out", str(tmp_path), "--nas-seeds", "1003"])
    assert other.exit_code != 0 and "another shape catalogue" in other.output  # the first one stays
    assert json.loads((tmp_path / "layer_shapes.json").read_text()) == catalogue

    swept = runner.invoke(main, ["collect", "ops", "--device", "cpu", "--out", str(tmp_path), "--random-shapes", "0",
                                 "--families", "activation,binary", "--precisions", "fp32", "--target", "6",
                                 "--max-bytes", "2e6", "--flush-every", "2"])
    assert swept.exit_code == 0, swept.output
    dataset = tmp_path / read_fingerprint("cpu").device_id
    ops = sorted((dataset / "ops").glob("part-*.parquet"))
    assert len(ops) == 3
    before = pd.concat([pd.read_parquet(p) for p in ops], ignore_index=True)
    # each real shape measured in the layout its node runs in, and only in that one
    layout_of = {(s["family"], s["variant"], json.dumps(s["params"], sort_keys=True)): s["layout"]
                 for s in catalogue["shapes"]}
    real = before[before["source"].str.startswith("model:")]
    assert len(real)
    for row in real.itertuples():
        params = {k: int(getattr(row, k)) for k in get_family(row.family).params}
        assert row.layout == layout_of[(row.family, row.variant, json.dumps(params, sort_keys=True))]

    compacted = runner.invoke(main, ["collect", "compact", str(dataset)])
    assert compacted.exit_code == 0, compacted.output
    assert "3 shard(s) -> 1, 6 rows" in compacted.output
    after = sorted((dataset / "ops").glob("part-*.parquet"))
    assert len(after) == 1
    pd.testing.assert_frame_equal(pd.read_parquet(after[0]), before)
