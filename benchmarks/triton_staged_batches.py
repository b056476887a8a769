"""Does Triton stage batches ahead of its instance? An exploratory replay of the Triton loads.

Measured through PyTriton on an H100 (``datasets/nvidia-h100-80gb-hbm3/serving-triton/``), with
preferred sizes and a 1 ms queue delay the requests waited far longer than latpred's simulator
predicts from Triton's own batch times (``results/simulator_vs_triton_h100.txt``: p99 0.45-0.82x).
Triton's scheduler forms the next batch (a payload) while the instance is busy and may stage up to
twice as many as there are instances (``RateLimiter::PayloadSlotAvailable`` in
triton-inference-server/core). This replays each load's measured arrivals (server receipt) through
a small event loop of that idea: up to ``slots`` batches formed by Triton's rule and frozen, waiting
behind the running one, each served for a draw from the load's measured service table (median
and lognormal sigma per batch size, ``training.serving_check.measured_service``). Slots 0 is the
simulator's rule: a batch formed only when the instance frees.

Exploratory, on the data it is judged by: a hint of where the simulator should go, not a check of it.

Run: .venv/bin/python benchmarks/triton_staged_batches.py [--folder F] [--out F] (a minute or two).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.capacity.simulator import BatchingConfig  # noqa: E402
from training.serving_check import WARMUP_FRACTION, load_serving, measured_service  # noqa: E402

FOLDER = Path(__file__).resolve().parents[1] / "datasets" / "nvidia-h100-80gb-hbm3" / "serving-triton"
SLOTS = (0, 1, 2)
SLACK_S = 1e-9


def _batch_now(queued: list[int], arrivals: np.ndarray, now: float, config: BatchingConfig) -> tuple[int, float | None]:
    """Triton's rule on the queue: (size to form now, 0 for none; when to look again)."""
    if not queued:
        return 0, None
    preferred = sorted(config.preferred_batch_sizes or ())
    fits = [p for p in preferred if p <= len(queued)]
    if fits:
        return fits[-1], None
    if not preferred and len(queued) >= config.max_batch:
        return config.max_batch, None
    due = arrivals[queued[0]] + config.max_queue_delay_us * 1e-6
    if now + SLACK_S >= due:
        return min(len(queued), config.max_batch), None
    return 0, due


def replay(arrivals: np.ndarray, config: BatchingConfig, latency: Callable[[int], tuple[float, float]],
           slots: int, seed: int = 0) -> np.ndarray:
    """Seconds from arrival to the end of its batch for each request, with up to ``slots`` frozen
    batches staged behind the running one (0: a batch is formed only when the instance frees)."""
    rng = np.random.default_rng(seed)
    n = len(arrivals)
    finish = np.full(n, np.nan)
    queued: list[int] = []
    staged: list[list[int]] = []
    running: tuple[list[int], float] | None = None
    next_arrival, wake = 0, None
    while next_arrival < n or queued or staged or running is not None:
        times = [t for t in (arrivals[next_arrival] if next_arrival < n else None,
                             running[1] if running is not None else None, wake) if t is not None]
        now = min(times)
        while next_arrival < n and arrivals[next_arrival] <= now:
            queued.append(next_arrival)
            next_arrival += 1
        if running is not None and running[1] <= now:
            finish[running[0]] = now
            running = None
        wake = None
        while True:
            if running is None and staged:
                batch = staged.pop(0)
                median_ms, sigma = latency(len(batch))
                running = (batch, now + median_ms / 1e3 * float(np.exp(rng.normal(0.0, sigma))))
                continue
            room = slots if running is not None else slots + 1  # a free instance takes one at once
            if len(staged) >= room:
                break
            size, wake = _batch_now(queued, arrivals, now, config)
            if not size:
                break
            staged.append(queued[:size])
            del queued[:size]
    return finish - arrivals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "triton_staged_batches.txt")
    args = parser.parse_args()
    data = load_serving(args.folder)
    lines = [f"# .venv/bin/python benchmarks/triton_staged_batches.py --folder {args.folder.name}: exploratory "
             "(the loads it is judged on are the loads it was thought up from)",
             "# each load's server receipts replayed; ratios are replayed / measured, after the first 10% of "
             "requests; slots 0 = a batch formed when the instance frees (the simulator's rule)",
             f"{'model':<14}{'setting':<8}{'level':>6} | {'p50 ms':>7}{'p99 ms':>8} | "
             + " | ".join(f"slots {s}: p50   p99" for s in SLOTS)]
    within = {s: 0 for s in SLOTS}
    loads = 0
    for model, setting, level, frame in data.loads():
        if level > 0.8 + 1e-9:
            continue
        config = data.settings[setting]
        table = measured_service(data.service[data.service["model"] == model])
        ordered = frame.sort_values("received_us", kind="stable")
        arrivals = (ordered["received_us"].to_numpy() - ordered["received_us"].min()) / 1e6
        skip = int(len(ordered) * WARMUP_FRACTION)
        measured = ((ordered["finish_us"] - ordered["received_us"]).to_numpy() / 1e3)[skip:]
        p50, p99 = np.percentile(measured, [50, 99])
        cells = []
        for slots in SLOTS:
            replayed = replay(arrivals, config, table, slots)[skip:] * 1e3
            r50, r99 = np.nanpercentile(replayed, [50, 99]) / (p50, p99)
            within[slots] += abs(r99 - 1) <= 0.1
            cells.append(f"{r50:13.2f} {r99:5.2f}")
        loads += 1
        lines.append(f"{model:<14}{setting[:7]:<8}{level:6.2f} | {p50:7.2f}{p99:8.2f} | " + " | ".join(cells))
    lines.append("p99 within +-10%, loads up to 0.8: " + ", ".join(f"slots {s}: {within[s]}/{loads}" for s in SLOTS))
    publish(lines, args.out)


if __name__ == "__main__":
    main()
