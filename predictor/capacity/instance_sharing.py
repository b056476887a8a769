"""How a batch's time grows with the batches other model instances run beside it on the same GPU.

Triton can run k instances of a model on one GPU (``instance_group { count: k }``), each issuing its
own batches. They share the GPU's SMs and memory bandwidth, so a batch does not take what it takes
alone. Measured on an H100 (2026-12-07, ``benchmarks/instance_concurrency.sh``, analysed by
``benchmarks/instance_sharing.py``, ``benchmarks/results/instance_sharing.txt``: six zoo models as fp16
CUDA graphs, k copies replaying at once on their own streams and threads), k batches of b running
together took about what one batch of k x b takes alone, times a small factor phi_k for the sharing
itself: phi_2 1.10 (1.00-1.22 over 18 (model, b) pairs; predicted for each model from the others'
median, 5.1% MAPE) and phi_4 1.21 (1.03-1.47; 10.6% MAPE).

So a batch of b that starts while n - 1 others run, of S samples together, is simulated as taking
phi_n x latency(b + S): the GPU runs the n batches as one of their summed size, a little less
efficiently. That is exact for the measurement's case (k equal batches, always all running) and an
approximation elsewhere: the time is fixed when the batch starts, so one that starts beside a batch
about to end is charged for the sharing throughout, and one that starts alone is not slowed by
batches that start after it (the two errors lean opposite ways). With one instance nothing changes:
phi_1 is 1 and the batch runs alone.

Its scope is the measurement's: fp16 CUDA graphs, k x b up to 32, k = 2 and 4 (phi_3 is interpolated
in log2 k, no count above 4 is taken), one process with a thread and stream per instance (libtorch's
backend and PyTriton's in-process callables run instances so; Triton's Python backend runs each in a
process and CUDA context of its own, which the GPU time-slices instead), not measured through Triton.

Checked blind against a real server with 2-4 instances (``collectors/instance_serving.py`` on an H100,
three other models, ``benchmarks/results/instances_vs_server_h100.txt``) it is optimistic: p99 0.33-0.93x
the measured at 26 of 27 loads, since served batches took 1.03-1.73x their time alone where this model
charges 1.00-1.60x (a batch that starts alone is slowed by those that start after it). Plans say so
(``describe``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The most instances per GPU a plan weighs: the largest count measured.
MAX_INSTANCES = 4


@dataclass(frozen=True)
class InstanceSharing:
    """phi_n by the number n of batches running at once on one GPU (the new one included), as
    measured points (n, phi) from n = 1 (phi 1: alone); between them phi is interpolated in log2 n."""

    points: tuple[tuple[int, float], ...]
    #: where the points were measured, for the plans that use them to say
    source: str = ""
    #: what a check against a real server found, for the plans that use them to say with it
    caution: str = ""

    def describe(self) -> str:
        """Where the sharing was measured and, where checked, how far to trust it: what a plan says."""
        return f"{self.source}; {self.caution}" if self.caution else self.source

    def __post_init__(self) -> None:
        counts = [n for n, _ in self.points]
        if not counts or counts[0] != 1 or self.points[0][1] != 1.0:
            raise ValueError("points: must start at (1, 1.0), a batch that runs alone")
        if counts != sorted(set(counts)) or not all(isinstance(n, int) and n >= 1 for n in counts):
            raise ValueError(f"points: counts must be increasing integers, not {counts!r}")
        if not all(math.isfinite(phi) and 1.0 <= phi <= 4.0 for _, phi in self.points):
            raise ValueError("points: each phi must be a finite factor in [1, 4]")

    @property
    def max_batches(self) -> int:
        """The most batches at once the points reach: no more are simulated on one GPU."""
        return self.points[-1][0]

    def factor(self, running: int) -> float:
        """phi for ``running`` batches at once (at least 1, at most ``max_batches``)."""
        if not 1 <= running <= self.max_batches:
            raise ValueError(f"running: must be in [1, {self.max_batches}], not {running!r}")
        for (n0, phi0), (n1, phi1) in zip(self.points, self.points[1:]):
            if n0 <= running <= n1:
                share = (math.log2(running) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
                return phi0 + share * (phi1 - phi0)
        return self.points[0][1]  # one point only: (1, 1.0)

    def batch_time_terms(self, size: int, running_sizes: Sequence[int]) -> tuple[int, float]:
        """(the batch size whose latency the batch takes, the factor on it) for a batch of ``size``
        that starts while batches of ``running_sizes`` run on the same GPU."""
        return size + sum(running_sizes), self.factor(1 + len(running_sizes))


def instances_capacity_qps(median_ms: Callable[[int], float], max_batch: int, instances: int,
                           sharing: InstanceSharing | None) -> float:
    """The most requests per second ``instances`` instances serve with batches of at most ``max_batch``,
    each sending its best batch back to back: ``max over b of k b / (phi_k median(k b))`` with sharing
    (k batches of b always running together take phi_k times one of k x b), ``k max over b of b /
    median(b)`` without (independent instances, each as fast as one alone)."""
    if sharing is None or instances == 1:
        return instances * max(b / median_ms(b) * 1e3 for b in range(1, max_batch + 1))
    phi = sharing.factor(instances)
    return max(instances * b / (phi * median_ms(instances * b)) * 1e3 for b in range(1, max_batch + 1))


#: phi_2 and phi_4 as measured on the H100 (the medians over six models and three batch sizes each).
MEASURED_SHARING = InstanceSharing(
    points=((1, 1.0), (2, 1.10), (4, 1.21)),
    source="H100, fp16 CUDA graphs, six zoo models, k x b up to 32 (benchmarks/results/instance_sharing.txt)",
    caution="against a real server with 2-4 instances on an H100 the simulated p99 came out 0.33-0.93x the "
            "measured at 26 of 27 loads (median 0.77), and one load set at 0.8 of the capacity this sharing gives "
            "overloaded the server (benchmarks/results/instances_vs_server_h100.txt): batches beside others took "
            "longer than it says, so keep headroom")


def instance_choices(max_instances: int) -> tuple[int, ...]:
    """The instance counts a plan weighs up to ``max_instances``: the measured ones (1, 2, 4) and the
    limit itself (3 is weighed only where it is the limit: its phi is interpolated)."""
    if not isinstance(max_instances, int) or isinstance(max_instances, bool) \
            or not 1 <= max_instances <= MAX_INSTANCES:
        raise ValueError(f"max_instances: must be an integer in [1, {MAX_INSTANCES}], not {max_instances!r}")
    measured = {n for n, _ in MEASURED_SHARING.points}
    return tuple(sorted({n for n in measured if n <= max_instances} | {max_instances}))


__all__: Sequence[str] = ["MAX_INSTANCES", "MEASURED_SHARING", "InstanceSharing", "instance_choices",
                          "instances_capacity_qps"]
