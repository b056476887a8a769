"""Timing one whole forward of a model: eagerly on the host clock, or as a replayed CUDA graph.

Eager latency is host clock from issuing the forward to the GPU finishing it, synchronised each
time: at small batch the host's issue time, not the kernels, sets it, and only the host clock
sees that. CUDA-graph latency is one replay of a captured forward between an event pair: the
replay is a single launch, so the pair's own overhead is small beside it.

The timers return one sample per call, for a protocol to schedule (``collectors.model_runs``
interleaves them across models); ``time_eager`` and ``time_cudagraph`` repeat one forward on
its own, for diagnostics (``latpred collect profile``) and checks against the protocol.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from collectors.timing import RepetitionRule

#: repetitions of one forward timed on its own: up to 20, until the spread is 2%, or 2 s.
RULE = RepetitionRule(target_cv=0.02, min_reps=5, max_reps=20, group=5, time_cap_s=2.0)


def synchronize(device: torch.device) -> None:
    """Wait for the GPU to finish what was issued (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def eager_timer(forward: Callable[[], Any], device: torch.device) -> Callable[[], float]:
    """A callable timing one eager forward in milliseconds, host clock, synchronised."""
    def once() -> float:
        t0 = time.perf_counter_ns()
        forward()
        synchronize(device)
        return (time.perf_counter_ns() - t0) / 1e6

    return once


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


def repeat(timed: Callable[[], float], rule: RepetitionRule = RULE) -> list[float]:
    """Samples of ``timed``, taken in groups until ``rule`` is satisfied."""
    samples: list[float] = []
    started = time.perf_counter()
    while not rule.done(samples, started):
        samples += [timed() for _ in range(rule.group)]
    return samples


def time_eager(forward: Callable[[], Any], device: torch.device, rule: RepetitionRule = RULE) -> list[float]:
    """Milliseconds per eager forward, after three warm-up calls (cuDNN and allocator caches)."""
    for _ in range(3):
        forward()
    synchronize(device)
    return repeat(eager_timer(forward, device), rule)


def time_cudagraph(forward: Callable[[], Any], rule: RepetitionRule = RULE) -> list[float]:
    """Milliseconds per replay of one captured forward, timed by an event pair per replay."""
    graph = capture(forward)
    try:
        return repeat(replay_timer(graph), rule)
    finally:
        del graph
