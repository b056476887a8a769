"""Calibrate the service's work budget: what a unit of estimated work costs in CPU, and what the
estimate itself costs (``service.work_budget``, issue #13).

For each request below, as the service would resolve it (zoo graphs shared, inline graphs new
objects), on a predictor with an empty kernel cache: the estimate (node evaluations, distinct and
new kernel configurations, units), the CPU the estimate took, then the CPU of the work the batch
endpoint does for it (``Predictor.prefetch`` of every pair, then ``predict`` per pair without
layers), and the CPU per unit. The estimate's CPU includes each graph's kernel configurations,
which the prefetch that follows reuses; and the service computes the estimate only where even
every node counted as a new kernel would be over the budget ("fits (bound)": not computed). A
second pass asks the same request again, its kernels now cached: the estimate's discount and what
is left to do. The two passes of every request give a least-squares fit (of relative errors) of
CPU = a x nodes + b x new kernels, whose b / a is what ``KERNEL_WEIGHT`` should be, and the last
column says whether ``LATPRED_MAX_WORK``'s default lets the request in.

The requests: README's examples, a NAS batch of 100 new 100-node graphs x 4 variants, the
requests ``benchmarks/service_batch.py`` (its three streams, 100 pairs a request) and
``benchmarks/nas_speed.py`` (100 new NAS graphs x 1 variant) send, one graph at
``LATPRED_MAX_NODES`` (50,000 nodes, every kernel distinct) on one variant, and issue #13's hostile
one: 5,000 distinct nodes x 40 batches.

Process CPU time (``time.process_time``), one thread (``OMP_NUM_THREADS=1``), the compiled trees as
the service runs them.

Run: .venv/bin/python benchmarks/work_budget.py [--skip-hostile]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.nas_speed import graphs_of  # noqa: E402
from benchmarks.service_batch import NasInline, OneGraph, ZooNames  # noqa: E402
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from predictor.devices import resolve_device  # noqa: E402
from predictor.graph import Graph, Node  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402
from service.config import DEFAULT_MAX_WORK, ServiceConfig  # noqa: E402
from service.predictions import ResolvedVariant, host_key  # noqa: E402
from service.work_budget import KERNEL_WEIGHT, WorkEstimate, estimate  # noqa: E402

DEVICE = "h200"
Variant = tuple[int | None, str, str]  # batch, precision, mode


@dataclass(frozen=True)
class Request:
    name: str
    #: makes the request's graphs as the service would hold them (new inline graphs each call)
    graphs: Callable[[], list[Graph]]
    variants: list[Variant]


@dataclass
class Measured:
    work: WorkEstimate
    estimate_ms: float
    cpu_s: float


def distinct_chain(nodes: int) -> Graph:
    """A chain of linear layers, no two the same shape: every node a kernel configuration of its own."""
    return Graph(name=f"distinct-{nodes}", nodes=[
        Node(name=f"fc{i}", op="linear", kind="kernel", family="linear", params={"tokens": 1, "k": 64 + i, "n": 64})
        for i in range(nodes)])


def _zoo(names: list[str]) -> Callable[[], list[Graph]]:
    graphs = [load_zoo_graph(n) for n in names]  # the resolver keeps one object per zoo name
    return lambda: graphs


def _batch_variants(variants: list[dict[str, Any]]) -> list[Variant]:
    return [(v["batch"], v["precision"], v["mode"]) for v in variants]


def requests(hostile: bool, max_nodes: int) -> list[Request]:
    """The requests to measure (see the module's docstring)."""
    zoo = ZooNames(100).work(0)
    one = OneGraph(100, "resnet50").work(0)
    nas = NasInline(100, 800, 0)
    inline = nas.work(0)
    pool = [json.loads(nas.pool[i]) for _, i in inline.graphs]
    out = [
        Request("README predict resnet50", _zoo(["resnet50"]), [(8, "fp16", "cudagraph")]),
        Request("README latency grid", _zoo(["resnet50", "bert-base"]),
                [(b, "fp16", m) for b in (1, 8, 32) for m in ("eager", "cudagraph")]),
        Request("zoo 43 x b1,8,32 fp16 cg", _zoo(sorted(p.stem for p in (Path(__file__).parent.parent /
                                                                        "predictor" / "zoo_graphs").glob("*.json"))),
                [(b, "fp16", "cudagraph") for b in (1, 8, 32)]),
        Request("NAS 100 x 100 nodes x 4", lambda: graphs_of(7_000_000, 100, nodes=100),
                [(1, "fp16", "cudagraph"), (8, "fp16", "cudagraph"), (1, "fp32", "eager"), (32, "bf16", "eager")]),
        Request("nas_speed 100 x 1", lambda: graphs_of(8_000_000, 100), [(8, "fp16", "cudagraph")]),
        Request("service_batch zoo-names", _zoo([n for _, n in zoo.graphs]), _batch_variants(zoo.variants)),
        Request("service_batch one-graph", _zoo(["resnet50"]), _batch_variants(one.variants)),
        Request("service_batch nas-inline", lambda: [Graph.from_json(g) for g in pool],
                _batch_variants(inline.variants)),
        Request(f"one graph, {max_nodes:,} nodes", lambda: [distinct_chain(max_nodes)], [(1, "fp16", "cudagraph")]),
    ]
    if hostile:
        out.append(Request("hostile 5,000 x 40 batches", lambda: [distinct_chain(5_000)],
                           [(b, "fp16", "cudagraph") for b in range(1, 41)]))
    return out


def resolved(predictor: Predictor, variants: list[Variant]) -> list[ResolvedVariant]:
    """The variants as ``service.predictions.resolve_variant`` makes them (the bundle's host)."""
    return [ResolvedVariant(predictor, predictor.device, b, p, m, predictor.host, host_key(predictor.host))
            for b, p, m in variants]


def measure(predictor: Predictor, graphs: list[Graph], variants: list[ResolvedVariant]) -> Measured:
    """The estimate and its CPU, then the batch endpoint's work for the same pairs and its CPU."""
    gc.collect()
    started = time.process_time()
    work = estimate(graphs, variants)
    estimate_ms = (time.process_time() - started) * 1e3
    started = time.process_time()
    predictor.prefetch([(g, v.batch, v.precision, v.mode) for v in variants for g in graphs])
    for g in graphs:
        for v in variants:
            predictor.predict(g, v.batch, v.precision, v.mode, with_layers=False, host=v.host)
    return Measured(work, estimate_ms, time.process_time() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-hostile", action="store_true", help="leave out 5,000 x 40 (seconds of CPU)")
    args = parser.parse_args()
    device = resolve_device(DEVICE)
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id)
    trees = bundle.compile_trees()
    max_nodes = ServiceConfig().max_nodes
    print(f"# {bundle.version} on {device.device_id}, trees {trees}; KERNEL_WEIGHT {KERNEL_WEIGHT}, "
          f"LATPRED_MAX_WORK default {DEFAULT_MAX_WORK:,}")
    head = (f"{'request':<30} {'pass':<5} {'results':>7} {'nodes':>9} {'kernels':>8} {'new':>8} {'units':>10} "
            f"{'est ms':>7} {'work s':>7} {'us/unit':>7}  {'default'}")
    print(head)
    rows: list[tuple[int, int, float]] = []  # nodes, new kernels, CPU s
    for req in requests(not args.skip_hostile, max_nodes):
        predictor = Predictor(bundle, device)  # an empty kernel cache for each request
        graphs, variants = req.graphs(), resolved(predictor, req.variants)
        for label in ("cold", "again"):
            m = measure(predictor, graphs, variants)
            w = m.work
            rows.append((w.nodes, w.new_kernels, m.cpu_s))
            bound = w.nodes * (1 + KERNEL_WEIGHT) <= DEFAULT_MAX_WORK  # service.work_budget.check's shortcut
            verdict = "fits (bound)" if bound else "fits" if w.units <= DEFAULT_MAX_WORK else "refused"
            print(f"{req.name if label == 'cold' else '':<30} {label:<5} {w.results:>7,} {w.nodes:>9,} "
                  f"{w.kernels:>8,} {w.new_kernels:>8,} {w.units:>10,} {m.estimate_ms:>7.1f} {m.cpu_s:>7.3f} "
                  f"{m.cpu_s / max(w.units, 1) * 1e6:>7.2f}  {verdict}")
    # relative errors (each row divided by its CPU), so the large requests do not decide alone;
    # rows under 10 ms of CPU are left out (timer resolution and fixed costs)
    fit = [(n, k, s) for n, k, s in rows if s >= 0.01]
    x = np.array([[n / s, k / s] for n, k, s in fit], dtype=float)
    (a, b), *_ = np.linalg.lstsq(x, np.ones(len(fit)), rcond=None)
    total = sum(s for _, _, s in rows)
    units = sum(n + KERNEL_WEIGHT * k for n, k, _ in rows)
    print(f"\nfit CPU = a x nodes + b x new kernels: a = {a * 1e6:.2f} us, b = {b * 1e6:.1f} us, b / a = {b / a:.1f} "
          f"(KERNEL_WEIGHT is {KERNEL_WEIGHT}); over all rows {total / units * 1e6:.2f} us of CPU per unit, so "
          f"the default budget is about {DEFAULT_MAX_WORK * total / units:.1f} s of CPU here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
