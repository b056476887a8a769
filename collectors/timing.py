"""Timing one operator call: kernel time and host dispatch time, with their spread.

Why this way (measured on an H200): an event pair around each call reports 27 us for a
1,000-element add whose kernel takes 1.5 us, because launch and event overhead dominate. So
kernel time comes from replaying a CUDA graph of many back-to-back calls, timed by one event pair
per replay; host dispatch time comes from eager back-to-back calls timed on the host clock, since
that is what an eager model pays per operator before the GPU even sees the kernel.

Repetitions adapt: replays are added in small groups until the coefficient of variation of the
per-replay times falls to ``target_cv`` (or ``max_reps``, or the time cap, is reached).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Timing:
    """What a timer learned about one call; all times in microseconds per call."""

    kernel_us: float
    dispatch_us: float
    p10_us: float
    p50_us: float
    p90_us: float
    cv: float
    repetitions: int
    calls_per_replay: int


@dataclass(frozen=True)
class RepetitionRule:
    """When to stop repeating: spread small enough, or enough repetitions, or out of time."""

    target_cv: float = 0.02
    min_reps: int = 5
    max_reps: int = 40
    group: int = 5
    time_cap_s: float = 1.5

    def done(self, samples: list[float], started: float) -> bool:
        """True once ``samples`` satisfy the rule (checked after each group of repetitions)."""
        if not samples:
            return False  # the cap never leaves a configuration without a measurement
        if len(samples) >= self.max_reps or time.perf_counter() - started > self.time_cap_s:
            return True
        return len(samples) >= self.min_reps and coefficient_of_variation(samples) <= self.target_cv


class Timer(Protocol):
    """Times a zero-argument callable that runs one operator call."""

    def time(self, fn: Callable[[], object]) -> Timing: ...


def coefficient_of_variation(samples: list[float]) -> float:
    """Standard deviation over mean (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean > 0 else math.inf


def summarize(per_call_us: list[float], dispatch_us: float, calls: int) -> Timing:
    """Turn per-call samples into a ``Timing`` (the median is the headline kernel time)."""
    p10, p50, p90 = (float(v) for v in np.percentile(per_call_us, [10, 50, 90]))
    return Timing(
        kernel_us=p50, dispatch_us=dispatch_us, p10_us=p10, p50_us=p50, p90_us=p90,
        cv=coefficient_of_variation(per_call_us), repetitions=len(per_call_us),
        calls_per_replay=calls,
    )


class CpuTimer:
    """Times operators on the CPU device: calls are synchronous, so host time is the time.

    Each repetition runs ``calls`` back-to-back calls (chosen so a repetition lasts about
    ``rep_target_us``) and the rule decides how many repetitions.
    """

    def __init__(self, rule: RepetitionRule | None = None, rep_target_us: float = 2000.0) -> None:
        self.rule = rule or RepetitionRule()
        self.rep_target_us = rep_target_us

    def time(self, fn: Callable[[], object]) -> Timing:
        t0 = time.perf_counter_ns()
        fn()  # warm-up: allocation, one-time dispatch caches
        estimate_us = max((time.perf_counter_ns() - t0) / 1e3, 0.05)
        calls = max(1, min(1000, math.ceil(self.rep_target_us / estimate_us)))
        samples: list[float] = []
        started = time.perf_counter()
        while not self.rule.done(samples, started):
            for _ in range(self.rule.group):
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    fn()
                samples.append((time.perf_counter_ns() - t0) / 1e3 / calls)
        return summarize(samples, dispatch_us=statistics.median(samples), calls=calls)


class CudaGraphTimer:
    """Times operators on a CUDA GPU: graph replay for kernel time, eager calls for dispatch.

    ``replay_target_us`` sets how long one replay should run: long enough that the event pair's
    own cost (a few microseconds) is noise, short enough to keep sweeps fast.
    """

    def __init__(
        self,
        rule: RepetitionRule | None = None,
        replay_target_us: float = 300.0,
        max_calls_per_replay: int = 64,
    ) -> None:
        import torch

        self.torch = torch
        self.rule = rule or RepetitionRule()
        self.replay_target_us = replay_target_us
        self.max_calls = max_calls_per_replay

    def _dispatch_us(self, fn: Callable[[], object]) -> tuple[float, float]:
        """Host time per eager call, and synced wall time per call (an upper bound on GPU time)."""
        torch = self.torch
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        torch.cuda.synchronize()
        single_us = (time.perf_counter_ns() - t0) / 1e3
        # Long kernels: few calls suffice, and many would only wait on the GPU.
        reps, calls = (3, 8) if single_us < 200 else (1, 3)
        host, wall = [], []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter_ns()
            torch.cuda.synchronize()
            t2 = time.perf_counter_ns()
            host.append((t1 - t0) / 1e3 / calls)
            wall.append((t2 - t0) / 1e3 / calls)
        return statistics.median(host), min(wall)

    def _capture(self, fn: Callable[[], object], calls: int) -> object:
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        return graph

    def _replay_ms(self, graph: object, count: int) -> list[float]:
        torch = self.torch
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(count)]
        for start, end in events:
            start.record()
            graph.replay()  # type: ignore[attr-defined]
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]

    def time(self, fn: Callable[[], object]) -> Timing:
        torch = self.torch
        # Warm up on a side stream, as graph capture requires (cuDNN/cuBLAS pick algorithms here).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        dispatch_us, wall_us = self._dispatch_us(fn)

        calls = max(1, min(self.max_calls, math.ceil(self.replay_target_us / max(wall_us, 1.0))))
        graph = self._capture(fn, calls)
        first = self._replay_ms(graph, 2)[-1] * 1e3
        if first < self.replay_target_us / 3 and calls < self.max_calls:
            # The eager wall time overstated a tiny kernel (it was host-bound): capture more calls.
            calls = max(1, min(self.max_calls, math.ceil(calls * self.replay_target_us / max(first, 0.5))))
            del graph
            graph = self._capture(fn, calls)
            self._replay_ms(graph, 1)
        samples: list[float] = []
        started = time.perf_counter()
        while not self.rule.done(samples, started):
            samples += [ms * 1e3 / calls for ms in self._replay_ms(graph, self.rule.group)]
        del graph
        return summarize(samples, dispatch_us=dispatch_us, calls=calls)


def make_timer(kind: str, rule: RepetitionRule | None = None) -> Timer:
    """The timer for a device kind ("cuda" or "cpu")."""
    if kind == "cuda":
        return CudaGraphTimer(rule)
    if kind == "cpu":
        return CpuTimer(rule)
    raise ValueError(f"no timer for device kind {kind!r}: expected 'cuda' or 'cpu'")
