"""Sweeps record failures, survive SIGKILL without losing or duplicating rows, and flush on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from collectors.fingerprint import read_fingerprint
from collectors.layer_shapes import load_shapes
from collectors.op_config import OpConfig
from collectors.op_measure import OpMeasurer
from collectors.sampler import SamplerSettings, sample_configs
from collectors.shards import ShardStore
from collectors.sweep import run_sweep
from collectors.timing import CpuTimer, RepetitionRule
from predictor.dataset_schema import validate_rows

REPO = Path(__file__).resolve().parents[2]
FAMILIES = ("activation", "binary", "softmax")
MAX_BYTES, MAX_FLOPS = 2e5, 1e7


@pytest.fixture(scope="module")
def measurer() -> OpMeasurer:
    return OpMeasurer(read_fingerprint("cpu"),
                      CpuTimer(RepetitionRule(min_reps=3, max_reps=5, group=1), rep_target_us=200))


def test_failing_config_is_recorded_not_fatal(tmp_path: Path, measurer: OpMeasurer) -> None:
    good = OpConfig.make("binary", dict(elements=64), "add")
    bad = OpConfig.make("conv2d", dict(c_in=4, c_out=4, h=8, w=8, kernel=3, stride=1, groups=3),
                        layout="nchw")
    other = OpConfig.make("activation", dict(elements=64), "relu", precision="bf16", batch=2)
    store = ShardStore(tmp_path, validate_rows)

    report = run_sweep([good, bad, other], store, measurer, progress=False)

    assert (report.planned, report.measured, report.failed, report.stopped) == (3, 3, 1, "complete")
    rows = store.read().set_index("config_id")
    assert set(rows.index) == {good.config_id, bad.config_id, other.config_id}
    assert rows.loc[bad.config_id, "status"] == "failed"
    assert "groups" in rows.loc[bad.config_id, "error"]
    assert (rows.loc[[good.config_id, other.config_id], "status"] == "ok").all()
    assert rows.loc[other.config_id, "precision"] == "bf16"


def test_resumed_sweep_skips_what_is_on_disk(tmp_path: Path, measurer: OpMeasurer) -> None:
    configs = [OpConfig.make("binary", dict(elements=16 * i), "mul") for i in range(1, 6)]
    store = ShardStore(tmp_path, validate_rows)
    first = run_sweep(configs[:3], store, measurer, flush_every=2, progress=False)
    assert first.measured == 3 and len(store.shards()) == 2  # a shard of 2, then the rest of 1

    calls: list[str] = []

    def counting(cfg: OpConfig) -> dict:
        calls.append(cfg.config_id)
        return measurer(cfg)

    second = run_sweep(configs, store, counting, progress=False)
    assert (second.already_done, second.measured) == (3, 2)
    assert calls == [c.config_id for c in configs[3:]]
    frame = store.read()
    assert sorted(frame["config_id"]) == sorted(c.config_id for c in configs)


def test_time_budget_stops_cleanly(tmp_path: Path, measurer: OpMeasurer) -> None:
    configs = [OpConfig.make("binary", dict(elements=8 * i), "add") for i in range(1, 30)]
    store = ShardStore(tmp_path, validate_rows)
    report = run_sweep(configs, store, measurer, budget_s=0.0, progress=False)
    assert report.stopped == "budget" and report.measured == 0
    assert store.shards() == []


def test_config_missing_a_parameter_is_recorded_not_fatal(tmp_path: Path, measurer: OpMeasurer) -> None:
    bad = OpConfig.make("conv2d", dict(c_in=4, c_out=4), layout="nchw")
    store = ShardStore(tmp_path, validate_rows)
    report = run_sweep([bad], store, measurer, progress=False)
    assert report.failed == 1


# --- the real CLI in a subprocess -------------------------------------------------------------


def cli(out: Path, target: int, flush_every: int) -> list[str]:
    return [sys.executable, "-m", "latpred", "collect", "ops", "--device", "cpu",
            "--out", str(out), "--families", ",".join(FAMILIES), "--target", str(target),
            "--max-bytes", str(MAX_BYTES), "--max-flops", str(MAX_FLOPS),
            "--flush-every", str(flush_every)]


def default_sigint() -> None:
    # A shell without job control starts background jobs with SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler; the child should see Ctrl-C like a terminal would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def dataset_root(tmp_path: Path) -> Path:
    shutil.copy(REPO / "datasets" / "layer_shapes.json", tmp_path / "layer_shapes.json")
    return tmp_path


@pytest.fixture
def ops_dir(dataset_root: Path) -> Path:
    return dataset_root / read_fingerprint("cpu").device_id / "ops"


@pytest.fixture
def popen() -> Iterator[list[subprocess.Popen]]:
    """Started processes, killed at teardown if a failed assertion left them running."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def shard_rows(ops: Path) -> pd.DataFrame:
    shards = sorted(ops.glob("part-*.parquet"))
    return pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True) if shards else pd.DataFrame()


def wait_for(condition, proc: subprocess.Popen, timeout: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the sweep ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out waiting for the sweep"
        time.sleep(0.02)


def test_sigkill_and_restart_lose_and_duplicate_nothing(
        dataset_root: Path, ops_dir: Path, popen: list[subprocess.Popen]) -> None:
    target = 300  # about 5 s of measuring: long enough to be cut after two shards of 10
    proc = subprocess.Popen(cli(dataset_root, target, 10), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    popen.append(proc)
    wait_for(lambda: len(list(ops_dir.glob("part-*.parquet"))) >= 2, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    cut = shard_rows(ops_dir)
    assert 20 <= len(cut) < target, "the run was not cut mid-way"
    assert len(cut) % 10 == 0  # only whole shards: every flush holds exactly flush_every rows
    # A temporary file as a killed write leaves it: it must never be read as data.
    (ops_dir / "part-00999.parquet.tmp").write_bytes(b"half a shard")

    done = subprocess.run(cli(dataset_root, target, 10), cwd=REPO, capture_output=True, text=True,
                          check=True, timeout=300)
    match = re.search(r"ops: (\d+) measured \((\d+) failed\), (\d+) already on disk", done.stdout)
    assert match, done.stdout
    assert int(match[3]) == len(cut) and int(match[1]) == target - len(cut)

    expected = sample_configs(
        load_shapes(dataset_root / "layer_shapes.json"),
        SamplerSettings(seed=0, target_configs=target, families=FAMILIES, max_bytes=MAX_BYTES,
                        max_flops=MAX_FLOPS),
    )
    frame = shard_rows(ops_dir)
    assert len(frame) == frame["config_id"].nunique()
    assert set(frame["config_id"]) == {c.config_id for c in expected}
    assert set(cut["config_id"]) <= set(frame["config_id"])
    assert len(ShardStore(ops_dir, validate_rows).read()) == target
    assert [p.name for p in ops_dir.glob("*.tmp")] == ["part-00999.parquet.tmp"]

    log = [json.loads(line) for line in (ops_dir.parent / "sweep_log.jsonl").read_text().splitlines()]
    assert log[-1]["stopped"] == "complete" and log[-1]["already_done"] == len(cut)


def test_sigint_flushes_and_exits_cleanly(
        dataset_root: Path, ops_dir: Path, popen: list[subprocess.Popen]) -> None:
    target = 3000  # a minute or more of measuring: SIGINT surely lands mid-sweep
    proc = subprocess.Popen(cli(dataset_root, target, 100_000), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    popen.append(proc)
    hosts = ops_dir.parent / "hosts"
    wait_for(lambda: any(hosts.glob("*.json")), proc)  # the probe before the sweep: measuring starts next
    time.sleep(4.0)
    assert proc.poll() is None and not list(ops_dir.glob("part-*.parquet"))  # nothing flushed yet
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)

    assert proc.returncode == 0, stderr
    assert "stopped: interrupted" in stdout
    frame = ShardStore(ops_dir, validate_rows).read()
    assert 0 < len(frame) < target
    assert len(frame) == frame["config_id"].nunique()
    last = json.loads((ops_dir.parent / "sweep_log.jsonl").read_text().splitlines()[-1])
    assert last["stopped"] == "interrupted"
    assert last["measured"] == len(frame)
