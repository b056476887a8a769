"""The dataset card: what a device's dataset holds, how it was measured, how fast and how well.

Everything in the card is computed from the data, the fingerprint and the sweep log, so the
card is regenerated (``latpred collect card``) rather than edited by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from predictor.dataset_schema import validate_rows
from predictor.model_run_schema import validate_model_runs

from collectors.shards import ShardStore


def _table(frame: pd.DataFrame) -> str:
    frame = frame.reset_index()
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _sweep_log(directory: Path) -> pd.DataFrame:
    path = directory / "sweep_log.jsonl"
    if not path.exists():
        return pd.DataFrame(columns=["kind", "seconds", "measured", "failed", "stopped"])
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def card_text(directory: Path) -> str:
    """The card as Markdown."""
    fingerprint = json.loads((directory / "fingerprint.json").read_text())
    ops = ShardStore(directory / "ops", validate_rows).read()
    runs = ShardStore(directory / "models", validate_model_runs).read()
    log = _sweep_log(directory)
    op_log, model_log = log[log["kind"] == "ops"], log[log["kind"] == "models"]
    op_seconds, model_seconds = float(op_log["seconds"].sum()), float(model_log["seconds"].sum())
    ok = ops[ops["status"] == "ok"] if len(ops) else ops
    lines = [
        f"# Dataset: {fingerprint['name']} ({fingerprint['device_id']})", "",
        "Written by `latpred collect card`; regenerate it rather than editing it.", "",
        "## Device and software", "",
        *[f"- {k}: {v}" for k, v in fingerprint.items() if k != "notes" and v is not None], "",
        "## Operator rows", "",
        f"- rows: {len(ops)} ({len(ok)} measured, {len(ops) - len(ok)} failed with their reason)",
        f"- sweep time on the device: {op_seconds / 60:.1f} min over {len(op_log)} run(s); "
        f"{(op_log['measured'].sum() / op_seconds if op_seconds else 0):.1f} configurations per second",
    ]
    if len(ok):
        lines += [
            f"- kernel time: median CV {ok['cv'].median() * 100:.2f}% "
            f"(p90 {ok['cv'].quantile(0.9) * 100:.2f}%), repetitions adapt to a 2% target",
            f"- rows flagged as measured under clock throttling: {int(ok['throttled'].sum())}",
            f"- median host dispatch per eager call: {ok['dispatch_us'].median():.1f} us", "",
            "Rows per family and precision (measured / failed):", "",
            _table(pd.crosstab(ops["family"], ops["precision"], values=ops["status"],
                               aggfunc=lambda s: f"{(s == 'ok').sum()} / {(s != 'ok').sum()}")
                   .fillna("0 / 0")),
        ]
        failures = ops.loc[ops["status"] == "failed", "error"].str.split(":").str[0].value_counts()
        if len(failures):
            lines += ["", "Failure reasons:", "", _table(failures.rename("rows").to_frame())]
    lines += ["", "## Whole-model runs", ""]
    if len(runs):
        ok_runs = runs[runs["status"] == "ok"]
        lines += [
            f"- rows: {len(runs)} ({len(ok_runs)} measured) over {runs['model'].nunique()} models; "
            f"device time {model_seconds / 60:.1f} min",
            f"- median CV: eager {ok_runs.loc[ok_runs['mode'] == 'eager', 'cv'].median() * 100:.2f}%, "
            f"cudagraph {ok_runs.loc[ok_runs['mode'] == 'cudagraph', 'cv'].median() * 100:.2f}%", "",
            "Latency in ms (eager / cudagraph), by model, precision and batch:", "",
            _table(_latency_grid(runs)),
        ]
    else:
        lines.append("none collected yet")
    lines += ["", f"Total device time recorded: {(op_seconds + model_seconds) / 60:.1f} min.", "",
              METHOD]
    notes = directory / "notes.md"
    if notes.exists():
        lines += ["", notes.read_text().strip(), ""]
    return "\n".join(lines)


METHOD = """## How rows were measured

- Kernel time (`kernel_us`): a CUDA graph of N back-to-back calls (N chosen so one replay runs
  about 300 us) is replayed, each replay timed by one event pair; the per-call median is
  reported with p10/p50/p90 and the CV over replays. Replays are added five at a time until the
  CV is at most 2% (40 at most, or 1.5 s).
- Dispatch time (`dispatch_us`): host time per call when the operator is called eagerly
  back to back (not synchronised), i.e. what an eager model pays to issue it.
- Inputs are reused across replays, so inputs that fit in L2 are warm (`l2_state`).
- `fp32` is PyTorch's default (cuDNN convolutions in TF32, matmuls in FP32); `tf32` allows
  TF32 for both; the flags are recorded in every row. Layers are nn.Modules where models use
  them, with weights created on the device.
- Shapes: the layers of the zoo's models (`datasets/layer_shapes.json`), one perturbation of
  each, and log-uniform random shapes per family; each shape at three batch sizes drawn from
  1..256 whose fp32 working set is at most 3 GB and arithmetic at most 0.3 TFLOP, in every
  precision and layout. Seed 0; `latpred collect ops` redraws the same configurations.
- Whole models: eager latency is host clock from issue to completion, synchronised each
  repetition; CUDA-graph latency is the replay of one captured forward. The eager row carries a
  torch.profiler breakdown (top-level aten ops in issue order, shapes, host time, kernels)."""


def _latency_grid(runs: pd.DataFrame) -> pd.DataFrame:
    def cell(group: pd.DataFrame) -> str:
        by_mode = {r.mode: (f"{r.latency_ms:.3g}" if r.status == "ok" else "fail")
                   for r in group.itertuples()}
        return f"{by_mode.get('eager', '-')} / {by_mode.get('cudagraph', '-')}"

    cells = runs.groupby(["model", "precision", "batch"]).apply(cell, include_groups=False)
    return cells.unstack("batch").fillna("-")


def write_card(directory: Path) -> Path:
    """Write ``directory/README.md`` and return its path."""
    path = Path(directory) / "README.md"
    path.write_text(card_text(Path(directory)))
    return path
