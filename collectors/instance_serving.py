"""Serve a model with several instances on one GPU under Poisson load: what the capacity simulator's
sharing of a GPU between instances (``predictor/capacity/instance_sharing.py``) is checked against.

The server of :mod:`collectors.batching_server` (one thread polling arrivals and completions, Triton's
documented batching rule, a CUDA graph per batch size, requests from a separate load process), with k
model instances: k copies of the model, each with its own CUDA graphs, replayed on its own CUDA stream,
so that their batches run on the GPU at once, as Triton's instances of a libtorch or in-process Python
backend do. Whenever an instance is free and requests are queued, it takes up to ``max_batch`` of them
(no queue delay: Triton's code forms the same batches, ``predictor.capacity.triton_scheduler``).

Each model's batches are also timed alone, one at a time, up to k x max_batch (the summed batch the
sharing model asks the latency of). Written under ``<out>/<device>/serving-instances/``, as
:mod:`collectors.serving_check` writes its loads (``requests-*.parquet``, ``service-*.parquet``,
``meta.json``), the setting's name carrying its instance count (``mb4-nodelay-x2``). A run stopped part
way (SIGTERM or Ctrl-C) writes the loads it measured and resumes with the settings not on disk, as
:mod:`collectors.serving_check` does. Loads are set at fractions of the capacity the sharing model gives.

    python3 -m collectors.instance_serving --out ROOT [--models a,b] [--settings mb1-nodelay-x1,...]
        [--levels 0.3,0.6,0.8] [--seconds 4]
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from collectors.batching_server import ServedRun, ServerSettings, receive_arrivals, service_times
from collectors.fingerprint import read_fingerprint
from collectors.serving_check import (
    ModelToServe,
    ending_on_stop,
    load_client,
    load_rows,
    model_kept,
    models_to_serve,
    start_load,
    write_meta,
    write_model,
)
from predictor.capacity.instance_sharing import MEASURED_SHARING, instances_capacity_qps

MODELS = ("resnet34", "convnext_small", "electra-small")
LEVELS = (0.3, 0.6, 0.8)
MIN_REQUESTS, MAX_REQUESTS = 2000, 30000


def instance_setting(name: str) -> ServerSettings:
    """A setting this server serves: ``mb<max batch>-nodelay[-x<instances>]`` (``ServerSettings.parse``),
    without a queue delay or preferred sizes (it batches as Triton does without them); ValueError
    naming the form."""
    setting = ServerSettings.parse(name)
    if setting.max_queue_delay_us or setting.preferred:
        raise ValueError(f"setting {name!r}: this server batches without a delay or preferred sizes: expected "
                         "mb<max batch>-nodelay-x<instances>, as mb4-nodelay-x2")
    return setting


SETTINGS = tuple(instance_setting(n) for n in ("mb1-nodelay-x1", "mb1-nodelay-x2", "mb1-nodelay-x4",
                                               "mb4-nodelay-x2"))


class Instances:
    """k copies of a captured model, each replaying on a CUDA stream of its own."""

    def __init__(self, name: str, precision: str, max_batch: int, count: int, timed_up_to: int) -> None:
        import torch

        from collectors.batching_server import CapturedModel

        # the first copy also captures the summed batches, for the timing alone
        self.copies = [CapturedModel(name, precision, timed_up_to if i == 0 else max_batch) for i in range(count)]
        self.streams = [torch.cuda.Stream() for _ in range(count)]
        self.name, self.precision = name, precision

    def launch(self, instance: int, batch: int) -> None:
        import torch

        with torch.cuda.stream(self.streams[instance]):
            self.copies[instance].launch(batch)

    def done(self, instance: int) -> bool:
        return self.copies[instance].done()


def serve_instances(conn: Connection, model: Instances, setting: ServerSettings, requests: int,
                    timeout_s: float) -> ServedRun:
    """``batching_server.serve`` with ``setting.instances`` instances: each free instance takes up to
    max_batch of the queued requests at once (no delay), all polled by one thread."""
    sent, received, start, finish = (np.full(requests, np.nan) for _ in range(4))
    size_of = np.zeros(requests, dtype=np.int32)
    queue: deque[int] = deque()
    running: list[list[int] | None] = [None] * setting.instances
    finished = 0
    deadline = time.perf_counter() + timeout_s
    while finished < requests:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{model.name} {setting.name}: {finished} of {requests} requests done in {timeout_s} s")
        receive_arrivals(conn, sent, received, queue)
        for instance, batch in enumerate(running):
            if batch is not None and model.done(instance):
                finish[batch] = time.perf_counter()
                finished += len(batch)
                running[instance] = None
        for instance in range(setting.instances):
            if running[instance] is None and queue:
                size = min(len(queue), setting.max_batch)
                batch = [queue.popleft() for _ in range(size)]
                start[batch] = time.perf_counter()
                size_of[batch] = size
                running[instance] = batch
                model.launch(instance, size)
    return ServedRun(sent, received, start, finish, size_of)


def run_instance_check(out: Path, models: Sequence[str] = MODELS, settings: Sequence[ServerSettings] = SETTINGS,
                       levels: Sequence[float] = LEVELS, seconds: float = 4.0, precision: str = "fp16",
                       reps: int = 30, say: Callable[[str], None] = print) -> Path:
    """Every model under every setting not yet on disk for it, at every level; returns the folder (a
    folder holding loads measured otherwise is refused, as ``serving_check.write_meta`` refuses it)."""
    import torch

    fp = read_fingerprint("cuda")
    folder = Path(out) / fp.device_id / "serving-instances"
    folder.mkdir(parents=True, exist_ok=True)
    write_meta(folder, fp, precision, levels, seconds, 0, torch.get_num_threads(), settings,
               server="collectors.instance_serving (streams, one thread)", torch=torch.__version__)
    with ending_on_stop(models, say) as started, load_client() as (requests_recv, control_here):
        for item in models_to_serve(folder, models, precision, settings, say, levels):
            started.append(item.name)
            frames: list[pd.DataFrame] = []
            timed: dict[int, np.ndarray] = {}
            write = partial(write_model, folder, item, frames, timed, item.earlier_file("service"))
            with model_kept(folder, item, settings, levels, say, write):
                _serve_model(item, settings, levels, seconds, reps, requests_recv, control_here, frames, timed,
                             say, write)
            torch.cuda.empty_cache()
    return folder


def _serve_model(item: ModelToServe, settings: Sequence[ServerSettings], levels: Sequence[float], seconds: float,
                 reps: int, requests_recv: Connection, control_here: Connection, frames: list[pd.DataFrame],
                 timed: dict[int, np.ndarray], say: Callable[[str], None],
                 setting_done: Callable[[], object] = lambda: None) -> None:
    """The model's copies captured and timed alone (into ``timed``), then its loads under every setting
    the requests file lacks, each appended to ``frames`` as it ends (kept if a stop cuts the rest);
    ``setting_done`` after each setting (the caller writes the model's files then: a SIGKILL, which no
    handler sees, loses at most the setting in progress)."""
    started = time.perf_counter()
    count = max(s.instances for s in settings)
    max_batch = max(s.max_batch for s in settings)
    summed = max(s.instances * s.max_batch for s in settings)
    model = Instances(item.name, item.precision, max_batch, count, summed)
    timed.update(service_times(model.copies[0], range(1, summed + 1), reps))
    median = {b: float(np.median(v)) for b, v in timed.items()}
    median_ms = {b: s * 1e3 for b, s in median.items()}
    say(f"{item.name}: {count} copies captured, 1..{summed} timed alone in {time.perf_counter() - started:.0f} s; "
        f"b1 {median[1] * 1e3:.3f} ms, b{summed} {median[summed] * 1e3:.3f} ms")
    for s_index, setting in enumerate(settings):
        if not item.serves(setting):
            continue
        capacity = instances_capacity_qps(median_ms.__getitem__, setting.max_batch, setting.instances,
                                          MEASURED_SHARING)
        for l_index, level in enumerate(levels):
            _one_load(model, setting, level, capacity, requests_recv, control_here, seconds, 1000 * s_index + l_index,
                      say, frames)
        setting_done()


def _one_load(model: Instances, setting: ServerSettings, level: float, capacity: float, requests: Connection,
              control: Any, seconds: float, seed: int, say: Callable[[str], None], keep: list[pd.DataFrame]) -> None:
    offsets, start_at = start_load(control, level * capacity, seconds, (MIN_REQUESTS, MAX_REQUESTS), seed)
    run = serve_instances(requests, model, setting, len(offsets), timeout_s=float(offsets[-1]) + 30.0)
    load_rows(model.name, model.precision, setting.name, level, capacity, offsets, start_at, run, control.recv(),
              say, keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--settings", default=",".join(s.name for s in SETTINGS))
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    run_instance_check(args.out, args.models.split(","), [instance_setting(s) for s in args.settings.split(",")],
                       [float(x) for x in args.levels.split(",")], args.seconds)


if __name__ == "__main__":
    main()
