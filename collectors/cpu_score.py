"""The CPU's single-thread speed as eager dispatch feels it: a fixed pure-Python workload.

A host without a GPU (a user sizing a machine they do not have yet, a CI runner) cannot run the
GPU probe; its eager costs are estimated from a measured profile, scaled by this score against
the score that profile recorded (predictor.host_profile.estimate_profile). The workload is what
dispatch spends its time on in Python: calls, attribute reads, small objects, dict stores. It
needs nothing beyond the standard library, so a service-only install can run it.
"""

from __future__ import annotations

import statistics
import time

ITERATIONS = 20_000
REPEATS = 9


class _Args:
    __slots__ = ("left", "right")

    def __init__(self, left: int, right: int) -> None:
        self.left = left
        self.right = right


def _combine(args: _Args, scale: int = 3) -> int:
    return (args.left * scale) ^ args.right


def _workload(n: int) -> int:
    table: dict[int, int] = {}
    total = 0
    for i in range(n):
        args = _Args(i, i + 1)
        total += _combine(args)
        table[i & 255] = total
        total += len(table) + table.get((i * 7) & 255, 0)
    return total


def cpu_score_ns(iterations: int = ITERATIONS, repeats: int = REPEATS) -> float:
    """Nanoseconds per iteration of the workload: the median of ``repeats`` timed runs (lower is
    faster). About 50 ms on a current server core."""
    _workload(iterations // 10)  # warm the interpreter's caches
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        _workload(iterations)
        samples.append((time.perf_counter_ns() - t0) / iterations)
    return float(statistics.median(samples))
