"""The load generator that drives a real Triton server (:mod:`collectors.triton_serving`) over gRPC.

Its own process, as a fleet of clients is: open loop (a request is sent at its time whether or not
earlier ones were answered, with ``tritonclient``'s non-blocking ``async_infer``), one sample per
request, each named by ``request_id`` so that Triton's trace can be joined to it. Inputs are built
before the schedule starts, and the sender sleeps until half a millisecond before an arrival and
spins the rest (:mod:`collectors.load_client` does the same for the pipe-fed server). Send and
answer times are ``time.perf_counter`` (CLOCK_MONOTONIC on Linux), the clock Triton stamps its trace
with, so the two sets of times compare directly.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

#: sleep until this long before an arrival, then spin
SPIN_S = 0.0005
#: input and output tensor names of every model the Triton check binds
INPUT, OUTPUT = "index", "echo"


@dataclass
class ClientRun:
    """One job's requests as the client saw them (perf_counter seconds; NaN where unanswered)."""

    request_ids: list[str]
    sent_s: np.ndarray
    answered_s: np.ndarray
    errors: list[str]  # the first few failures, by request id


def _inputs(grpc: Any, values: np.ndarray) -> list[Any]:
    tensor = grpc.InferInput(INPUT, list(values.shape), "FP64")
    tensor.set_data_from_numpy(values)
    return [tensor]


def run_serial(client: Any, grpc: Any, model: str, prefix: str, count: int, batch: int) -> ClientRun:
    """Send ``count`` requests of ``batch`` samples one at a time, each once the one before is
    answered: Triton then runs each alone, as a batch of ``batch``."""
    ids = [f"{prefix}{i}" for i in range(count)]
    sent, answered = np.full(count, np.nan), np.full(count, np.nan)
    errors: list[str] = []
    for i, request_id in enumerate(ids):
        payload = _inputs(grpc, np.full((batch, 1), float(i)))
        sent[i] = time.perf_counter()
        try:
            client.infer(model, payload, request_id=request_id)
        except Exception as exc:  # tritonclient's InferenceServerException, or the channel's
            errors.append(f"{request_id}: {exc}")
            break
        answered[i] = time.perf_counter()
    return ClientRun(ids, sent, answered, errors)


class _Answers:
    """One job's one-sample requests as the client tracks them: ids, payloads, send and answer
    times, the first few failures, and a semaphore released by each answer (tritonclient calls
    ``callback(i)``'s function on its own thread)."""

    def __init__(self, grpc: Any, prefix: str, count: int, slots: int) -> None:
        self.ids = [f"{prefix}{i}" for i in range(count)]
        self.payloads = [_inputs(grpc, np.full((1, 1), float(i))) for i in range(count)]
        self.sent, self.answered = np.full(count, np.nan), np.full(count, np.nan)
        self.errors: list[str] = []
        self.released = threading.Semaphore(slots)

    def callback(self, i: int) -> Any:
        def answered(result: Any, error: Any) -> None:
            self.answered[i] = time.perf_counter()
            if error is not None and len(self.errors) < 5:
                self.errors.append(f"{self.ids[i]}: {error}")
            self.released.release()
        return answered

    def send(self, client: Any, model: str, i: int) -> None:
        self.sent[i] = time.perf_counter()
        client.async_infer(model, self.payloads[i], self.callback(i), request_id=self.ids[i])

    def run(self) -> ClientRun:
        return ClientRun(self.ids, self.sent, self.answered, self.errors)


def run_closed(client: Any, grpc: Any, model: str, prefix: str, count: int, in_flight: int,
               timeout_s: float = 60.0) -> ClientRun:
    """Send ``count`` one-sample requests keeping ``in_flight`` unanswered at all times (closed
    loop): the instance stays busy with full batches while Triton's queue stays short. (An open
    loop above capacity grows the queue without end, and PyTriton's server has crashed so.)"""
    job = _Answers(grpc, prefix, count, in_flight)
    deadline = time.perf_counter() + timeout_s
    for i in range(count):
        if not job.released.acquire(timeout=max(0.0, deadline - time.perf_counter())) or job.errors:
            job.errors.append(f"stopped after {i} of {count} requests")
            break
        job.send(client, model, i)
    for _ in range(in_flight):  # the last ones answered
        job.released.acquire(timeout=max(0.0, deadline - time.perf_counter()))
    return job.run()


def run_schedule(client: Any, grpc: Any, model: str, prefix: str, offsets_s: np.ndarray, start_at: float,
                 timeout_s: float = 60.0) -> ClientRun:
    """Send request ``i`` (one sample whose value is its index) at ``start_at + offsets_s[i]`` and
    wait for every answer, or ``timeout_s`` past the last send."""
    n = len(offsets_s)
    job = _Answers(grpc, prefix, n, 0)
    due = start_at + np.asarray(offsets_s, dtype=float)
    for i in range(n):
        while (wait := due[i] - time.perf_counter()) > 0:
            if wait > SPIN_S:
                time.sleep(wait - SPIN_S)
        job.send(client, model, i)
    deadline = time.perf_counter() + timeout_s
    for _ in range(n):
        if not job.released.acquire(timeout=max(0.0, deadline - time.perf_counter())):
            job.errors.append(f"{int(np.isnan(job.answered).sum())} of {n} requests unanswered after {timeout_s} s")
            break
    return job.run()


def client_main(url: str, control: Connection) -> None:
    """Run jobs as the control pipe sends them, answering each with its :class:`ClientRun`:
    ``("serial", model, prefix, count, batch)``, ``("closed", model, prefix, count, in_flight)`` or
    ``("load", model, prefix, offsets_s, start_at)``; None ends."""
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(url)
    try:
        while True:
            job = control.recv()
            if job is None:
                return
            kind, model, prefix, *rest = job
            if kind == "serial":
                control.send(run_serial(client, grpc, model, prefix, int(rest[0]), int(rest[1])))
            elif kind == "closed":
                control.send(run_closed(client, grpc, model, prefix, int(rest[0]), int(rest[1])))
            else:
                control.send(run_schedule(client, grpc, model, prefix, np.asarray(rest[0], dtype=float),
                                          float(rest[1])))
    finally:
        client.close()
