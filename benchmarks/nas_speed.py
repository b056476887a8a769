"""How fast a NAS loop is answered: new graphs, each with kernel configurations never seen before.

Issue #11 asks, on two cores, for 60,000 graphs a minute in process (``Predictor.predict_many``),
20,000 a minute through ``POST /v1/predict/batch`` (real gunicorn), and a cold 200-node graph in
at most 2 ms on one core. Every figure is measured twice in the same run, taking turns: with the
bundle's trees compiled (predictor.compiled_trees, ``LATPRED_TREES=compiled``: lleaves) and with
its boosters (``LATPRED_TREES=booster``, the baseline); the table gives both and their ratio.

The graphs are NAS candidates drawn here (``nas_graph(seed)``: MobileNet-style inverted residuals
with squeeze-excite, basic ResNets, and pre-norm transformer encoders; widths, sizes, depths, heads
and sequence lengths drawn anew per seed, 20-250 nodes), built with predictor.graph's Node and
Graph as an importer would build them. Each is used once per predictor, so its kernel
configurations are new to it (the table says how many a graph brings), and every predictor gets
its own graph objects (a graph remembers its node keys).

- in process: ``predict_many`` over batches of ``--per-call`` graphs (default 100) on one variant
  (batch, precision and mode change from batch to batch), on ``--graphs`` graphs per predictor,
  the two predictors taking turns batch by batch; graphs built beforehand (and frozen for the
  garbage collector, see ``in_process``), wall time.
- served: ``gunicorn -c service/gunicorn_conf.py service.wsgi:app`` (one gevent worker per core)
  twice, compiled and booster, each driven in turn for ``--seconds`` (after ``--warmup``) by
  ``--clients`` keep-alive connections (default 4) posting ``--per-call`` inline graphs and one
  variant per request; no graph is sent twice to a server. Client and server share the machine's
  cores; the server CPU per graph comes from /proc.
- cold: one core (the measuring processes pinned to the first core this one may use, as
  ``taskset -c 0`` would), median of ``--cold-rounds`` rounds per predictor, one predictor per
  process (the other's boosters or code would evict its caches between rounds), processes in
  alternating blocks: densenet169's first 200 nodes at batch 8, fp16, CUDA graph with the kernel
  cache cleared (``predict_speed.py``'s cold line), and a new 200-node NAS graph each round
  (its node keys made too; the first 200 nodes of a draw that has as many, which only the
  MobileNet-style space makes), both with their per-layer breakdowns as ``predict`` gives them.
- compile (``--compile``): the bundle's models compiled into an empty cache, as a fresh machine
  or CI run does on its first load.

Run: .venv/bin/python benchmarks/nas_speed.py [--graphs 3000] [--seconds 20] [--compile]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

os.environ.setdefault("OMP_NUM_THREADS", "1")

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._server import CpuSampler, GunicornServer, cores, cpu_line, run_served_all  # noqa: E402
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from predictor.compose import MODES  # noqa: E402
from predictor.devices import resolve_device  # noqa: E402
from predictor.graph import Graph, Node  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.variant import Variant  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402

DEVICE = "h200"
TREES = ("booster", "compiled")  # the baseline first
GOALS = {"in_process": 60_000, "served": 20_000, "cold_ms": 2.0}
#: the variants the batches take in turn (batch, precision, mode)
VARIANTS = [Variant(batch=b, precision=p, mode=m) for b in (1, 8, 32) for p in ("fp16", "bf16", "fp32")
            for m in MODES]
#: seeds of the graphs each part uses, far apart so no two parts share a graph
SEEDS = {"in_process": 1_000_000, "served": 2_000_000, "cold": 3_000_000}


# ------------------------------------------------------------------------------------ the graphs
SPACES = ("mbconv", "resnet", "transformer")
ACTIVATIONS = ("relu", "silu", "hardswish", "gelu")


def _width(rng: random.Random, low: int, high: int) -> int:
    """A channel count in [low, high], a multiple of 8 (as NAS spaces draw them)."""
    return rng.randrange(low // 8, high // 8 + 1) * 8


class _Builder:
    """Appends nodes in call order, as the torch importer would record them."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, op: str, kind: Literal["kernel", "free", "fallback"] = "kernel", family: str | None = None,
            variant: str = "",
            layout: str = "contiguous", **params: int) -> None:
        self.nodes.append(Node(name=f"{len(self.nodes)}:{op}", op=op, kind=kind, family=family, variant=variant,
                               layout=layout, params=params, dtype="float32"))

    def conv(self, c_in: int, c_out: int, size: int, kernel: int, stride: int = 1, groups: int = 1,
             bias: bool = False) -> int:
        self.add("conv2d", family="conv2d", variant="" if bias else "nobias", layout="nchw", c_in=c_in,
                 c_out=c_out, h=size, w=size, kernel=kernel, stride=stride, groups=groups)
        return (size + 2 * (kernel // 2) - kernel) // stride + 1

    def bn(self, c: int, size: int) -> None:
        self.add("batch_norm", family="batch_norm", layout="nchw", c=c, h=size, w=size)

    def act(self, name: str, elements: int) -> None:
        self.add(name, family="activation", variant=name, elements=elements)


def _mbconv(rng: random.Random, b: _Builder) -> None:
    """MobileNet/EfficientNet-style inverted residuals with squeeze-excite."""
    size = rng.choice((96, 128, 160, 192, 224))
    c = _width(rng, 16, 48)
    size = b.conv(3, c, size, 3, 2)
    b.bn(c, size)
    b.act("hardswish", c * size * size)
    for _ in range(rng.randint(4, 6)):
        out, act, kernel = _width(rng, 16, 320), rng.choice(ACTIVATIONS), rng.choice((3, 5))
        for block in range(rng.randint(1, 4)):
            stride = 2 if block == 0 and size > 8 and rng.random() < 0.6 else 1
            hidden = c * rng.choice((1, 3, 4, 6))
            if hidden != c:
                b.conv(c, hidden, size, 1)
                b.bn(hidden, size)
                b.act(act, hidden * size * size)
            new = b.conv(hidden, hidden, size, kernel, stride, groups=hidden)
            size = new
            b.bn(hidden, size)
            b.act(act, hidden * size * size)
            if rng.random() < 0.5:  # squeeze-excite
                squeeze = max(8, _width(rng, 8, max(8, hidden // 4)))
                b.add("adaptive_avg_pool2d", family="pool", variant="adaptive_avg", layout="nchw", c=hidden,
                      h=size, w=size, kernel=1, stride=1)
                b.conv(hidden, squeeze, 1, 1, bias=True)
                b.act("relu", squeeze)
                b.conv(squeeze, hidden, 1, 1, bias=True)
                b.act("hardsigmoid", hidden)
                b.add("mul", family="binary", variant="mul", layout="strided", elements=hidden * size * size)
            b.conv(hidden, out, size, 1)
            b.bn(out, size)
            if stride == 1 and out == c:
                b.add("add_", family="binary", variant="add", elements=out * size * size)
            c = out
    b.add("adaptive_avg_pool2d", family="pool", variant="adaptive_avg", layout="nchw", c=c, h=size, w=size,
          kernel=1, stride=1)
    b.add("flatten", kind="free")
    b.add("linear", family="linear", tokens=1, k=c, n=1000)


def _resnet(rng: random.Random, b: _Builder) -> None:
    """Basic residual stages, widths doubling per stage."""
    size = rng.choice((64, 96, 128, 160, 192, 224))
    c = _width(rng, 32, 96)
    size = b.conv(3, c, size, 7, 2)
    b.bn(c, size)
    b.act("relu", c * size * size)
    b.add("max_pool2d", family="pool", variant="max", layout="nchw", c=c, h=size, w=size, kernel=3, stride=2)
    size = (size + 2 - 3) // 2 + 1
    for stage in range(rng.randint(2, 4)):
        out = c * 2 if stage else c
        for block in range(rng.randint(1, 3)):
            stride = 2 if stage and not block else 1
            new = b.conv(c, out, size, 3, stride)
            b.bn(out, new)
            b.act("relu", out * new * new)
            b.conv(out, out, new, 3)
            b.bn(out, new)
            if stride != 1 or out != c:
                b.conv(c, out, size, 1, stride)
                b.bn(out, new)
            b.add("add_", family="binary", variant="add", elements=out * new * new)
            b.act("relu", out * new * new)
            c, size = out, new
    b.add("adaptive_avg_pool2d", family="pool", variant="adaptive_avg", layout="nchw", c=c, h=size, w=size,
          kernel=1, stride=1)
    b.add("flatten", kind="free")
    b.add("linear", family="linear", tokens=1, k=c, n=1000)


def _transformer(rng: random.Random, b: _Builder) -> None:
    """A pre- or post-norm encoder stack with hand-written attention."""
    heads = rng.randint(1, 12)
    head_dim = rng.choice((16, 24, 32, 48, 64, 80, 96, 128))
    d, tokens = heads * head_dim, rng.randrange(32, 513)
    hidden = _width(rng, d, 4 * d)
    act = rng.choice(("gelu", "relu", "silu"))
    for _ in range(rng.randint(2, 12)):
        b.add("layer_norm", family="layer_norm", tokens=tokens, c=d)
        b.add("linear", family="linear", tokens=tokens, k=d, n=3 * d)
        for view in ("view", "permute", "unbind"):
            b.add(view, kind="free")
        b.add("scaled_dot_product_attention", family="sdpa", heads=heads, seq_q=tokens, seq_kv=tokens,
              head_dim=head_dim, causal=int(rng.random() < 0.25))
        b.add("transpose", kind="free")
        b.add("reshape", kind="free")
        b.add("linear", family="linear", tokens=tokens, k=d, n=d)
        b.add("add", family="binary", variant="add", elements=tokens * d)
        b.add("layer_norm", family="layer_norm", tokens=tokens, c=d)
        b.add("linear", family="linear", tokens=tokens, k=d, n=hidden)
        b.act(act, tokens * hidden)
        b.add("linear", family="linear", tokens=tokens, k=hidden, n=d)
        b.add("add", family="binary", variant="add", elements=tokens * d)
    b.add("layer_norm", family="layer_norm", tokens=tokens, c=d)
    b.add("mean", family="mean", rows=tokens, c=d)
    b.add("linear", family="linear", tokens=1, k=d, n=1000)


def nas_graph(seed: int) -> Graph:
    """One NAS-like candidate from ``seed`` (deterministic), in the space ``seed % 3`` names;
    its widths, sizes and depths are drawn anew, so its kernel configurations are new."""
    rng = random.Random(seed)
    space = SPACES[seed % len(SPACES)]
    b = _Builder()
    {"mbconv": _mbconv, "resnet": _resnet, "transformer": _transformer}[space](rng, b)
    return Graph(name=f"nas-{space}-{seed}", nodes=b.nodes, batch=1, source="benchmarks/nas_speed.py",
                 meta={"kind": "vision" if space != "transformer" else "text", "traced_dtype": "float32"})


def graphs_of(first_seed: int, count: int, nodes: int | None = None) -> list[Graph]:
    """``count`` NAS graphs from consecutive seeds; with ``nodes``, only those with at least that
    many nodes, cut to their first ``nodes`` (as predict_speed.py cuts densenet169)."""
    out: list[Graph] = []
    seed = first_seed
    while len(out) < count:
        graph = nas_graph(seed)
        seed += 1
        if nodes is None:
            out.append(graph)
        elif len(graph.nodes) >= nodes:
            out.append(Graph(name=graph.name, nodes=graph.nodes[:nodes], meta=graph.meta))
    return out


# ----------------------------------------------------------------------------------- predictors
def load_predictor(trees: str) -> Predictor:
    """A predictor over the shipped bundle with its trees compiled or as boosters (compiling what
    the cache lacks)."""
    device = resolve_device(DEVICE)
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id)
    bundle.compile_trees(trees)
    return Predictor(bundle, device)


def timed_compile() -> tuple[float, int]:
    """(seconds, models) to compile the shipped bundle's models into an empty cache."""
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / resolve_device(DEVICE).device_id)
    models = sum(len(t.files) for t in bundle.targets.values())
    before = os.environ.get("LATPRED_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="latpred-compile-") as tmp:
        os.environ["LATPRED_CACHE_DIR"] = tmp
        try:
            started = time.perf_counter()
            bundle.compile_trees("compiled")
            return time.perf_counter() - started, models
        finally:
            if before is None:
                os.environ.pop("LATPRED_CACHE_DIR", None)
            else:
                os.environ["LATPRED_CACHE_DIR"] = before


# ----------------------------------------------------------------------------------- in process
@dataclass
class InProcess:
    graphs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    new_configs: int = 0
    nodes: int = 0

    @property
    def per_min(self) -> float:
        return self.graphs / max(self.seconds, 1e-9) * 60


def in_process(predictors: dict[str, Predictor], count: int, per_call: int) -> dict[str, InProcess]:
    """predict_many over batches of new graphs, the predictors taking turns batch by batch."""
    graphs = {trees: graphs_of(SEEDS["in_process"], count) for trees in predictors}  # own objects each
    # Built beforehand, the graphs would be swept by the collector's first passes inside the
    # timing (a loop that builds each candidate as it goes pays that as it goes): frozen, what is
    # timed is prediction and the collections its own allocations cause.
    gc.collect()
    gc.freeze()
    out = {trees: InProcess() for trees in predictors}
    for k, start in enumerate(range(0, count, per_call)):
        variant = VARIANTS[k % len(VARIANTS)]
        order = list(predictors) if k % 2 == 0 else list(predictors)[::-1]
        for trees in order:
            predictor, batch = predictors[trees], graphs[trees][start:start + per_call]
            before = len(predictor._cache)
            t0, c0 = time.perf_counter(), time.thread_time()
            predictor.predict_many(batch, [variant])
            out[trees].seconds += time.perf_counter() - t0
            out[trees].cpu_seconds += time.thread_time() - c0
            out[trees].graphs += len(batch)
            out[trees].nodes += sum(len(g.nodes) for g in batch)
            out[trees].new_configs += len(predictor._cache) - before
    gc.unfreeze()
    return out


# --------------------------------------------------------------------------------------- served
@dataclass
class Served:
    graphs: int = 0
    requests: int = 0
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    cpu: str = ""
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def per_min(self) -> float:
        return self.graphs / max(self.seconds, 1e-9) * 60

    @property
    def server_ms_per_graph(self) -> float:
        return self.server_cpu_s / max(self.graphs, 1) * 1e3


class Stream:
    """Request bodies: ``per_call`` inline graphs from a pool and one variant. Each pass over the
    pool has its own (batch, precision), so no (graph, variant) is sent twice and the server's
    kernel configurations are always new to it; the graphs are parsed anew per request anyway."""

    def __init__(self, pool: list[bytes], per_call: int) -> None:
        self.pool, self.per_call = pool, per_call
        self._next = 0
        self._lock = threading.Lock()

    def next_body(self) -> tuple[bytes, int]:
        with self._lock:
            k = self._next
            self._next += 1
        first = k * self.per_call
        passes = first // len(self.pool)
        variant = {"device": DEVICE, "batch": 1 + (passes * 37) % 128, "precision": ("fp16", "bf16", "fp32", "tf32")[
            passes % 4], "mode": MODES[(passes // 4) % 2]}
        items = [self.pool[(first + i) % len(self.pool)] for i in range(self.per_call)]
        body = (b'{"graphs":[' + b",".join(b'{"graph":' + g + b"}" for g in items) + b'],"variants":['
                + json.dumps(variant).encode() + b'],"layers":false}')
        return body, len(items)


def drive(server: GunicornServer, stream: Stream, clients: int, warmup: float, seconds: float) -> Served:
    """``clients`` keep-alive connections post the stream's bodies; the measured window opens when
    every client has its last warm-up answer and closes with the answers to the requests sent in
    it, so the server CPU read over it is that of the graphs counted."""
    out = Served()
    lock = threading.Lock()
    idle = threading.Barrier(clients + 1)
    go = threading.Event()
    window = {"start": float("inf"), "stop": float("inf"), "last": 0.0}

    def client() -> None:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
        warm_until = time.perf_counter() + warmup
        measuring = False
        try:
            while True:
                now = time.perf_counter()
                if not measuring and now >= warm_until:
                    idle.wait()
                    go.wait()
                    measuring = True
                    now = time.perf_counter()
                if measuring and now >= window["stop"]:
                    return
                body, graphs = stream.next_body()
                conn.request("POST", "/v1/predict/batch", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                if not measuring:
                    continue
                with lock:
                    out.requests += 1
                    window["last"] = max(window["last"], time.perf_counter())
                    if resp.status != 200:
                        out.errors[f"HTTP {resp.status}"] = out.errors.get(f"HTTP {resp.status}", 0) + graphs
                        continue
                    answer = json.loads(data)
                    out.graphs += answer["count"] - answer["failed"]
                    if answer["failed"]:
                        out.errors["item problems"] = out.errors.get("item problems", 0) + answer["failed"]
        finally:
            conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    sampler = CpuSampler(server.process.pid if server.process else None, server.port)
    idle.wait()
    before = sampler.snapshot()
    window["start"] = time.perf_counter()
    window["stop"] = window["start"] + seconds
    go.set()
    for t in threads:
        t.join()
    use = sampler.between(before, sampler.snapshot())
    out.seconds = max(window["last"] - window["start"], 1e-9)
    out.server_cpu_s = use.server * use.wall_s
    out.cpu = cpu_line(use)
    return out


def served(args: argparse.Namespace) -> dict[str, Served] | None:
    """Both servers up, each driven in turn (booster, compiled, then compiled, booster)."""
    pool = [json.dumps(g.to_json(), separators=(",", ":")).encode()
            for g in graphs_of(SEEDS["served"], args.pool)]
    servers = {trees: GunicornServer(extra_env={"LATPRED_TREES": trees}, ready_timeout_s=600) for trees in TREES}
    runs: dict[str, list[Served]] = {trees: [] for trees in TREES}

    def work() -> None:
        for r in range(args.rounds):
            for trees in (TREES if r % 2 == 0 else TREES[::-1]):
                run = drive(servers[trees], Stream(pool, args.per_call), args.clients,
                            args.warmup if r == 0 else min(args.warmup, 2.0), args.seconds)
                print(f"# served {trees} round {r + 1}: {run.per_min:,.0f} graphs/min, "
                      f"{run.server_ms_per_graph:.2f} server CPU ms/graph; {run.cpu}", flush=True)
                runs[trees].append(run)

    if run_served_all(list(servers.values()), work) is None:
        return None
    merged = {}
    for trees, rs in runs.items():
        m = Served(sum(r.graphs for r in rs), sum(r.requests for r in rs), sum(r.seconds for r in rs),
                   sum(r.server_cpu_s for r in rs), rs[-1].cpu if rs else "")
        for r in rs:
            for k, v in r.errors.items():
                m.errors[k] = m.errors.get(k, 0) + v
        merged[trees] = m
    return merged


# ----------------------------------------------------------------------------------------- cold
def cold_child(trees: str, rounds: int, first: int) -> dict[str, list[float]]:
    """In a process pinned to one core, one predictor: ms of a cold densenet169[:200] and of a
    new 200-node NAS graph (seeds from ``first``), ``rounds`` times after 5 unmeasured."""
    predictor = load_predictor(trees)
    source = load_zoo_graph("densenet169")
    dense = Graph(name="densenet169[:200]", nodes=source.nodes[:200])
    fresh = graphs_of(SEEDS["cold"] + first, rounds + 5, nodes=200)
    gc.collect()
    gc.freeze()  # as in_process does
    samples: dict[str, list[float]] = {"densenet": [], "nas": []}
    for i in range(rounds + 5):
        for what, graph in (("densenet", dense), ("nas", fresh[i])):
            predictor.forget_evaluated()  # every kernel configuration evaluated anew
            t0 = time.perf_counter()
            predictor.predict(graph, 8, "fp16", "cudagraph")
            if i >= 5:  # the first rounds warm the interpreter up
                samples[what].append((time.perf_counter() - t0) * 1e3)
    return samples


def cold(rounds: int, blocks: int = 4) -> tuple[dict[str, dict[str, float]], int]:
    """``cold_child`` in subprocesses pinned to the first core this process may use, one
    predictor per process (the other's boosters or code would evict its caches between rounds),
    in alternating blocks (booster, compiled, compiled, booster ...) so drift falls on both;
    the median of every round."""
    import subprocess

    core = min(os.sched_getaffinity(0))
    samples: dict[str, dict[str, list[float]]] = {t: {"densenet": [], "nas": []} for t in TREES}
    for block in range(blocks):
        for trees in (TREES if block % 2 == 0 else TREES[::-1]):
            done = subprocess.run([sys.executable, __file__, "--cold-child", trees, "--rounds", str(rounds // blocks),
                                   "--first", str(block * 1000), "--core", str(core)],
                                  capture_output=True, text=True, timeout=1800)
            if done.returncode:
                raise RuntimeError(f"the cold measurement failed:\n{done.stderr[-2000:]}")
            for what, values in json.loads(done.stdout.strip().splitlines()[-1]).items():
                samples[trees][what] += values
    return {t: {what: statistics.median(v) for what, v in by.items()} for t, by in samples.items()}, core


# ----------------------------------------------------------------------------------------- main
def row(what: str, values: dict[str, float], goal: float | None, fmt: str, higher_better: bool = True) -> str:
    base, new = values.get("booster", float("nan")), values.get("compiled", float("nan"))
    ratio = new / base if base else float("nan")
    met = "" if goal is None else ("met" if (new >= goal if higher_better else new <= goal) else "NOT met")
    goal_text = "" if goal is None else (f">= {goal:{fmt}}" if higher_better else f"<= {goal:{fmt}}")
    return f"{what:<58} {base:>12{fmt}} {new:>12{fmt}} {ratio:>9.2f}x  {goal_text:<10} {met}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=3000, help="in-process graphs per predictor (default 3000)")
    parser.add_argument("--per-call", type=int, default=100, help="graphs per predict_many call and per request")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per server and round")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds before the first round")
    parser.add_argument("--rounds", type=int, default=2, help="served rounds per server (default 2)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent keep-alive connections (default 4)")
    parser.add_argument("--pool", type=int, default=4000, help="distinct inline graphs the served stream cycles")
    parser.add_argument("--cold-rounds", type=int, default=60, help="cold rounds per graph and predictor")
    parser.add_argument("--compile", action="store_true", help="also time compiling the bundle into an empty cache")
    parser.add_argument("--skip-served", action="store_true", help="no gunicorn part")
    parser.add_argument("--cold-child", choices=TREES, help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_child:
        os.sched_setaffinity(0, {args.core})
        print(json.dumps(cold_child(args.cold_child, args.rounds, args.first)))
        return

    print(f"# {platform.processor() or platform.machine()}, {cores()} cores; python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f} (other processes share these cores: see 'other' below)")
    compile_line = ""
    if args.compile:
        seconds, models = timed_compile()
        compile_line = f"compiling the bundle's {models} models into an empty cache: {seconds:.1f} s on {cores()} cores"
        print(f"# {compile_line}", flush=True)
    t0 = time.perf_counter()
    predictors = {trees: load_predictor(trees) for trees in TREES}  # compiles what the cache lacks
    print(f"# predictors loaded in {time.perf_counter() - t0:.1f} s: "
          + "; ".join(f"{t}: {p!r}" for t, p in predictors.items()), flush=True)

    inproc = in_process(predictors, args.graphs, args.per_call)
    del predictors  # the served part's workers need the memory more
    c = inproc["compiled"]
    print(f"# in process: {c.graphs} graphs per predictor, mean {c.nodes / max(c.graphs, 1):.0f} nodes, "
          f"{c.new_configs / max(c.graphs, 1):.1f} new kernel configurations a graph "
          f"(booster {inproc['booster'].new_configs / max(inproc['booster'].graphs, 1):.1f}); by this thread's "
          "CPU time: " + ", ".join(f"{t} {r.graphs / max(r.cpu_seconds, 1e-9) * 60:,.0f}/min"
                                   for t, r in inproc.items()), flush=True)
    serve = None if args.skip_served else served(args)
    cold_ms, core = cold(args.cold_rounds)

    print()
    print(f"{'what':<58} {'booster':>12} {'compiled':>12} {'ratio':>10}  {'goal':<10}")
    print(row(f"in process, graphs/min (predict_many, {args.per_call} a call)",
              {t: r.per_min for t, r in inproc.items()}, GOALS["in_process"], ",.0f"))
    if serve is not None:
        print(row(f"POST /v1/predict/batch, graphs/min ({args.per_call} a request)",
                  {t: r.per_min for t, r in serve.items()}, GOALS["served"], ",.0f"))
        print(row("  server CPU ms per graph", {t: r.server_ms_per_graph for t, r in serve.items()}, None, ".2f",
                  higher_better=False))
    print(row(f"cold densenet169[:200] (b8 fp16 cudagraph), core {core}, ms",
              {t: v["densenet"] for t, v in cold_ms.items()}, GOALS["cold_ms"], ".2f", higher_better=False))
    print(row(f"cold new 200-node NAS graph (same), core {core}, ms",
              {t: v["nas"] for t, v in cold_ms.items()}, None, ".2f", higher_better=False))
    if compile_line:
        print(compile_line)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if serve is not None:
        for trees, r in serve.items():
            print(f"served {trees}: {r.requests} requests, {r.graphs} graphs in {r.seconds:.1f} s, errors "
                  f"{r.errors or 'none'}; last window's CPU: {r.cpu}")


if __name__ == "__main__":
    main()
