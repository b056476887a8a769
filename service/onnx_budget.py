"""ONNX uploads imported in a child process, within a time and a memory budget.

An uploaded ONNX file is the one input whose cost the service cannot bound before it works: the
wire reader caps nodes (subgraphs included), dims and folded tensors, but onnx's shape inference
is C++ that no Python check interrupts, and an adversary only needs one path the caps missed. So
the import runs in a process of its own (one per worker, started on the first upload, reused):
its address space is capped at what it had when ready plus ``memory_bytes``, and the worker
waits at most ``seconds`` for its answer, then kills it. Past either budget the request is
refused with a 422 ``import-budget`` problem that names the budget and its setting, and the next
upload gets a fresh child. The worker itself never holds the model's tensors, so whatever the
file asks for, the worker's memory does not grow.

The child is a fresh interpreter (``python -m service.onnx_budget``), with none of the worker's
gevent patches, threads or loaded bundles. The worker waits by polling with ``time.sleep``, which gevent
makes cooperative, so other requests on the same worker are served meanwhile; uploads on one
worker take turns on its child (the budget's clock starts when an upload's turn comes).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from predictor.graph import Graph

#: how often the worker looks for the child's answer (and for its turn), in seconds
POLL_S = 0.002
#: the child's exit code when the file alone does not fit under its memory cap
MEMORY_EXIT = 3
#: seconds a child may take to start (import onnx and the importer) before it counts as broken
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ImportBudget:
    """What one ONNX import may take: wall-clock seconds, and bytes of address space above the
    child's own once ready (LATPRED_ONNX_IMPORT_SECONDS, LATPRED_ONNX_IMPORT_MAX_BYTES)."""

    seconds: float
    memory_bytes: int


class ImportBudgetError(Exception):
    """The import passed ``budget`` ('time' or 'memory'); ``str`` says by how much and what to set."""

    def __init__(self, budget: str, detail: str) -> None:
        super().__init__(detail)
        self.budget = budget


class ImportRefused(ValueError):
    """The importer's own refusal (ValueError, or DimsError when ``dims`` is True), carried back."""

    def __init__(self, message: str, dims: bool) -> None:
        super().__init__(message)
        self.dims = dims


class BudgetedImporter:
    """Imports ONNX bytes into a Graph in a child process under ``budget``; one per worker."""

    def __init__(self, budget: ImportBudget) -> None:
        self.budget = budget
        self._turn = threading.Lock()
        self._child: _Child | None = None

    def import_graph(self, data: bytes, name: str | None, batch: int | None,
                     dims: Mapping[str, int] | None) -> Graph:
        """``graph_from_onnx(data, name, batch, dims)``, run in the child. Raises ImportRefused for
        what the importer refuses, ImportBudgetError past the budget."""
        while not self._turn.acquire(blocking=False):  # a real lock, waited on cooperatively
            time.sleep(POLL_S)
        try:
            child = self._ready_child()
            try:
                child.conn.send((data, name, batch, dict(dims) if dims else None))
            except OSError:  # it died reading the file: the cap on its memory
                raise self._died(child) from None
            deadline = time.monotonic() + self.budget.seconds
            while not child.conn.poll():
                if not child.alive():
                    break
                if time.monotonic() > deadline:
                    self._discard()
                    raise ImportBudgetError("time", f"importing the ONNX file took more than {self.budget.seconds:g} s "
                                                    "(LATPRED_ONNX_IMPORT_SECONDS), and was stopped")
                time.sleep(POLL_S)
            try:
                outcome, payload = child.conn.recv()
            except (EOFError, OSError):  # it died: the memory cap ends C++ code that way
                raise self._died(child) from None
            if outcome == "memory":
                self._discard()  # a MemoryError may leave the child's heap fragmented: start afresh
                raise ImportBudgetError("memory", self._memory_detail())
        finally:
            self._turn.release()
        if outcome == "ok":
            return Graph.from_json(payload)
        raise ImportRefused(payload, dims=outcome == "dims")

    def close(self) -> None:
        """Stop the child (a worker's exit would too; tests call this)."""
        self._discard()

    def _died(self, child: _Child) -> ImportBudgetError:
        """The error for a child that ended mid-import: its memory cap (a MemoryError it could not
        answer, or C++ aborting on a failed allocation); any other end is named by its code."""
        self._discard()
        code = child.process.returncode
        if code in (MEMORY_EXIT, -signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV):
            return ImportBudgetError("memory", self._memory_detail())
        return ImportBudgetError("memory", f"the ONNX import process ended with code {code} while reading "
                                           f"the file (its memory is capped at {self.budget.memory_bytes >> 20} MiB "
                                           "above its own: LATPRED_ONNX_IMPORT_MAX_BYTES)")

    def _memory_detail(self) -> str:
        return (f"importing the ONNX file needed more than {self.budget.memory_bytes / 2**20:.0f} MiB "
                "(LATPRED_ONNX_IMPORT_MAX_BYTES), and was stopped")

    def _ready_child(self) -> _Child:
        if self._child is None or not self._child.alive():
            self._discard()
            self._child = _Child.start(self.budget.memory_bytes)
        return self._child

    def _discard(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()


_SHARED: dict[ImportBudget, BudgetedImporter] = {}
_SHARED_LOCK = threading.Lock()


def shared_importer(budget: ImportBudget) -> BudgetedImporter:
    """The process's importer for ``budget``: apps made in one process (a worker has one; a test
    session many) share its child instead of starting one each."""
    with _SHARED_LOCK:
        if budget not in _SHARED:
            _SHARED[budget] = BudgetedImporter(budget)
        return _SHARED[budget]


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    conn: _Duplex

    @staticmethod
    def start(memory_bytes: int) -> _Child:
        """``python -m service.onnx_budget``, talking over two pipes: not multiprocessing's spawn,
        which would run the parent's ``__main__`` again in the child (gunicorn's, or a script's)."""
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        process = subprocess.Popen(
            [sys.executable, "-m", "service.onnx_budget", str(to_child_r), str(from_child_w), str(memory_bytes)],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        conn = _Duplex(from_child_r, to_child_w)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not conn.poll():  # "ready" once it has imported the importer and capped itself
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                conn.close()
                raise RuntimeError("the ONNX import process did not start")
            time.sleep(POLL_S * 10)
        conn.recv()
        return _Child(process, conn)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=5)
        self.conn.close()


class _Duplex:
    """One pipe to read and one to write, as one connection (multiprocessing's framing)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._in = Connection(read_fd, writable=False)
        self._out = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self._out.send(obj)

    def recv(self) -> Any:
        return self._in.recv()

    def poll(self) -> bool:
        return self._in.poll()

    def close(self) -> None:
        self._in.close()
        self._out.close()


# ------------------------------------------------------------------------------- in the child
def _serve(conn: _Duplex, memory_bytes: int) -> None:
    """The child's loop: import what arrives, answer ("ok", graph JSON), ("invalid", message),
    ("dims", message) or ("memory", message)."""
    from predictor.importers.onnx_dims import DimsError
    from predictor.importers.onnx_graph import graph_from_onnx

    graph_from_onnx(_warm_up_model())  # onnx and numpy load lazily: not on an upload's clock
    _cap_address_space(memory_bytes)
    conn.send("ready")
    while True:
        try:
            data, name, batch, dims = conn.recv()
        except EOFError:  # the worker went away
            return
        except MemoryError:  # the file alone is over the cap; the message stream is broken now
            os._exit(MEMORY_EXIT)
        try:
            graph = graph_from_onnx(data, name=name, batch=batch, dims=dims)
            answer: tuple[str, Any] = ("ok", graph.to_json())
        except MemoryError:
            answer = ("memory", "")
        except DimsError as exc:
            answer = ("dims", str(exc))
        except (ValueError, TypeError) as exc:
            answer = ("invalid", str(exc))
        del data
        conn.send(answer)


def _warm_up_model() -> bytes:
    """One Conv and one Relu, so that the importer's every stage has run once."""
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.0] * 108)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["c"], ["y"])], "warm_up",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
                              initializer=[w])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def _cap_address_space(extra_bytes: int) -> None:
    """RLIMIT_AS at the address space in use now plus ``extra_bytes``: a Python allocation past it
    is a MemoryError, a C++ one ends the process (which the worker reports the same way)."""
    try:
        with open("/proc/self/statm") as f:
            in_use = int(f.read().split()[0]) * resource.getpagesize()
    except OSError:  # not Linux: the time budget still holds
        return
    limit = in_use + extra_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


if __name__ == "__main__":  # the child: python -m service.onnx_budget READ_FD WRITE_FD MEMORY_BYTES
    _serve(_Duplex(int(sys.argv[1]), int(sys.argv[2])), int(sys.argv[3]))
