"""Would re-timing running batches fix the instance sharing? A check of the approximation the simulator makes.

The simulator fixes a batch's time when it starts (``predictor/capacity/instance_sharing.py``): phi(n, b)
x latency(summed batch) for the batches running then. A batch that starts alone is never slowed by
batches that start after it. This replays the loads of a ``collectors/instance_serving.py`` folder
(Triton's batching without a delay: a free instance takes up to max batch of the queue) in a small
simulation of its own that can do either:

- **fixed**: the simulator's rule, a batch's time fixed at its start;
- **re-timed**: every running batch progresses at the rate 1 / (its own spread x phi(n, b) x
  latency(S)) of the batches running now (n of them, S samples together), re-timed whenever one
  starts or ends (a fluid sharing of the GPU).

each with the shipped sharing (phi by count and batch size) and with one phi per count (the sharing
until 2026-12-07), against the measured p99. The batches' times alone are their sizes' medians
measured alone, with a lognormal spread per batch (sigma: the median over sizes of the log spread).

A folder served by Triton (``latpred collect serving --server triton`` with ``-x<k>`` settings) also
has each batch size's CUDA-graph replay alone (``graph-service-*.parquet``); a batch's time through
PyTriton is that replay plus PyTriton's own host work. For it one more way is replayed, **host
apart**: only the replay shares the GPU, phi(n, b) x replay(S), and the batch's host work, alone(b) -
replay(b), is added unshared (each instance's work in its own thread and Python backend process).

Run: .venv/bin/python benchmarks/retimed_sharing.py --folder datasets/nvidia-h100-80gb-hbm3/serving-instances
Saved: results/retimed_sharing.txt (``--out``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from benchmarks.instances_vs_server import PER_COUNT_SHARING, WARMUP, alone, measured  # noqa: E402
from collectors.batching_server import ServerSettings  # noqa: E402
from predictor.capacity.instance_sharing import MEASURED_SHARING, InstanceSharing  # noqa: E402
from predictor.capacity.simulator import LatencyModel  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def p99_ms(arrival_s: np.ndarray, alone_s: Callable[[int], float], sigma: float, max_batch: int, instances: int,
           sharing: InstanceSharing, retimed: bool, seed: int = 0,
           replay_s: Callable[[int], float] | None = None) -> float:
    """The p99 (ms, after the warm-up) of ``arrival_s`` served by ``instances`` instances that take up to
    ``max_batch`` queued requests when free, sharing the GPU as ``sharing`` says, fixed or re-timed;
    with ``replay_s`` (the GPU's part of ``alone_s``, fixed only) the rest of a batch's time is its own."""
    rng = np.random.default_rng(seed)
    n = len(arrival_s)
    finish = np.zeros(n)
    # a running batch: [end s (fixed) or work left (re-timed, 1 at its start), size, spread, first request]
    running: list[list[float]] = []
    head = arrived = 0
    now = 0.0

    def set_time() -> float:
        summed = int(sum(r[1] for r in running))
        return sharing.factor(len(running), summed / len(running)) * alone_s(summed)

    while head < n or running:
        if not running:
            done_at = np.inf
        elif retimed:
            together = set_time()
            done_at = now + min(r[0] * together * r[2] for r in running)
        else:
            done_at = min(r[0] for r in running)
        arrives_at = arrival_s[arrived] if arrived < n else np.inf
        at = min(done_at, arrives_at)
        if retimed and running:  # every running batch's work done until then, at the set's rate
            for r in running:
                r[0] -= (at - now) / (together * r[2])
        now = at
        if done_at <= arrives_at:
            batch = running.pop(min(range(len(running)), key=lambda i: running[i][0]))
            first, size = int(batch[3]), int(batch[1])
            finish[first:first + size] = now
        else:
            arrived += 1
        while len(running) < instances and head < arrived:
            size = min(arrived - head, max_batch)
            spread = float(np.exp(rng.normal(0.0, sigma)))
            if retimed:
                running.append([1.0, size, spread, head])
            else:
                summed = size + int(sum(r[1] for r in running))
                phi = sharing.factor(len(running) + 1, summed / (len(running) + 1))
                if replay_s is None:
                    took = phi * alone_s(summed)
                else:  # the replay shares the GPU; the host's work for this batch does not
                    took = phi * replay_s(summed) + max(alone_s(size) - replay_s(size), 0.0)
                running.append([now + took * spread, size, spread, head])
            head += size
    return float(np.percentile((finish - arrival_s)[int(n * WARMUP):], 99) * 1e3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="a serving-instances folder")
    parser.add_argument("--out", type=Path, default=RESULTS / "retimed_sharing.txt")
    args = parser.parse_args()
    ways = {"fixed, phi(n, b)": (MEASURED_SHARING, False), "re-timed, phi(n, b)": (MEASURED_SHARING, True),
            "fixed, phi(n)": (PER_COUNT_SHARING, False), "re-timed, phi(n)": (PER_COUNT_SHARING, True)}
    replays = sorted(args.folder.glob("graph-service-*.parquet"))
    if replays:
        ways["host apart, phi(n, b)"] = (MEASURED_SHARING, False)
    lines = [f"# .venv/bin/python benchmarks/retimed_sharing.py --folder {args.folder}",
             "simulated p99 over measured, loads with several instances",
             f"{'model':<16} {'setting':<16} {'level':>5} {'p99 ms':>7} " + " ".join(f"{w:>21}" for w in ways)]
    ratios: dict[str, list[float]] = {w: [] for w in ways}
    for requests in sorted(args.folder.glob("requests-*.parquet")):
        frame = pd.read_parquet(requests)
        latency = alone(pd.read_parquet(requests.with_name(requests.name.replace("requests-", "service-"))))

        def alone_s(batch: int, latency: LatencyModel = latency) -> float:
            return float(latency.median_ms(batch)) / 1e3
        graph = requests.with_name(requests.name.replace("requests-", "graph-service-"))
        replay = pd.read_parquet(graph).groupby("batch")["service_s"].median().to_dict() if graph.exists() else {}
        for (model, setting, level), load in frame.groupby(["model", "setting", "level"], sort=False):
            served_as = ServerSettings.parse(str(setting))
            max_batch, instances = served_as.max_batch, served_as.instances
            if instances == 1:
                continue
            arrivals = np.sort(load["received_us"].to_numpy() / 1e6)
            arrivals -= arrivals[0]
            p99 = measured(load)["p99"]
            cells = []
            for way, (sharing, retimed) in ways.items():
                host_apart = way.startswith("host apart")
                if host_apart and not replay:  # this model's replays alone were not written
                    cells.append(f"{'-':>21}")
                    continue
                ratio = p99_ms(arrivals, alone_s, latency.sigma, max_batch, instances, sharing, retimed,
                               replay_s=replay.__getitem__ if host_apart else None) / p99
                ratios[way].append(ratio)
                cells.append(f"{ratio:>21.2f}")
            lines.append(f"{model:<16} {setting:<16} {level:>5.2f} {p99:>7.3f} " + " ".join(cells))
    lines += ["", "within +-10% of the measured p99 (median ratio):"]
    lines += [f"  {way}: {sum(abs(r - 1) <= 0.1 for r in rs)} of {len(rs)} ({np.median(rs):.2f})"
              for way, rs in ratios.items() if rs]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
