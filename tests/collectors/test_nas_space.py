"""The NAS suite: a deterministic generator of architectures in six spaces, each built and run on
the CPU, split by seed; the torch importer's view of the fused transformer layers they hold; and
``latpred collect nas`` writing whole-model rows to ``<out>/<device>/nas`` and resuming."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from collectors.fingerprint import read_fingerprint
from collectors.model_runs import measure_models
from collectors.nas_space import (
    DEFAULT_SEEDS,
    FLOPS_RANGE,
    SPACES,
    TRAIN_SEEDS_FROM,
    NasModel,
    arch_spec,
    build,
    example_input,
    format_seeds,
    input_kind,
    model_name,
    parse_seeds,
    seed_of,
    spec_flops,
    spec_hash,
    split,
)
from latpred import main
from predictor.dataset_schema import DatasetSchemaError
from predictor.model_run_schema import NAS_RUNS_FOLDER, validate_model_runs

REPO = Path(__file__).resolve().parents[2]
#: sha256 of the specs of seeds 0..143: a change to the generator changes the suite, and must be
#: made on purpose (regenerate datasets/suites/nas and re-measure).
PINNED_HASH = "287acc49d9779e250d7f6f9ccb6c83722560d4f85e4c9874103e36908772e4e9"
#: two architectures that run in milliseconds on the CPU (an MBConv CNN and a transformer encoder)
FAST_SEEDS = "24-25"


def test_the_generator_is_deterministic_and_pinned() -> None:
    assert arch_spec(17) == arch_spec(17)
    assert arch_spec(17) != arch_spec(23)
    assert spec_hash(DEFAULT_SEEDS) == PINNED_HASH
    # a fresh interpreter (another hash seed) draws the same specs
    code = "from collectors.nas_space import spec_hash; print(spec_hash(range(144)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert out.stdout.strip() == PINNED_HASH


def test_specs_are_plain_json_within_their_flops_budget() -> None:
    for seed in DEFAULT_SEEDS:
        spec = arch_spec(seed)
        assert json.loads(json.dumps(spec)) == spec
        assert spec["space"] == SPACES[seed % 6]
        low, high = FLOPS_RANGE[spec["space"]]
        assert low <= spec_flops(spec) <= high, (seed, spec_flops(spec))


def test_transformer_specs_cover_both_fast_and_slow_paths() -> None:
    specs = [arch_spec(s) for s in DEFAULT_SEEDS if s % 6 == SPACES.index("transformer")]
    assert all(s["d_model"] % s["heads"] == 0 and 64 <= s["d_model"] <= 768 for s in specs)
    assert all(32 <= s["seq"] <= 512 and 2 <= s["layers"] <= 12 for s in specs)
    heads = [s["heads"] % 2 for s in specs]
    assert 0 < sum(heads) < len(heads)  # odd heads (slow path) and even heads (fast path) both
    assert {s["norm_first"] for s in specs} == {True, False}
    assert {s["activation"] for s in specs} == {"relu", "gelu"}


def test_mbconv_specs_mix_activations_and_squeeze_excite() -> None:
    blocks = [b for s in DEFAULT_SEEDS if s % 6 == 0 for b in arch_spec(s)["blocks"]]
    assert {b["act"] for b in blocks} == {"relu", "silu", "hardswish", "gelu"}
    assert {b["se"] for b in blocks} == {True, False}
    assert {b["kernel"] for b in blocks} == {3, 5} and {b["stride"] for b in blocks} == {1, 2}


@pytest.mark.parametrize("seed", range(6))
def test_every_space_builds_and_runs_on_the_cpu(seed: int) -> None:
    spec = arch_spec(seed)
    model = build(spec).eval()
    x = example_input(spec, 2)
    with torch.inference_mode():
        y = model(x)
    if input_kind(spec) == "sequence":
        assert x.shape == (2, spec["seq"], spec["d_model"]) and y.shape == x.shape
    else:
        assert x.shape == (2, 3, spec["image"], spec["image"]) and y.shape == (2, spec["classes"])
    assert torch.isfinite(y).all()


def test_splits_are_disjoint_even_per_space_and_never_both() -> None:
    dev = {s for s in DEFAULT_SEEDS if split(s) == "nas-dev"}
    test = {s for s in DEFAULT_SEEDS if split(s) == "nas-test"}
    assert dev and test and not dev & test and dev | test == set(DEFAULT_SEEDS)
    for space in range(6):
        in_space = [s for s in DEFAULT_SEEDS if s % 6 == space]
        assert sum(s in dev for s in in_space) == sum(s in test for s in in_space) == 12


def test_training_architectures_have_seeds_of_their_own() -> None:
    train = [json.loads(line) for line in (REPO / "datasets/suites/nas-train/archs.jsonl").read_text().splitlines()]
    seeds = {a["seed"] for a in train}
    assert len(seeds) == 72 and min(seeds) >= TRAIN_SEEDS_FROM and not seeds & set(DEFAULT_SEEDS)
    assert {a["split"] for a in train} == {"nas-train"} == {split(s) for s in seeds}
    assert {a["space"] for a in train} == set(SPACES)  # every space, as in the scored suites


def test_names_and_seed_lists_round_trip() -> None:
    assert model_name(17) == "nas-17" and seed_of("nas-17") == 17
    with pytest.raises(ValueError, match="not a NAS"):
        seed_of("resnet34")
    assert parse_seeds("0-3,7,5-6,3") == [0, 1, 2, 3, 7, 5, 6]
    assert format_seeds(parse_seeds("0-143")) == "0-143" and format_seeds([3, 5, 9, 10, 11]) == "3,5,9-11"
    for bad in ("", "4-2", "a", "-1"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_the_transformer_space_is_traced_as_pytorch_runs_it() -> None:
    """Even heads: each layer is one fused call (its kernels as parts); odd heads: the slow path's calls."""
    from collectors.nas_suite import trace_arch

    for seed in DEFAULT_SEEDS[1::6][:6]:
        spec, graph = arch_spec(seed), trace_arch(seed)
        fused = {n.merged[0] for n in graph.nodes if n.op == "_transformer_encoder_layer_fwd"}
        if spec["heads"] % 2:
            assert not fused and sum(n.family == "sdpa" for n in graph.nodes) == spec["layers"]
            assert sum(n.op == "multi_head_attention_forward" for n in graph.nodes) == 7 * spec["layers"]
        else:
            assert len(fused) == spec["layers"]
        assert graph.meta["split"] == split(seed) and graph.meta["traced_dtype"] == "float32"


def test_measure_models_takes_nas_architectures() -> None:
    seed = 24
    rows = measure_models(read_fingerprint("cpu"), {model_name(seed): NasModel(seed)}, (1,), ("fp32",), "eager",
                          rounds=1, reps=2)
    assert [(r["model"], r["model_kind"], r["repetitions"]) for r in rows] == [("nas-24", "mbconv", 2)]
    assert len(validate_model_runs(pd.DataFrame(rows))) == 1
    with pytest.raises(DatasetSchemaError, match="model_kind"):
        validate_model_runs(pd.DataFrame(rows).assign(model_kind="not-a-space"))


def test_collect_nas_writes_rows_to_the_nas_folder_and_resumes(tmp_path: Path) -> None:
    args = ["collect", "nas", "--out", str(tmp_path), "--device", "cpu", "--seeds", FAST_SEEDS, "--batches", "1",
            "--precisions", "fp32", "--modes", "eager", "--rounds", "1", "--reps", "1", "--group", "1"]
    runner = CliRunner()
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "2 rows written (0 failed), 0 already on disk" in first.output
    folder = tmp_path / read_fingerprint("cpu").device_id
    shards = sorted((folder / NAS_RUNS_FOLDER).glob("part-*.parquet"))
    assert len(shards) == 2  # a shard per group, written as the group is done
    frame = validate_model_runs(pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True))
    assert sorted(frame["model"]) == ["nas-24", "nas-25"]
    assert sorted(frame["model_kind"]) == ["mbconv", "transformer"]
    assert (frame["run_id"].str.endswith("|b1|fp32|eager|interleaved-all")).all()
    assert not (folder / "models").exists()  # NAS runs never enter the training folder
    log = [json.loads(line) for line in (folder / "sweep_log.jsonl").read_text().splitlines()]
    assert [entry["settings"]["seeds"] for entry in log] == [[24], [25]]
    assert all(entry["kind"] == "nas" for entry in log)

    again = runner.invoke(main, args)
    assert again.exit_code == 0, again.output
    assert "0 rows written (0 failed), 2 already on disk" in again.output
    assert len(list((folder / NAS_RUNS_FOLDER).glob("part-*.parquet"))) == 2


def test_collect_nas_stops_at_its_time_budget_and_refuses_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["collect", "nas", "--out", str(tmp_path), "--device", "cpu", "--seeds", FAST_SEEDS, "--batches", "1",
            "--precisions", "fp32", "--rounds", "1", "--reps", "1"]
    stopped = runner.invoke(main, [*base, "--modes", "eager", "--max-seconds", "0"])
    assert stopped.exit_code == 0, stopped.output
    assert "stopped: budget" in stopped.output and "0 rows written" in stopped.output
    no_gpu = runner.invoke(main, [*base, "--modes", "eager,cudagraph"])
    if not torch.cuda.is_available():
        assert no_gpu.exit_code != 0 and "cudagraph runs need a CUDA GPU" in no_gpu.output
    bad = runner.invoke(main, [*base, "--modes", "eager", "--seeds", "5-2"])
    assert bad.exit_code != 0 and "bad seed range" in bad.output


def test_an_architecture_that_fails_gets_failed_rows_and_the_others_are_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from collectors.campaign import collect_nas

    original = NasModel.build

    def build_or_fail(self: NasModel) -> torch.nn.Module:
        if self.seed == 25:
            raise RuntimeError("CUDA out of memory (pretend)")
        return original(self)

    monkeypatch.setattr(NasModel, "build", build_or_fail)
    said: list[str] = []
    report = collect_nas(tmp_path, "cpu", [24, 25], (1,), ("fp32",), ("eager",), group=2, rounds=1, reps=1,
                         say=said.append)
    assert (report.measured, report.failed) == (1, 1)
    assert any("one by one" in line for line in said) and any("nas-25 [eager] failed" in line for line in said)
    folder = tmp_path / read_fingerprint("cpu").device_id / NAS_RUNS_FOLDER
    frame = validate_model_runs(pd.concat([pd.read_parquet(s) for s in folder.glob("part-*.parquet")]))
    assert dict(zip(frame["model"], frame["status"])) == {"nas-24": "ok", "nas-25": "failed"}
    assert frame.set_index("model").loc["nas-25", "error"].startswith("RuntimeError: CUDA out of memory")
    again = collect_nas(tmp_path, "cpu", [24, 25], (1,), ("fp32",), ("eager",), group=2, rounds=1, reps=1)
    assert again.measured == again.failed == 0 and again.already_done == 2  # a failure is not retried


def test_a_run_stopped_by_its_budget_counts_the_groups_left_as_planned_not_on_disk(tmp_path: Path) -> None:
    from collectors.campaign import collect_nas

    first = collect_nas(tmp_path, "cpu", [24], (1,), ("fp32",), ("eager",), group=1, rounds=1, reps=1)
    assert (first.planned, first.already_done, first.measured) == (1, 0, 1)
    # nas-24 is on disk; nas-25's group would start past a budget of 0 s, so it and nas-26's are left for later
    stopped = collect_nas(tmp_path, "cpu", [24, 25, 26], (1,), ("fp32",), ("eager",), group=1, rounds=1, reps=1,
                          max_seconds=0.0)
    assert stopped.stopped == "budget"
    assert (stopped.planned, stopped.already_done, stopped.measured) == (3, 1, 0)
