"""The dataset card: what a device's dataset holds, how it was measured, how fast and how well.

Everything in the card is computed from the data, the fingerprint and the sweep log, so the
card is regenerated (``latpred collect card``) rather than edited by hand. The prose it cannot
compute is read from files beside the data: ``archive/README.md`` (why rows were archived) and
``notes.md`` (caveats and the history of each collection).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from collectors.shards import model_run_store, op_store
from predictor.host_profile import HOST_KINDS, HOSTS_FOLDER, HostStore
from predictor.model_run_schema import (
    ARCHIVE_FOLDER,
    HOST_RUNS_FOLDER,
    MODEL_RUNS_FOLDER,
    NAS_RUNS_FOLDER,
)

UNIT = ["model", "batch", "precision", "mode"]


def _table(frame: pd.DataFrame) -> str:
    frame = frame.reset_index()
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _sweep_log(directory: Path) -> pd.DataFrame:
    path = directory / "sweep_log.jsonl"
    if not path.exists():
        return pd.DataFrame(columns=["kind", "seconds", "measured", "failed", "stopped", "settings"])
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def card_text(directory: Path) -> str:
    """The card as Markdown."""
    fingerprint = json.loads((directory / "fingerprint.json").read_text())
    ops = op_store(directory / "ops").read()
    runs = model_run_store(directory / MODEL_RUNS_FOLDER).read()
    log = _sweep_log(directory)
    op_log, model_log = log[log["kind"] == "ops"], log[log["kind"] == "models"]
    op_seconds, model_seconds = float(op_log["seconds"].sum()), float(model_log["seconds"].sum())
    ok = ops[ops["status"] == "ok"] if len(ops) else ops
    cpu = fingerprint.get("kind") == "cpu"
    per_call_us = ok["dispatch_us"].median() if len(ok) else float("nan")
    per_call = (f"- median time per call, back to back: {per_call_us:.1f} us (on a CPU a call computes before "
                "it returns: kernel and dispatch time are both its whole time); " if cpu
                else f"- median host dispatch per eager call: {per_call_us:.1f} us; ")
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
            per_call + f"{int(ok['host_profile'].notna().sum())} rows name the host profile probed beside them", "",
            "Rows per family and precision (measured / failed):", "",
            # pandas-stubs wants a numeric aggfunc; pandas takes one that makes text
            _table(pd.crosstab(ops["family"], ops["precision"], values=ops["status"],
                               aggfunc=lambda s: f"{(s == 'ok').sum()} / {(s != 'ok').sum()}")  # type: ignore[arg-type, return-value]
                   .fillna("0 / 0")),
        ]
        failures = ops.loc[ops["status"] == "failed", "error"].str.split(":").str[0].value_counts()
        if len(failures):
            lines += ["", "Failure reasons:", "", _table(failures.rename("rows").to_frame())]
    lines += _model_runs_section(directory, runs, model_log, ("eager",) if cpu else MODES)
    lines += _nas_runs_section(directory, ("eager",) if cpu else MODES)
    lines += _hosts_section(directory)
    lines += ["", f"Total device time recorded: {(op_seconds + model_seconds) / 60:.1f} min.", "",
              CPU_METHOD if cpu else METHOD]
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
- Whole models (`latpred collect models`, one protocol): every (model, batch, precision) is
  built at once, and each round times a few forwards of every one of them in a fresh random
  order, so host and clock drift is shared by all rows; a row's latency is the median over all
  rounds. Eager latency is host clock from issue to completion, synchronised each forward;
  CUDA-graph latency is one replay of the captured forward between an event pair. Only the
  archived sequential rows carry a torch.profiler breakdown of the eager forward."""


CPU_METHOD = """## How rows were measured

- On a CPU a call computes its kernels before it returns, so an operator's time is its calls'
  wall time: N back-to-back calls (N chosen so a repetition runs about 2 ms) timed on the host
  clock, repetitions added five at a time until their CV is at most 2% (40 at most, or 1.5 s);
  the per-call median is both `kernel_us` and `dispatch_us`. torch runs on all the machine's threads.
- Shapes as on a GPU: the zoo's layers, perturbations and log-uniform random shapes per family,
  fp32 only, within the sweep's FLOP bound.
- Whole models (`latpred collect models`): eager fp32 forwards, every (model, batch) built at
  once and timed in rounds of a fresh random order, so drift is shared by all rows; a row's
  latency is the median forward over all rounds, on the host clock."""

MODES = ("eager", "cudagraph")


def _model_runs_section(directory: Path, runs: pd.DataFrame, log: pd.DataFrame,
                        modes: tuple[str, ...] = MODES) -> list[str]:
    """The live whole-model runs (what training reads), then the archived ones, in ``modes`` (a
    CPU runs eager only)."""
    lines = ["", "## Whole-model runs", ""]
    if not len(runs):
        return lines + ["none collected yet"] + _archive_section(directory, runs)
    ok_runs = runs[runs["status"] == "ok"]
    counts = _protocol(runs).value_counts()
    live_log = log[log["settings"].map(lambda s: isinstance(s, dict) and s.get("protocol") in counts.index)]
    logged = float(live_log["seconds"].sum())
    median_cv = {mode: ok_runs.loc[ok_runs["mode"] == mode, "cv"].median() * 100 for mode in modes}
    lines += [
        f"- live rows, in `{MODEL_RUNS_FOLDER}/`: {len(runs)} ({len(ok_runs)} measured) over "
        f"{runs['model'].nunique()} models; the only rows training reads",
        "- protocol, by run-id suffix: " + ", ".join(f"`{p}` ({n})" for p, n in counts.items()),
        f"- device time in the sweep log for this protocol: {logged / 60:.1f} min over {len(live_log)} run(s)"
        if len(live_log) else "- device time: not in the sweep log (run before the protocol logged its runs)",
        "- median CV: " + ", ".join(f"{mode} {cv:.2f}%" for mode, cv in median_cv.items()), "",
        f"Latency in ms ({' / '.join(modes)}), by model, precision and batch:", "",
        _table(_latency_grid(runs, modes)),
    ]
    return lines + _archive_section(directory, runs)


def _nas_runs_section(directory: Path, modes: tuple[str, ...] = MODES) -> list[str]:
    """The NAS suite's runs: measured like the zoo's, read only by validation (never training)."""
    folder = directory / NAS_RUNS_FOLDER
    if not any(folder.glob("part-*.parquet")):
        return []
    runs = model_run_store(folder).read()
    ok_runs = runs[runs["status"] == "ok"]
    median_cv = {mode: ok_runs.loc[ok_runs["mode"] == mode, "cv"].median() * 100 for mode in modes}
    spaces = ok_runs.groupby("model_kind")["model"].nunique()
    return ["", "## NAS suite runs", "",
            f"- in `{NAS_RUNS_FOLDER}/`: {len(runs)} rows ({len(ok_runs)} measured) over {runs['model'].nunique()} "
            "architectures of `latpred collect nas` (interleaved rounds in groups), by space: "
            + ", ".join(f"{space} {n}" for space, n in spaces.items()),
            "- nas-test is read by `latpred validate --suite` only; training fits composition on nas-train's "
            "runs and calibrates the 90% interval on nas-dev's; the architectures, their split and their graphs are in "
            "`datasets/suites/nas/` and `datasets/suites/nas-train/`",
            f"- batches {sorted(ok_runs['batch'].unique().tolist())}, precisions "
            f"{sorted(ok_runs['precision'].unique().tolist())}; median CV: "
            + ", ".join(f"{mode} {cv:.2f}%" for mode, cv in median_cv.items())]


def _hosts_section(directory: Path) -> list[str]:
    """The host profiles probed beside the data, and the whole-model runs of other host conditions."""
    profiles = HostStore(directory / HOSTS_FOLDER).all()
    if not profiles:
        return []
    rows = [{"id": p.id, "measured": p.measured_at[:19], **{k: f"{p.costs_us[k]:.2f}" for k in HOST_KINDS},
             "cpu score ns": f"{p.cpu_score_ns:.0f}" if p.cpu_score_ns else "-", "note": p.note or ""}
            for p in sorted(profiles, key=lambda p: p.measured_at)]
    lines = ["", "## Host profiles", "",
             f"Probed (`latpred host probe`, collectors.host_probe) at the start and end of every sweep and run, in "
             f"`{HOSTS_FOLDER}/`; rows name the probe before them, the sweep log names both. Per-call host cost in "
             "microseconds:", "", _table(pd.DataFrame(rows).set_index("id"))]
    conditions = sorted(p for p in (directory / HOST_RUNS_FOLDER).glob("*") if p.is_dir())
    if conditions:
        lines += ["", f"Whole-model runs under other host conditions, in `{HOST_RUNS_FOLDER}/<condition>/` (scored by "
                  "`latpred validate --hosts`; training never reads them):", ""]
        for folder in conditions:
            runs = model_run_store(folder).read()
            ok = runs[runs["status"] == "ok"]
            batches = sorted(ok["batch"].unique().tolist())
            lines.append(f"- `{folder.name}`: {len(runs)} rows ({len(ok)} measured), modes "
                         f"{', '.join(sorted(runs['mode'].unique()))}, batches {batches}, "
                         f"{runs['timestamp'].min():%Y-%m-%d %H:%M} UTC")
    return lines


def _protocol(runs: pd.DataFrame) -> pd.Series:
    """Each row's protocol, from its run-id suffix (the first protocol's run ids have none)."""
    return runs["run_id"].map(lambda run_id: run_id.split("|")[4] if run_id.count("|") >= 4 else "sequential")


def _archive_section(directory: Path, live: pd.DataFrame) -> list[str]:
    """Which whole-model rows are archived, whether every archived unit has a live row, and why
    (``archive/README.md``)."""
    folders = sorted(p for p in (directory / ARCHIVE_FOLDER).glob("*") if p.is_dir())
    if not folders:
        return []
    live_units = live.set_index(UNIT).index if len(live) else pd.MultiIndex.from_tuples([], names=UNIT)
    rows = []
    for folder in folders:
        runs = model_run_store(folder).read()
        if not len(runs):
            continue
        covered = runs.set_index(UNIT).index.isin(live_units)
        rows.append({"folder": f"{ARCHIVE_FOLDER}/{folder.name}/", "rows": len(runs),
                     "first": runs["timestamp"].min(),
                     "protocol": ", ".join(sorted(_protocol(runs).unique())),
                     "modes": ", ".join(sorted(runs["mode"].unique())),
                     "measured": f"{runs['timestamp'].min():%Y-%m-%d %H:%M} to "
                                 f"{runs['timestamp'].max():%Y-%m-%d %H:%M}",
                     "units with a live row": f"{int(covered.sum())} of {len(runs)}"})
    if not rows:
        return []
    lines = ["", "### Archived whole-model rows", "",
             "Superseded by a later measurement of the same units, and read by nothing in training:", "",
             _table(pd.DataFrame(rows).sort_values("first").drop(columns="first").set_index("folder"))]
    why = directory / ARCHIVE_FOLDER / "README.md"
    if why.exists():
        lines += ["", why.read_text().strip()]
    return lines


def _latency_grid(runs: pd.DataFrame, modes: tuple[str, ...] = MODES) -> pd.DataFrame:
    def cell(group: pd.DataFrame) -> str:
        by_mode = {r.mode: (f"{r.latency_ms:.3g}" if r.status == "ok" else "fail")
                   for r in group.itertuples()}
        return " / ".join(by_mode.get(mode, "-") for mode in modes)

    # pandas-stubs' apply() passes its keywords to the function and knows no include_groups
    cells = runs.groupby(["model", "precision", "batch"]).apply(cell, include_groups=False)  # type: ignore[call-overload]
    return cells.unstack("batch").fillna("-")


def write_card(directory: Path) -> Path:
    """Write ``directory/README.md`` and return its path."""
    path = Path(directory) / "README.md"
    path.write_text(card_text(Path(directory)))
    return path
