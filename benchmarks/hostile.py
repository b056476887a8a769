"""Hostile clients against the real REST service (issue #13): can one bad request hurt the others?

Why: the service answers anyone who can reach it, and a single request that makes a worker build
a gigabyte tensor, walk a million nodes, grind through a chunk-size line that never ends or hold
a thread while it trickles its body, takes that worker (and the requests queued on it) away from
everyone else. Unit tests check each refusal in process; this runs the real main job, gunicorn
with ``service/gunicorn_conf.py`` (2 gevent workers here), on a free loopback port, replays
issue #13's probes at it one at a time, and watches the server while each runs.

Three servers, one after the other, each with its own temporary ``LATPRED_DATA_DIR`` (nothing
lands in the user's home) and none reachable from outside 127.0.0.1:

  main     LATPRED_API_KEY set (writes need it): probes 1-6, 8, 9a
  bundle   the same, serving a copy of the shipped bundle folder (LATPRED_BUNDLES) that probe 7
           breaks: a reload must refuse it, and a worker killed afterwards must come back serving
  no-key   no key and no LATPRED_OPEN_WRITES: probe 9b reads what its OpenAPI document declares

While a probe runs, a thread reads the resident memory (VmRSS, from /proc/<pid>/statm) of every
worker, the children of the gunicorn master, every 20 ms, and the kernel's own peak (VmHWM, reset
through /proc/<pid>/clear_refs when the probe starts) is read when it ends, so a spike between two
samples is not missed; another thread GETs ``/livez`` on a fresh connection every 100 ms with a 3 s
timeout. Before each probe the benchmark waits (up to 10 s) until the server's processes are idle,
so what one probe left running is not counted against the next.

One row per probe:

  status     what the server answered (``12x200``; ``no answer`` when the client timed out)
  seconds    the slowest answer the probe waited for (not the probe's wall time: probe 8a holds
             its slow connections open ~10 s on purpose)
  MiB        the largest rise of one worker's RSS over its own RSS just before the probe (a
             worker that appeared during the probe, such as one gunicorn restarted, has no idle
             value and is left out: the notes name it)
  livez ms   the slowest /livez answer during the probe; ``3000+`` is a poll that timed out
  cpu s      CPU seconds the server's processes (master and workers) used during the probe
  verdict    ok, or MISS with every reason: the answer the probe expects, then the goals

Goal (the last line): every probe answered in under 5 s, no worker more than 1 GiB above idle,
no 5xx anywhere, /livez never above 1 s. Read a MISS's reasons before its numbers: a request that
is refused fast but with the wrong status, and one that takes a worker down, are different
failures. The machine's other load shows in the livez column too: on a quiet two-core machine
/livez answers in about a millisecond.

Run: .venv/bin/python benchmarks/hostile.py [--timeout 30] [--hold 10] [--only 1a,8b] [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import functools
import http.client
import io
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._server import GunicornServer, ServedRun, _children, _proc_stat, run_served

KEY = "hostile-benchmark-key"
WORKERS = 2
ANSWER_GOAL_S = 5.0
MEMORY_GOAL_MIB = 1024.0
LIVEZ_GOAL_MS = 1000.0
LIVEZ_TIMEOUT_S = 3.0
RSS_EVERY_S = 0.02
LIVEZ_EVERY_S = 0.1
MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
PREDICT = {"model": "resnet50", "batch": 8, "precision": "fp16", "mode": "cudagraph", "layers": False}
#: characters a spreadsheet reads as the start of a formula (README, "Asking the service")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


# ------------------------------------------------------------------------------------- HTTP client
@dataclass
class Answer:
    """One request's outcome as the client saw it: a status, or why there was none."""

    status: int | None
    seconds: float
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str = ""
    #: the client gave up waiting (its timeout), as opposed to the server closing or resetting
    timed_out: bool = False

    @property
    def label(self) -> str:
        if self.status is not None:
            return str(self.status)
        return "timeout" if self.timed_out else "no answer"

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def problem(self) -> dict[str, Any]:
        """The RFC 9457 problem the server answered, {} if it is not one."""
        data = self.json()
        return data if isinstance(data, dict) and "status" in data and "detail" in data else {}

    def brief(self, limit: int = 160) -> str:
        """What the answer said, one line: the problem's field, type and detail, or the error."""
        if self.status is None:
            return f"{self.label} after {self.seconds:.1f} s ({self.error})" if self.error else self.label
        prob = self.problem()
        if prob:
            kind = str(prob.get("type", "")).removeprefix("urn:latpred:problem:")
            text = f"{self.status} {kind} field={prob.get('field')!r}: {prob.get('detail')}"
        else:
            text = f"{self.status} {self.body[:limit].decode('utf-8', 'replace')!r}"
        text = " ".join(text.split())
        return text if len(text) <= limit else text[:limit - 3] + "..."

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": self.seconds, "error": self.error, "timed_out": self.timed_out,
                "brief": self.brief(400)}


def exchange(host: str, port: int, method: str, head: bytes, body: Iterable[bytes], timeout: float) -> Answer:
    """Send ``head`` then ``body`` (pieces, from a thread) on a new connection and read the answer.

    The body goes out from its own thread while this one reads, so an answer the server gives
    before it has read the whole body (a 413 on the headers alone) is heard, rather than lost in
    a broken pipe. The whole exchange is bounded by ``timeout``: at the deadline the socket is
    shut down, which also frees a sender stuck on a full socket buffer."""
    t0 = time.perf_counter()
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return Answer(None, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
    done = threading.Event()
    expired = threading.Event()
    send_error: list[str] = []

    def send() -> None:
        try:
            sock.sendall(head)
            for piece in body:
                if done.is_set():
                    return
                sock.sendall(piece)
        except OSError as exc:  # the server answered and closed, or the deadline shut the socket
            send_error.append(f"{type(exc).__name__}: {exc}")

    def deadline() -> None:
        expired.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    timer = threading.Timer(timeout, deadline)
    timer.daemon = True
    sender.start()
    timer.start()
    try:
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        data = resp.read()
        return Answer(resp.status, time.perf_counter() - t0, {k.lower(): v for k, v in resp.getheaders()}, data)
    except (OSError, http.client.HTTPException) as exc:
        elapsed = time.perf_counter() - t0
        timed_out = expired.is_set() or isinstance(exc, TimeoutError)
        why = f"no answer within the client's {timeout:g} s" if timed_out else f"{type(exc).__name__}: {exc}"
        why += f"; sending: {send_error[0]}" if send_error else ""
        return Answer(None, elapsed, error=why, timed_out=timed_out)
    finally:
        done.set()
        timer.cancel()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        sender.join(5)


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def pieces(data: bytes, size: int = 1 << 20) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(data), size):
        yield bytes(view[i:i + size])


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body, as ``curl -F`` sends it; returns (body, Content-Type)."""
    boundary = "hostile" + uuid.uuid4().hex
    out = []
    for name, value in fields.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data) in files.items():
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                   "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


# ---------------------------------------------------------------------------------------- payloads
_FRESH = iter(range(20_011, 10**9))


def linear_chain(nodes: int, name: str, distinct: bool = True) -> dict[str, Any]:
    """A chain of linear layers as JSON IR (as tests/service/test_work_budget.py builds one):
    with ``distinct``, every node a kernel configuration the server has never evaluated."""
    first = next(_FRESH)
    return {"name": name, "nodes": [
        {"name": f"fc{i}", "op": "linear", "kind": "kernel", "family": "linear",
         "params": {"tokens": 3, "k": next(_FRESH) if distinct and i else first, "n": 96}} for i in range(nodes)]}


@functools.cache
def padded_graph(total_bytes: int) -> bytes:
    """A valid graph of about ``total_bytes`` of JSON, under the node cap: long node names carry
    the bytes (one repeated kernel configuration, so the predictor has nothing to learn)."""
    pad = "n" * 1000
    node = {"name": f"000000{pad}", "op": "linear", "kind": "kernel", "family": "linear",
            "params": {"tokens": 3, "k": 64, "n": 64}}
    count = total_bytes // (len(json.dumps(node)) + 2)
    nodes = [{**node, "name": f"{i:06d}{pad}"} for i in range(count)]
    return json.dumps({"name": "padded", "nodes": nodes}).encode()


def _onnx_model(nodes: list[Any], name: str, inputs: list[Any], outputs: list[Any]) -> bytes:
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


@functools.cache
def onnx_constant_of_shape(elements: int) -> bytes:
    """ConstantOfShape of the constant shape [elements], added to a graph input: a few hundred
    bytes that become ``elements`` floats (4 bytes each) in anything that folds constants."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Constant", [], ["shape"], name="shape",
                         value=numpy_helper.from_array(np.array([elements], np.int64), "shape_value")),
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill",
                         value=helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Add", ["big", "x"], ["y"], name="add"),
    ]
    return _onnx_model(nodes, "bomb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [elements])])


@functools.cache
def onnx_range(limit: float) -> bytes:
    """Range(0, limit, 1) added to a graph input: the same bomb from three scalars."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def scalar(name: str, value: float) -> Any:
        return helper.make_node("Constant", [], [name], name=name,
                                value=numpy_helper.from_array(np.array(value, np.float32), f"{name}_value"))

    nodes = [scalar("start", 0.0), scalar("limit", limit), scalar("delta", 1.0),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    return _onnx_model(nodes, "range_bomb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [int(limit)])])


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _pb_field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (strings and messages): tag, length, bytes."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


@functools.cache
def onnx_if_subgraphs(branch_nodes: int) -> bytes:
    """One ``If`` node whose then and else branches each hold a chain of ``branch_nodes`` Relus.

    The top graph has one node, so a node cap that counts only ``graph.node`` lets it in. A million
    NodeProtos made through onnx.helper take many seconds; the branch nodes are written as
    protobuf bytes here (NodeProto: input=1, output=2, name=3, op_type=4; GraphProto: node=1),
    appended to a serialized empty branch (a repeated field's entries may come in any order) and
    parsed once."""
    from onnx import GraphProto, TensorProto, helper

    relu = _pb_field(4, b"Relu")

    def branch(prefix: str) -> GraphProto:
        out = f"{prefix}{branch_nodes}"
        head = helper.make_graph([], f"{prefix}_branch", [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1])]).SerializeToString()
        nodes = []
        previous = b"x"
        for i in range(1, branch_nodes + 1):
            current = f"{prefix}{i}".encode()
            nodes.append(_pb_field(1, _pb_field(1, previous) + _pb_field(2, current) + _pb_field(3, current) + relu))
            previous = current
        graph = GraphProto()
        graph.ParseFromString(head + b"".join(nodes))
        return graph

    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("t"), else_branch=branch("e"))
    return _onnx_model([node], "branches",
                       [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])


# ------------------------------------------------------------------------------- watching a server
def _rss(pid: int) -> int | None:
    """Resident bytes of a process (VmRSS: statm's second field, in pages), None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None


def _hwm(pid: int) -> int | None:
    """Peak resident bytes (VmHWM) since the process started or ``_reset_hwm``."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _reset_hwm(pid: int) -> bool:
    """Reset a process's VmHWM to its current RSS (clear_refs 5, Linux >= 4.0; our own process)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def server_cpu(master: int) -> dict[int, float]:
    """CPU seconds used so far by the gunicorn master and each of its workers."""
    out = {}
    for pid in [master, *_children(master)]:
        stat = _proc_stat(pid)
        if stat:
            out[pid] = stat[1]
    return out


def settle(master: int, max_s: float = 10.0, window_s: float = 0.25, quiet_cpu_s: float = 0.03) -> float:
    """Wait until the server's processes use next to no CPU over ``window_s`` (at most ``max_s``),
    so what the last probe left running is not measured as the next one's; returns the wait."""
    t0 = time.perf_counter()
    before = sum(server_cpu(master).values())
    while time.perf_counter() - t0 < max_s:
        time.sleep(window_s)
        now = sum(server_cpu(master).values())
        if now - before <= quiet_cpu_s:
            return time.perf_counter() - t0
        before = now
    return time.perf_counter() - t0


@dataclass
class Watch:
    """What the server did while one probe ran."""

    wall_s: float
    #: per worker present when the probe began: its idle RSS and its peak during the probe (MiB)
    idle_mib: dict[int, float]
    peak_mib: dict[int, float]
    #: workers that vanished (crashed, killed or restarted) and ones that appeared, with their peak
    gone: list[int]
    new: dict[int, float]
    livez_max_ms: float
    livez_polls: int
    livez_timeouts: int
    livez_errors: Counter[str]
    cpu_s: float

    @property
    def rise_mib(self) -> float:
        return max((self.peak_mib[p] - self.idle_mib[p] for p in self.idle_mib), default=float("nan"))

    def livez_text(self) -> str:
        if not self.livez_polls:
            return "-"
        if self.livez_timeouts:
            return f"3000+ x{self.livez_timeouts}"
        return f"{self.livez_max_ms:.0f}"

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s, "worker_rise_mib": self.rise_mib,
                "idle_mib": {str(k): v for k, v in self.idle_mib.items()},
                "peak_mib": {str(k): v for k, v in self.peak_mib.items()}, "gone": self.gone,
                "new_peak_mib": {str(k): v for k, v in self.new.items()}, "livez_max_ms": self.livez_max_ms,
                "livez_polls": self.livez_polls, "livez_timeouts": self.livez_timeouts,
                "livez_errors": dict(self.livez_errors), "server_cpu_s": self.cpu_s}


class Monitor:
    """Watches one server while a probe runs: every worker's RSS every 20 ms, /livez every 100 ms on
    a fresh connection (3 s timeout), and CPU; ``result`` holds the ``Watch`` after the block."""

    def __init__(self, server: GunicornServer) -> None:
        assert server.process is not None
        self.server = server
        self.master = server.process.pid
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.result: Watch | None = None

    def __enter__(self) -> Monitor:
        workers = _children(self.master)
        self._idle = {p: r for p in workers if (r := _rss(p)) is not None}
        self._hwm_reset = {p: _reset_hwm(p) for p in self._idle}
        self._peak = dict(self._idle)
        self._seen = set(self._idle)
        self._gone: set[int] = set()
        self._cpu0 = server_cpu(self.master)
        self._cpu_last = dict(self._cpu0)
        self._livez: list[float] = []
        self._livez_timeouts = 0
        self._livez_errors: Counter[str] = Counter()
        self._t0 = time.perf_counter()
        self._threads = [threading.Thread(target=self._sample_memory, daemon=True),
                         threading.Thread(target=self._poll_livez, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def _sample_memory(self) -> None:
        workers = list(self._seen)
        last_scan = 0.0
        while not self._stop.is_set():
            now = time.perf_counter()
            if now - last_scan >= 0.25:  # new workers, and CPU of those that may die before the end
                workers = _children(self.master)
                last_scan = now
                for pid, cpu in server_cpu(self.master).items():
                    self._cpu_last[pid] = cpu
            for pid in workers:
                rss = _rss(pid)
                with self._lock:
                    if rss is None:
                        if pid in self._seen:
                            self._gone.add(pid)
                        continue
                    self._seen.add(pid)
                    self._peak[pid] = max(self._peak.get(pid, 0), rss)
            self._stop.wait(RSS_EVERY_S)

    def _poll_livez(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=LIVEZ_TIMEOUT_S)
            timed_out = False
            try:
                conn.request("GET", "/livez")
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    with self._lock:
                        self._livez_errors[f"HTTP {resp.status}"] += 1
            except TimeoutError:
                timed_out = True
            except (OSError, http.client.HTTPException) as exc:
                with self._lock:
                    self._livez_errors[type(exc).__name__] += 1
            finally:
                conn.close()
            ms = (time.perf_counter() - t0) * 1e3
            with self._lock:
                self._livez.append(max(ms, LIVEZ_TIMEOUT_S * 1e3) if timed_out else ms)
                self._livez_timeouts += timed_out
            next_at = max(next_at + LIVEZ_EVERY_S, time.perf_counter())
            self._stop.wait(next_at - time.perf_counter())

    def __exit__(self, *exc: Any) -> None:
        wall = time.perf_counter() - self._t0
        self._stop.set()
        for t in self._threads:
            t.join(LIVEZ_TIMEOUT_S + 2)
        for pid, cpu in server_cpu(self.master).items():
            self._cpu_last[pid] = cpu
        for pid in list(self._peak):
            rss = _rss(pid)
            if rss is None:
                if pid in self._seen:
                    self._gone.add(pid)
                continue
            self._peak[pid] = max(self._peak[pid], rss)
            # The kernel's own peak catches a spike between two samples; only where it was reset
            # at the start, else it is the peak since the worker loaded its bundle.
            hwm = _hwm(pid) if self._hwm_reset.get(pid) else None
            if hwm is not None:
                self._peak[pid] = max(self._peak[pid], hwm)
        cpu = sum(v - self._cpu0.get(p, 0.0) for p, v in self._cpu_last.items())
        self.result = Watch(
            wall_s=wall, idle_mib={p: v / MIB for p, v in self._idle.items()},
            peak_mib={p: self._peak[p] / MIB for p in self._idle}, gone=sorted(self._gone),
            new={p: v / MIB for p, v in self._peak.items() if p not in self._idle},
            livez_max_ms=max(self._livez, default=float("nan")), livez_polls=len(self._livez),
            livez_timeouts=self._livez_timeouts, livez_errors=self._livez_errors, cpu_s=cpu)


# ------------------------------------------------------------------------------------------ probes
@dataclass
class Target:
    """The server a probe talks to, and how."""

    server: GunicornServer
    key: str | None
    timeout: float
    hold_s: float
    bundle_copy: Path | None = None
    #: the model file of ``bundle_copy`` probe 7 truncated, once it has
    broken: Path | None = None

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             key: bool = False, timeout: float | None = None) -> Answer:
        """One request on a new connection, with Content-Length (and the API key if ``key``)."""
        all_headers = dict(headers or {})
        if body is not None:
            all_headers["Content-Length"] = str(len(body))
        if key and self.key:
            all_headers["X-API-Key"] = self.key
        return exchange(self.server.host, self.server.port, method, request_head(method, path, all_headers),
                        pieces(body or b""), timeout or self.timeout)

    def post_json(self, path: str, payload: Any, key: bool = False, raw: bytes | None = None) -> Answer:
        body = raw if raw is not None else json.dumps(payload).encode()
        return self.send("POST", path, body, {"Content-Type": "application/json"}, key=key)

    def post_onnx(self, data: bytes, **fields: str) -> Answer:
        body, ctype = multipart(fields, {"onnx": ("model.onnx", data)})
        return self.send("POST", "/v1/predict", body, {"Content-Type": ctype})


@dataclass
class Outcome:
    """What a probe saw: the answers it waited for, and whether they were the expected ones."""

    answers: list[Answer]
    #: None when the answers are what the probe expects, else why not
    miss: str | None = None
    note: str = ""
    #: the probe kills a worker on purpose: a vanished worker is not a failure there
    expects_worker_death: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: the status column, where the answers' statuses alone would mislead
    label: str = ""

    def status(self) -> str:
        if self.label:
            return self.label
        if not self.answers:
            return "-"
        if len(self.answers) == 1:
            return self.answers[0].label
        return " ".join(f"{n}x{label}" for label, n in Counter(a.label for a in self.answers).most_common())


def expect(answer: Answer, ok: Callable[[int], bool], wanted: str, note: str = "") -> Outcome:
    """An outcome that misses unless the status passes ``ok``; the note says what came back."""
    miss = None
    if answer.status is None or not ok(answer.status):
        miss = f"wanted {wanted}, got {answer.label}"
    return Outcome([answer], miss, note or answer.brief())


def is_4xx(status: int) -> bool:
    return 400 <= status < 500


def spaced(count: int, every_s: float, make: Callable[[], Answer]) -> list[Answer]:
    """``count`` requests, one started every ``every_s`` seconds, each on its own thread (so one
    that waits does not delay the next); returns their answers in order once all are in."""
    answers: list[Answer | None] = [None] * count

    def run(i: int) -> None:
        answers[i] = make()

    threads = []
    for i in range(count):
        t = threading.Thread(target=run, args=(i,), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(every_s)
    for t in threads:
        t.join()
    return [a if a is not None else Answer(None, 0.0, error="client thread failed") for a in answers]


#: the payloads that take the client a while to build, cached (``Probe.prepare``)
BOMB_1E8 = functools.partial(onnx_constant_of_shape, 100_000_000)
BOMB_RANGE = functools.partial(onnx_range, 1e8)
BOMB_1E12 = functools.partial(onnx_constant_of_shape, 1_000_000_000_000)
IF_BRANCHES = functools.partial(onnx_if_subgraphs, 500_000)
HUGE_GRAPH = functools.partial(padded_graph, 50_000_000)


# probe 1: ONNX memory bombs -------------------------------------------------------------------------
def _bomb(build: Callable[[], bytes]) -> Callable[[Target], Outcome]:
    """Probe 1: upload what ``build`` makes (cached, see ``Probe.prepare``)."""
    def probe(t: Target) -> Outcome:
        data = build()
        a = t.post_onnx(data, batch="1", mode="cudagraph")
        out = expect(a, lambda s: is_4xx(s) or s == 200, "a 4xx problem, or a 200")
        out.note = f"{len(data)} byte upload; " + out.note
        return out

    return probe


# probe 2: a node cap that must count subgraphs ------------------------------------------------------
def probe_subgraphs(t: Target) -> Outcome:
    data = IF_BRANCHES()
    out = expect(t.post_onnx(data, batch="1", mode="cudagraph"), is_4xx, "4xx (the node cap counts subgraphs)")
    out.note = f"{len(data) / MIB:.1f} MiB upload; " + out.note
    return out


# probe 3: the work budget -----------------------------------------------------------------------------
def probe_work(t: Target) -> Outcome:
    body = {"graphs": [{"graph": linear_chain(5_000, "wide")}], "variants": [{"batch": b} for b in range(1, 41)],
            "layers": False}
    a = t.post_json("/v1/predict/batch", body)
    out = expect(a, lambda s: s == 422, "422 work-budget")
    if out.miss is None and not str(a.problem().get("type", "")).endswith("work-budget"):
        out.miss = f"a 422, but of type {a.problem().get('type')!r}, not work-budget"
    return out


# probe 4: CSV formula injection ---------------------------------------------------------------------
def probe_formula_name(t: Target) -> Outcome:
    a = t.post_json("/v1/graphs", linear_chain(3, "+cmd|' /C calc'!A0"), key=True)
    out = expect(a, lambda s: s == 422, "422 naming the name field")
    if out.miss is None and not str(a.problem().get("field", "")).endswith("name"):
        out.miss = f"a 422, but naming field {a.problem().get('field')!r}"
    return out


def _is_number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def probe_csv_cells(t: Target) -> Outcome:
    stored = t.post_json("/v1/graphs", linear_chain(3, "x"), key=True)
    gid = (stored.json() or {}).get("id") if stored.status in (200, 201) else None
    if not gid:
        return Outcome([stored], f"storing the graph: wanted 200/201 with an id, got {stored.label}", stored.brief())
    got = t.send("GET", f"/v1/latency?graph={gid}&batch=1,8&format=csv")
    if got.status != 200:
        return Outcome([stored, got], f"the CSV: wanted 200, got {got.label}", got.brief())
    rows = list(csv.reader(io.StringIO(got.body.decode("utf-8", "replace"))))
    unsafe = [cell for row in rows for cell in row if cell.startswith(FORMULA_STARTS) and not _is_number(cell)]
    miss = f"cells a spreadsheet would run: {unsafe[:3]}" if unsafe else None
    if len(rows) < 2:
        miss = f"the CSV has {len(rows)} row(s), wanted a header and rows"
    header = rows[0] if rows else []
    return Outcome([stored, got], miss, f"{len(rows) - 1} rows x {len(header)} columns, "
                                        f"{sum(len(r) for r in rows)} cells checked; first row {rows[1:2]}")


# probe 5: the graph store's limits ------------------------------------------------------------------
def probe_huge_graph(t: Target) -> Outcome:
    body = HUGE_GRAPH()
    out = expect(t.post_json("/v1/graphs", None, key=True, raw=body), lambda s: s == 413,
                 "413 (per-graph cap 16 MiB)")
    out.note = f"{len(body) / 1e6:.0f} MB body: " + out.note
    return out


def probe_no_key(t: Target) -> Outcome:
    return expect(t.post_json("/v1/graphs", linear_chain(3, "nokey")), lambda s: s in (401, 403), "401 or 403")


# probe 6: lax types ---------------------------------------------------------------------------------
def _lax(batch: Any = None, raw: bytes | None = None) -> Callable[[Target], Outcome]:
    def probe(t: Target) -> Outcome:
        a = t.post_json("/v1/predict", {"model": "resnet50", "batch": batch}, raw=raw)
        out = expect(a, is_4xx, "4xx")
        if a.status == 200:
            pred = a.json() or {}
            batch_used = pred.get("batch", (pred.get("variant") or {}).get("batch", "?"))
            out.note = f"200: predicted for batch {batch_used!r}"
        return out

    return probe


# probe 7: a broken bundle, a reload, a killed worker ------------------------------------------------
def break_bundle(t: Target) -> Path:
    """Truncate one model file of the bundle copy to half (once; 7a and 7b may each run alone)."""
    assert t.bundle_copy is not None
    if t.broken is None:
        device = next(p for p in sorted(t.bundle_copy.iterdir()) if (p / "metadata.json").exists())
        victim = device / "kernel-linear.txt.gz"
        if not victim.exists():
            victim = max(device.glob("*.gz"), key=lambda p: p.stat().st_size)
        with victim.open("r+b") as f:
            f.truncate(victim.stat().st_size // 2)
        t.broken = victim
    return t.broken


def probe_bad_reload(t: Target) -> Outcome:
    victim = break_bundle(t)
    a = t.send("POST", "/v1/models/reload", key=True)
    out = expect(a, lambda s: s == 409, "409 naming the file")
    if out.miss is None and victim.name not in str(a.problem().get("detail", "")):
        out.miss = f"a 409 that does not name {victim.name}"
    out.note = f"truncated {victim.parent.name}/{victim.name} to half; " + out.note
    return out


def probe_killed_worker(t: Target) -> Outcome:
    """The worker gunicorn starts in place of a killed one finds the bundle folder broken: it must
    serve the last good copy (README: fallbacks in /readyz), not answer 503."""
    assert t.server.process is not None
    break_bundle(t)
    workers = sorted(_children(t.server.process.pid))
    if not workers:
        return Outcome([], "no worker to kill")
    os.kill(workers[0], signal.SIGKILL)
    body = json.dumps(PREDICT).encode()
    answers = spaced(12, 0.5, lambda: t.send("POST", "/v1/predict", body, {"Content-Type": "application/json"}))
    # /readyz is answered by whichever worker accepts: ask a few times to hear from both
    readyz = [t.send("GET", "/readyz") for _ in range(6)]
    misses = []
    if any(a.status != 200 for a in answers):
        misses.append(f"predicts {Counter(a.label for a in answers).most_common()}")
    if any(r.status != 200 for r in readyz):
        misses.append(f"/readyz {Counter(r.label for r in readyz).most_common()}")
    fallbacks = sorted({json.dumps((r.json() or {}).get("fallbacks")) for r in readyz if r.status == 200})
    late = max(answers, key=lambda a: a.seconds)
    out = Outcome(answers + readyz, "; ".join(misses) or None,
                  f"killed worker {workers[0]}; slowest predict {late.seconds:.2f} s ({late.brief(80)}); "
                  f"/readyz x6: {Counter(r.label for r in readyz).most_common()}, fallbacks seen {fallbacks}",
                  expects_worker_death=True)
    out.label = (f"{Outcome(answers).status()}, readyz "
                 f"{' '.join(f'{n}x{s}' for s, n in Counter(r.label for r in readyz).most_common())}")
    return out


# probe 8: slow clients --------------------------------------------------------------------------------
def probe_slow_bodies(t: Target) -> Outcome:
    """Ten connections that promise 100,000 bytes of body, send 1,000 and wait: under gthread
    workers each held one of the workers' threads (2 workers x 4 threads) for as long as it liked;
    a gevent worker reads them in greenlets, and its app threads only see complete bodies."""
    head = request_head("POST", "/v1/predict", {"Content-Type": "application/json", "Content-Length": "100000"})
    body = json.dumps(PREDICT).encode()
    held: list[socket.socket] = []
    answers: list[Answer] = []
    answered = Counter[str]()
    predicts = threading.Thread(target=lambda: answers.extend(spaced(
        20, t.hold_s * 0.8 / 20, lambda: t.send("POST", "/v1/predict", body, {"Content-Type": "application/json"}))),
        daemon=True)
    try:
        for _ in range(10):
            s = socket.create_connection((t.server.host, t.server.port), timeout=t.timeout)
            held.append(s)
            s.sendall(head + b'{"model": "resnet50", "pad": "' + b"a" * 970)
        started = time.perf_counter()
        predicts.start()  # its own thread: the slow bodies are let go after hold_s, answered or not
        time.sleep(max(0.0, t.hold_s - (time.perf_counter() - started)))
    finally:
        for s in held:  # did the server give up on any of them by itself (a 408, a close)?
            try:
                s.setblocking(False)
                data = s.recv(64)
                answered[data.split(b" ")[1].decode() if data.startswith(b"HTTP/") else "closed"] += 1
            except (BlockingIOError, IndexError):
                pass
            except OSError as exc:
                answered[type(exc).__name__] += 1
            s.close()
    if predicts.ident is not None:  # started
        predicts.join()
    misses = []
    if any(a.status != 200 for a in answers):
        misses.append(f"predicts {Counter(a.label for a in answers).most_common()}")
    slowest = max(a.seconds for a in answers)
    return Outcome(answers, "; ".join(misses) or None,
                   f"held 10 connections {t.hold_s:.0f} s; predicts: slowest {slowest:.2f} s, "
                   f"median {sorted(a.seconds for a in answers)[10]:.2f} s; the server answered or closed "
                   f"{sum(answered.values())} of the 10 slow ones by itself ({dict(answered) or 'none'})")


def probe_endless_chunk_size(t: Target) -> Outcome:
    """A chunked body whose first chunk-size line never ends: 8 MB of 'f' and no CRLF. A parser that
    searches the whole buffer again for each new piece spends quadratic CPU on it."""
    assert t.server.process is not None
    head = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n")
    size = 8 * MIB
    a = exchange(t.server.host, t.server.port, "POST", head, pieces(b"f" * size, 64 * 1024), min(t.timeout, 15.0))
    waited = settle(t.server.process.pid, max_s=10.0)  # the CPU the server spends after we hang up counts too
    out = expect(a, is_4xx, "a 4xx, fast, using little CPU")
    out.note = f"{size // MIB} MiB of 'f'; {a.brief(100)}; server idle again {waited:.1f} s after the answer"
    return out


def probe_chunked_over_cap(t: Target) -> Outcome:
    """A valid chunked body past the 64 MiB body cap: no Content-Length to refuse it on, so the cap
    must be applied while reading."""
    head = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n\r\n")
    chunk = 1 << 20
    count = 66

    def body() -> Iterator[bytes]:
        prefix = b'{"model": "resnet50", "pad": "'
        yield b"%x\r\n" % len(prefix) + prefix + b"\r\n"
        block = b"%x\r\n" % chunk + b"a" * chunk + b"\r\n"
        for _ in range(count):
            yield block
        yield b"2\r\n\"}\r\n0\r\n\r\n"

    a = exchange(t.server.host, t.server.port, "POST", head, body(), t.timeout)
    out = expect(a, lambda s: s == 413, "413")
    out.note = f"{count} MiB in 1 MiB chunks: " + out.note
    return out


# probe 9: what the OpenAPI document says -----------------------------------------------------------
def probe_openapi(t: Target) -> Outcome:
    a = t.send("GET", "/openapi.json")
    doc = a.json() if a.status == 200 else None
    if not isinstance(doc, dict):
        return Outcome([a], f"wanted the document, got {a.label}", a.brief())
    op = doc.get("paths", {}).get("/v1/graphs", {}).get("post", {})
    schemes = sorted((doc.get("components") or {}).get("securitySchemes") or {})
    global_security = doc.get("security")
    note = (f"POST /v1/graphs security: {json.dumps(op.get('security')) if 'security' in op else 'not declared'}; "
            f"document-wide security {json.dumps(global_security)}; securitySchemes {schemes}")
    return Outcome([a], None, note, extra={"security": op.get("security"), "schemes": schemes})


@dataclass(frozen=True)
class Probe:
    key: str
    name: str
    expected: str
    run: Callable[[Target], Outcome]
    #: builds (and caches) the payload before the server is watched: the client's own seconds of
    #: Python would otherwise hold the GIL that the /livez poller in this process needs
    prepare: Callable[[], object] | None = None


MAIN_PROBES = [
    Probe("1a", "ONNX ConstantOfShape [1e8] + Add", "4xx fast / 200", _bomb(BOMB_1E8), BOMB_1E8),
    Probe("1b", "ONNX Range(0, 1e8, 1) + Add", "4xx fast / 200", _bomb(BOMB_RANGE), BOMB_RANGE),
    Probe("1c", "ONNX ConstantOfShape [1e12] + Add", "4xx fast / 200", _bomb(BOMB_1E12), BOMB_1E12),
    Probe("2", "ONNX If, 2 x 500,000 branch nodes", "4xx (node cap)", probe_subgraphs, IF_BRANCHES),
    Probe("3", "5,000 distinct nodes x 40 batches", "422 work-budget", probe_work),
    Probe("4a", "graph named +cmd|' /C calc'!A0", "422 name field", probe_formula_name),
    Probe("4b", "graph x, latency CSV cells", "200, cells safe", probe_csv_cells),
    Probe("5a", "~50 MB graph to /v1/graphs", "413", probe_huge_graph, HUGE_GRAPH),
    Probe("5b", "graph write without the key", "401/403", probe_no_key),
    Probe("6a", 'predict batch: true', "4xx", _lax(True)),
    Probe("6b", 'predict batch: "8"', "4xx", _lax("8")),
    Probe("6c", 'predict batch: "8.0"', "4xx", _lax("8.0")),
    Probe("6d", 'predict batch: "1_000"', "4xx", _lax("1_000")),
    Probe("6e", "predict duplicate key batch 8, 1", "4xx",
          _lax(raw=b'{"model":"resnet50","batch":8,"batch":1}')),
    Probe("8a", "10 slow bodies held + 20 predicts", "livez<1s, 20x200", probe_slow_bodies),
    Probe("8b", "chunk-size line of 8 MiB, no CRLF", "4xx, little CPU", probe_endless_chunk_size),
    Probe("8c", "chunked body of 66 MiB", "413", probe_chunked_over_cap),
    Probe("9a", "OpenAPI security, key set", "report", probe_openapi),
]
BUNDLE_PROBES = [
    Probe("7a", "truncated model file, reload", "409", probe_bad_reload),
    Probe("7b", "SIGKILL a worker, 12 predicts", "12x200, readyz 200", probe_killed_worker),
]
NO_KEY_PROBES = [Probe("9b", "OpenAPI security, no key/open", "report", probe_openapi)]
ALL_PROBES = MAIN_PROBES + BUNDLE_PROBES + NO_KEY_PROBES
#: a probe that burns more server CPU than this on its own has found a CPU sink (probe 8b)
CPU_GOAL_S = {"8b": 1.0}


# --------------------------------------------------------------------------------------------- rows
@dataclass
class Row:
    probe: Probe
    server: str
    outcome: Outcome | None
    watch: Watch | None
    error: str = ""
    settle_s: float = 0.0

    @property
    def seconds(self) -> float:
        """The slowest answer the probe waited for (its wall time when it raised)."""
        if self.outcome and self.outcome.answers:
            return max(a.seconds for a in self.outcome.answers)
        return self.watch.wall_s if self.watch else float("nan")

    def fivexx(self) -> list[int]:
        return [a.status for a in (self.outcome.answers if self.outcome else []) if a.status and a.status >= 500]

    def reasons(self) -> list[str]:
        """Why the row misses: its own expectation first, then each goal it breaks."""
        out = []
        if self.error:
            out.append(f"raised {self.error}")
        if self.outcome and self.outcome.miss:
            out.append(self.outcome.miss)
        if self.seconds >= ANSWER_GOAL_S:
            out.append(f"slowest answer {self.seconds:.1f} s")
        if self.fivexx():
            out.append(f"5xx: {sorted(set(self.fivexx()))}")
        w = self.watch
        if w is not None:
            if w.rise_mib > MEMORY_GOAL_MIB:
                out.append(f"worker +{w.rise_mib:.0f} MiB")
            if w.livez_timeouts:
                out.append(f"/livez timed out x{w.livez_timeouts}")
            elif w.livez_max_ms > LIVEZ_GOAL_MS:
                out.append(f"/livez {w.livez_max_ms:.0f} ms")
            if w.livez_errors:
                out.append(f"/livez errors {dict(w.livez_errors)}")
            if w.gone and not (self.outcome and self.outcome.expects_worker_death):
                out.append(f"worker(s) {w.gone} died")
            limit = CPU_GOAL_S.get(self.probe.key)
            if limit is not None and w.cpu_s > limit:
                out.append(f"server CPU {w.cpu_s:.1f} s")
        return out

    def verdict(self) -> str:
        reasons = self.reasons()
        return "ok" if not reasons else "MISS: " + "; ".join(reasons)

    def as_dict(self) -> dict[str, Any]:
        return {"probe": self.probe.key, "name": self.probe.name, "expected": self.probe.expected,
                "server": self.server, "status": self.outcome.status() if self.outcome else "ERROR",
                "seconds": self.seconds, "verdict": self.verdict(), "reasons": self.reasons(),
                "note": self.outcome.note if self.outcome else self.error, "settle_s": self.settle_s,
                "answers": [a.as_dict() for a in self.outcome.answers] if self.outcome else [],
                "extra": self.outcome.extra if self.outcome else {},
                "watch": self.watch.as_dict() if self.watch else None}


def run_probe(probe: Probe, target: Target, server_label: str) -> Row:
    """Wait for a quiet server, then run one probe under a Monitor; an exception becomes its row."""
    assert target.server.process is not None
    outcome: Outcome | None = None
    error = ""
    try:
        if probe.prepare is not None:
            probe.prepare()
    except Exception as exc:
        error = f"building the payload: {type(exc).__name__}: {exc}"
    waited = settle(target.server.process.pid)
    monitor = Monitor(target.server)
    with monitor:
        try:
            if not error:
                outcome = probe.run(target)
        except Exception as exc:  # a probe's own failure is its row; the others still run
            error = f"{type(exc).__name__}: {exc}"
    row = Row(probe, server_label, outcome, monitor.result, error, waited)
    print(f"#   {probe.key:<3} {row.outcome.status() if row.outcome else 'ERROR':<14} {row.verdict()}",
          file=sys.stderr, flush=True)
    return row


def print_table(rows: list[Row]) -> None:
    head = (f"{'probe':<40} {'expected':<19} {'status':<20} {'seconds':>7} {'MiB':>7} {'livez ms':>10} "
            f"{'cpu s':>6}  verdict")
    print(head)
    print("-" * len(head))
    for r in rows:
        w = r.watch
        status = r.outcome.status() if r.outcome else "ERROR"
        print(f"{r.probe.key + ' ' + r.probe.name:<40.40} {r.probe.expected:<19.19} {status:<20.20} "
              f"{r.seconds:>7.2f} {w.rise_mib if w else float('nan'):>+7.0f} {w.livez_text() if w else '-':>10} "
              f"{w.cpu_s if w else float('nan'):>6.2f}  {r.verdict()}")


def print_notes(rows: list[Row]) -> None:
    print("notes (what each answer said; workers that died or appeared):")
    for r in rows:
        text = r.outcome.note if r.outcome else r.error
        extra = []
        if r.watch and r.watch.gone:
            extra.append(f"workers gone {r.watch.gone}")
        if r.watch and r.watch.new:
            extra.append("new workers " + ", ".join(f"{p} (peak {v:.0f} MiB)" for p, v in r.watch.new.items()))
        if r.settle_s >= 9.9:
            extra.append("the server was still busy 10 s after the previous probe")
        print(f"  {r.probe.key:<3} [{r.server}] {text}" + (f" [{'; '.join(extra)}]" if extra else ""))


def goal_line(rows: list[Row]) -> str:
    slow = [r.probe.key for r in rows if r.seconds >= ANSWER_GOAL_S]
    memory = [r.probe.key for r in rows if r.watch and r.watch.rise_mib > MEMORY_GOAL_MIB]
    fivexx = [r.probe.key for r in rows if r.fivexx() or (r.watch and any(
        k.startswith("HTTP 5") for k in r.watch.livez_errors))]
    livez = [r.probe.key for r in rows if r.watch and (r.watch.livez_timeouts or r.watch.livez_max_ms > LIVEZ_GOAL_MS)]
    broken = [f"{name} ({', '.join(keys)})" for name, keys in
              (("answer >= 5 s", slow), ("worker > 1 GiB above idle", memory), ("5xx", fivexx),
               ("/livez > 1 s", livez)) if keys]
    misses = [r.probe.key for r in rows if r.reasons()]
    return (f"goal: every probe answered in under {ANSWER_GOAL_S:.0f} s, worker peak <= 1 GiB above idle, "
            f"zero 5xx, /livez never above 1 s: {'met' if not broken else 'NOT met: ' + '; '.join(broken)}\n"
            f"probes: {len(rows) - len(misses)} ok, {len(misses)} MISS" + (f" ({', '.join(misses)})" if misses else ""))


# ---------------------------------------------------------------------------------------------- run
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout of each request, s (30)")
    parser.add_argument("--hold", type=float, default=10.0, help="seconds probe 8a holds its slow bodies (10)")
    parser.add_argument("--only", default="", help=f"comma-separated probes ({', '.join(p.key for p in ALL_PROBES)})")
    parser.add_argument("--ready-timeout", type=float, default=90.0, help="seconds to wait for /readyz")
    parser.add_argument("--json", metavar="PATH", help="also write every row, answer and sample summary here")
    args = parser.parse_args()
    wanted = {k.strip() for k in args.only.split(",") if k.strip()}
    unknown = wanted - {p.key for p in ALL_PROBES}
    if unknown:
        parser.error(f"unknown probe(s) {sorted(unknown)}")

    def chosen(probes: list[Probe]) -> list[Probe]:
        return [p for p in probes if not wanted or p.key in wanted]

    rows: list[Row] = []
    logs: list[tuple[str, ServedRun]] = []
    failed = False
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="latpred-hostile-") as tmp_name:
        tmp = Path(tmp_name)
        phases: list[tuple[str, dict[str, str], list[Probe], str | None]] = [
            ("main", {"LATPRED_API_KEY": KEY, "LATPRED_DATA_DIR": str(tmp / "main")}, chosen(MAIN_PROBES), KEY),
            ("bundle", {"LATPRED_API_KEY": KEY, "LATPRED_DATA_DIR": str(tmp / "bundle"),
                        "LATPRED_BUNDLES": str(tmp / "bundles")}, chosen(BUNDLE_PROBES), KEY),
            ("no-key", {"LATPRED_API_KEY": "", "LATPRED_DATA_DIR": str(tmp / "no-key")}, chosen(NO_KEY_PROBES), None),
        ]
        for label, env, probes, key in phases:
            if not probes:
                continue
            bundle_copy = None
            if "LATPRED_BUNDLES" in env:
                from predictor.bundle import DEFAULT_BUNDLE_DIR  # the shipped bundles, whatever the env says

                bundle_copy = Path(env["LATPRED_BUNDLES"])
                shutil.copytree(DEFAULT_BUNDLE_DIR, bundle_copy)
            server = GunicornServer(workers=WORKERS, ready_timeout_s=args.ready_timeout,
                                    extra_env={"LATPRED_OPEN_WRITES": "", **env})
            target = Target(server, key, args.timeout, args.hold, bundle_copy)
            t0 = time.perf_counter()

            def work(label: str = label, probes: list[Probe] = probes, target: Target = target,
                     t0: float = t0) -> None:
                print(f"# {label} server ready in {time.perf_counter() - t0:.1f} s on "
                      f"{target.server.host}:{target.server.port} ({WORKERS} gevent workers)",
                      file=sys.stderr, flush=True)
                for probe in probes:
                    rows.append(run_probe(probe, target, label))

            run = run_served(server, work)
            if run is None:
                failed = True
                break
            logs.append((label, run))
            if run.interrupted:
                break
    if not rows:
        return 1

    print(f"# hostile clients against gunicorn ({WORKERS} gevent workers) on 127.0.0.1, "
          f"{time.perf_counter() - t_start:.0f} s in all; MiB = the largest rise of one worker's RSS over its "
          f"idle RSS; seconds = the slowest answer; cpu s = server CPU during the probe")
    print_table(rows)
    print()
    print(goal_line(rows))
    print()
    print_notes(rows)
    for label, run in logs:
        print(f"[{label}] ", end="")
        run.print_log_summary()
    if args.json:
        data = {"workers": WORKERS, "timeout_s": args.timeout, "hold_s": args.hold,
                "goals": {"answer_s": ANSWER_GOAL_S, "worker_rise_mib": MEMORY_GOAL_MIB, "livez_ms": LIVEZ_GOAL_MS},
                "goal": goal_line(rows), "rows": [r.as_dict() for r in rows],
                "server_logs": {label: run.findings for label, run in logs}}
        Path(args.json).write_text(json.dumps(data, indent=1))
    if failed:
        return 1
    return 130 if any(run.interrupted for _, run in logs) else 0


if __name__ == "__main__":
    sys.exit(main())
