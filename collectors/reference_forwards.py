"""The reference forwards of a host profile, timed: whole eager forwards of three fixed architectures.

What they are for is in predictor.host_references: the probe's tiny per-kind loops can miss the
speed at which a host issues a whole forward, and a prediction scales the profile's costs by how
far these forwards ran from their prediction. They are built and timed exactly as the
whole-model protocol builds and times a model (collectors.model_runs: built as a user builds one,
run in inference mode under the precision's TF32 switches, a synchronised forward on the host
clock), in shuffled rounds so that drift hits each alike. ``latpred host probe`` times them after
its loops; a whole-model run times them between its rounds (collectors.host_probe.RoundSampler),
so a run's profile carries what its own rounds saw of the host.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from collectors.forward_timing import eager_timer, synchronize
from collectors.model_runs import bound_forward, build_model, under_precision
from collectors.nas_space import NasModel, seed_of
from collectors.precision_flags import torch_dtype
from predictor.host_profile import REFERENCE_KEYS, parse_reference_key
from predictor.precision import get_precision

WARMUP = 3


class ReferenceForwards:
    """The forwards of ``keys`` (``nas-1002|b1|fp16``...) built on ``device``, ready to time."""

    def __init__(self, device: str, keys: Sequence[str] = REFERENCE_KEYS) -> None:
        import torch

        self.device = torch.device(device)
        self.timers: dict[str, Callable[[], float]] = {}
        models: dict[tuple[str, str], Any] = {}
        with torch.inference_mode(False):  # built as measure_models builds (a sampler calls this inside it)
            for key in keys:
                name, batch, precision = parse_reference_key(key)
                prec = get_precision(precision)
                source = NasModel(seed_of(name))
                if (name, precision) not in models:
                    models[name, precision] = build_model(source, self.device, torch_dtype(prec))
                x = source.example_input(batch, self.device, torch_dtype(prec))
                self.timers[key] = eager_timer(under_precision(prec, bound_forward(models[name, precision], x)),
                                               self.device)
        with torch.inference_mode():
            for timer in self.timers.values():  # cuDNN/cuBLAS heuristics, allocator caches
                for _ in range(WARMUP):
                    timer()
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

    def median_ms(self, rounds: int, reps: int, seed: int = 0) -> dict[str, float]:
        """Per forward, the median of ``time``'s samples: what a profile's ``reference_ms`` holds."""
        return medians(self.time(rounds, reps, seed))


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    """Per forward, the median of its samples (``ReferenceForwards.time``'s)."""
    return {k: float(statistics.median(v)) for k, v in samples.items()}
