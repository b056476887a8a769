"""The reference forwards of a host profile, timed: whole eager forwards of three fixed architectures.

What they are for is in predictor.host_references: the probe's tiny per-kind loops can miss the
speed at which a host issues a whole forward, and a prediction scales the profile's costs by how
far these forwards ran from their prediction. They are built and timed exactly as the
whole-model protocol builds and times a model (collectors.model_build: built as a user builds one,
run in inference mode under the precision's TF32 switches, a synchronised forward on the host
clock), in shuffled rounds so that drift hits each alike. ``latpred host probe`` times them after
its loops; a whole-model run times them between its rounds (collectors.host_probe.RoundSampler),
so a run's profile carries what its own rounds saw of the host.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from collectors.forward_timing import eager_timer, synchronize
from collectors.model_build import bound_forward, build_model, under_precision
from collectors.nas_space import NasModel, seed_of
from collectors.precision_flags import torch_dtype
from predictor.host_profile import CALIBRATION_KEYS, MAX_FORWARD_SPREAD, parse_reference_key
from predictor.precision import get_precision

WARMUP = 3
#: the order the forwards are warmed up in when a deadline may cut it: precision by precision
#: (fp32, bf16, fp16), and within one each architecture at batch 1, then at batch 8, the MBConv
#: (nas-1002) last, so what a cut keeps spans the three architectures and what it drops is
#: nas-1002's batch 8 first (of the six fp32 forwards a probe times; of all 18, its fp16 ones).
#: (Warmed architecture by architecture, a contended probe that kept only nas-1003's first three
#: calibrated the costs by x3.31 from them.)
#: A process's first forwards cost what cuDNN and cuBLAS do on a shape's first call: on the H200
#: (benchmarks/results/probe_phases.txt) the 18 first calls took 2.9-5.2 s as the machine was and
#: 6.5-8.6 s on a contended core; nas-1002's two fp16 forwards 2.3-3.2 s of it as is, in cuDNN's
#: convolutions (its bf16 ones 0.07-0.3 s, run before or after them), each other forward 0.01-0.4 s.
WARMUP_MODELS = ("nas-1003", "nas-1004", "nas-1002")
WARMUP_PRECISIONS = ("fp32", "bf16", "fp16")
#: a deadline never cuts the first forward of each architecture (at fp32, batch 1: 0.05-0.09 s of
#: first call each as is): replayed on the zoo's runs under five host conditions
#: (benchmarks/reference_cut.py), a calibration from one forward put 31% of eager runs within
#: +-10%, from these three 49%, from the six fp32 ones (what a probe times now) 48%, from all 18
#: 43%, from none (the costs alone) 43%
ALWAYS_WARMED = len(WARMUP_MODELS)


def warmup_order(keys: Sequence[str]) -> list[str]:
    """``keys`` by WARMUP_PRECISIONS, then batch, then WARMUP_MODELS: the most forwards, of every
    architecture, warmed up before a deadline."""
    def rank(key: str) -> tuple[int, int, int]:
        name, batch, precision = parse_reference_key(key)
        model_rank = WARMUP_MODELS.index(name) if name in WARMUP_MODELS else len(WARMUP_MODELS)
        precision_rank = WARMUP_PRECISIONS.index(precision) if precision in WARMUP_PRECISIONS else 9
        return precision_rank, batch, model_rank
    return sorted(keys, key=rank)


class ReferenceForwards:
    """The forwards of ``keys`` (``nas-1002|b1|fp16``...) built on ``device``, ready to time.

    With a ``warmup_deadline`` (a ``time.perf_counter()`` value) no forward starts its warm-up
    past it, and those not warmed are dropped (``skipped``): a forward's first call can take
    seconds, and timed cold it would say nothing of the host. The first ALWAYS_WARMED of
    ``warmup_order`` (one of each architecture) always warm up."""

    def __init__(self, device: str, keys: Sequence[str] = CALIBRATION_KEYS,
                 warmup_deadline: float | None = None) -> None:
        import torch

        self.device = torch.device(device)
        self.timers: dict[str, Callable[[], float]] = {}
        self.skipped: tuple[str, ...] = ()
        models: dict[tuple[str, str], Any] = {}
        with torch.inference_mode(False):  # built as measure_models builds (a sampler calls this inside it)
            for key in warmup_order(keys) if warmup_deadline is not None else keys:
                name, batch, precision = parse_reference_key(key)
                prec = get_precision(precision)
                source = NasModel(seed_of(name))
                if (name, precision) not in models:
                    models[name, precision] = build_model(source, self.device, torch_dtype(prec))
                x = source.example_input(batch, self.device, torch_dtype(prec))
                self.timers[key] = eager_timer(under_precision(prec, bound_forward(models[name, precision], x)),
                                               self.device)
        with torch.inference_mode():
            keys = list(self.timers)
            for i, key in enumerate(keys):  # cuDNN/cuBLAS heuristics, allocator caches
                if i >= ALWAYS_WARMED and warmup_deadline is not None and time.perf_counter() > warmup_deadline:
                    self.skipped = tuple(keys[i:])
                    self.timers = {k: self.timers[k] for k in keys[:i]}
                    break
                for _ in range(WARMUP):
                    self.timers[key]()
                synchronize(self.device)

    def time(self, rounds: int, reps: int, seed: int = 0, deadline: float | None = None) -> dict[str, list[float]]:
        """Milliseconds of every forward: ``reps`` of each in each of up to ``rounds`` shuffled
        rounds. With a ``deadline`` (a ``time.perf_counter()`` value) no round starts that the
        last one's duration says would end past it; the first always runs, so every forward is
        timed ``reps`` times at least."""
        import torch

        samples: dict[str, list[float]] = defaultdict(list)
        order = list(self.timers)
        last_s = 0.0
        with torch.inference_mode():
            for r in range(rounds):
                started = time.perf_counter()
                if r and deadline is not None and started + last_s > deadline:
                    break
                random.Random(seed + r).shuffle(order)
                for key in order:
                    samples[key] += [self.timers[key]() for _ in range(reps)]
                last_s = time.perf_counter() - started
        return dict(samples)


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    """Per forward, the median of its samples (``ReferenceForwards.time``'s)."""
    return {k: float(statistics.median(v)) for k, v in samples.items()}


#: the fewest timings of a forward its spread is read from (a probe's first round alone gives 3)
MIN_SPREAD_SAMPLES = 6


def spread(samples: dict[str, list[float]]) -> float | None:
    """How steadily the forwards ran: per forward with ``MIN_SPREAD_SAMPLES`` timings or more, its
    90th percentile over its 10th; the median over those forwards (None where none has enough).

    What it is for (predictor.host_spread): how closely a host repeats an eager forward bounds how
    closely any prediction can land on it. That was measured on the zoo's own runs (their p90/p10
    ordered how many came within +-10%); this estimates it from the reference forwards, which on
    the one machine measured both ways (machine 21) spread more than the zoo's longer forwards."""
    ratios = []
    for timings in samples.values():
        timed = [t for t in timings if t > 0 and math.isfinite(t)]  # (a clock that read nothing says nothing)
        if len(timed) >= MIN_SPREAD_SAMPLES:
            deciles = statistics.quantiles(timed, n=10, method="inclusive")
            ratios.append(deciles[-1] / deciles[0])
    # capped at what a profile holds: a run's minutes of measured rows must never be lost to it
    return min(float(statistics.median(ratios)), MAX_FORWARD_SPREAD) if ratios else None
