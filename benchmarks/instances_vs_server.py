"""The simulator's instances sharing a GPU against a real server with several instances.

Reads a folder written by ``collectors/instance_serving.py`` (a model served with k instances on one
GPU, each on its own CUDA stream, Triton's documented batching without a delay, Poisson loads) and
replays each load's arrivals (the server's receipt times) in the simulator, each batch size's latency
the median of its times measured alone (its spread as a lognormal sigma), two ways:

- **shared**: ``BatchingConfig(sharing=MEASURED_SHARING)``, what plans use (a batch beside others runs
  as their summed batch, slowed by phi_n: 1.10 for two, 1.21 for four, fitted on other models);
- **independent**: instances that do not slow each other (the simulator's instances before the sharing).

Prints per load the measured p50, p99, throughput and mean batch, each simulation's p99 over the measured one, and the
median batch's time in the load over its time alone against what the sharing model charges it; then
how many loads each puts within ±10%. Nothing was fitted on these loads.

Run: .venv/bin/python benchmarks/instances_vs_server.py --folder FOLDER [--out results/instances_vs_server_h100.txt]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.capacity.instance_sharing import MEASURED_SHARING  # noqa: E402
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
WARMUP = 0.1


def alone(service: pd.DataFrame) -> LatencyModel:
    """Each batch size's median time alone (ms), with the median over sizes of their log spread."""
    by = service.groupby("batch")["service_s"]
    medians = (by.median() * 1e3).to_dict()
    sigma = float(by.apply(lambda s: np.std(np.log(s))).median())
    return LatencyModel(lambda b: medians[b], min(sigma, 5.0))


def measured(load: pd.DataFrame) -> dict[str, float]:
    ordered = load.sort_values("index")
    kept = ordered.iloc[int(len(ordered) * WARMUP):]
    latency_ms = (kept["finish_us"] - kept["received_us"]).to_numpy() / 1e3
    window_s = (kept["received_us"].max() - kept["received_us"].min()) / 1e6
    return {"p50": float(np.percentile(latency_ms, 50)), "p99": float(np.percentile(latency_ms, 99)),
            "qps": len(kept) / window_s, "batch": float(kept["batch_size"].mean())}


def simulated(load: pd.DataFrame, latency: LatencyModel, max_batch: int, instances: int, shared: bool) -> float:
    times = np.sort(load["received_us"].to_numpy() / 1e6)
    config = BatchingConfig(max_batch=max_batch, instances=instances,
                            sharing=MEASURED_SHARING if shared and instances > 1 else None)
    result = simulate(Arrivals("trace", times=tuple(times - times[0])), config, latency, warmup_fraction=WARMUP,
                      engine="events")
    return result.p99_ms


def batch_slowdowns(load: pd.DataFrame, latency: LatencyModel) -> tuple[float, float]:
    """(median served batch time over its size's time alone, the median the sharing model charges it):
    the model charges a batch phi_n x latency(its size + the sizes running when it starts) over its time
    alone, n the batches running then, itself included."""
    batches = load.groupby(["start_us", "finish_us"]).size().reset_index(name="size").sort_values("start_us")
    start, finish, size = (batches[c].to_numpy() for c in ("start_us", "finish_us", "size"))
    served, charged = [], []
    for i in range(len(batches)):
        running = (start < start[i]) & (finish > start[i])
        alone = latency(int(size[i]))[0]
        served.append((finish[i] - start[i]) / 1e3 / alone)
        summed, factor = MEASURED_SHARING.batch_time_terms(int(size[i]), [int(s) for s in size[running]])
        charged.append(factor * latency(summed)[0] / alone)
    return float(np.median(served)), float(np.median(charged))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="a serving-instances folder")
    parser.add_argument("--out", type=Path, default=RESULTS / "instances_vs_server.txt")
    args = parser.parse_args()
    lines = [f"# .venv/bin/python benchmarks/instances_vs_server.py --folder {args.folder}",
             f"{'model':<16} {'setting':<16} {'level':>5} {'qps':>7} {'batch':>6} {'p50 ms':>7} {'p99 ms':>7} "
             f"{'shared':>7} {'indep':>7} {'served/alone':>12} {'charged/alone':>13}"]
    counts = {"shared": [0, 0], "independent": [0, 0]}
    for requests in sorted(args.folder.glob("requests-*.parquet")):
        frame = pd.read_parquet(requests)
        service = pd.read_parquet(requests.with_name(requests.name.replace("requests-", "service-")))
        latency = alone(service)
        for (model, setting, level), load in frame.groupby(["model", "setting", "level"], sort=False):
            max_batch, instances = (int(x) for x in str(setting).removeprefix("mb").split("-nodelay-x"))
            m = measured(load)
            shared = simulated(load, latency, max_batch, instances, True) / m["p99"]
            independent = simulated(load, latency, max_batch, instances, False) / m["p99"]
            if instances > 1:
                for name, ratio in (("shared", shared), ("independent", independent)):
                    counts[name][0] += abs(ratio - 1) <= 0.1
                    counts[name][1] += 1
            served, charged = batch_slowdowns(load, latency)
            lines.append(f"{model:<16} {setting:<16} {level:>5.2f} {m['qps']:>7.0f} {m['batch']:>6.2f} "
                         f"{m['p50']:>7.3f} {m['p99']:>7.3f} {shared:>7.2f} {independent:>7.2f} {served:>12.2f} "
                         f"{charged:>13.2f}")
    lines += ["", "shared, indep: simulated p99 over measured; served/alone: the median batch's time in the load over "
              "its size's time alone; charged/alone: what the sharing model charges it (phi_n x latency(summed batch))",
              "loads with several instances whose simulated p99 is within +-10%:"]
    lines += [f"  {name}: {hit} of {total}" for name, (hit, total) in counts.items()]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
