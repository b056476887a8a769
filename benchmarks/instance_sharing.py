"""What k model instances sharing a GPU amount to, from ``instance_concurrency.py``'s measurements.

The capacity planner gives each GPU one model instance and lets the dynamic batcher grow its batches
(``predictor/capacity/planner.py``). Triton can run k instances on a GPU instead (``instance_group
{ count: k }``), each issuing its own batches. This reads the committed H100 measurements
(``results/instance_concurrency_h100.jsonl``: six zoo models as fp16 CUDA graphs, batches 1-32, k = 1-4
instances replaying at once, two interleaved rounds) and asks how k instances at batch b compare with
one instance at batch k x b, the batch a single instance's batcher would form from the same requests:

- phi_k = (median latency of a batch of b while k instances run) / (latency of one batch of k x b
  alone), for every (model, b) whose k x b was measured (k = 2: b = 4, 8, 16; k = 4: b = 1, 4, 8);
- the throughput of k instances at b over one instance at k x b (1 / phi_k: the same samples);
- phi_k fitted as the median over the other models, and each model's latency under k instances
  predicted as phi_k x its own one-instance latency at k x b (leave one model out);
- the same with phi(k, b), the other models' median at that k and b: the points the simulator's
  sharing takes (``predictor/capacity/instance_sharing.py``'s ``MEASURED_SHARING``).

Run: .venv/bin/python benchmarks/instance_sharing.py [--data results/instance_concurrency_h100.jsonl]
Saved: results/instance_sharing.txt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


Key = tuple[str, int, int]  # (model, batch, k)


def medians(path: Path) -> tuple[dict[str, object], dict[Key, float], dict[Key, float], int]:
    """The header record; the median over rounds of each (model, batch, k)'s median batch latency (ms)
    and of its samples a second (all k instances); and how many units the GPU slowed (power or heat:
    NVML's clock-event reasons), which are left out."""
    header: dict[str, object] = {}
    latency: dict[Key, list[float]] = defaultdict(list)
    throughput: dict[Key, list[float]] = defaultdict(list)
    throttled = 0
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["type"] == "header":
            header = record
        elif record["type"] == "unit":
            if record.get("throttled"):
                throttled += 1
                continue
            key = (record["model"], record["batch"], record["instances"])
            latency[key].append(record["latency_median_ms"])
            throughput[key].append(record["throughput_sps"])
    return (header, {k: statistics.median(v) for k, v in latency.items()},
            {k: statistics.median(v) for k, v in throughput.items()}, throttled)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=RESULTS / "instance_concurrency_h100.jsonl")
    parser.add_argument("--out", type=Path, default=RESULTS / "instance_sharing.txt")
    args = parser.parse_args()
    header, latency, throughput, throttled = medians(args.data)
    models = sorted({m for m, _, _ in latency})
    lines = [f"# .venv/bin/python benchmarks/instance_sharing.py  ({args.data.name}: {header.get('gpu')}, torch "
             f"{header.get('torch')}, {header.get('date')})",
             f"{throttled} units the GPU slowed (power or heat) left out",
             "phi = latency of a batch of b while k instances replay at once / latency of one batch of k*b alone;",
             "thr = samples a second of k instances at b (measured) / of one instance at k*b",
             f"{'model':<20} {'k':>2} {'b':>3} {'k*b':>4} {'L_k(b) ms':>10} {'L_1(kb) ms':>11} {'phi':>6} "
             f"{'thr':>6}"]
    phis: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    by_batch: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)  # (k, b) -> model -> phi
    gains: dict[int, list[float]] = defaultdict(list)
    for k in (2, 4):
        for model in models:
            for b in (1, 4, 8, 16, 32):
                if (model, k * b, 1) not in latency or (model, b, k) not in latency:
                    continue
                shared, alone = latency[(model, b, k)], latency[(model, k * b, 1)]
                phi = shared / alone
                phis[k][model].append(phi)
                by_batch[(k, b)][model] = phi
                gain = throughput[(model, b, k)] / throughput[(model, k * b, 1)]
                gains[k].append(gain)
                lines.append(f"{model:<20} {k:>2} {b:>3} {k * b:>4} {shared:>10.3f} {alone:>11.3f} {phi:>6.2f} "
                             f"{gain:>6.2f}")
    lines.append("")
    lines.append("phi_k over every (model, b): median (min-max); leave one model out: phi_k the others' median, "
                 "each model's L_k(b) predicted as phi_k x its L_1(k*b)")
    for k, by_model in phis.items():
        every = [p for values in by_model.values() for p in values]
        errors = []
        for model, values in by_model.items():
            others = statistics.median([p for m, vs in by_model.items() if m != model for p in vs])
            errors += [abs(others / p - 1) for p in values]
        within = sum(e <= 0.10 for e in errors) / len(errors)
        lines.append(f"  k={k}: phi {statistics.median(every):.2f} ({min(every):.2f}-{max(every):.2f}) over "
                     f"{len(every)} pairs; held out: MAPE {100 * statistics.mean(errors):.1f}%, "
                     f"{100 * within:.0f}% within +-10%; k instances at b served {min(gains[k]):.2f}-"
                     f"{max(gains[k]):.2f}x the samples a second of one instance at k*b (measured)")
    lines += ["", "phi(k, b) over the models: median (min-max); leave one model out: phi(k, b) the others' median "
              "(the simulator's points are these medians)"]
    for k in (2, 4):
        errors = []
        for (count, b), model_phis in sorted(by_batch.items()):
            if count != k:
                continue
            values = list(model_phis.values())
            lines.append(f"  k={k} b={b:<2}: phi {statistics.median(values):.3f} ({min(values):.2f}-{max(values):.2f}) "
                         f"over {len(values)} models")
            for model, own in model_phis.items():
                others = statistics.median([p for m, p in model_phis.items() if m != model])
                errors.append(abs(others / own - 1))
        within = sum(e <= 0.10 for e in errors) / len(errors)
        lines.append(f"  k={k}, phi by b, held out: MAPE {100 * statistics.mean(errors):.1f}%, "
                     f"{100 * within:.0f}% within +-10%")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
