"""Serve zoo models with real Triton (through PyTriton) under Poisson load, keeping every request's
times: the capacity simulator checked against the server it models (issue #14).

:mod:`collectors.serving_check` does the same against our own dynamic-batching process
(:mod:`collectors.batching_server`), built on Triton's documented rule. This one runs Triton
itself: ``tritonserver`` as PyTriton ships it, its dynamic batcher configured per setting
(``max_batch_size``, ``preferred_batch_size``, ``max_queue_delay_microseconds``), with the model
instances the setting names (one, or ``-x<k>``: PyTriton binds k Python callables, each run in a
thread of its own, Triton's ``instance_group`` count k), each instance's function replaying its own
copy of the model's CUDA graphs on its own CUDA stream for the batch Triton formed (graphs captured
for every batch size, as :class:`collectors.batching_server.CapturedModel` does).

Each setting runs in a Triton of its own (one that dies under load ends only its own setting's
loads; PyTriton's server did, see ``datasets/nvidia-h100-80gb-hbm3/serving-triton/failed_runs/``):

1. a serial pass: one request of ``b`` samples at a time, for every ``b`` the setting allows
   (Triton runs each as a batch of ``b``);
2. a closed loop at saturation (``IN_FLIGHT_BATCHES`` x max batch requests unanswered), whose
   batches give the capacity the loads are fractions of. Through PyTriton a batch of ``b``
   one-sample requests costs more than one request of ``b`` samples, so the serial pass alone
   would put the loads above capacity; an open-loop burst above it is what crashed Triton;
3. the Poisson loads (:mod:`collectors.triton_client`, its own process, gRPC, open loop).

What is kept per request comes from Triton's own trace (``--trace-config level=TIMESTAMPS``, every
request, written in parts): ``REQUEST_START`` (the server has it), ``COMPUTE_START`` and
``COMPUTE_END`` of the batch it rode in (the instance busy with it, PyTriton's hand-over to the
Python function and back included), beside the client's send and answer. Written under
``<out>/<device>/serving-triton/`` in the files :mod:`training.serving_check` reads
(``requests-*.parquet``, ``meta.json``, and ``service-*.parquet``: ``service_table``, the loads'
own batches), plus ``graph-service-*.parquet``, the CUDA graph replayed alone (what latpred
predicts).

A stop from outside (SIGTERM: ``benchmarks/triton_serving.sh`` runs the check under ``timeout``, which
signals the whole process group, Triton's server and the client among it; or Ctrl-C) loses no load
answered in full: the setting in progress has its trace read as far as it got (a load missing from
it is said and left out), the model's files are written with what was measured, what was not is
said and noted in ``meta.json`` (``unmeasured``), and the run exits with 128 + the signal's number
without serving further models. The same command resumes: a model whose requests file lacks
settings is served those alone (``serving_check.models_to_serve``), its rows appended and its
service table rebuilt over the loads of both runs (``resumed_service``); a setting cut part way keeps
its loads (its other levels are named, not served again: they would be levels of another Triton
run's capacity).
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from collectors.batching_server import ServedModel, ServerSettings
from collectors.fingerprint import read_fingerprint
from collectors.serving_check import (
    LEVELS,
    MAX_REQUESTS,
    MIN_REQUESTS,
    MODELS,
    SECONDS_PER_LEVEL,
    SETTINGS,
    ModelToServe,
    capacity_qps,
    ending_on_stop,
    model_kept,
    models_to_serve,
    served_model,
    timed_frame,
    timed_model,
    write_meta,
    write_parquet,
    write_requests,
)
from collectors.stop_signal import stop_in, stop_said
from collectors.triton_client import INPUT, OUTPUT, ClientRun, client_main
from predictor.capacity.simulator import MAX_RATE_QPS, is_finite_number

#: a rate asked for (``rates_qps``) at or above this share of the capacity measured is not offered
MAX_RATE_SHARE = 0.95
#: serial requests per batch size when Triton's service times are measured
SERVICE_REPS = 25
#: a batch size's service comes from the loads where they formed it this often (service_table)
LEAST_BATCHES = 5
#: the closed loop that finds a setting's capacity: this many requests unanswered (times the
#: setting's max batch), for about this long at the serial pass's capacity
IN_FLIGHT_BATCHES, SATURATED_S = 2, 1.5
#: Triton writes its trace in parts of this many requests
TRACE_PART = 1000
#: the folder's name under the device's dataset folder
FOLDER = "serving-triton"


def require_pytriton() -> str:
    """PyTriton's version, or a RuntimeError that says how to get it (it is no dependency of latpred:
    a 55 MB wheel with the server binary, needed only where this check runs)."""
    try:
        from importlib.metadata import version

        import pytriton  # noqa: F401
        import tritonclient.grpc  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"the Triton check needs PyTriton (pip install nvidia-pytriton): {exc}") from None
    return version("nvidia-pytriton")


def model_name(model: str, setting: ServerSettings) -> str:
    """The name a (zoo model, batching setting) pair is bound under in Triton."""
    return f"{model}-{setting.name}".replace(",", "_")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BatchLog:
    """The batches the model's Python function ran: their sizes and replay times (perf_counter s)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float]] = []


def infer_function(model: ServedModel, log: BatchLog, stream: Any = None) -> Callable[..., dict[str, np.ndarray]]:
    """The function Triton calls with each batch it formed: one CUDA-graph replay of that size (on
    ``stream``, an instance's own, where given), waited on with the GIL let go (a CUDA event's wait
    does), so PyTriton's threads keep receiving."""
    from pytriton.decorators import batch

    event = getattr(model, "event", None)
    on_stream: Callable[[], Any] = contextlib.nullcontext
    if stream is not None:
        import torch

        on_stream = functools.partial(torch.cuda.stream, stream)

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        values = inputs[INPUT]
        started = time.perf_counter()
        with on_stream():
            model.launch(len(values))
        if event is not None:
            event.synchronize()
        while not model.done():
            time.sleep(0)
        log.rows.append((len(values), started, time.perf_counter()))
        return {OUTPUT: values}

    return infer


@dataclass
class Copies:
    """The copies of one model an instance each (``ServedModel``s with their graphs), and the CUDA
    stream each replays on (None on a CPU)."""

    models: list[ServedModel]
    streams: list[Any]

    @property
    def name(self) -> str:
        return self.models[0].name

    @property
    def precision(self) -> str:
        return self.models[0].precision

    @classmethod
    def of(cls, first: ServedModel, count: int, max_batch: int, kind: str) -> Copies:
        """``first`` and ``count - 1`` more copies of it ready for batches up to ``max_batch`` (the
        largest a setting of several instances allows), each with a stream of its own on a GPU (one
        copy replays on the default stream, as the one-instance check always has)."""
        models = [first] + [served_model(first.name, first.precision, max_batch, kind) for _ in range(count - 1)]
        if kind != "cuda" or count == 1:
            return cls(models, [None] * count)
        import torch

        return cls(models, [torch.cuda.Stream() for _ in range(count)])


@contextlib.contextmanager
def triton_server(copies: Copies, setting: ServerSettings, trace_file: Path,
                  log: BatchLog) -> Iterator[tuple[str, dict[str, str]]]:
    """Triton on loopback with the model bound under one batching setting (``setting.instances`` of
    ``copies``, one instance each), tracing every request into ``trace_file``.<n> (a part every
    ``TRACE_PART`` requests, so that a server that dies leaves what it had traced); yields its gRPC
    address and the header that opens its statistics (PyTriton guards them with a token)."""
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    grpc_port = _free_port()
    config = TritonConfig(http_address="127.0.0.1", http_port=_free_port(), grpc_address="127.0.0.1",
                          grpc_port=grpc_port, metrics_port=_free_port(), log_verbose=0,
                          trace_config=[f"triton,file={trace_file}", "level=TIMESTAMPS", "rate=1", "count=-1",
                                        f"triton,log-frequency={TRACE_PART}"])
    with Triton(config=config) as triton:
        # The server was started with the trace flags; binding with them too would make PyTriton
        # trace its own proxy through OpenTelemetry, which this check does not use.
        triton._config.trace_config = None
        batcher = DynamicBatcher(max_queue_delay_microseconds=int(setting.max_queue_delay_us),
                                 preferred_batch_size=list(setting.preferred) or None)
        # a list of callables is PyTriton's way to k instances: each one's requests in a thread of its own
        functions = [infer_function(model, log, stream)
                     for model, stream in zip(copies.models[:setting.instances], copies.streams)]
        triton.bind(model_name=model_name(copies.name, setting), infer_func=functions,
                    inputs=[Tensor(name=INPUT, dtype=np.float64, shape=(1,))],
                    outputs=[Tensor(name=OUTPUT, dtype=np.float64, shape=(1,))],
                    config=ModelConfig(max_batch_size=setting.max_batch, batcher=batcher))
        triton.run()
        yield f"127.0.0.1:{grpc_port}", {"triton-grpc-protocol-triton-access-token": triton.get_access_token()}


class EmptyTrace(ValueError):
    """Triton traced no request: its server died before the trace wrote a part."""


def _trace_part(part: Path) -> list[dict[str, Any]]:
    """One part's entries; none from a part a dying server cut off mid-write (the loads it held
    are then left out by ``load_frame``, as for a part never written)."""
    try:
        entries: list[dict[str, Any]] = json.loads(part.read_text())
    except json.JSONDecodeError:
        return []
    return entries


def read_trace(path: Path) -> pd.DataFrame:
    """Triton's trace (``path`` and its parts ``path``.<n>) as one row per request: ``request_id``,
    the model it was sent to, and its timestamps (ns, CLOCK_MONOTONIC) as columns
    (``REQUEST_START``, ``COMPUTE_START``, ...); ``EmptyTrace`` when no request was traced, and a
    ValueError when requests were, without the timestamps (a trace not at level TIMESTAMPS)."""
    path = Path(path)
    entries = [e for part in sorted(path.parent.glob(path.name + "*")) for e in _trace_part(part)]
    heads: dict[int, dict[str, Any]] = {}
    stamps: dict[int, dict[str, int]] = {}
    for entry in entries:
        trace_id = int(entry["id"])
        if "model_name" in entry:
            heads[trace_id] = {"request_id": entry.get("request_id", ""), "model": entry["model_name"]}
        for stamp in entry.get("timestamps", ()):
            stamps.setdefault(trace_id, {})[stamp["name"]] = int(stamp["ns"])
    rows = [heads[i] | stamps.get(i, {}) for i in heads]
    if not rows:
        raise EmptyTrace(f"Triton traced no request ({len(entries)} trace entries): its server died before the "
                         "trace wrote a part")
    frame = pd.DataFrame(rows)
    missing = {"request_id", "REQUEST_START", "COMPUTE_START", "COMPUTE_END"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: the trace has no {sorted(missing)}: was it written with level=TIMESTAMPS?")
    return frame


def batch_totals(statistics: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """Triton's (batches, ns) by batch size so far (compute input + infer + output, its
    ``batch_stats``) from one model's ``get_inference_statistics`` answer (as JSON)."""
    out: dict[int, tuple[int, int]] = {}
    for entry in statistics["model_stats"][0].get("batch_stats", ()):
        parts = [entry.get(k, {}) for k in ("compute_input", "compute_infer", "compute_output")]
        out[int(entry["batch_size"])] = (int(parts[1].get("count", 0)), sum(int(p.get("ns", 0)) for p in parts))
    return out


def mean_seconds(after: dict[int, tuple[int, int]], before: dict[int, tuple[int, int]] | None = None,
                 least: int = 1) -> dict[int, float]:
    """Mean seconds per batch by size between two ``batch_totals``, for sizes run ``least`` times."""
    out: dict[int, float] = {}
    for b, (count, ns) in after.items():
        count0, ns0 = (before or {}).get(b, (0, 0))
        if count - count0 >= least:
            out[b] = (ns - ns0) / (count - count0) / 1e9
    return out


def service_table(frames: Sequence[pd.DataFrame], serial: pd.DataFrame, least: int = LEAST_BATCHES) -> pd.DataFrame:
    """Seconds per batch by size (``batch``, ``service_s``, ``source``) for the simulator: every
    batch the loads ran (Triton's ``COMPUTE_START`` to ``COMPUTE_END``), and, for sizes the loads
    formed fewer than ``least`` times, the serial pass's. Through PyTriton a batch of b one-sample
    requests costs more than one request of b samples (each request's tensors cross to Python and
    back on their own): on the H100 1.2-1.7x for the same size, so the loads' own batches are what
    the instance did, and the serial pass only fills sizes the batcher seldom forms."""
    if not frames:
        return serial.assign(source="serial")[["batch", "service_s", "source"]]
    batches = pd.concat([f.drop_duplicates(["level", "start_us"]) for f in frames], ignore_index=True)
    loads = pd.DataFrame({"batch": batches["batch_size"].astype(int),
                          "service_s": (batches["finish_us"] - batches["start_us"]).to_numpy() / 1e6,
                          "source": "loads"})
    counts = loads["batch"].value_counts()
    often = loads[loads["batch"].map(counts) >= least]
    rest = serial[~serial["batch"].isin(often["batch"].unique())].assign(source="serial")
    return pd.concat([often, rest[["batch", "service_s", "source"]]], ignore_index=True)


def load_frames(rows: pd.DataFrame, settings: Sequence[ServerSettings]) -> list[pd.DataFrame]:
    """The loads of one-instance settings among a requests file's ``rows``, a frame each (a load is
    one (setting, level)): the ``frames`` ``service_table`` was given for them."""
    alone = {s.name for s in settings if s.instances == 1}
    return [load for (setting, _), load in rows.groupby(["setting", "level"], sort=False) if setting in alone]


def resumed_service(earlier: pd.DataFrame | None, earlier_service: pd.DataFrame | None,
                    settings: Sequence[ServerSettings], alone: Sequence[pd.DataFrame],
                    serial: pd.DataFrame) -> pd.DataFrame:
    """``service_table`` of a model's loads on disk (``earlier``, its requests file; None where it has
    none) and this run's (``alone``: those of one-instance settings; ``serial``: this run's serial
    passes) together: the table one run serving every setting would have built, rows in another
    order. The earlier serial passes survive in ``earlier_service`` (the table on disk) only for the
    sizes its loads formed rarely; those are all a table with more loads can take from them, since
    more loads only make more sizes frequent."""
    if earlier is None:
        return service_table(alone, serial)
    kept = (earlier_service[earlier_service["source"] == "serial"][["batch", "service_s"]]
            if earlier_service is not None else pd.DataFrame({"batch": [], "service_s": []}))
    return service_table(load_frames(earlier, settings) + list(alone), pd.concat([kept, serial], ignore_index=True))


def batch_service(trace: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Triton's time per batch (``COMPUTE_END - COMPUTE_START``, s) of the serial requests whose ids
    start with ``prefix`` and name their batch size (``<prefix><b>-<i>``)."""
    rows = trace[trace["request_id"].str.startswith(prefix)]
    batch = rows["request_id"].str.slice(len(prefix)).str.split("-").str[0].astype(int)
    return pd.DataFrame({"batch": batch.to_numpy(),
                         "service_s": (rows["COMPUTE_END"] - rows["COMPUTE_START"]).to_numpy() / 1e9})


def load_frame(trace: pd.DataFrame, run: ClientRun, start_at: float, offsets_s: np.ndarray) -> pd.DataFrame:
    """One load's requests in :mod:`collectors.serving_check`'s columns (microseconds from the
    load's start): Triton's receipt and its batch's start and end, the client's send and answer,
    and the size of the batch each rode in (the requests that share its ``COMPUTE_START``)."""
    by_id = trace.set_index("request_id")
    missing = [i for i in run.request_ids if i not in by_id.index]
    if missing:
        raise ValueError(f"{len(missing)} requests are not in Triton's trace (the first: {missing[0]})")
    rows = by_id.loc[run.request_ids]
    sizes = rows.groupby("COMPUTE_START")["COMPUTE_START"].transform("size").to_numpy()

    def us_ns(ns: pd.Series) -> np.ndarray:
        return np.round(ns.to_numpy() / 1e3 - start_at * 1e6).astype(np.int64)

    # A batch is read back by its start in microseconds (training.load_batches); two instances' batches
    # that start within one microsecond would read as one, so a later one is moved on by a microsecond.
    starts_ns = rows["COMPUTE_START"].to_numpy()
    batch_ns = np.unique(starts_ns)
    batch_us = np.round(batch_ns / 1e3 - start_at * 1e6).astype(np.int64)
    for i in range(1, len(batch_us)):
        batch_us[i] = max(batch_us[i], batch_us[i - 1] + 1)

    def us_s(seconds: np.ndarray) -> np.ndarray:
        return np.round((seconds - start_at) * 1e6).astype(np.int64)

    return pd.DataFrame({
        "index": np.arange(len(rows), dtype=np.int32), "scheduled_us": np.round(offsets_s * 1e6).astype(np.int64),
        "sent_us": us_s(run.sent_s), "received_us": us_ns(rows["REQUEST_START"]),
        "start_us": batch_us[np.searchsorted(batch_ns, starts_ns)], "finish_us": us_ns(rows["COMPUTE_END"]),
        "answered_us": us_s(run.answered_s), "batch_size": sizes.astype(np.int16),
    })


def run_triton_check(out: Path, device: str = "cuda", models: Sequence[str] = MODELS, precision: str = "fp16",
                     settings: Sequence[ServerSettings] = SETTINGS, levels: Sequence[float] = LEVELS,
                     seconds_per_level: float = SECONDS_PER_LEVEL, seed: int = 0,
                     requests: tuple[int, int] = (MIN_REQUESTS, MAX_REQUESTS), reps: int = SERVICE_REPS,
                     say: Callable[[str], None] = lambda line: None, rates_qps: Sequence[float] = ()) -> Path:
    """Measure every (model, setting) not yet on disk under real Triton on ``device``; returns the folder. On a
    GPU each batch is a CUDA-graph replay; on a CPU an eager forward (what the tests run).

    ``rates_qps``, where given, are the loads instead of ``levels``: requests a second, as a
    capacity plan asks for them (``benchmarks/plan_check.py``), each recorded at its level of the
    capacity measured. A rate at or above ``MAX_RATE_SHARE`` of that capacity is not offered (an
    open-loop overload is what crashed Triton) and is said."""
    import torch

    check_rates(rates_qps)
    pytriton_version = require_pytriton()
    fp = read_fingerprint(device)
    folder = Path(out) / fp.device_id / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    more = {"rates_qps": [float(r) for r in rates_qps]} if rates_qps else {}
    check_alone_sizes(settings)
    several = max(s.instances for s in settings)
    server = "one instance" if several == 1 else "instances as each setting names, a thread and CUDA stream each"
    write_meta(folder, fp, precision, () if rates_qps else levels, seconds_per_level, seed, torch.get_num_threads(),
               settings, server=f"tritonserver (nvidia-pytriton {pytriton_version}), {server}, gRPC client", **more)
    max_batch = max(s.max_batch for s in settings)
    loads = Loads(levels, tuple(rates_qps))
    expected, column = (list(rates_qps), "offered_qps") if rates_qps else (list(levels), "level")
    with ending_on_stop(models, say) as started_models:
        for item in models_to_serve(folder, models, precision, settings, say, expected, column):
            started_models.append(item.name)
            earlier = (item.earlier_file("service"), item.earlier_file("graph-service"))
            served = Served()
            with model_kept(folder, item, settings, expected, say,
                            partial(_write_model, folder, item, settings, served, *earlier, say), column):
                started = time.perf_counter()
                model, served.replay = timed_model(item.name, precision, max_batch, fp.kind, reps)
                copies = Copies.of(model, several, max((s.max_batch for s in settings if s.instances > 1),
                                                       default=1), fp.kind)
                say(f"{item.name}: captured and replayed 1..{max_batch} in {time.perf_counter() - started:.0f} s"
                    + (f" ({several} copies)" if several > 1 else ""))
                _serve_model(copies, settings, loads, seconds_per_level, seed, requests, reps, say, served,
                             item.serves, partial(_write_so_far, folder, item, settings, served, *earlier, say))
            del model, copies
            if fp.kind == "cuda":
                torch.cuda.empty_cache()
    return folder


@dataclass
class Served:
    """What serving a model has measured so far, kept as it comes so that a stop loses none of it:
    its replay alone (``timed_model``'s), every load answered in full and traced (``frames``; those
    of one-instance settings also in ``alone``) and each setting's serial pass."""

    replay: dict[int, np.ndarray] = field(default_factory=dict)
    frames: list[pd.DataFrame] = field(default_factory=list)
    alone: list[pd.DataFrame] = field(default_factory=list)
    serial: list[pd.DataFrame] = field(default_factory=list)


def _write_model(folder: Path, item: ModelToServe, settings: Sequence[ServerSettings], served: Served,
                 earlier_service: pd.DataFrame | None, earlier_replay: pd.DataFrame | None,
                 say: Callable[[str], None]) -> pd.DataFrame | None:
    """The model's files with the loads on disk before and ``served``'s: the service table over both
    (``resumed_service``), the replays of both runs, then the requests (last: they say which settings
    are served, so a process killed between leaves those to a resumed run); returns the requests as
    on disk (``item.earlier`` when this run answered no load in full, said, and nothing is written)."""
    if not served.frames:
        say(f"{item.name}: no load was answered in full; nothing written")
        return item.earlier
    serial = (pd.concat(served.serial, ignore_index=True) if served.serial
              else pd.DataFrame({"batch": [], "service_s": []}))
    service = resumed_service(item.earlier, earlier_service, settings, served.alone, serial)
    name, precision = item.name, item.precision
    write_parquet(service.assign(model=name, precision=precision), folder / f"service-{name}-{precision}.parquet")
    replay = timed_frame(name, precision, served.replay)
    write_parquet(pd.concat([earlier_replay, replay], ignore_index=True) if earlier_replay is not None else replay,
                  folder / f"graph-service-{name}-{precision}.parquet")
    rows = item.rows(served.frames)
    write_requests(rows, item.target)
    return rows


def _write_so_far(folder: Path, item: ModelToServe, settings: Sequence[ServerSettings], served: Served,
                  earlier_service: pd.DataFrame | None, earlier_replay: pd.DataFrame | None,
                  say: Callable[[str], None]) -> None:
    """``_write_model`` once a setting is served, where some load was answered in full (quietly where none was)."""
    if served.frames:
        _write_model(folder, item, settings, served, earlier_service, earlier_replay, say)


def _serve_model(copies: Copies, settings: Sequence[ServerSettings], loads: Loads,
                 seconds: float, seed: int, requests: tuple[int, int], reps: int,
                 say: Callable[[str], None], served: Served,
                 serves: Callable[[ServerSettings], bool] = lambda setting: True,
                 setting_done: Callable[[], None] = lambda: None) -> None:
    """The model under each setting that ``serves``, each in a Triton of its own: Triton's service
    time of every batch size the setting allows and its capacity, then every load, into ``served``
    (a batch beside another instance's is not its time alone: only one-instance settings' loads go
    to ``served.alone``, for ``service_table``). A server that dies ends its setting's loads (said,
    and the loads it answered kept; a setting whose server died before its trace wrote a part is
    left out, said); the next setting starts a new one. A stop (or any other failure) ends the
    setting in progress the same way, its trace read as far as it got, and then goes on up.
    ``setting_done`` runs after each setting served (the caller writes the model's files then, so
    that a kill no handler sees, SIGKILL, loses at most the setting in progress)."""
    model = copies.models[0]
    for setting_index, setting in enumerate(settings):
        if not serves(setting):
            continue
        ended: BaseException | None = None
        trace: pd.DataFrame | None = None
        done: list[tuple[float, float, float, ClientRun, np.ndarray]] = []
        try:
            with tempfile.TemporaryDirectory() as scratch:
                trace_file = Path(scratch) / "trace.json"
                try:
                    _serve_setting(copies, setting, setting_index, trace_file, BatchLog(), loads, seconds, seed,
                                   requests, reps, say, done)
                except BaseException as exc:
                    ended = exc
                    stop = stop_in(exc)
                    say(f"  {setting.name}: " + (stop_said(stop) if stop is not None else f"failed ({exc!r})")
                        + f"; keeping the {len(done)} loads answered in full")
                try:
                    trace = read_trace(trace_file)
                except EmptyTrace as exc:  # a server that died before its trace wrote a part: the next setting
                    say(f"  {setting.name}: left out, {exc}")
            if trace is not None:
                _keep_loads(trace, done, model, setting, served, say)
        except BaseException as later:  # reading what a stopped setting left failed: the stop still ends the run
            if ended is None:
                raise
            raise ended from later
        if ended is not None:
            raise ended
        setting_done()


def _keep_loads(trace: pd.DataFrame, done: Sequence[tuple[float, float, float, ClientRun, np.ndarray]],
                model: ServedModel, setting: ServerSettings, served: Served, say: Callable[[str], None]) -> None:
    """A setting's loads answered in full joined to its trace, into ``served`` with its serial pass; a
    load the trace lacks (a server that died, or was stopped, before writing its last part) said and
    left out."""
    for qps, capacity, start_at, run, offsets in done:
        try:
            frame = load_frame(trace, run, start_at, offsets)
        except ValueError as exc:  # a server that died lost the trace's last part
            say(f"  {setting.name} at {qps:g} qps: left out, {exc}")
            continue
        # the rate as offered, exactly (a plan's load is found by it), and its level of the capacity
        served.frames.append(frame.assign(model=model.name, precision=model.precision, setting=setting.name,
                                          level=qps / capacity, capacity_qps=capacity, offered_qps=qps))
        if setting.instances == 1:
            served.alone.append(served.frames[-1])
    served.serial.append(batch_service(trace, "s").assign(setting=setting.name))


def _serve_setting(copies: Copies, setting: ServerSettings, setting_index: int, trace_file: Path, log: BatchLog,
                   loads: Loads, seconds: float, seed: int, requests: tuple[int, int], reps: int,
                   say: Callable[[str], None], done: list[tuple[float, float, float, ClientRun, np.ndarray]]) -> None:
    """One Triton run: the serial pass, then the loads; appends (the rate offered, capacity, start,
    the client's run, the schedule) of each load answered in full to ``done`` as it ends, so that a
    stop keeps those before it."""
    name = model_name(copies.name, setting)
    context = multiprocessing.get_context("spawn")
    with triton_server(copies, setting, trace_file, log) as (url, headers):
        control, there = context.Pipe()
        client = context.Process(target=client_main, args=(url, there), daemon=True)
        client.start()
        try:
            try:
                capacity = _capacity(control, url, headers, name, setting, setting_index, log, reps, requests, say)
            except RuntimeError as exc:  # the server died: the next setting starts another
                say(f"  {setting.name}: {exc}; the setting's loads are skipped")
                return
            for level_index, qps in enumerate(loads.rates(capacity)):
                level = qps / capacity
                if loads.rates_qps and level >= MAX_RATE_SHARE:
                    say(f"  {setting.name}: {qps:g} qps not offered, {level:.2f} of the {capacity:.0f} qps "
                        f"measured (at most {MAX_RATE_SHARE:g})")
                    continue
                n = int(np.clip(qps * seconds, *requests))
                offsets = np.cumsum(np.random.default_rng(seed + 1000 * setting_index + level_index)
                                    .exponential(1.0 / qps, n))
                start_at = time.perf_counter() + 0.3
                run = _ask(control, ("load", name, f"L{setting_index}-{level_index}-", offsets, start_at))
                if run.errors:
                    say(f"  {setting.name} at {level:.2f}: Triton failed ({'; '.join(run.errors)}); "
                        "the setting's other loads are skipped")
                    break
                done.append((qps, capacity, start_at, run, offsets))
                latency = (run.answered_s - run.sent_s)[n // 10:] * 1e3
                say(f"  {setting.name} at {level:.2f} x {capacity:.0f} = {qps:g} qps: {n} requests, client p50 "
                    f"{np.percentile(latency, 50):.3f} p99 {np.percentile(latency, 99):.3f} ms")
        except BaseException:
            with contextlib.suppress(OSError):
                client.terminate()  # a stop or a failure mid-job: the job's answer is no longer wanted
            raise
        finally:
            # the client may be gone (a stop's SIGTERM reaches the whole process group): its closed
            # pipe must not raise over the exception on its way out
            with contextlib.suppress(OSError):
                control.send(None)
            client.join(timeout=10)


@dataclass(frozen=True)
class Loads:
    """A setting's loads: fractions of the capacity measured (``levels``), or, where given, request
    rates (``rates_qps``, a capacity plan's loads)."""

    levels: Sequence[float]
    rates_qps: tuple[float, ...] = ()

    def rates(self, capacity_qps: float) -> list[float]:
        """Each load's requests a second, given the capacity the closed loop measured."""
        return list(self.rates_qps) if self.rates_qps else [level * capacity_qps for level in self.levels]


def check_alone_sizes(settings: Sequence[ServerSettings]) -> None:
    """ValueError unless every setting of k instances at max batch b has a one-instance setting beside
    it of max batch k x b or more: the simulator charges a batch beside others the time alone of their
    summed size, and only a one-instance setting's batches (its loads' and its serial pass's) are a
    batch's time alone (``service_table``)."""
    alone = max((s.max_batch for s in settings if s.instances == 1), default=0)
    for setting in settings:
        if setting.instances > 1 and setting.instances * setting.max_batch > alone:
            raise ValueError(f"setting {setting.name}: its instances' summed batches reach "
                             f"{setting.instances * setting.max_batch}, but no one-instance setting times batches "
                             f"that large (the largest: {alone or 'none'}); add --setting "
                             f"mb{setting.instances * setting.max_batch}-nodelay")


def check_rates(rates_qps: Sequence[float]) -> None:
    """ValueError naming a rate that is not a positive, finite number of requests a second up to
    the simulator's ``MAX_RATE_QPS``, or one given twice (two loads of one rate would share their
    (model, setting, level) and be read as one)."""
    for rate in rates_qps:
        if not is_finite_number(rate) or not 0 < rate <= MAX_RATE_QPS:
            raise ValueError(f"--rates: each must be a number of requests a second in (0, {MAX_RATE_QPS:g}], "
                             f"not {rate!r}")
    if len(set(rates_qps)) != len(rates_qps):
        raise ValueError(f"--rates: a rate is given twice ({', '.join(f'{r:g}' for r in rates_qps)})")


def _capacity(control: Any, url: str, headers: dict[str, str], name: str, setting: ServerSettings,
              setting_index: int, log: BatchLog, reps: int, requests: tuple[int, int],
              say: Callable[[str], None]) -> float:
    """The serial pass (every batch size as one request of b samples), then the closed loop at
    saturation; returns the setting's capacity in one-sample requests a second."""
    import tritonclient.grpc as grpc

    for b in range(1, setting.max_batch + 1):  # one request of b samples at a time: a batch of b
        _checked(_ask(control, ("serial", name, f"s{b}-", reps, b)))
    with contextlib.closing(grpc.InferenceServerClient(url)) as stats:
        serial = batch_totals(stats.get_inference_statistics(name, headers=headers, as_json=True))
        mean = mean_seconds(serial)
        # Capacity from what the instance does when kept busy with one-sample requests: the
        # serial pass's batches (one request of b samples) cost less than the loads' (see
        # service_table), and levels from them would be overloads.
        count = int(np.clip(capacity_qps(mean, setting.max_batch) * setting.instances * SATURATED_S, *requests))
        _checked(_ask(control, ("closed", name, f"B{setting_index}-", count,
                                IN_FLIGHT_BATCHES * setting.max_batch * setting.instances)))
        after = batch_totals(stats.get_inference_statistics(name, headers=headers, as_json=True))
        # sizes run at least thrice; on a slow host the closed loop may form none that often
        saturated = mean_seconds(after, serial, 3) or mean_seconds(after, serial, 1)
    replay = {b: np.median([t1 - t0 for size, t0, t1 in log.rows if size == b]) for b in (1, setting.max_batch)}
    if setting.instances == 1:
        capacity = max(b / t for b, t in saturated.items())
    else:  # k instances kept busy: k batches at once, the closed loop's samples over its batches' summed time
        ran = {b: (count - serial.get(b, (0, 0))[0], ns - serial.get(b, (0, 0))[1]) for b, (count, ns) in after.items()}
        capacity = setting.instances * sum(b * n for b, (n, _) in ran.items()) / sum(ns for n, ns in ran.values()) * 1e9
    say(f"  {setting.name}: Triton's service (ms), one request of b samples: "
        + " ".join(f"b{b} {mean[b] * 1e3:.3f}" for b in sorted(mean)) + "; saturated, b requests: "
        + " ".join(f"b{b} {t * 1e3:.3f}" for b, t in sorted(saturated.items()))
        + ("; the function's alone " if setting.instances == 1 else "; the function's (serial pass and closed loop) ")
        + " ".join(f"b{b} {t * 1e3:.3f}" for b, t in replay.items()) + f"; capacity {capacity:.0f} qps "
        f"(the serial pass's {capacity_qps(mean, setting.max_batch):.0f})")
    return capacity


def _ask(control: Any, job: tuple[Any, ...]) -> ClientRun:
    control.send(job)
    run: ClientRun = control.recv()
    return run


def _checked(run: ClientRun) -> ClientRun:
    if run.errors:
        raise RuntimeError(f"Triton answered with errors: {'; '.join(run.errors)}")
    return run
