"""Whole-model latency measured in interleaved rounds, so drift hits every model alike.

Eager latency at small batch is host time, and the host's speed drifts: the first zoo run, which
measured one model after another, saw the same model differ up to 2x minutes apart, so one
model's row caught a fast host and the next a slow one. Here every model is built at once in
every precision, and each round times a few forwards of every (model, batch, precision) in a
fresh random order; the row's latency is the median over all rounds. Drift then becomes noise
common to all rows instead of a bias peculiar to each. (Interleaving models within one precision
at a time, as the first version did, still let drift between precision groups through: text
models and ViT measured up to 1.5x slower in fp16 than in bf16, host-bound, with the same code.)

``--modes cudagraph`` does the same for CUDA-graph replays: every unit is captured once, and the
rounds time replays (an event pair each) in shuffled order, so clock and power-state drift
between one model's minute and the next is shared too.

Rows use the whole-model run schema with run id ``<model>|b<batch>|<precision>|<mode>|interleaved-all``
and go to ``<root>/<device>/models_interleaved``; training prefers them over the sequential
rows of the same unit (which stay on disk).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from collectors.campaign import Campaign
from collectors.fingerprint import THROTTLE_MASK, open_nvml, read_fingerprint
from collectors.model_runs import ModelMeasurer, ModelUnit, _sync, capture, eager_timer, replay_timer
from collectors.precision_flags import precision_flags, torch_dtype
from collectors.shards import ShardStore
from collectors.timing import coefficient_of_variation
from collectors.zoo import ZOO, get_zoo_model
from predictor.model_run_schema import INTERLEAVED_FOLDER, validate_model_runs
from predictor.precision import get_precision

#: this protocol's run-id suffix: rows of the first version, which interleaved one precision at a
#: time, end in "interleaved"; a unit's latest row is the one training uses.
PROTOCOL = "interleaved-all"


MODES = ("eager", "cudagraph")


def _timer(mode: str, forward: Any, device: torch.device) -> Callable[[], float]:
    """A callable timing one run of ``forward`` in ``mode``, in milliseconds, as the sequential
    runs time it: a synchronised eager forward, or one replay of its captured graph."""
    return eager_timer(forward, device) if mode == "eager" else replay_timer(capture(forward))


def measure_interleaved(measurer: ModelMeasurer, models: list[str], batches: tuple[int, ...],
                        precisions: tuple[str, ...], rounds: int, reps: int, seed: int,
                        mode: str = "eager") -> list[dict[str, Any]]:
    """Rows for every (model, batch, precision) in ``mode``, timed in shuffled interleaved
    rounds; each forward runs (and is captured) under its precision's TF32 switches."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
    device = measurer.device
    rows: list[dict[str, Any]] = []
    with torch.inference_mode():
        forwards: dict[tuple[str, int, str], Any] = {}
        for precision in precisions:
            prec = get_precision(precision)
            for name in models:
                with torch.device(device):
                    model = get_zoo_model(name).build()
                model = model.to(device=device, dtype=torch_dtype(prec)).eval()
                for batch in batches:
                    x = get_zoo_model(name).example_input(batch, device, torch_dtype(prec))
                    forwards[(name, batch, precision)] = _under(prec, lambda model=model, x=x: model(x))
        units = list(forwards)
        for unit in units:  # warm-up: cuDNN/cuBLAS heuristics and allocator caches
            for _ in range(3):
                forwards[unit]()
        _sync(device)
        timers = {unit: _timer(mode, forwards[unit], device) for unit in units}
        for unit in units:
            timers[unit]()
        samples: dict[tuple[str, int, str], list[float]] = defaultdict(list)
        reasons = 0
        for r in range(rounds):
            order = list(units)
            random.Random(seed + r).shuffle(order)
            before = measurer.nvml.clock_event_reasons() if measurer.nvml else 0
            for unit in order:
                samples[unit] += [timers[unit]() for _ in range(reps)]
            after = measurer.nvml.clock_event_reasons() if measurer.nvml else 0
            reasons |= (before or 0) | (after or 0)
        for (model, batch, precision) in units:
            s = samples[(model, batch, precision)]
            p10, p50, p90 = (float(v) for v in np.percentile(s, [10, 50, 90]))
            unit = ModelUnit(model, batch, precision)
            row = measurer._row(unit, get_zoo_model(model), mode, latency_ms=p50, p10_ms=p10, p90_ms=p90,
                                cv=coefficient_of_variation(s), repetitions=len(s), clock_reasons=reasons,
                                throttled=bool(reasons & THROTTLE_MASK))
            row["run_id"] = f"{unit.config_id}|{mode}|{PROTOCOL}"
            rows.append(row)
        del timers, forwards
    torch.cuda.empty_cache()
    return rows


def _under(precision: Any, forward: Any) -> Any:
    """``forward`` run under ``precision``'s TF32 switches (restored afterwards)."""
    def run() -> Any:
        with precision_flags(precision):
            return forward()
    return run


def collect(root: Path, models: list[str], batches: tuple[int, ...], precisions: tuple[str, ...],
            rounds: int = 5, reps: int = 3, seed: int = 0, device: str = "auto",
            modes: tuple[str, ...] = ("eager",)) -> int:
    """Measure, per mode, the models not yet on disk, all their precisions interleaved: a shard
    per mode, written as soon as that mode is done. A model with any unit missing is measured
    whole (its units share the rounds), and only the missing units are written."""
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)}: expected {', '.join(MODES)}")
    fp = read_fingerprint(device)
    if "cudagraph" in modes and fp.kind != "cuda":
        raise ValueError(f"cudagraph runs need a CUDA GPU; this device is {fp.kind}")
    campaign = Campaign(root, fp)
    campaign.record_fingerprint()
    store = ShardStore(campaign.directory / INTERLEAVED_FOLDER, validate_model_runs, key="run_id")
    done = store.completed_ids()
    measurer = ModelMeasurer(fp, open_nvml())
    written = 0
    for mode in modes:
        wanted = [m for m in models if any(f"{ModelUnit(m, b, p).config_id}|{mode}|{PROTOCOL}" not in done
                                           for p in precisions for b in batches)]
        if not wanted:
            continue
        started = time.perf_counter()
        rows = [r for r in measure_interleaved(measurer, wanted, batches, precisions, rounds, reps, seed, mode)
                if r["run_id"] not in done]
        store.write(rows)
        written += len(rows)
        print(f"{mode}: {len(rows)} rows in {time.perf_counter() - started:.0f} s", flush=True)
    return written


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("datasets"))
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--batches", default="1,8,32,128")
    parser.add_argument("--precisions", default="fp32,fp16,bf16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--modes", default="eager", help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    try:
        written = collect(args.out, args.models.split(","), tuple(int(b) for b in args.batches.split(",")),
                          tuple(args.precisions.split(",")), args.rounds, args.reps, device=args.device,
                          modes=modes)
    except ValueError as exc:  # a mode, or cudagraph without a GPU: say so, no traceback
        parser.error(str(exc))
    print(f"{written} rows written")


if __name__ == "__main__":
    main()
