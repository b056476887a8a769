"""How long a capacity plan takes: the bounded search against the exhaustive one it replaced.

Prints one row per objective: the plan, then the wall time of ``plan()`` as it is now (runs given
up once out of the running, each GPU batching as Triton's code does, a budget of simulated
requests), of the exhaustive search (``exhaustive=True``: every run to its end) and whether it
gave the same plan; of the planner under Triton's documented rule (``scheduler="rule"``: the
planner before 2026-12-06, every run on the one-instance loop), and its plan where it differs; and
of that rule's search before the bound (``exhaustive=True, engine="events"``: SimPy's event loop),
each measured in the same run.
CPU seconds are printed beside the wall time: on a shared machine they move less with what other
processes take. The objectives run from easy to out of reach; the slow one is 2 ms + 0.05 ms a
sample at 5,000 qps and p99 4 ms, where 53 GPUs each run almost idle and every setting's p99 is
within a few percent of the objective, so no run can be given up early and 13 GPU counts are asked.

Run: .venv/bin/python benchmarks/capacity_planner.py [--skip-old] [--no-model]   (minutes: the old search
on the slow objective took 95 s on a quiet two-core machine). Saved: results/capacity_planner.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from predictor.capacity.planner import Plan, plan
from predictor.capacity.simulator import LatencyFn


def linear(base_ms: float, per_sample_ms: float, sigma: float) -> LatencyFn:
    """``base + per_sample x batch`` ms, lognormal spread ``sigma``: a model that batches well."""
    return lambda batch: (base_ms + per_sample_ms * batch, sigma)


@dataclass(frozen=True)
class Objective:
    name: str
    latency: LatencyFn
    qps: float
    slo_ms: float
    max_gpus: int = 64


def objectives(with_model: bool) -> list[Objective]:
    rows = [
        Objective("easy: 2 ms+0.05/sample, 2,000 qps, 10 ms", linear(2.0, 0.05, 0.0), 2_000, 10.0),
        Objective("many GPUs: 20,000 qps, 5 ms", linear(2.0, 0.05, 0.0), 20_000, 5.0),
        Objective("slow: 5,000 qps, 4 ms", linear(2.0, 0.05, 0.0), 5_000, 4.0),
        Objective("slow, sigma 0.01: 5,000 qps, 4 ms", linear(2.0, 0.05, 0.01), 5_000, 4.0),
        Objective("out of reach: 500 qps, 1.5 ms", linear(2.0, 0.05, 0.0), 500, 1.5),
        Objective("beyond max_gpus=2: 100,000 qps, 10 ms", linear(2.0, 0.05, 0.0), 100_000, 10.0, 2),
    ]
    if with_model:
        from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
        from predictor.capacity.service_time import predicted_service_time
        from predictor.devices import resolve_device
        from predictor.predict import Predictor
        from predictor.zoo import load_zoo_graph

        device = resolve_device("h200")
        predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id), device)
        service_time = predicted_service_time(predictor, load_zoo_graph("resnet50"), "fp16", "cudagraph")
        for batch in range(1, 129):  # predicted once here, so the timings below are the search's alone
            service_time(batch)
        rows.append(Objective("resnet50 h200 fp16 graph: 3,000 qps, 5 ms", service_time, 3_000, 5.0))
        rows.append(Objective("resnet50 h200 fp16 graph: 100 qps, 5 ms", service_time, 100, 5.0))
    return rows


def timed(row: Objective, **options: Any) -> tuple[Plan, float, float]:
    """The plan for ``row`` with ``options``, its wall-clock and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = plan(row.latency, row.qps, row.slo_ms, max_gpus=row.max_gpus, **options)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def same(one: Plan, other: Plan) -> bool:
    """The same plan, whatever finding it cost."""
    return dataclasses.replace(one, simulated_requests=0) == dataclasses.replace(other, simulated_requests=0)


def shown(result: Plan) -> str:
    return (f"{result.gpus} GPU x b{result.max_batch} d{result.max_queue_delay_us}us p99 {result.p99_ms:.2f}"
            + ("" if result.meets else " (no)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-old", action="store_true", help="leave out the search on SimPy's loop (minutes)")
    parser.add_argument("--no-model", action="store_true", help="leave out resnet50's predicted latency")
    args = parser.parse_args()
    header = (f"{'objective':<42} {'plan':<36} {'now s':>6} {'cpu':>5} {'sim req':>9} {'exh. s':>7} same | "
              f"{'rule s':>6} {'now/rule':>8} {'plan under the rule':<36} | {'old s':>7} {'cpu':>6} {'old/rule':>8}")
    print(header)
    print("-" * len(header))
    for row in objectives(not args.no_model):
        now, now_s, now_cpu = timed(row)
        exhaustive, exh_s, _ = timed(row, exhaustive=True)
        rule, rule_s, _ = timed(row, scheduler="rule")
        rule_plan = "the same setting" if (rule.gpus, rule.max_batch, rule.max_queue_delay_us) == \
            (now.gpus, now.max_batch, now.max_queue_delay_us) else shown(rule)
        old_cols = f"{'-':>7} {'-':>6} {'-':>8}"
        if not args.skip_old:
            old, old_s, old_cpu = timed(row, exhaustive=True, engine="events", scheduler="rule")
            old_cols = f"{old_s:7.2f} {old_cpu:6.1f} {old_s / rule_s:7.1f}x" + ("" if same(old, rule) else " NOT SAME")
        print(f"{row.name:<42} {shown(now):<36} {now_s:6.2f} {now_cpu:5.1f} {now.simulated_requests:9,} {exh_s:7.2f} "
              f"{'yes' if same(now, exhaustive) else 'NO ':<4} | {rule_s:6.2f} {now_s / rule_s:7.1f}x "
              f"{rule_plan:<36} | {old_cols}", flush=True)
    print("\nnow: plan() as it is (budget 4,000,000 simulated requests; each GPU batching as Triton's code does, "
          "scheduler='triton'); exh.: exhaustive=True, same: it gave the same plan;\nrule: plan(scheduler='rule'), "
          "the planner before 2026-12-06 (Triton's documented rule, on the one-instance loop); old: the rule's "
          "search before the bound (exhaustive=True, engine='events': SimPy's loop), checked to give the rule's plan.")


if __name__ == "__main__":
    main()
