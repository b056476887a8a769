"""How fast prediction is once loaded: one 200-node graph, and graphs per minute in batch.

Prints a table. The baseline, measured in the same run, is the roofline alone over the same
graph (features computed, no model evaluated), so the ratio shows what the learned models cost.
Run: python benchmarks/predict_speed.py [--onnx resnet50.onnx]  (one CPU core: threads pinned to 1)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from predictor.devices import resolve_device  # noqa: E402
from predictor.features import roofline_us  # noqa: E402
from predictor.graph import Graph  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.zoo import load_zoo_graph, zoo_names  # noqa: E402


def timed(fn, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--onnx", help="an ONNX file to time the import of (e.g. resnet50.onnx)")
    parser.add_argument("--graphs", type=int, default=600)
    args = parser.parse_args()
    device = resolve_device("h200")
    t0 = time.perf_counter()
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id), device)
    load_ms = (time.perf_counter() - t0) * 1e3
    source = load_zoo_graph("densenet169")
    graph = Graph(name="densenet169[:200]", nodes=source.nodes[:200])
    kernels = sum(n.kind == "kernel" for n in graph.nodes)

    def roofline_only() -> float:  # every kernel node has a family (Node's validator refuses one without)
        return sum(roofline_us(n.family, n.params, n.variant, 8, "fp16", device)
                   for n in graph.nodes if n.kind == "kernel" and n.family)

    def cold(mode: str) -> None:
        predictor.forget_evaluated()  # every kernel configuration evaluated by the boosters
        predictor.predict(graph, 8, "fp16", mode)

    timings = (("predict cudagraph, 200 nodes, cold cache", lambda: cold("cudagraph")),
               ("predict eager, 200 nodes, cold cache", lambda: cold("eager")),
               ("predict cudagraph, 200 nodes, warm cache", lambda: predictor.predict(graph, 8, "fp16", "cudagraph")))
    # Interleaved rounds, baseline first in each: this machine's speed drifts by a quarter from
    # one second to the next, and timing each line in a block of its own let that drift into
    # the ratios.
    samples: dict[str, list[float]] = {"base": [], **{label: [] for label, _ in timings}}
    for _ in range(30):
        samples["base"] += timed(roofline_only, 1)
        for label, fn in timings:
            samples[label] += timed(fn, 1)
    base = statistics.median(samples["base"])
    rows = [("bundle load", load_ms, None),
            (f"roofline only, 200 nodes ({kernels} kernels)", base, 1.0)]
    for label, _ in timings:
        value = statistics.median(samples[label])
        rows.append((label, value, value / base))
    predictor.forget_evaluated()

    graphs = [load_zoo_graph(name) for name in zoo_names()]
    variants = [(g, b, p) for g in graphs for b in (1, 8, 32, 128) for p in ("fp16", "bf16", "fp32")]
    variants = (variants * (args.graphs // len(variants) + 1))[: args.graphs]
    t0 = time.perf_counter()
    for g, b, p in variants:
        predictor.predict(g, b, p, "cudagraph")
    per_minute = len(variants) / (time.perf_counter() - t0) * 60
    mean_nodes = statistics.mean(len(g.nodes) for g, _, _ in variants)
    rows.append((f"graphs per minute, {len(variants)} zoo variants (mean {mean_nodes:.0f} nodes)", per_minute, None))
    # The batch path (what POST /v1/predict/batch does): every new kernel configuration of the
    # whole batch evaluated in one booster pass per family, then each graph composed.
    predictor.forget_evaluated()
    t0 = time.perf_counter()
    predictor.prefetch([(g, b, p, "cudagraph") for g, b, p in variants])
    for g, b, p in variants:
        predictor.predict(g, b, p, "cudagraph")
    batched = len(variants) / (time.perf_counter() - t0) * 60
    rows.append(("graphs per minute, the same as one batch (prefetch)", batched, None))
    if args.onnx:
        from predictor.importers.onnx_graph import graph_from_onnx

        rows.append(("ONNX import " + os.path.basename(args.onnx),
                     statistics.median(timed(lambda: graph_from_onnx(args.onnx), 5)), None))
    print(f"{'what':<48} {'value':>12} {'x baseline':>11}")
    for what, value, ratio in rows:
        unit = "/min" if "per minute" in what else " ms"
        print(f"{what:<48} {value:>9.2f}{unit:<4}{'' if ratio is None else f'{ratio:>10.1f}x'}")


if __name__ == "__main__":
    main()
