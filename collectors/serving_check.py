"""Serve zoo models under Poisson load on the GPU and keep every request's times: the measurements
the capacity simulator is scored against (``benchmarks/simulator_vs_server.py``).

For each model: one CUDA graph per batch size is captured (:class:`collectors.batching_server.
CapturedModel`); every batch size's service time is measured the way the server runs it; then for
each batching setting and each load level the load generator (:mod:`collectors.load_client`, its
own process) sends Poisson arrivals at ``level x capacity``, where capacity is what the setting can
serve at most (``max over b <= max_batch of b / median service(b)``), and the server serves them.

Written under ``<out>/<device>/serving/``, a pair of parquet files per (model, precision), so that a
run stopped part way resumes with the next model: ``requests-*.parquet`` (per request: the load's
keys, client send, server receipt, batch start and finish in microseconds from the load's start,
and the batch size it rode in) and ``service-*.parquet`` (every timed service of every batch size).
``meta.json`` holds the settings, levels, torch's intra-op threads and the device fingerprint. Run
with a set number of threads (a CPU's server beside its load process), they go to
``serving-threads<N>/`` instead.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from collectors.batching_server import (
    EMPTY_MODEL,
    CapturedModel,
    CpuModel,
    EmptyModel,
    ServedModel,
    ServedRun,
    ServerSettings,
    serve,
    service_times,
)
from collectors.fingerprint import read_fingerprint
from collectors.load_client import client_main

#: the two batching settings each model is served with: Triton's defaults at a small maximum batch,
#: and a large maximum batch with preferred sizes and a queue delay
SETTINGS = (
    ServerSettings("mb8-nodelay", max_batch=8),
    ServerSettings("mb32-pref16,32-delay1000us", max_batch=32, preferred=(16, 32), max_queue_delay_us=1000.0),
)
#: offered load as a fraction of the setting's capacity
LEVELS = (0.3, 0.6, 0.7, 0.8, 0.85, 0.9)
MODELS = ("resnet101", "densenet169", "roberta-large")
#: each load runs this long, within these request counts (a p99 needs a few thousand)
SECONDS_PER_LEVEL = 4.0
MIN_REQUESTS, MAX_REQUESTS = 3000, 30000


#: per-request times: increasing integers, stored as deltas (a fifth of the size of plain snappy)
TIME_COLUMNS = ("index", "scheduled_us", "sent_us", "received_us", "start_us", "finish_us")


def write_requests(frame: pd.DataFrame, path: Path) -> None:
    """One load sweep's per-request rows, compactly: zstd, delta-coded time columns, dictionaries
    for the repeated keys (the data is committed, and every byte of the repository travels to the
    GPU machine under a 64 MiB cap). Lossless: reading it back gives the same frame."""
    frame.to_parquet(path, compression="zstd", compression_level=19,
                     use_dictionary=[c for c in frame.columns if c not in TIME_COLUMNS],
                     column_encoding={c: "DELTA_BINARY_PACKED" for c in TIME_COLUMNS if c in frame.columns})


def write_meta(folder: Path, fingerprint: Any, precision: str, levels: Sequence[float], seconds_per_level: float,
               seed: int, threads: int, settings: Sequence[Any], **more: Any) -> None:
    """A serving folder's ``meta.json``: the device, the loads' settings (``ServerSettings``) and levels (``more``: what
    else a server records about itself). ValueError when the folder already holds loads measured
    otherwise (other settings, levels, precision, seconds, seed or server): one ``meta.json``
    describes every model's loads, and a resumed run must not relabel the earlier ones."""
    meta = {**more, "fingerprint": fingerprint.as_dict(), "precision": precision, "levels": list(levels),
            "seconds_per_level": seconds_per_level, "seed": seed, "threads": threads,
            "settings": [{k: list(v) if isinstance(v, tuple) else v for k, v in vars(s).items()} for s in settings]}
    path = folder / "meta.json"
    if path.exists() and any(folder.glob("requests-*.parquet")):
        before = json.loads(path.read_text())
        before["settings"] = _settings_as_now(before.get("settings", []))
        differ = [key for key in ("settings", "levels", "precision", "seconds_per_level", "seed", *more)
                  if before.get(key) != (_settings_as_now(meta[key]) if key == "settings" else meta[key])]
        if differ:
            raise ValueError(f"{folder} holds loads measured with other {', '.join(differ)} ({path}); serve these "
                             "into another --out, or move that folder away first")
    path.write_text(json.dumps(meta, indent=1))


def _settings_as_now(settings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``meta.json``'s settings with the fields recorded before they had them: an instance count (one
    instance each), and no preferred sizes or delay (``instance_serving``'s settings had neither)."""
    return [{"preferred": [], "max_queue_delay_us": 0.0, "instances": 1, **s} for s in settings]


def models_to_serve(folder: Path, models: Sequence[str], precision: str,
                    say: Callable[[str], None]) -> Iterator[tuple[str, Path]]:
    """(model, its requests file) for each of ``models`` not yet measured in ``folder``: a run
    stopped part way resumes with the next model."""
    for name in models:
        target = folder / f"requests-{name}-{precision}.parquet"
        if target.exists():
            say(f"{name}: on disk, skipped")
            continue
        yield name, target


def served_model(name: str, precision: str, max_batch: int, kind: str) -> ServedModel:
    """Zoo model ``name`` ready to serve batches 1..``max_batch`` (CUDA graphs on a GPU, eager on a
    CPU), or the empty model (``EMPTY_MODEL``: the server's own path alone)."""
    if name == EMPTY_MODEL:
        return EmptyModel(precision)
    return (CapturedModel if kind == "cuda" else CpuModel)(name, precision, max_batch)


def timed_model(name: str, precision: str, max_batch: int, kind: str,
                reps: int) -> tuple[ServedModel, dict[int, np.ndarray]]:
    """``served_model``, and each batch size's service times, ``reps`` of them."""
    model = served_model(name, precision, max_batch, kind)
    return model, service_times(model, range(1, max_batch + 1), reps)


def timed_frame(name: str, precision: str, timed: dict[int, np.ndarray]) -> pd.DataFrame:
    """``timed_model``'s service times as rows (model, precision, batch, service_s)."""
    return pd.DataFrame([{"model": name, "precision": precision, "batch": b, "service_s": s}
                         for b, v in timed.items() for s in v])


def capacity_qps(median_s: dict[int, float], max_batch: int) -> float:
    """The most requests per second one instance can serve with batches up to ``max_batch``."""
    return max(b / median_s[b] for b in range(1, max_batch + 1))


def run_serving_check(out: Path, device: str = "cuda", models: Sequence[str] = MODELS, precision: str = "fp16",
                      settings: Sequence[ServerSettings] = SETTINGS, levels: Sequence[float] = LEVELS,
                      seconds_per_level: float = SECONDS_PER_LEVEL, seed: int = 0,
                      requests: tuple[int, int] = (MIN_REQUESTS, MAX_REQUESTS),
                      reps: int = 40, threads: int | None = None,
                      say: Callable[[str], None] = lambda line: None) -> Path:
    """Measure every (model, setting, level) not yet on disk on ``device`` ("cuda", or "cpu": eager
    forwards on the CPU); returns the serving folder. ``threads`` sets torch's intra-op threads for
    the server's forwards (a CPU's: all its cores by default, the load process's among them), and
    the measurements then go to ``serving-threads<N>``."""
    import torch

    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    several = [s.name for s in settings if s.instances > 1]
    if several:
        raise ValueError(f"setting {several[0]}: our own server runs one model instance; serve several with "
                         "--server triton (or collectors.instance_serving)")
    fp = read_fingerprint(device)
    if threads is not None:
        torch.set_num_threads(threads)
    folder = Path(out) / fp.device_id / ("serving" if threads is None else f"serving-threads{threads}")
    folder.mkdir(parents=True, exist_ok=True)
    write_meta(folder, fp, precision, levels, seconds_per_level, seed, torch.get_num_threads(), settings)
    with load_client() as (requests_recv, control_here):
        for name, target in models_to_serve(folder, models, precision, say):
            started = time.perf_counter()
            max_batch = max(s.max_batch for s in settings)
            model, timed = timed_model(name, precision, max_batch, fp.kind, reps)
            median = {b: float(np.median(v)) for b, v in timed.items()}
            say(f"{name}: captured and timed 1..{max_batch} in {time.perf_counter() - started:.0f} s; "
                f"b1 {median[1] * 1e3:.3f} ms, b{max_batch} {median[max_batch] * 1e3:.3f} ms")
            frames = []
            for setting_index, setting in enumerate(settings):
                capacity = capacity_qps(median, setting.max_batch)
                for level_index, level in enumerate(levels):
                    frames.append(_one_load(model, setting, level, capacity, requests_recv, control_here,
                                            seconds_per_level, requests, seed + 1000 * setting_index + level_index,
                                            say))
            write_requests(pd.concat(frames, ignore_index=True), target)
            timed_frame(name, precision, timed).to_parquet(folder / f"service-{name}-{precision}.parquet")
            del model
            if fp.kind == "cuda":
                torch.cuda.empty_cache()
    return folder


@contextlib.contextmanager
def load_client() -> Iterator[tuple[Connection, Connection]]:
    """The load generator (``load_client.client_main``) in a process of its own while the block runs:
    yields the pipe its requests arrive on and the one that tells it a schedule (``start_load``)."""
    context = multiprocessing.get_context("spawn")
    requests_recv, requests_send = context.Pipe(duplex=False)
    control_here, control_there = context.Pipe()
    client = context.Process(target=client_main, args=(requests_send, control_there), daemon=True)
    client.start()
    try:
        yield requests_recv, control_here
    finally:
        control_here.send(None)
        client.join(timeout=10)


def start_load(control: Connection, qps: float, seconds: float, requests_range: tuple[int, int],
               seed: int) -> tuple[np.ndarray, float]:
    """Tell the load generator a Poisson schedule at ``qps`` for ``seconds`` (its request count clipped to
    ``requests_range``), starting 0.3 s from now: returns the arrival offsets and the start time."""
    n = int(np.clip(qps * seconds, *requests_range))
    offsets = np.cumsum(np.random.default_rng(seed).exponential(1.0 / qps, n))
    start_at = time.perf_counter() + 0.3
    control.send((offsets, start_at))
    return offsets, start_at


def _one_load(model: ServedModel, setting: ServerSettings, level: float, capacity: float, requests: Any,
              control: Any, seconds: float, requests_range: tuple[int, int], seed: int,
              say: Callable[[str], None]) -> pd.DataFrame:
    offsets, start_at = start_load(control, level * capacity, seconds, requests_range, seed)
    run = serve(requests, model, setting, len(offsets), timeout_s=float(offsets[-1]) + 30.0)
    return load_rows(model.name, model.precision, setting.name, level, capacity, offsets, start_at, run,
                     control.recv(), say)


def load_rows(model: str, precision: str, setting: str, level: float, capacity: float, offsets: np.ndarray,
              start_at: float, run: ServedRun, worst_late_s: float, say: Callable[[str], None]) -> pd.DataFrame:
    """One load's requests as rows (times in microseconds from the load's start), its p50, p99 and
    mean batch said: what every serving folder's ``requests-*.parquet`` holds."""
    n = len(offsets)
    tail = ((run.finish_s - run.received_s) * 1e3)[n // 10:]
    say(f"  {setting} at {level:.2f} x {capacity:.0f} qps: {n} requests, p50 {np.percentile(tail, 50):.3f} "
        f"p99 {np.percentile(tail, 99):.3f} ms, mean batch {run.batch_size[n // 10:].mean():.2f}, "
        f"client late by {worst_late_s * 1e3:.2f} ms at worst")

    def us(values: np.ndarray) -> np.ndarray:
        return np.round((values - start_at) * 1e6).astype(np.int64)

    return pd.DataFrame({
        "model": model, "precision": precision, "setting": setting, "level": level,
        "capacity_qps": capacity, "offered_qps": level * capacity, "index": np.arange(n, dtype=np.int32),
        "scheduled_us": np.round(offsets * 1e6).astype(np.int64), "sent_us": us(run.sent_s),
        "received_us": us(run.received_s), "start_us": us(run.start_s), "finish_us": us(run.finish_s),
        "batch_size": run.batch_size.astype(np.int16),
    })
