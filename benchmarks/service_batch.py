"""Throughput of ``POST /v1/predict/batch`` for NAS loops, served by real gunicorn vs in-process.

A NAS loop asks for thousands of graph predictions a minute; the goal (issue #4) is 10,000 graph
predictions per minute on two cores. This starts ``gunicorn -c service/gunicorn_conf.py
service.wsgi:app`` (one gevent worker per core, with app threads) on a free loopback port and drives the batch
endpoint from ``--clients`` concurrent keep-alive connections (default 4, so every worker is busy),
each sending requests of about ``--per-request`` (graph, variant) pairs (default 100), for
``--seconds`` after ``--warmup`` seconds not counted. Scenarios:

  zoo-names     zoo graphs by name (the server keeps them parsed), 4 variants a request taken in
                turn from batch {1,8,32,128} x {fp16,bf16,fp32} x {cudagraph,eager}: names and
                variants repeat, so the kernel caches warm up as the run goes (the repeated case)
  nas-inline    inline JSON IR graphs, each a NAS-like variant of a zoo graph
                (predictor/zoo_graphs/*.json): one random width multiplier m in [0.5, 1.5] per
                graph scales its width parameters (conv c_in/c_out/groups of depthwise layers,
                norm/pool/concat/embedding c, linear k/n, elementwise elements; values >= 16
                only, rounded to a multiple of 8) and a distinct name. A node whose scaled
                parameters its family refuses keeps its own; attention (sdpa, matmul, softmax) and
                the traced shapes (outputs) are left as they are (the predictor reads params).
                A pool of ``--pool`` such graphs is sent in turn, each request with one random
                variant (batch 1..128, every precision and mode), so a graph comes back at another
                batch and the predictor's kernel cache is mostly cold: the baseline reports how
                many kernel configurations each prediction had to evaluate anew
  one-graph     one zoo graph (``--sweep-model``, default resnet50) over the grid batch 1..128 x
                every precision x every mode, ``--per-request`` variants a request

The baseline, measured in the same run before the server starts, is the same stream of
(graph, variant) pairs predicted in this process by ``Predictor.predict`` on one thread (bundle
from predictor/bundles, device h200), after the same warm-up: served/in-process shows what HTTP,
JSON and validation cost, and what two workers win back. For nas-inline the in-process parse
(json.loads + Graph.from_json) is timed apart and shown in its own column. Each gunicorn worker
loads its own predictor (no preload_app), so a served stream fills its kernel caches once per
worker where the baseline fills one; "new cfg/pred" (kernel configurations the baseline's
boosters evaluated per prediction) says how cold a scenario is; a warm-up too short for every
worker to fill its caches shows as a low served/in-process ratio in the warm scenarios. "per srv
core" divides the served rate by the CPU the server got, which takes out what other processes
took. A few served results are checked against the in-process ones (same bundle version, same
totals).

"srv ms/pred" is the server's CPU time (master and workers, from /proc) per prediction served;
in nas-inline every prediction is one new inline graph, so it is the server CPU per new graph.
The measured window opens once every client has had the answer to its last warm-up request and
closes with the answer to the last request sent before it ends, so no request is in flight at
either edge and the CPU read over it is that of the requests counted.

``--baseline REV`` measures the code before and after a change in one run: REV (a git revision)
is checked out in a temporary worktree (``git worktree add --detach``, outside the repository,
removed at the end, also on an error or Ctrl-C), and a second gunicorn is started from it (same
venv, the worktree as cwd and first on PYTHONPATH; the script checks that a Python started so
imports every latpred module from the worktree, not the editable install). Both servers are up
for the whole run and take turns on each scenario, ``--rounds`` times each (default 2: baseline,
new, then new, baseline, so drift of the machine falls on both alike); the table then has a row
per server and a new/baseline row with the ratios of throughput and of server CPU per prediction.
"New" is this working tree, uncommitted changes included.

Client and server share this machine's cores; the CPU line says how much the client took.
Run: .venv/bin/python benchmarks/service_batch.py [--seconds 20] [--clients 4] [--per-request 100]
     [--baseline REV [--rounds 2]]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the baseline's boosters on one thread, as in a worker

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from predictor.catalogue import get_family  # noqa: E402
from predictor.compose import MODES  # noqa: E402
from predictor.devices import resolve_device  # noqa: E402
from predictor.graph import Graph  # noqa: E402
from predictor.precision import PRECISIONS  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.zoo import GRAPH_DIR, load_zoo_graph, zoo_names  # noqa: E402

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._server import (
    Checkout,
    CpuSampler,
    CpuSnapshot,
    CpuUse,
    GunicornServer,
    baseline_checkout,
    code_env,
    cores,
    cpu_line,
    imported_from,
    percentile,
    run_served_all,
    sigterm_as_interrupt,
    working_tree_label,
)

DEVICE = "h200"
GOAL_PER_MIN = 10_000
#: the width parameters a NAS width multiplier scales, per family
WIDTH_PARAMS: dict[str, tuple[str, ...]] = {
    "conv2d": ("c_in", "c_out", "groups"), "batch_norm": ("c",), "group_norm": ("c",), "pool": ("c",),
    "concat": ("c",), "layer_norm": ("c",), "embedding": ("c",), "mean": ("c",), "linear": ("k", "n"),
    "activation": ("elements",), "binary": ("elements",),
}


@dataclass(frozen=True)
class Work:
    """One request: graphs (each a zoo name or an index into the inline pool) x variants."""

    graphs: list[tuple[str, Any]]  # ("zoo", name) or ("inline", pool index)
    variants: list[dict[str, Any]]
    body: bytes

    @property
    def pairs(self) -> int:
        return len(self.graphs) * len(self.variants)


class Stream(Protocol):
    name: str
    description: str

    def work(self, k: int) -> Work: ...


def _variant(batch: int, precision: str, mode: str) -> dict[str, Any]:
    return {"device": DEVICE, "batch": batch, "precision": precision, "mode": mode}


def _body(graphs: list[bytes], variants: list[dict[str, Any]]) -> bytes:
    return (b'{"graphs":[' + b",".join(graphs) + b'],"variants":' + json.dumps(variants).encode()
            + b',"layers":false}')


class ZooNames:
    name = "zoo-names"

    def __init__(self, per_request: int) -> None:
        self.names = zoo_names()
        self.grid = [_variant(b, p, m) for b in (1, 8, 32, 128) for p in ("fp16", "bf16", "fp32")
                     for m in ("cudagraph", "eager")]
        self.v = min(4, per_request)
        self.g = max(1, per_request // self.v)
        self.description = (f"{self.g} of {len(self.names)} zoo names x {self.v} of {len(self.grid)} variants "
                            "a request, in turn")

    def work(self, k: int) -> Work:
        names = [self.names[(k * self.g + i) % len(self.names)] for i in range(self.g)]
        variants = [self.grid[(k * self.v + j) % len(self.grid)] for j in range(self.v)]
        return Work([("zoo", n) for n in names], variants,
                    _body([json.dumps({"model": n}).encode() for n in names], variants))


def _scale(value: int, m: float) -> int:
    return max(8, int(round(value * m / 8)) * 8)


def perturb(source: dict[str, Any], m: float, name: str) -> tuple[dict[str, Any], int, int]:
    """A NAS-like variant of a graph's JSON IR: width parameters times ``m``; returns
    (graph, kernel nodes changed, kernel nodes)."""
    nodes = []
    changed = kernels = 0
    for node in source["nodes"]:
        node = dict(node)
        widths = WIDTH_PARAMS.get(node.get("family") or "", ())
        if node["kind"] == "kernel":
            kernels += 1
            params = node.get("params", {})
            new = {p: _scale(v, m) if p in widths and v >= 16 else v for p, v in params.items()}
            if new != params:
                family = get_family(node["family"])
                try:
                    family.check(new, node.get("variant", ""), node.get("layout"))
                    if node.get("capture_variant"):
                        family.check(new, node["capture_variant"], node.get("layout"))
                    node["params"] = new
                    changed += 1
                except ValueError:
                    pass  # e.g. a grouped convolution whose groups no longer divide: keep it as traced
        nodes.append(node)
    return {**source, "name": name, "nodes": nodes}, changed, kernels


class NasInline:
    name = "nas-inline"

    def __init__(self, per_request: int, pool_size: int, seed: int) -> None:
        rng = random.Random(seed)
        sources = {n: json.loads((GRAPH_DIR / f"{n}.json").read_text()) for n in zoo_names()}
        order = list(sources)
        self.pool: list[bytes] = []
        changed = kernels = 0
        for i in range(pool_size):
            src = order[i % len(order)]
            m = rng.uniform(0.5, 1.5)
            graph, c, n = perturb(sources[src], m, f"{src}-nas{i:05d}-w{m:.3f}")
            changed, kernels = changed + c, kernels + n
            self.pool.append(json.dumps(graph, separators=(",", ":")).encode())
        self.seed = seed
        self.g = per_request
        self.mean_kb = sum(map(len, self.pool)) / len(self.pool) / 1024
        self.description = (f"{self.g} of {pool_size} perturbed inline graphs (mean {self.mean_kb:.0f} KB, "
                            f"{changed / max(kernels, 1):.0%} of kernel nodes rescaled) x 1 random variant a request")

    def work(self, k: int) -> Work:
        rng = random.Random(self.seed * 1_000_003 + k)
        variant = _variant(rng.randint(1, 128), rng.choice(list(PRECISIONS)), rng.choice(list(MODES)))
        idx = [(k * self.g + i) % len(self.pool) for i in range(self.g)]
        return Work([("inline", i) for i in idx], [variant],
                    _body([b'{"graph":' + self.pool[i] + b"}" for i in idx], [variant]))


class OneGraph:
    name = "one-graph"

    def __init__(self, per_request: int, model: str) -> None:
        self.model = model
        self.grid = [_variant(b, p, m) for b in range(1, 129) for p in PRECISIONS for m in MODES]
        self.v = per_request
        self.description = f"{model} x {self.v} of {len(self.grid)} variants (batch 1..128 x precisions x modes)"

    def work(self, k: int) -> Work:
        variants = [self.grid[(k * self.v + j) % len(self.grid)] for j in range(self.v)]
        return Work([("zoo", self.model)], variants, _body([json.dumps({"model": self.model}).encode()], variants))


# --------------------------------------------------------------------------------- in-process baseline
@dataclass
class Baseline:
    pairs: int
    predict_s: float
    parse_s: float
    graphs_parsed: int
    new_configs: int

    @property
    def per_min(self) -> float:
        return self.pairs / max(self.predict_s, 1e-9) * 60

    @property
    def per_min_with_parse(self) -> float:
        return self.pairs / max(self.predict_s + self.parse_s, 1e-9) * 60


class InProcess:
    """Predictor.predict on one thread, graphs resolved as the server does (zoo parsed once)."""

    def __init__(self, pool: list[bytes] | None = None) -> None:
        device = resolve_device(DEVICE)
        self.predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id), device)
        self.version = self.predictor.bundle.version
        self.pool = pool or []
        self._zoo: dict[str, Graph] = {}
        self._zoo_mtime: dict[str, float] = {}

    def graph(self, ref: tuple[str, Any]) -> tuple[Graph, float]:
        """The graph and the seconds it took to parse (0 for a zoo graph already parsed)."""
        kind, key = ref
        if kind == "zoo":
            if key not in self._zoo:
                self._zoo_mtime[key] = (GRAPH_DIR / f"{key}.json").stat().st_mtime
                self._zoo[key] = load_zoo_graph(key)
            return self._zoo[key], 0.0
        t0 = time.perf_counter()
        graph = Graph.from_json(json.loads(self.pool[key]))
        return graph, time.perf_counter() - t0

    def changed_on_disk(self, ref: tuple[str, Any]) -> bool:
        """Whether a zoo graph's file was rewritten since this process loaded it."""
        kind, key = ref
        return kind == "zoo" and key in self._zoo_mtime and \
            (GRAPH_DIR / f"{key}.json").stat().st_mtime != self._zoo_mtime[key]

    def predict(self, graph: Graph, v: dict[str, Any]) -> float:
        return self.predictor.predict(graph, v["batch"], v["precision"], v["mode"]).total_ms

    def run(self, stream: Stream, warmup: float, seconds: float) -> Baseline:
        out = Baseline(0, 0.0, 0.0, 0, 0)
        t_end_warm = time.perf_counter() + warmup
        measuring = False
        t_stop = math.inf
        for k in itertools.count():
            now = time.perf_counter()
            if not measuring and now >= t_end_warm:
                measuring, t_stop = True, now + seconds
            if now >= t_stop:
                break
            work = stream.work(k)
            for ref in work.graphs:
                graph, parse_s = self.graph(ref)
                for v in work.variants:
                    before = len(self.predictor._cache)
                    t0 = time.perf_counter()
                    self.predict(graph, v)
                    dt = time.perf_counter() - t0
                    after = len(self.predictor._cache)
                    if measuring:
                        out.pairs += 1
                        out.predict_s += dt
                        out.new_configs += after - before if after >= before else after
                if measuring:
                    out.parse_s += parse_s
                    out.graphs_parsed += ref[0] == "inline"
        return out


# ----------------------------------------------------------------------------------------- served
@dataclass
class ClientLog:
    ok: int = 0  # (graph, variant) results that carry a prediction
    requests: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    example_error: str = ""
    last_done: float = 0.0
    versions: set[str] = field(default_factory=set)
    sample: tuple[int, list[dict[str, Any]]] | None = None  # (k, results) of one answer, to check


@dataclass
class Served:
    seconds: float
    ok: int
    requests: int
    latencies_ms: list[float]
    errors: Counter[str]
    example_error: str
    versions: set[str]
    samples: list[tuple[int, list[dict[str, Any]]]]
    cpu: CpuUse

    @property
    def per_min(self) -> float:
        return self.ok / self.seconds * 60

    @property
    def per_min_per_server_core(self) -> float:
        return self.per_min / max(self.cpu.server, 1e-9)

    @property
    def server_cpu_ms_per_prediction(self) -> float:
        """Server CPU (master and workers) over the measured window, per prediction served."""
        return self.cpu.server * self.cpu.wall_s / max(self.ok, 1) * 1e3

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "requests": self.requests, "predictions": self.ok, "per_min": self.per_min,
                "per_min_per_server_core": self.per_min_per_server_core,
                "server_cpu_ms_per_prediction": self.server_cpu_ms_per_prediction,
                "request_ms": {"p50": percentile(self.latencies_ms, 50), "p90": percentile(self.latencies_ms, 90),
                               "max": max(self.latencies_ms, default=float("nan"))},
                "errors": dict(self.errors), "example_error": self.example_error, "cpu": self.cpu.as_dict()}


def merge_served(runs: list[Served]) -> Served:
    """Several measured windows of one server on one scenario as one: counts and times added, CPU
    use averaged over the windows' wall time."""
    if len(runs) == 1:
        return runs[0]
    wall = sum(r.cpu.wall_s for r in runs)

    def mean(get: Any) -> float:
        return sum(get(r.cpu) * r.cpu.wall_s for r in runs) / wall

    workers: dict[int, float] = {}
    for r in runs:
        for pid, v in r.cpu.workers.items():
            workers[pid] = workers.get(pid, 0.0) + v * r.cpu.wall_s / wall
    cpu = CpuUse(wall, runs[0].cpu.cores, mean(lambda c: c.client), mean(lambda c: c.server), workers,
                 mean(lambda c: c.other), mean(lambda c: c.idle), dict(runs[0].cpu.worker_connections))
    errors: Counter[str] = Counter()
    for r in runs:
        errors.update(r.errors)
    return Served(sum(r.seconds for r in runs), sum(r.ok for r in runs), sum(r.requests for r in runs),
                  sorted(x for r in runs for x in r.latencies_ms), errors,
                  next((r.example_error for r in runs if r.example_error), ""),
                  set().union(*(r.versions for r in runs)), [x for r in runs for x in r.samples], cpu)


def _client(host: str, port: int, stream: Stream, counter: itertools.count[int], warm_until: float,
            window: Window, timeout: float, log: ClientLog) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    warming = True
    try:
        while True:
            if warming and time.perf_counter() >= warm_until:
                warming = False
                if not window.wait_for_start():
                    return
            k = next(counter)  # atomic under the GIL: every request of the stream is sent once
            work = stream.work(k)
            t0 = time.perf_counter()
            if not warming and t0 >= window.stop_at:
                break
            counted = not warming
            try:
                conn.request("POST", "/v1/predict/batch", body=work.body,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                t1 = time.perf_counter()
                if not counted:
                    continue
                log.requests += 1
                log.latencies.append(t1 - t0)
                log.last_done = t1
                if resp.status != 200:
                    log.errors[f"HTTP {resp.status}"] += work.pairs
                    log.example_error = log.example_error or f"HTTP {resp.status}: {data[:300]!r}"
                    continue
                answer = json.loads(data)
                for item in answer["results"]:
                    if "prediction" in item and item["prediction"] is not None:
                        log.ok += 1
                        log.versions.add(item["prediction"]["model_version"])
                    else:
                        problem = item.get("problem") or {}
                        log.errors[f"item {problem.get('status')} {problem.get('kind') or ''}".strip()] += 1
                        log.example_error = log.example_error or f"item problem: {problem}"
                if log.sample is None:
                    log.sample = (k, answer["results"])
            except Exception as exc:  # a timeout, a reset ...
                conn.close()
                if counted:
                    log.requests += 1
                    log.errors[type(exc).__name__] += work.pairs
                    log.example_error = log.example_error or f"{type(exc).__name__}: {exc}"
                    log.last_done = time.perf_counter()
    finally:
        conn.close()


class Window:
    """The measured window, started only when every client has finished its warm-up requests, so
    that no request is in flight when it starts or when it ends (the clients send none after
    ``stop_at`` and wait for their last answer): the server CPU read over it is that of the
    requests counted, and nothing else."""

    def __init__(self, clients: int, seconds: float) -> None:
        self.seconds = seconds
        self._idle = threading.Barrier(clients + 1)  # the clients, and the thread that samples
        self._go = threading.Event()
        self.start = self.stop_at = math.inf

    def wait_for_start(self) -> bool:
        """A client's turn: wait until all are idle and the window has begun; False if it never will."""
        try:
            self._idle.wait()
        except threading.BrokenBarrierError:
            return False
        self._go.wait()
        return self.start < math.inf

    def begin(self, sample: Callable[[], CpuSnapshot]) -> CpuSnapshot:
        """Wait until every client is idle, sample the CPU, and let them go."""
        self._idle.wait()
        snapshot = sample()
        self.start = time.perf_counter()
        self.stop_at = self.start + self.seconds
        self._go.set()
        return snapshot

    def abandon(self) -> None:
        """Release waiting clients without starting (they stop)."""
        self._idle.abort()
        self._go.set()


def serve_run(server: GunicornServer, stream: Stream, clients: int, warmup: float, seconds: float,
              timeout: float) -> Served:
    sampler = CpuSampler(server.process.pid if server.process else None, server.port)
    logs = [ClientLog() for _ in range(clients)]
    counter = itertools.count()
    barrier = threading.Barrier(clients + 1)
    window = Window(clients, seconds)
    warm_until: dict[str, float] = {}

    def target(log: ClientLog) -> None:
        barrier.wait()
        _client(server.host, server.port, stream, counter, warm_until["t"], window, timeout, log)

    threads = [threading.Thread(target=target, args=(log,), daemon=True) for log in logs]
    for t in threads:
        t.start()
    warm_until["t"] = time.perf_counter() + warmup
    barrier.wait()
    try:
        before = window.begin(sampler.snapshot)
        for t in threads:
            t.join()
    except BaseException:
        window.abandon()
        raise
    cpu = sampler.between(before, sampler.snapshot())
    errors: Counter[str] = Counter()
    for log in logs:
        errors.update(log.errors)
    last = max((log.last_done for log in logs), default=0.0) or window.stop_at
    return Served(max(last - window.start, 1e-9), sum(log.ok for log in logs),
                  sum(log.requests for log in logs), sorted(x * 1e3 for log in logs for x in log.latencies),
                  errors, next((log.example_error for log in logs if log.example_error), ""),
                  set().union(*(log.versions for log in logs)), [log.sample for log in logs if log.sample], cpu)


def check_samples(inproc: InProcess, stream: Stream, samples: list[tuple[int, list[dict[str, Any]]]],
                  limit: int = 50) -> tuple[int, int, int]:
    """(agreeing, compared, skipped) served totals vs in-process ones for the same pairs; a zoo
    graph whose file changed since the baseline loaded it is skipped (the server may have read
    either version)."""
    agree = compared = skipped = 0
    for k, results in samples:
        work = stream.work(k)
        for item in results:
            if compared >= limit or not item.get("prediction"):
                continue
            ref = work.graphs[item["graph"]]
            if inproc.changed_on_disk(ref):
                skipped += 1
                continue
            graph, _ = inproc.graph(ref)
            expected = inproc.predict(graph, work.variants[item["variant"]])
            compared += 1
            agree += math.isclose(item["prediction"]["total_ms"], expected, rel_tol=1e-6)
    return agree, compared, skipped


# ------------------------------------------------------------------------------------------- main
NEW, BASE = "new", "baseline"  # the servers: this working tree's code, and --baseline REV's
LATER_WARMUP_S = 2.0  # later rounds find each server's caches filled by its first one


def schedule(rounds: int, labels: list[str]) -> list[list[str]]:
    """The order the servers take turns in, round by round: as given, then reversed, and so on
    (baseline, new, new, baseline, ...), so that a steady drift of the machine falls on both alike."""
    return [list(labels) if r % 2 == 0 else labels[::-1] for r in range(rounds)]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="measured seconds per scenario, server and round (default 20)")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="unmeasured seconds before each (default 10: each worker fills its own caches; "
                             f"later rounds warm up for at most {LATER_WARMUP_S:g} s)")
    parser.add_argument("--baseline-seconds", type=float, default=None,
                        help="measured seconds of the in-process baseline per scenario (default: --seconds / 2)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also serve git revision REV (from a temporary worktree) and compare: new/baseline")
    parser.add_argument("--rounds", type=int, default=None,
                        help="measured turns per scenario and server (default 1; 2 with --baseline)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections (default 4)")
    parser.add_argument("--per-request", type=int, default=100, help="(graph, variant) pairs a request (100)")
    parser.add_argument("--pool", type=int, default=800, help="distinct perturbed graphs for nas-inline (800)")
    parser.add_argument("--sweep-model", default="resnet50", help="the one-graph scenario's zoo graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=cores(), help="gunicorn workers (default: the cores)")
    parser.add_argument("--threads", type=int, default=None, help="threads per worker (default: gunicorn_conf's)")
    parser.add_argument("--scenarios", default="zoo-names,nas-inline,one-graph",
                        help="comma-separated subset of zoo-names, nas-inline, one-graph")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-request timeout in seconds")
    parser.add_argument("--ready-timeout", type=float, default=90.0, help="seconds to wait for /readyz")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    args = parser.parse_args()
    args.wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if set(args.wanted) - {"zoo-names", "nas-inline", "one-graph"}:
        parser.error(f"unknown scenario(s) in {args.scenarios!r}")
    if args.rounds is None:
        args.rounds = 2 if args.baseline else 1
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    baseline_s = args.baseline_seconds if args.baseline_seconds is not None else args.seconds / 2

    t0 = time.perf_counter()
    streams: list[Stream] = []
    nas: NasInline | None = None
    for name in args.wanted:
        if name == "zoo-names":
            streams.append(ZooNames(args.per_request))
        elif name == "nas-inline":
            nas = NasInline(args.per_request, args.pool, args.seed)
            streams.append(nas)
        else:
            streams.append(OneGraph(args.per_request, args.sweep_model))
    rounds = f", {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"# workload built in {time.perf_counter() - t0:.1f} s; {args.per_request} pairs a request, "
          f"{args.clients} clients, {args.warmup:g} s warm-up + {args.seconds:g} s served{rounds}, "
          f"{baseline_s:g} s in-process, per scenario", flush=True)
    for s in streams:
        print(f"#   {s.name}: {s.description}")

    with sigterm_as_interrupt():
        try:
            with ExitStack() as stack:
                checkout = None
                if args.baseline:
                    checkout = stack.enter_context(baseline_checkout(args.baseline))
                    imported_from(checkout.root, code_env(checkout.root))  # refuses if it would not
                    print(f"# {BASE} = {checkout.label} \"{checkout.subject}\", served from a worktree at "
                          f"{checkout.root} (checked: a Python started there imports latpred from it)")
                    print(f"# {NEW} = {working_tree_label()}")
                    print("# the servers take turns on each scenario: "
                          + " | ".join(", ".join(turn) for turn in schedule(args.rounds, [BASE, NEW])), flush=True)
                return measure_and_report(args, streams, nas, checkout, baseline_s)
        except KeyboardInterrupt:
            print("interrupted" + (": baseline worktree removed" if args.baseline else ""), file=sys.stderr)
            return 130
        except RuntimeError as exc:  # git, or the baseline's code not importable from its worktree
            print(f"error: {exc}", file=sys.stderr)
            return 1


def measure_and_report(args: argparse.Namespace, streams: list[Stream], nas: NasInline | None,
                       checkout: Checkout | None, baseline_s: float) -> int:
    inproc = InProcess(nas.pool if nas else None)
    baselines = {}
    try:
        for s in streams:
            baselines[s.name] = inproc.run(s, min(args.warmup, baseline_s), baseline_s)
            print(f"#   in-process {s.name}: {baselines[s.name].per_min:,.0f}/min", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted (no server was started)", file=sys.stderr)
        return 130

    def server(**where: Any) -> GunicornServer:
        return GunicornServer(workers=args.workers, threads=args.threads, ready_timeout_s=args.ready_timeout, **where)

    servers = {NEW: server()}
    if checkout is not None:
        servers = {BASE: server(root=checkout.root, extra_env=code_env(checkout.root)), **servers}
    labels = list(servers)
    order = schedule(args.rounds, labels)
    by_round: dict[str, dict[str, list[Served]]] = {label: {} for label in labels}

    def work() -> None:
        for label, srv in servers.items():
            who = f" ({label})" if checkout else ""
            print(f"# gunicorn{who} on {srv.host}:{srv.port}: {args.workers} gevent workers x "
                  f"{args.threads or 'gunicorn_conf default (4)'} threads", flush=True)
        for s in streams:
            for r, turn in enumerate(order):
                for label in turn:
                    warmup = args.warmup if r == 0 else min(args.warmup, LATER_WARMUP_S)
                    got = serve_run(servers[label], s, args.clients, warmup, args.seconds, args.timeout)
                    by_round[label].setdefault(s.name, []).append(got)
                    tag = (f" round {r + 1}" if args.rounds > 1 else "") + (f" {label}" if checkout else "")
                    print(f"#   served {s.name}{tag}: {got.per_min:,.0f}/min, "
                          f"{got.server_cpu_ms_per_prediction:.2f} server CPU ms/pred", file=sys.stderr, flush=True)

    runs = run_served_all(list(servers.values()), work)
    if runs is None:
        return 1
    run = dict(zip(labels, runs))
    # Only scenarios every server finished (an interrupted run may have measured one side only).
    done = [s for s in streams if all(len(by_round[label].get(s.name, [])) == args.rounds for label in labels)]
    if not done:
        return 130
    served = {label: {s.name: merge_served(by_round[label][s.name]) for s in done} for label in labels}

    print(f"# machine: {cores()} cores shared by client and server; goal {GOAL_PER_MIN:,} graph predictions/min "
          f"served, no errors; x = served / in-process (one thread, Predictor.predict only); per srv core = "
          "served/min per core of CPU the server got; srv ms/pred = server CPU ms per prediction (nas-inline: per "
          "new inline graph)")
    if checkout is None:
        print_table(done, served[NEW], baselines)
    else:
        print_comparison(done, served, by_round, baselines)
    print()
    print("CPU during each served window (in cores; client = this benchmark's process"
          + (f"; {args.rounds} rounds averaged" if args.rounds > 1 else "") + "):")
    for s in done:
        for label in labels:
            r = served[label][s.name]
            name = f"{s.name} {label}" if checkout else s.name
            width = 20 if checkout else 11
            print(f"  {name:<{width}} {cpu_line(r.cpu)}")
            print(f"  {'':<{width}} -> {r.cpu.verdict()}")
    checks = {label: [(s.name, *check_samples(inproc, s, served[label][s.name].samples)) for s in done]
              for label in labels}
    versions = {label: sorted(set().union(*(r.versions for r in served[label].values()))) for label in labels}
    for label in labels:
        who = f"{label}: " if checkout else ""
        print(f"{who}served model version(s) {', '.join(versions[label]) or '-'}; in-process bundle {inproc.version}; "
              "served totals equal to in-process" + (" (this working tree's code)" if checkout else "") + ": "
              + ", ".join(f"{n} {a}/{c}" + (f" ({sk} skipped: zoo file rewritten during the run)" if sk else "")
                          for n, a, c, sk in checks[label]))
        for s in done:
            if served[label][s.name].example_error:
                where = f"{s.name} {label}" if checkout else s.name
                print(f"  first error in {where}: {served[label][s.name].example_error}")
    for label in labels:
        if checkout:
            print(f"{label} ", end="")
        run[label].print_log_summary()
    if args.json:
        write_json(args, done, served, by_round, baselines, checks, versions, run, inproc.version, checkout)
    return 130 if any(r.interrupted for r in runs) else 0


def print_table(done: list[Stream], served: dict[str, Served], baselines: dict[str, Baseline]) -> None:
    """One server: served against in-process, per scenario."""
    head = (f"{'scenario':<11} {'requests':>8} {'preds':>7} {'served/min':>11} {'per srv core':>12} "
            f"{'srv ms/pred':>11} {'req p50 ms':>10} {'in-proc/min':>11} {'x':>5} {'+parse/min':>10} "
            f"{'new cfg/pred':>12}  {'errors':<10} goal met")
    print(head)
    print("-" * len(head))
    for s in done:
        r, b = served[s.name], baselines[s.name]
        parse = f"{b.per_min_with_parse:>10,.0f}" if b.graphs_parsed else f"{'-':>10}"
        errors = ", ".join(f"{k} x{v}" for k, v in r.errors.most_common()) or "0"
        problems = ([f"{r.per_min:,.0f} < {GOAL_PER_MIN:,}/min"] if r.per_min < GOAL_PER_MIN else []) + \
                   ([f"{sum(r.errors.values())} errors"] if r.errors else [])
        goal = "yes" if not problems else "NO: " + ", ".join(problems)
        print(f"{s.name:<11} {r.requests:>8} {r.ok:>7} {r.per_min:>11,.0f} {r.per_min_per_server_core:>12,.0f} "
              f"{r.server_cpu_ms_per_prediction:>11.2f} {percentile(r.latencies_ms, 50):>10.0f} "
              f"{b.per_min:>11,.0f} {r.per_min / max(b.per_min, 1e-9):>5.2f} {parse} "
              f"{b.new_configs / max(b.pairs, 1):>12.1f}  {errors:<10} {goal}")
    if any(s.name == "nas-inline" for s in done):
        print(f"nas-inline: {served['nas-inline'].server_cpu_ms_per_prediction:.2f} ms of server CPU per new inline "
              "graph (one graph per prediction)")


def _ratio(new: float, base: float) -> float:
    return new / base if base > 0 else float("nan")


#: issue #10: the server CPU per new inline graph at least halves
INLINE_CPU_GOAL = 0.5


def print_comparison(done: list[Stream], served: dict[str, dict[str, Served]],
                     by_round: dict[str, dict[str, list[Served]]], baselines: dict[str, Baseline]) -> None:
    """Two servers, baseline and new: a row each per scenario, then new/baseline."""
    head = (f"{'scenario':<11} {'code':<12} {'requests':>8} {'preds':>7} {'served/min':>11} {'per srv core':>12} "
            f"{'srv ms/pred':>11} {'req p50 ms':>10} {'new cfg/pred':>12}  errors")
    print(head)
    print("-" * len(head))
    for s in done:
        cold = baselines[s.name].new_configs / max(baselines[s.name].pairs, 1)
        for label in (BASE, NEW):
            r = served[label][s.name]
            errors = ", ".join(f"{k} x{v}" for k, v in r.errors.most_common()) or "0"
            print(f"{s.name:<11} {label:<12} {r.requests:>8} {r.ok:>7} {r.per_min:>11,.0f} "
                  f"{r.per_min_per_server_core:>12,.0f} {r.server_cpu_ms_per_prediction:>11.2f} "
                  f"{percentile(r.latencies_ms, 50):>10.0f} {cold:>12.1f}  {errors}")
        b, n = served[BASE][s.name], served[NEW][s.name]
        print(f"{s.name:<11} {'new/baseline':<12} {'':>8} {'':>7} {_ratio(n.per_min, b.per_min):>11.2f} "
              f"{_ratio(n.per_min_per_server_core, b.per_min_per_server_core):>12.2f} "
              f"{_ratio(n.server_cpu_ms_per_prediction, b.server_cpu_ms_per_prediction):>11.2f} "
              f"{_ratio(percentile(n.latencies_ms, 50), percentile(b.latencies_ms, 50)):>10.2f}")
    print()
    print("new/baseline round by round (server CPU per prediction; served/min):")
    for s in done:
        pairs = list(zip(by_round[BASE][s.name], by_round[NEW][s.name]))
        cpu = ", ".join(f"{_ratio(n.server_cpu_ms_per_prediction, b.server_cpu_ms_per_prediction):.2f}"
                        for b, n in pairs)
        rate = ", ".join(f"{_ratio(n.per_min, b.per_min):.2f}" for b, n in pairs)
        print(f"  {s.name:<11} {cpu}; {rate}")
    if any(s.name == "nas-inline" for s in done):
        b, n = served[BASE]["nas-inline"], served[NEW]["nas-inline"]
        ratio = _ratio(n.server_cpu_ms_per_prediction, b.server_cpu_ms_per_prediction)
        print(f"server CPU per new inline graph (nas-inline): {BASE} {b.server_cpu_ms_per_prediction:.2f} ms, "
              f"{NEW} {n.server_cpu_ms_per_prediction:.2f} ms, new/baseline {ratio:.2f} (issue #10 wants at most "
              f"{INLINE_CPU_GOAL:.2f}: {'met' if ratio <= INLINE_CPU_GOAL else 'not met'})")


def write_json(args: argparse.Namespace, done: list[Stream], served: dict[str, dict[str, Served]],
               by_round: dict[str, dict[str, list[Served]]], baselines: dict[str, Baseline],
               checks: dict[str, list[tuple[str, int, int, int]]], versions: dict[str, list[str]],
               run: dict[str, Any], bundle_version: str, checkout: Checkout | None) -> None:
    """The raw numbers; the layout of a run without --baseline, plus its keys when there is one."""
    def checked(label: str, name: str) -> dict[str, int]:
        return next({"agree": a, "compared": c, "skipped": sk} for n, a, c, sk in checks[label] if n == name)

    data: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "wanted")}, "cores": cores(),
        "goal_per_min": GOAL_PER_MIN, "bundle_version": bundle_version, "served_versions": versions[NEW],
        "server_log": run[NEW].findings, "scenarios": []}
    if checkout is not None:
        data["baseline"] = {"rev": checkout.rev, "commit": checkout.commit, "subject": checkout.subject,
                            "served_versions": versions[BASE], "server_log": run[BASE].findings}
        data["new"] = working_tree_label()
    for s in done:
        r, b = served[NEW][s.name], baselines[s.name]
        entry: dict[str, Any] = {
            "scenario": s.name, "description": s.description, "served": r.as_dict(),
            "in_process": {"pairs": b.pairs, "predict_s": b.predict_s, "parse_s": b.parse_s,
                           "graphs_parsed": b.graphs_parsed, "per_min": b.per_min,
                           "per_min_with_parse": b.per_min_with_parse,
                           "new_configs_per_prediction": b.new_configs / max(b.pairs, 1)},
            "served_over_in_process": r.per_min / max(b.per_min, 1e-9),
            "checked": checked(NEW, s.name),
            "goal_met": r.per_min >= GOAL_PER_MIN and not r.errors}
        if args.rounds > 1:
            entry["served_rounds"] = [x.as_dict() for x in by_round[NEW][s.name]]
        if checkout is not None:
            base = served[BASE][s.name]
            entry["served_baseline"] = base.as_dict()
            entry["served_baseline_rounds"] = [x.as_dict() for x in by_round[BASE][s.name]]
            entry["checked_baseline"] = checked(BASE, s.name)
            entry["new_over_baseline"] = {
                "per_min": _ratio(r.per_min, base.per_min),
                "server_cpu_ms_per_prediction": _ratio(r.server_cpu_ms_per_prediction,
                                                       base.server_cpu_ms_per_prediction),
                "rounds_server_cpu_ms_per_prediction": [
                    _ratio(n.server_cpu_ms_per_prediction, o.server_cpu_ms_per_prediction)
                    for o, n in zip(by_round[BASE][s.name], by_round[NEW][s.name])]}
        data["scenarios"].append(entry)
    with open(args.json, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
