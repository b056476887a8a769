"""Serve zoo models under Poisson load on the GPU and keep every request's times: the measurements
the capacity simulator is scored against (``benchmarks/simulator_vs_server.py``).

For each model: one CUDA graph per batch size is captured (:class:`collectors.batching_server.
CapturedModel`); every batch size's service time is measured the way the server runs it; then for
each batching setting and each load level the load generator (:mod:`collectors.load_client`, its
own process) sends Poisson arrivals at ``level x capacity``, where capacity is what the setting can
serve at most (``max over b <= max_batch of b / median service(b)``), and the server serves them.

Written under ``<out>/<device>/serving/``, a pair of parquet files per (model, precision), so that a
run stopped part way resumes with what it lacks (below): ``requests-*.parquet`` (per request: the load's
keys, client send, server receipt, batch start and finish in microseconds from the load's start,
and the batch size it rode in) and ``service-*.parquet`` (every timed service of every batch size).
``meta.json`` holds the settings, levels, torch's intra-op threads and the device fingerprint. Run
with a set number of threads (a CPU's server beside its load process), they go to
``serving-threads<N>/`` instead.

A stop from outside (SIGTERM, as ``timeout`` sends at its limit, or Ctrl-C: :mod:`collectors.stop_signal`)
loses nothing measured: the model in progress has its loads answered so far written, what was not
measured is said and kept in ``meta.json`` (``unmeasured``), and the run exits with 128 + the
signal's number (a failure likewise has the model's loads written before it goes on up). The same
command resumes: a model whose requests file lacks settings is served those settings alone, and
their rows are appended (``models_to_serve``); a setting cut part way keeps the loads it has (its
other levels are named, not served again).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

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
from collectors.stop_signal import stop_exit_code, stop_in, stop_on_sigterm, stop_said

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


@contextlib.contextmanager
def replaced_whole(path: Path) -> Iterator[Path]:
    """A path to write ``path``'s new content to: it replaces ``path`` in one step when the block ends
    (``os.replace``), so that a process killed mid-write leaves the file as it was, never cut off
    (a resumed run reads it back). The scratch file (``<name>.partial``, matched by no ``*.parquet``
    or ``meta.json``) is removed if the block fails."""
    scratch = path.with_name(path.name + ".partial")
    try:
        yield scratch
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` to ``path`` as parquet, whole or not at all (``replaced_whole``)."""
    with replaced_whole(path) as scratch:
        frame.to_parquet(scratch)


def write_requests(frame: pd.DataFrame, path: Path) -> None:
    """One load sweep's per-request rows, compactly: zstd, delta-coded time columns, dictionaries
    for the repeated keys (the data is committed, and every byte of the repository travels to the
    GPU machine under a 64 MiB cap). Lossless: reading it back gives the same frame. Written whole or
    not at all (``replaced_whole``)."""
    with replaced_whole(path) as scratch:
        frame.to_parquet(scratch, compression="zstd", compression_level=19,
                         use_dictionary=[c for c in frame.columns if c not in TIME_COLUMNS],
                         column_encoding={c: "DELTA_BINARY_PACKED" for c in TIME_COLUMNS if c in frame.columns})


def write_meta(folder: Path, fingerprint: Any, precision: str, levels: Sequence[float], seconds_per_level: float,
               seed: int, threads: int, settings: Sequence[Any], **more: Any) -> None:
    """A serving folder's ``meta.json``: the device, the loads' settings (``ServerSettings``) and levels (``more``: what
    else a server records about itself). ValueError when the folder already holds loads measured
    otherwise (other settings, levels, precision, seconds, seed or server): one ``meta.json``
    describes every model's loads, and a resumed run must not relabel the earlier ones. The loads
    that earlier runs did not measure (``UNMEASURED``, ``record_unmeasured``) are carried over."""
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
        if before.get(UNMEASURED):
            meta[UNMEASURED] = before[UNMEASURED]
    _write_json(meta, path)


#: ``meta.json``'s key for the loads a stopped (or failed) run left unmeasured: model -> setting -> the
#: levels (or, for a run given rates, the requests a second) of that setting not on disk
UNMEASURED = "unmeasured"


def _write_json(value: Any, path: Path) -> None:
    with replaced_whole(path) as scratch:
        scratch.write_text(json.dumps(value, indent=1))


def record_unmeasured(folder: Path, model: str, missing: dict[str, list[float]]) -> None:
    """Note in ``meta.json`` (``UNMEASURED``) the loads of ``model`` not on disk (``unmeasured_loads``),
    or that it has none missing: the folder says which models are partial without its log."""
    path = folder / "meta.json"
    meta = json.loads(path.read_text())
    partial = {m: v for m, v in meta.get(UNMEASURED, {}).items() if m != model}
    if missing:
        partial[model] = missing
    if partial:
        meta[UNMEASURED] = dict(sorted(partial.items()))
    else:
        meta.pop(UNMEASURED, None)
    _write_json(meta, path)


def _settings_as_now(settings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``meta.json``'s settings with the fields recorded before they had them: an instance count (one
    instance each), and no preferred sizes or delay (``instance_serving``'s settings had neither)."""
    return [{"preferred": [], "max_queue_delay_us": 0.0, "instances": 1, **s} for s in settings]


@dataclass(frozen=True, eq=False)
class ModelToServe:
    """A model a run serves: its requests file, and the loads already in it (``earlier``: a run
    stopped part way through the model), None where it has none."""

    name: str
    precision: str
    target: Path
    earlier: pd.DataFrame | None = None

    def serves(self, setting: ServerSettings) -> bool:
        """Whether this run serves ``setting``: the requests file has no load of it."""
        return self.earlier is None or setting.name not in set(self.earlier["setting"])

    def earlier_file(self, kind: str) -> pd.DataFrame | None:
        """The model's ``<kind>-<model>-<precision>.parquet`` beside its requests file (``service``,
        ``graph-service``) as a partial run left it, where there is one; read before anything of this
        run is written, so that writing the model's files twice (again after a stop) appends once."""
        path = self.target.with_name(f"{kind}-{self.name}-{self.precision}.parquet")
        return pd.read_parquet(path) if self.earlier is not None and path.exists() else None

    def rows(self, frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
        """The loads on disk and ``frames`` (this run's), as the requests file holds them."""
        return pd.concat(([self.earlier] if self.earlier is not None else []) + list(frames), ignore_index=True)


def models_to_serve(folder: Path, models: Sequence[str], precision: str, settings: Sequence[ServerSettings],
                    say: Callable[[str], None], loads: Sequence[float] = (),
                    column: str = "level") -> Iterator[ModelToServe]:
    """Each of ``models`` that ``folder`` lacks loads of: one with no requests file, or one whose file
    lacks some of ``settings`` (a run stopped part way through it; only those settings are served).
    A model with every setting is skipped, and said so, with the ``loads`` (``column``'s values) a
    setting cut part way lacks (``unmeasured_loads``: noted in ``meta.json`` too)."""
    for name in models:
        target = folder / f"requests-{name}-{precision}.parquet"
        if not target.exists():
            yield ModelToServe(name, precision, target)
            continue
        earlier = pd.read_parquet(target)
        item = ModelToServe(name, precision, target, earlier)
        missing = unmeasured_loads(earlier, settings, loads, column)
        if all(not item.serves(s) for s in settings):
            record_unmeasured(folder, name, missing)
            say(f"{name}: on disk, skipped" + (f"; not measured: {describe_loads(missing)} (a setting "
                                               "cut part way is not served again)" if missing else ""))
            continue
        served = [s.name for s in settings if not item.serves(s)]
        cut = {setting: lacking for setting, lacking in missing.items() if setting in served}
        say(f"{name}: partial on disk ({_loads_of(earlier)} of {', '.join(served)}"
            + (f"; not measured, and not served again: {describe_loads(cut)}" if cut else "")
            + f"); serving {', '.join(s.name for s in settings if item.serves(s))}")
        yield item


def unmeasured_loads(rows: pd.DataFrame | None, settings: Sequence[ServerSettings], loads: Sequence[float],
                     column: str = "level") -> dict[str, list[float]]:
    """Setting -> the ``loads`` it has no rows of in ``rows`` (a requests file's), matched on
    ``column`` (``level``; ``offered_qps`` for loads given as rates); settings with none missing are
    left out. A level a server recorded as rate / capacity matches within rounding."""
    out: dict[str, list[float]] = {}
    for setting in settings:
        have = np.array([], dtype=float) if rows is None else \
            rows.loc[rows["setting"] == setting.name, column].unique().astype(float)
        lacking = [float(x) for x in loads if not np.isclose(have, x, rtol=1e-9, atol=0).any()]
        if lacking:
            out[setting.name] = lacking
    return out


def describe_loads(missing: dict[str, list[float]]) -> str:
    """``unmeasured_loads`` in words: ``mb8-nodelay at 0.85, 0.9; mb32-... at 0.3, ...``."""
    return "; ".join(f"{setting} at {', '.join(f'{x:g}' for x in loads)}" for setting, loads in missing.items())


def end_of_model(folder: Path, item: ModelToServe, rows: pd.DataFrame | None, settings: Sequence[ServerSettings],
                 loads: Sequence[float], say: Callable[[str], None], ended_by: BaseException | None = None,
                 column: str = "level") -> None:
    """After a model's files are written (``rows``: its requests file now, None where nothing is on
    disk): its unmeasured loads noted in ``meta.json`` and, when a stop or a failure (``ended_by``)
    cut it short, said with them. (The collectors write a model before its stop or failure goes on
    up, again if the stop came while they wrote it: every write is whole, and appends only once.)"""
    missing = unmeasured_loads(rows, settings, loads, column)
    if rows is not None:
        record_unmeasured(folder, item.name, missing)
    if ended_by is None and missing:
        say(f"{item.name}: not measured: {describe_loads(missing)}")
    if ended_by is not None:
        stop = stop_in(ended_by)
        said = stop_said(stop) if stop is not None else f"failed ({type(ended_by).__name__}: {ended_by})"
        say(f"{item.name}: {said}; {_loads_of(rows)} on disk"
            + (f", not measured: {describe_loads(missing)}" if missing else ""))


def _loads_of(rows: pd.DataFrame | None) -> str:
    """How many loads a requests file's ``rows`` hold, in words (``1 load``, ``14 loads``)."""
    count = 0 if rows is None else len(rows.groupby(["setting", "level"]))
    return f"{count} load{'' if count == 1 else 's'}"


def end_run(stop: BaseException, models: Sequence[str], current: str | None, say: Callable[[str], None]) -> NoReturn:
    """A run a stop ended, after the model in progress was written: the models it did not reach said,
    and the process ends with the status a signal gives (``stop_exit_code``)."""
    names = list(models)
    later = names[names.index(current) + 1:] if current is not None and current in names else names
    say(f"{stop_said(stop)}: " + (f"{', '.join(later)} not served; " if later else "")
        + "the same command resumes with what is not on disk")
    raise SystemExit(stop_exit_code(stop)) from stop


@contextlib.contextmanager
def ending_on_stop(models: Sequence[str], say: Callable[[str], None]) -> Iterator[list[str]]:
    """A serving run's block under ``stop_on_sigterm``: a stop from outside that ends it (after the
    model in progress was written: ``model_kept``) is said with the models not reached, and the process
    exits as the signal would have it (``end_run``); any other failure goes on up. Yields the list the
    run appends each model's name to as it starts it."""
    started: list[str] = []
    try:
        with stop_on_sigterm():
            yield started
    except BaseException as exc:
        stop = stop_in(exc)
        if stop is None:
            raise
        end_run(stop, models, started[-1] if started else None, say)


@contextlib.contextmanager
def model_kept(folder: Path, item: ModelToServe, settings: Sequence[ServerSettings], loads: Sequence[float],
               say: Callable[[str], None], write: Callable[[], pd.DataFrame | None],
               column: str = "level") -> Iterator[None]:
    """A model's block: however it ends (served, stopped or failed) the model's files are written with
    every load answered in full (``write``, which returns its requests as now on disk) and its loads
    not measured are noted (``end_of_model``; said with the stop or failure, which then goes on up)."""
    try:
        yield
    except BaseException as exc:
        end_of_model(folder, item, write(), settings, loads, say, exc, column)
        raise
    end_of_model(folder, item, write(), settings, loads, say, column=column)


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
    """Measure every (model, setting) not yet on disk on ``device`` ("cuda", or "cpu": eager
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
    with ending_on_stop(models, say) as started_models, load_client() as (requests_recv, control_here):
        for item in models_to_serve(folder, models, precision, settings, say, levels):
            started_models.append(item.name)
            frames: list[pd.DataFrame] = []
            timed: dict[int, np.ndarray] = {}
            write = partial(write_model, folder, item, frames, timed, item.earlier_file("service"))
            with model_kept(folder, item, settings, levels, say, write):
                started = time.perf_counter()
                max_batch = max(s.max_batch for s in settings)
                model, measured = timed_model(item.name, precision, max_batch, fp.kind, reps)
                timed.update(measured)
                median = {b: float(np.median(v)) for b, v in timed.items()}
                say(f"{item.name}: captured and timed 1..{max_batch} in {time.perf_counter() - started:.0f} s; "
                    f"b1 {median[1] * 1e3:.3f} ms, b{max_batch} {median[max_batch] * 1e3:.3f} ms")
                for setting_index, setting in enumerate(settings):
                    if not item.serves(setting):
                        continue
                    capacity = capacity_qps(median, setting.max_batch)
                    for level_index, level in enumerate(levels):
                        _one_load(model, setting, level, capacity, requests_recv, control_here,
                                  seconds_per_level, requests, seed + 1000 * setting_index + level_index, say,
                                  frames)
                    write()  # after each setting: a SIGKILL, which no handler sees, loses at most this one
            del model
            if fp.kind == "cuda":
                torch.cuda.empty_cache()
    return folder


def write_model(folder: Path, item: ModelToServe, frames: Sequence[pd.DataFrame], timed: dict[int, np.ndarray],
                earlier_service: pd.DataFrame | None) -> pd.DataFrame | None:
    """The model's loads (those on disk before, then ``frames``) and every timed service (the
    earlier run's, then this one's, whose medians set this run's capacities) written; returns its
    requests as now on disk (``item.earlier`` when this run measured no load). The service times
    go first: the requests file says which settings are served, so a process killed between the
    two leaves those settings to a resumed run."""
    if not frames:
        return item.earlier
    service = timed_frame(item.name, item.precision, timed)
    if earlier_service is not None:
        service = pd.concat([earlier_service, service], ignore_index=True)
    write_parquet(service, folder / f"service-{item.name}-{item.precision}.parquet")
    rows = item.rows(frames)
    write_requests(rows, item.target)
    return rows


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
    except BaseException:
        with contextlib.suppress(OSError):
            client.terminate()  # a failure or a stop mid-load: the rest of its schedule is not wanted
        raise
    finally:
        # a client that a stop's SIGTERM ended (``timeout`` signals the whole process group) has
        # closed its pipe: that must not raise over the exception on its way out
        with contextlib.suppress(OSError):
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
              say: Callable[[str], None], keep: list[pd.DataFrame]) -> None:
    offsets, start_at = start_load(control, level * capacity, seconds, requests_range, seed)
    run = serve(requests, model, setting, len(offsets), timeout_s=float(offsets[-1]) + 30.0)
    load_rows(model.name, model.precision, setting.name, level, capacity, offsets, start_at, run, control.recv(),
              say, keep)


def load_rows(model: str, precision: str, setting: str, level: float, capacity: float, offsets: np.ndarray,
              start_at: float, run: ServedRun, worst_late_s: float, say: Callable[[str], None],
              keep: list[pd.DataFrame] | None = None) -> pd.DataFrame:
    """One load's requests as rows (times in microseconds from the load's start), its p50, p99 and
    mean batch said: what every serving folder's ``requests-*.parquet`` holds. Appended to ``keep``
    before it is said, so that a load the log reports is never one a stop then loses."""
    n = len(offsets)

    def us(values: np.ndarray) -> np.ndarray:
        return np.round((values - start_at) * 1e6).astype(np.int64)

    frame = pd.DataFrame({
        "model": model, "precision": precision, "setting": setting, "level": level,
        "capacity_qps": capacity, "offered_qps": level * capacity, "index": np.arange(n, dtype=np.int32),
        "scheduled_us": np.round(offsets * 1e6).astype(np.int64), "sent_us": us(run.sent_s),
        "received_us": us(run.received_s), "start_us": us(run.start_s), "finish_us": us(run.finish_s),
        "batch_size": run.batch_size.astype(np.int16),
    })
    if keep is not None:
        keep.append(frame)
    tail = ((run.finish_s - run.received_s) * 1e3)[n // 10:]
    say(f"  {setting} at {level:.2f} x {capacity:.0f} qps: {n} requests, p50 {np.percentile(tail, 50):.3f} "
        f"p99 {np.percentile(tail, 99):.3f} ms, mean batch {run.batch_size[n // 10:].mean():.2f}, "
        f"client late by {worst_late_s * 1e3:.2f} ms at worst")
    return frame
