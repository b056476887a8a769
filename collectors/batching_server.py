"""A real dynamic-batching server on the GPU: what the capacity simulator is checked against.

A server process built the way Triton's dynamic batcher is documented to work, so that the
simulator is checked on queueing under its own rule (Triton itself, through PyTriton, is checked
by :mod:`collectors.triton_serving`, whose Python backend adds milliseconds of its own per batch):

- **Requests** arrive over a pipe from a separate load-generator process
  (:mod:`collectors.load_client`) at Poisson times, open loop (the client never waits for answers,
  as a fleet of independent users does not). Each carries one sample.
- **The batcher** is Triton's documented rule, the very function the simulator uses
  (:func:`predictor.capacity.batch_rule.batch_to_send`): one FIFO queue, maximum batch, preferred
  sizes, maximum queue delay, one model instance.
- **The model** is a zoo model with a CUDA graph captured for every batch size up to the maximum:
  a batch of ``b`` is one replay of graph ``b``, as a Triton backend with CUDA graphs would run it.

One thread polls everything (arrivals, the running batch's completion event, the queue delay):
with a thread per job they would fight over the GIL and stamp times late. A request's latency runs
from the server receiving it to the GPU finishing its batch (the server-side latency Triton's
metrics report, and what the simulator models); responses are not sent back, and the client's send
time is kept so that the pipe's delay can be seen.
"""

from __future__ import annotations

import functools
import re
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol

import numpy as np
import torch

from collectors.forward_timing import capture
from collectors.model_build import ModelSource, build_model
from collectors.nas_space import NasModel, seed_of
from collectors.precision_flags import precision_flags, torch_dtype
from collectors.zoo_models import get_zoo_model
from predictor.capacity.batch_rule import batch_to_send
from predictor.capacity.instance_sharing import MAX_INSTANCES
from predictor.capacity.serving_path import EMPTY_MODEL
from predictor.precision import get_precision

#: a request on the wire: its index and the client's send time (perf_counter seconds), as float64s
REQUEST_DTYPE = np.dtype([("index", "<f8"), ("sent_s", "<f8")])


@dataclass(frozen=True)
class ServerSettings:
    """One batching setting of the server: Triton's max_batch_size, preferred sizes and delay, and the
    model instances on the GPU (``instance_group { count }``: only the Triton check serves several)."""

    name: str
    max_batch: int
    preferred: tuple[int, ...] = ()
    max_queue_delay_us: float = 0.0
    instances: int = 1

    @classmethod
    def parse(cls, name: str) -> ServerSettings:
        """A setting from its name, as the serving folders name them: ``mb<max batch>``, then
        ``-pref<sizes, comma-separated>`` if any, then ``-delay<microseconds>us`` or ``-nodelay``, then
        ``-x<instances>`` for more than one (``mb8-nodelay``, ``mb32-pref16,32-delay1000us``,
        ``mb4-nodelay-x2``); ValueError naming what is wrong."""
        match = SETTING_NAME.fullmatch(name)
        if match is None:
            raise ValueError(f"setting {name!r}: expected mb<max batch>[-pref<a,b,..>](-delay<us>us|-nodelay)"
                             "[-x<instances>], as mb32-pref16,32-delay1000us or mb4-nodelay-x2")
        max_batch = int(match["max_batch"])
        preferred = tuple(int(p) for p in match["preferred"].split(",")) if match["preferred"] else ()
        if max_batch < 1 or not all(1 <= p <= max_batch for p in preferred) or len(set(preferred)) != len(preferred):
            raise ValueError(f"setting {name!r}: preferred sizes must be distinct, in 1..max batch {max_batch}")
        instances = int(match["instances"] or 1)
        if not 1 <= instances <= MAX_INSTANCES:
            raise ValueError(f"setting {name!r}: instances must be 1-{MAX_INSTANCES} (the counts the sharing of a "
                             "GPU was measured for)")
        return cls(name, max_batch, tuple(sorted(preferred)), float(match["delay"] or 0), instances)


#: a setting's name: ``ServerSettings.parse``
SETTING_NAME = re.compile(r"mb(?P<max_batch>\d+)(?:-pref(?P<preferred>\d+(?:,\d+)*))?"
                          r"(?:-delay(?P<delay>\d+)us|-nodelay)(?:-x(?P<instances>\d+))?")


class ServedModel(Protocol):
    """What the server runs: ``launch`` starts a batch, ``done`` says whether it has finished
    (polled, never blocking, so that arrivals are stamped while a batch runs)."""

    name: str
    precision: str

    def launch(self, batch: int) -> None: ...

    def done(self) -> bool: ...


def model_source(name: str) -> ModelSource:
    """A zoo model by name, or a NAS architecture (``nas-<seed>``), with the zoo's error otherwise."""
    return NasModel(seed_of(name)) if name.startswith("nas-") else get_zoo_model(name)


class CapturedModel:
    """A zoo model on the GPU with one CUDA graph per batch size 1..max_batch, on static input
    buffers: a batch is one replay, and an event after it says when the GPU is through."""

    def __init__(self, name: str, precision: str, max_batch: int) -> None:
        prec = get_precision(precision)
        zoo = model_source(name)
        dtype = torch_dtype(prec)
        self.name, self.precision = name, precision
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        with torch.inference_mode(), precision_flags(prec):
            self.module = build_model(zoo, torch.device("cuda"), dtype)
            self.inputs = {b: zoo.example_input(b, torch.device("cuda"), dtype) for b in range(1, max_batch + 1)}
            for batch, x in self.inputs.items():
                self.graphs[batch] = capture(functools.partial(self.module, x))
        self.event = torch.cuda.Event()

    def launch(self, batch: int) -> None:
        self.graphs[batch].replay()
        self.event.record()

    def done(self) -> bool:
        return bool(self.event.query())


class CpuModel:
    """A zoo model run eagerly on the CPU: a batch runs to its end inside ``launch`` (nothing to
    poll), so arrivals meanwhile are stamped when it returns. Serves the check on a CPU, and its tests."""

    def __init__(self, name: str, precision: str, max_batch: int) -> None:
        prec = get_precision(precision)
        zoo = model_source(name)
        dtype = torch_dtype(prec)
        self.name, self.precision = name, precision
        with torch.inference_mode():
            self.module = zoo.build().to(dtype=dtype).eval()
            self.inputs = {b: zoo.example_input(b, torch.device("cpu"), dtype) for b in range(1, max_batch + 1)}
            for x in self.inputs.values():
                self.module(x)

    def launch(self, batch: int) -> None:
        with torch.inference_mode():
            self.module(self.inputs[batch])

    def done(self) -> bool:
        return True


class EmptyModel:
    """A model whose batches take no time (``launch`` does nothing, ``done`` at once): what a server
    spends on each batch of it is the server's own path, on any host, with or without a GPU."""

    def __init__(self, precision: str) -> None:
        self.name, self.precision = EMPTY_MODEL, precision

    def launch(self, batch: int) -> None:
        pass

    def done(self) -> bool:
        return True


def service_times(model: ServedModel, batches: range, reps: int = 40) -> dict[int, np.ndarray]:
    """Seconds per batch, measured the way the server runs one (replay, then wait on an event),
    batch sizes interleaved so that drift lands on all alike: the latency(batch) the simulator is
    given when it is checked on queueing alone."""
    out: dict[int, list[float]] = {b: [] for b in batches}
    for _ in range(reps):
        for b in batches:
            t0 = time.perf_counter()
            model.launch(b)
            while not model.done():
                pass
            out[b].append(time.perf_counter() - t0)
    return {b: np.asarray(v) for b, v in out.items()}


@dataclass
class ServedRun:
    """What the server did for one load: per request, per batch (perf_counter seconds)."""

    sent_s: np.ndarray
    received_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    batch_size: np.ndarray  # of the batch each request rode in


def receive_arrivals(conn: Connection, sent: np.ndarray, received: np.ndarray, queue: deque[int]) -> None:
    """Take every request waiting on ``conn``: its client send time and its receipt (now) recorded at its
    index, the index queued."""
    while conn.poll(0):
        stamp = time.perf_counter()
        for index, sent_at in np.frombuffer(conn.recv_bytes(), dtype=REQUEST_DTYPE):
            i = int(index)
            sent[i], received[i] = sent_at, stamp
            queue.append(i)


def serve(conn: Connection, model: ServedModel, settings: ServerSettings, requests: int,
          timeout_s: float) -> ServedRun:
    """Serve ``requests`` requests arriving on ``conn`` with ``settings``; returns when all are done
    (or raises after ``timeout_s``: a server that cannot keep up must not hang the sweep)."""
    sent = np.full(requests, np.nan)
    received = np.full(requests, np.nan)
    start = np.full(requests, np.nan)
    finish = np.full(requests, np.nan)
    size_of = np.zeros(requests, dtype=np.int32)
    queue: deque[int] = deque()
    preferred = tuple(sorted(settings.preferred))
    delay_s = settings.max_queue_delay_us * 1e-6
    running: list[int] | None = None
    finished = 0
    deadline = time.perf_counter() + timeout_s
    while finished < requests:
        now = time.perf_counter()
        if now > deadline:
            raise TimeoutError(f"{model.name} {settings.name}: {finished} of {requests} requests done in {timeout_s} s")
        receive_arrivals(conn, sent, received, queue)
        if running is not None and model.done():
            stamp = time.perf_counter()
            finish[running] = stamp
            finished += len(running)
            running = None
        if running is None and queue:
            now = time.perf_counter()
            size = batch_to_send(len(queue), now - received[queue[0]], settings.max_batch, preferred, delay_s)
            if size:
                running = [queue.popleft() for _ in range(size)]
                start[running] = now
                size_of[running] = size
                model.launch(size)
    return ServedRun(sent, received, start, finish, size_of)
