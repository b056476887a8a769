"""Several model instances per GPU in capacity plans: the sharing model against the H100's measurements,
and what plans under a batch limit gain from weighing instances.

Part 1 scores ``predictor/capacity/instance_sharing.py``'s model (k batches of b running together take
phi(k, b) x latency(k x b)) on the committed H100 measurements (``results/instance_concurrency_h100.jsonl``:
six zoo models as fp16 CUDA graphs, k = 1-4 instances replaying at once, batches 1-32): the samples a
second k instances served at batch b, measured, against ``k b / (phi(k, b) latency(k b))``, with phi's
points the medians over the other five models at each (k, b) measured (leave one model out; k = 3 was
never fitted: its phi is interpolated between 2 and 4) and latency(k b) either measured alone (where
k x b was measured, up to 32) or predicted by latpred for the H100 (the shipped transfer bundle: what a
plan uses). Beside it, two baselines a planner without the model would use: independent instances
(``k b / latency(b)``, the simulator's instances before the sharing model) and one instance
(``b / latency(b)``).

Part 2 plans each model on the H100 under a batch limit (``latpred capacity --batch-limit``) at a load
of three times what one instance serves at that limit, p99 objective five times the limit's latency,
with one instance per GPU and with up to four (``--max-instances``): the GPUs each needs.

Run: .venv/bin/python benchmarks/instance_plans.py   (about a minute on 2 cores)
Saved: results/instance_plans.txt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from benchmarks.instance_sharing import Key, medians  # noqa: E402
from predictor.capacity.instance_sharing import InstanceSharing, instances_capacity_qps  # noqa: E402
from predictor.capacity.planner import limited_choices, plan, weighed_instances  # noqa: E402
from predictor.capacity.service_time import predicted_service_time  # noqa: E402
from predictor.cli import load_predictor  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BATCHES = (1, 4, 8, 16, 32)
H100 = "nvidia-h100-80gb-hbm3"


def held_out_sharing(latency: dict[Key, float], model: str) -> InstanceSharing:
    """The sharing from the other models: at each (k, b) measured, the median of L_k(b) / L_1(k b), as
    the shipped ``MEASURED_SHARING`` takes them from all six (phi at k = 3 interpolated as it does)."""
    phis: dict[tuple[int, int], list[float]] = defaultdict(list)
    for m, b, count in latency:
        if count > 1 and m != model and (m, count * b, 1) in latency:
            phis[(count, b)].append(latency[(m, b, count)] / latency[(m, count * b, 1)])
    return InstanceSharing(tuple((k, b, statistics.median(v)) for (k, b), v in sorted(phis.items())))


def score(rows: list[tuple[int, float, float]]) -> str:
    """MAPE and share within +-10% of (k, predicted, measured) rows ('-' for none)."""
    if not rows:
        return "-"
    errors = [abs(p / m - 1) for _, p, m in rows]
    return f"{100 * statistics.mean(errors):5.1f}% {100 * sum(e <= 0.1 for e in errors) / len(errors):4.0f}%"


def part_one(data: Path, predicted_ms: Callable[[str, int], float]) -> list[str]:
    header, latency, throughput, throttled = medians(data)
    models = sorted({m for m, _, _ in latency})
    lines = [f"## Part 1: k instances' samples a second at batch b, measured against the sharing model "
             f"({data.name}: {header.get('gpu')}, {throttled} units the GPU slowed left out)",
             "sharing (measured L): k b / (phi(k, b) L_1(k b)), L_1 measured alone (k b up to 32); "
             "sharing (latpred L): the same, L predicted; independent: k b / L(b), L predicted; one instance: b / L(b)",
             f"{'model':<20} {'k':>2} {'b':>3} {'measured':>9} {'shared(meas L)':>15} {'shared(latpred)':>16} "
             f"{'independent':>12} {'one':>8}"]
    rows: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for k in (2, 3, 4):
        for model in models:
            sharing = held_out_sharing(latency, model)
            for b in BATCHES:
                if (model, b, k) not in throughput:
                    continue
                phi = sharing.factor(k, b)
                measured = throughput[(model, b, k)]
                alone = latency.get((model, k * b, 1))
                shared_measured = k * b / (phi * alone) * 1e3 if alone else None
                shared = k * b / (phi * predicted_ms(model, k * b)) * 1e3
                independent = k * b / predicted_ms(model, b) * 1e3
                one = b / predicted_ms(model, b) * 1e3
                if shared_measured is not None:
                    rows["shared (measured L)"].append((k, shared_measured, measured))
                rows["shared (latpred L)"].append((k, shared, measured))
                rows["independent (latpred L)"].append((k, independent, measured))
                rows["one instance (latpred L)"].append((k, one, measured))
                cell = f"{shared_measured:>15.0f}" if shared_measured is not None else f"{'-':>15}"
                lines.append(f"{model:<20} {k:>2} {b:>3} {measured:>9.0f} {cell} {shared:>16.0f} {independent:>12.0f} "
                             f"{one:>8.0f}")
    lines += ["", "predicted samples a second against measured: MAPE, within +-10% (k = 3 never fitted)",
              f"{'predictor':<26} {'k=2':>11} {'k=3':>11} {'k=4':>11} {'all':>11}"]
    for name, scored in rows.items():
        cells = [score([r for r in scored if r[0] == k]) for k in (2, 3, 4)] + [score(scored)]
        lines.append(f"{name:<26} " + " ".join(f"{c:>11}" for c in cells))
    return lines


def part_two(models: list[str], limits: tuple[int, ...]) -> list[str]:
    predictor = load_predictor(H100, None)
    lines = ["", "## Part 2: plans on the H100 (transfer bundle's predictions, fp16 CUDA graph), under a batch limit, "
             "at 3x one instance's capacity at the limit, p99 objective 5x the limit's predicted latency",
             f"{'model':<20} {'limit':>5} {'qps':>7} {'slo ms':>7} {'GPUs, 1 instance':>17} {'GPUs, up to 4':>14} "
             f"{'instances':>10} {'max batch':>10} {'p99 ms':>7} {'CPU s':>6}"]
    for model in models:
        service = predicted_service_time(predictor, load_zoo_graph(model), "fp16", "cudagraph")
        for limit in limits:
            batches, delays = limited_choices(limit)
            qps = round(3 * instances_capacity_qps(service.median_ms, limit, 1, None))
            slo = round(5 * service(limit)[0], 2)
            one = plan(service, qps, slo, max_batch_choices=batches, delay_us_choices=delays)
            started = time.process_time()
            shared = plan(service, qps, slo, max_batch_choices=batches, delay_us_choices=delays,
                          instance_choices=weighed_instances(batch_limit=limit))
            seconds = time.process_time() - started
            lines.append(f"{model:<20} {limit:>5} {qps:>7} {slo:>7.2f} {one.gpus:>17} {shared.gpus:>14} "
                         f"{shared.instances:>10} {shared.max_batch:>10} {shared.p99_ms:>7.2f} {seconds:>6.1f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=RESULTS / "instance_concurrency_h100.jsonl")
    parser.add_argument("--out", type=Path, default=RESULTS / "instance_plans.txt")
    parser.add_argument("--limits", default="1,4,8", help="the batch limits part 2 plans under")
    args = parser.parse_args()
    predictor = load_predictor(H100, None)
    graphs: dict[str, object] = {}
    cache: dict[tuple[str, int], float] = {}

    def predicted_ms(model: str, batch: int) -> float:
        if (model, batch) not in cache:
            graph = graphs.setdefault(model, load_zoo_graph(model))
            cache[(model, batch)] = predictor.predict(graph, batch, "fp16", "cudagraph",  # type: ignore[arg-type]
                                                      with_layers=False).total_ms
        return cache[(model, batch)]

    lines = [f"# .venv/bin/python benchmarks/instance_plans.py  (bundle {predictor.bundle.version} for "
             f"{predictor.device.name})"]
    lines += part_one(args.data, predicted_ms)
    models = sorted({m for m, _, _ in medians(args.data)[1]})
    lines += part_two(models, tuple(int(x) for x in args.limits.split(",")))
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
