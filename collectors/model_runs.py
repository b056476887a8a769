"""Whole-model runs, the one protocol: interleaved rounds, so drift hits every model alike.

Eager latency at small batch is host time, and the host's speed drifts: the first zoo run, which
measured one model after another, saw the same model differ up to 2x minutes apart, so one
model's row caught a fast host and the next a slow one. Here every model is built at once in
every precision, and each round times a few forwards of every (model, batch, precision) in a
fresh random order; the row's latency is the median over all rounds. Drift then becomes noise
common to all rows instead of a bias peculiar to each. (Interleaving models within one precision
at a time, as a second version did, still let drift between precision groups through: text
models and ViT measured up to 1.5x slower in fp16 than in bf16, host-bound, with the same code.)

In ``cudagraph`` mode every unit is captured once, and the rounds time replays (an event pair
each) in shuffled order, so clock and power-state drift between one model's minute and the next
is shared too.

Rows use the whole-model run schema with run id ``<model>|b<batch>|<precision>|<mode>|interleaved-all``;
``collectors.campaign.collect_models`` writes them to ``<root>/<device>/models``, the dataset's
one live folder of whole-model runs (rows of the earlier protocols are under ``archive/``).
The NAS suite's architectures are timed by the same protocol (``collectors.campaign.collect_nas``,
a group of architectures at a time) into ``<root>/<device>/nas``, which training never reads.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from collectors.fingerprint import DeviceFingerprint, Nvml
from collectors.forward_timing import capture, eager_timer, replay_timer, synchronize
from collectors.model_build import ModelSource, bound_forward, build_model, under_precision
from collectors.op_measure import provenance
from collectors.precision_flags import torch_dtype
from collectors.timing import coefficient_of_variation
from collectors.zoo_models import get_zoo_model
from predictor.clock_reasons import THROTTLE_MASK
from predictor.model_run_schema import MODEL_RUN_SCHEMA_VERSION, MODES
from predictor.precision import get_precision

#: the run-id suffix of this protocol's rows; a resumed collection skips the run ids on disk.
PROTOCOL = "interleaved-all"
MODEL_BATCHES = (1, 8, 32, 128)
MODEL_PRECISIONS = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class ModelUnit:
    """One (model, batch, precision): it has one row per mode."""

    model: str
    batch: int
    precision: str

    @property
    def config_id(self) -> str:
        return f"{self.model}|b{self.batch}|{self.precision}"

    def run_id(self, mode: str) -> str:
        """The id of this unit's row in ``mode``: what a resumed collection looks for on disk."""
        return f"{self.config_id}|{mode}|{PROTOCOL}"


def run_row(unit: ModelUnit, mode: str, fingerprint: DeviceFingerprint, samples: list[float],
            clock_reasons: int | None, kind: str | None = None, host_profile: str | None = None) -> dict[str, Any]:
    """The row of one unit in one mode from its samples (milliseconds) over all rounds;
    ``kind`` is the model's (by default, the zoo model's of that name), ``host_profile`` the id
    of the host profile probed before the rounds."""
    precision = get_precision(unit.precision)
    p10, p50, p90 = (float(v) for v in np.percentile(samples, [10, 50, 90]))
    return {
        "schema_version": MODEL_RUN_SCHEMA_VERSION, "config_id": unit.config_id,
        "run_id": unit.run_id(mode), "status": "ok", "error": None, **provenance(fingerprint),
        "model": unit.model, "model_kind": kind or get_zoo_model(unit.model).kind, "batch": unit.batch,
        "precision": unit.precision, "mode": mode, "allow_tf32_cudnn": precision.allow_tf32_cudnn,
        "allow_tf32_matmul": precision.allow_tf32_matmul, "latency_ms": p50, "p10_ms": p10,
        "p90_ms": p90, "cv": coefficient_of_variation(samples), "repetitions": len(samples),
        "throttled": bool(clock_reasons and clock_reasons & THROTTLE_MASK),
        "clock_reasons": clock_reasons, "profile": None, "host_profile": host_profile,
        "timestamp": pd.Timestamp.now(tz="UTC"),
    }


def failed_row(unit: ModelUnit, mode: str, fingerprint: DeviceFingerprint, kind: str, error: str,
               host_profile: str | None = None) -> dict[str, Any]:
    """The row of a unit that could not be measured (it failed to build, run or capture): on
    disk, a resumed collection skips it instead of failing on it again."""
    precision = get_precision(unit.precision)
    return {
        "schema_version": MODEL_RUN_SCHEMA_VERSION, "config_id": unit.config_id,
        "run_id": unit.run_id(mode), "status": "failed", "error": error[:500], **provenance(fingerprint),
        "model": unit.model, "model_kind": kind, "batch": unit.batch, "precision": unit.precision, "mode": mode,
        "allow_tf32_cudnn": precision.allow_tf32_cudnn, "allow_tf32_matmul": precision.allow_tf32_matmul,
        "latency_ms": None, "p10_ms": None, "p90_ms": None, "cv": None, "repetitions": None,
        "throttled": False, "clock_reasons": None, "profile": None, "host_profile": host_profile,
        "timestamp": pd.Timestamp.now(tz="UTC"),
    }


def _timer(mode: str, forward: Callable[[], Any], device: torch.device) -> Callable[[], float]:
    """A callable timing one run of ``forward`` in ``mode``, in milliseconds: a synchronised
    eager forward, or one replay of its captured graph."""
    return eager_timer(forward, device) if mode == "eager" else replay_timer(capture(forward))


def measure_models(fingerprint: DeviceFingerprint, models: Sequence[str] | Mapping[str, ModelSource],
                   batches: tuple[int, ...], precisions: tuple[str, ...], mode: str = "eager", rounds: int = 5,
                   reps: int = 3, seed: int = 0, nvml: Nvml | None = None,
                   between_rounds: Callable[[], object] | None = None) -> list[dict[str, Any]]:
    """Rows for every (model, batch, precision) in ``mode``, timed in shuffled interleaved
    rounds; each forward runs (and is captured) under its precision's TF32 switches.
    ``between_rounds`` runs after each round (the host's sample, collectors.host_probe); the
    caller names the host profile in the rows.

    ``models`` names zoo models, or maps names to sources (``ModelSource``: the NAS suite's
    architectures), in the order their rows come."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
    sources: Mapping[str, ModelSource] = (models if isinstance(models, Mapping)
                                          else {name: get_zoo_model(name) for name in models})
    device = torch.device("cuda" if fingerprint.kind == "cuda" else "cpu")
    rows: list[dict[str, Any]] = []
    forwards: dict[ModelUnit, Callable[[], Any]] = {}
    for precision in precisions:  # models built as users build them (build_model), run in inference mode
        prec = get_precision(precision)
        for name, source in sources.items():
            model = build_model(source, device, torch_dtype(prec))
            for batch in batches:
                x = source.example_input(batch, device, torch_dtype(prec))
                forwards[ModelUnit(name, batch, precision)] = under_precision(prec, bound_forward(model, x))
    with torch.inference_mode():
        units = list(forwards)
        for unit in units:  # warm-up: cuDNN/cuBLAS heuristics and allocator caches
            for _ in range(3):
                forwards[unit]()
        synchronize(device)
        timers = {unit: _timer(mode, forwards[unit], device) for unit in units}
        for unit in units:
            timers[unit]()
        samples: dict[ModelUnit, list[float]] = defaultdict(list)
        reasons: int | None = None
        for r in range(rounds):
            order = list(units)
            random.Random(seed + r).shuffle(order)
            before = nvml.clock_event_reasons() if nvml else None
            for unit in order:
                samples[unit] += [timers[unit]() for _ in range(reps)]
            after = nvml.clock_event_reasons() if nvml else None
            if nvml:  # any reason NVML reported in any round: the whole set of rounds saw it
                reasons = (reasons or 0) | (before or 0) | (after or 0)
            if between_rounds is not None:
                between_rounds()
        rows = [run_row(unit, mode, fingerprint, samples[unit], reasons, sources[unit.model].kind) for unit in units]
        del timers, forwards
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows
