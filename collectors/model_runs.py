"""Whole-model runs: each zoo model timed eagerly and as a CUDA graph, with a kernel breakdown.

Eager latency is host clock from issuing the forward to the GPU finishing it (synchronised each
repetition): at small batch the host's issue time, not the kernels, sets it. CUDA-graph latency
is the replay of one captured forward, timed by events. A torch.profiler pass over one eager
forward records the top-level aten ops with their shapes, host time and kernels.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from predictor.model_run_schema import MODEL_RUN_SCHEMA_VERSION
from predictor.precision import get_precision

from collectors.fingerprint import THROTTLE_MASK, DeviceFingerprint, Nvml
from collectors.op_measure import provenance
from collectors.precision_flags import precision_flags, torch_dtype
from collectors.timing import RepetitionRule, coefficient_of_variation
from collectors.zoo import ZooModel, get_zoo_model

MODEL_BATCHES = (1, 8, 32, 128)
MODEL_PRECISIONS = ("fp32", "fp16", "bf16")
RULE = RepetitionRule(target_cv=0.02, min_reps=5, max_reps=20, group=5, time_cap_s=2.0)


@dataclass(frozen=True)
class ModelUnit:
    """One (model, batch, precision): measured together, resumed together."""

    model: str
    batch: int
    precision: str

    @property
    def config_id(self) -> str:
        return f"{self.model}|b{self.batch}|{self.precision}"


def model_units(models: list[str], batches: tuple[int, ...] = MODEL_BATCHES,
                precisions: tuple[str, ...] = MODEL_PRECISIONS) -> list[ModelUnit]:
    """Units in build order: one model and precision at a time, batches ascending."""
    return [ModelUnit(m, b, p) for m in models for p in precisions for b in sorted(set(batches))]


def _repeat(timed: Callable[[], float], rule: RepetitionRule) -> list[float]:
    samples: list[float] = []
    started = time.perf_counter()
    while not rule.done(samples, started):
        samples += [timed() for _ in range(rule.group)]
    return samples


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def eager_timer(forward: Callable[[], Any], device: torch.device) -> Callable[[], float]:
    """A callable timing one eager forward in milliseconds, host clock, synchronised."""
    def once() -> float:
        t0 = time.perf_counter_ns()
        forward()
        _sync(device)
        return (time.perf_counter_ns() - t0) / 1e6

    return once


def replay_timer(graph: torch.cuda.CUDAGraph) -> Callable[[], float]:
    """A callable timing one replay of ``graph`` in milliseconds, between an event pair."""
    def once() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    return once


def time_eager(forward: Callable[[], Any], device: torch.device, rule: RepetitionRule = RULE) -> list[float]:
    """Milliseconds per eager forward, host clock, synchronised each time."""
    for _ in range(3):
        forward()
    _sync(device)
    return _repeat(eager_timer(forward, device), rule)


def capture(forward: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    """One captured forward, warmed up on a side stream as CUDA-graph capture requires."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def time_cudagraph(forward: Callable[[], Any], rule: RepetitionRule = RULE) -> list[float]:
    """Milliseconds per replay of one captured forward, timed by an event pair per replay."""
    graph = capture(forward)
    try:
        return _repeat(replay_timer(graph), rule)
    finally:
        del graph


def _kernel_key(kernel: Any) -> tuple[str, float]:
    return kernel.name[:160], round(float(kernel.duration), 3)


def _own_kernels(event: Any) -> list[list[Any]]:
    """Kernels an event launched itself: a parent also lists its children's, so subtract those."""
    own = Counter(_kernel_key(k) for k in getattr(event, "kernels", None) or [])
    for child in event.cpu_children:
        own -= Counter(_kernel_key(k) for k in getattr(child, "kernels", None) or [])
    return [[name, duration] for name, duration in own.elements()]


def profile_forward(forward: Callable[[], Any], device: torch.device) -> list[dict[str, Any]]:
    """Top-level aten ops of one eager forward, in issue order, each with its kernels."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        forward()
        _sync(device)
    ops: dict[int, dict[str, Any]] = {}
    for event in prof.events():
        if getattr(event.device_type, "name", "") != "CPU":
            continue
        root = event
        while root.cpu_parent is not None:
            root = root.cpu_parent
        if root.id not in ops:
            ops[root.id] = {"name": root.name, "shapes": root.input_shapes,
                            "start_us": root.time_range.start, "cpu_us": round(root.cpu_time_total, 2),
                            "kernels": []}
        ops[root.id]["kernels"] += _own_kernels(event)
    ordered = sorted(ops.values(), key=lambda op: op["start_us"])
    t0 = ordered[0]["start_us"] if ordered else 0
    for op in ordered:
        op["start_us"] = round(op["start_us"] - t0, 2)
    return ordered


class ModelMeasurer:
    """Measures units of the zoo, keeping the current model built across its batches."""

    def __init__(self, fingerprint: DeviceFingerprint, nvml: Nvml | None = None,
                 rule: RepetitionRule = RULE) -> None:
        self.fp = fingerprint
        self.device = torch.device("cuda" if fingerprint.kind == "cuda" else "cpu")
        self.nvml = nvml
        self.rule = rule
        self._built: tuple[str, str, Any] | None = None
        self._provenance = provenance(fingerprint)

    def _model(self, zoo: ZooModel, precision: str) -> Any:
        if self._built and self._built[:2] == (zoo.name, precision):
            return self._built[2]
        self._built = None
        torch.cuda.empty_cache() if self.device.type == "cuda" else None
        with torch.device(self.device):
            model = zoo.build()
        model = model.to(device=self.device, dtype=torch_dtype(get_precision(precision))).eval()
        self._built = (zoo.name, precision, model)
        return model

    def _row(self, unit: ModelUnit, zoo: ZooModel, mode: str, **values: Any) -> dict[str, Any]:
        precision = get_precision(unit.precision)
        return {
            "schema_version": MODEL_RUN_SCHEMA_VERSION, "config_id": unit.config_id,
            "run_id": f"{unit.config_id}|{mode}", "status": "ok", "error": None,
            **self._provenance, "model": unit.model, "model_kind": zoo.kind, "batch": unit.batch,
            "precision": unit.precision, "mode": mode,
            "allow_tf32_cudnn": precision.allow_tf32_cudnn,
            "allow_tf32_matmul": precision.allow_tf32_matmul, "latency_ms": None, "p10_ms": None,
            "p90_ms": None, "cv": None, "repetitions": None, "throttled": False,
            "clock_reasons": None, "profile": None, "timestamp": pd.Timestamp.now(tz="UTC"),
            **values,
        }

    def _timed(self, measure: Callable[[], list[float]]) -> dict[str, Any]:
        before = self.nvml.clock_event_reasons() if self.nvml else None
        samples = measure()
        after = self.nvml.clock_event_reasons() if self.nvml else None
        reasons = None if before is None and after is None else (before or 0) | (after or 0)
        p10, p50, p90 = (float(v) for v in np.percentile(samples, [10, 50, 90]))
        return {"latency_ms": p50, "p10_ms": p10, "p90_ms": p90,
                "cv": coefficient_of_variation(samples), "repetitions": len(samples),
                "clock_reasons": reasons, "throttled": bool(reasons and reasons & THROTTLE_MASK)}

    def measure(self, unit: ModelUnit) -> list[dict[str, Any]]:
        """Eager and CUDA-graph rows for one unit (failed rows carry the reason)."""
        zoo = get_zoo_model(unit.model)
        precision = get_precision(unit.precision)
        modes = ["eager"] + (["cudagraph"] if self.device.type == "cuda" else [])
        rows: list[dict[str, Any]] = []
        try:
            with precision_flags(precision), torch.inference_mode():
                model = self._model(zoo, unit.precision)
                x = zoo.example_input(unit.batch, self.device, torch_dtype(precision))
                forward = lambda: model(x)  # noqa: E731
                eager = self._timed(lambda: time_eager(forward, self.device, self.rule))
                eager["profile"] = json.dumps(profile_forward(forward, self.device), separators=(",", ":"))
                rows.append(self._row(unit, zoo, "eager", **eager))
                if "cudagraph" in modes:
                    try:
                        rows.append(self._row(unit, zoo, "cudagraph",
                                              **self._timed(lambda: time_cudagraph(forward, self.rule))))
                    except Exception as exc:
                        rows.append(self._row(unit, zoo, "cudagraph", status="failed",
                                              error=f"{type(exc).__name__}: {exc}"[:500]))
        except Exception as exc:
            self._built = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            done = {r["mode"] for r in rows}
            rows += [self._row(unit, zoo, m, status="failed", error=f"{type(exc).__name__}: {exc}"[:500])
                     for m in modes if m not in done]
        return rows
