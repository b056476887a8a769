"""How a batch's time grows with the batches other model instances run beside it on the same GPU.

Triton can run k instances of a model on one GPU (``instance_group { count: k }``), each issuing its
own batches. They share the GPU's SMs and memory bandwidth, so a batch does not take what it takes
alone. Measured on an H100 (2026-12-07, ``benchmarks/instance_concurrency.sh``, analysed by
``benchmarks/instance_sharing.py``, ``benchmarks/results/instance_sharing.txt``: six zoo models as fp16
CUDA graphs, k copies replaying at once on their own streams and threads), k batches of b running
together took about what one batch of k x b takes alone, times a factor phi for the sharing itself,
and phi is larger the smaller the batches: for two batches of 4 1.17, of 16 1.09; for four batches of 1
1.28, of 8 1.13 (the medians over the six models at each (k, b)).

So a batch of b that starts while n - 1 others run, of S samples together, is simulated as taking
phi(n, (b + S) / n) x latency(b + S): the GPU runs the n batches as one of their summed size, a little
less efficiently, the more so the smaller they are. That is exact for the measurement's case (k equal
batches, always all running) and an approximation elsewhere: the time is fixed when the batch starts,
so one that starts beside a batch about to end is charged for the sharing throughout, and one that
starts alone is not slowed by batches that start after it. Re-timing running batches as others start
and end instead changed the check below little (``benchmarks/retimed_sharing.py``, a replay of its own:
29 of the 45 blind loads within ±10% re-timed, 30 with the time fixed at the start), so the time stays
fixed at the start.
With one instance nothing changes: phi is 1 and the batch runs alone. Where the latency names the
serving host's own work in each batch (``LatencyModel.host``: a serving path's, put there by
``ServingPath.around``), only the rest is shared: the batch takes phi x (latency(b + S) - host(b + S))
+ host(b), each instance doing its own host work in its own thread.

Its scope is the measurement's: fp16 CUDA graphs, k x b up to 32, k = 2 and 4 (phi for 3 is
interpolated in log2 k, no count above 4 is taken; between measured b in log2 b, beyond them the
nearest b's), one process with a thread and stream per instance (libtorch's backend and PyTriton's
in-process callables run instances so; Triton's Python backend runs each in a process and CUDA context
of its own, which the GPU time-slices instead).

Checked against a real server with 2-4 instances (``collectors/instance_serving.py`` on an H100;
``benchmarks/instances_vs_server.py``). First, with one phi per count (1.10 for two, 1.21 for four,
over every b), blind: optimistic, the simulated p99 0.33-0.93x the measured at 26 of 27 loads (3 within
±10%; resnet34, convnext_small, electra-small, ``results/instances_vs_server_h100.txt``), that server's
batches being small (1-4), where phi is largest. phi by batch size was chosen after that check (10 of
those 27 within ±10%, median 0.89x: a development figure), then checked blind on three more models
(googlenet, opt-125m, regnet_x_400mf; max batch 1-8, 2 and 4 instances; ``results/
instances_vs_server_h100_2.txt``): 29 of 45 loads within ±10%, 0.54-1.29x (median 0.94x), where one phi
per count gave 13 of 45 (0.86x). It is still optimistic where four instances run batches of 1-2 at 0.8
of capacity (0.54-0.56x for opt-125m). Through Triton (PyTriton, k callables on their own streams;
regnet_y_1_6gf, llama-300m, swin_s; ``results/instances_vs_triton_h100.txt``), whose batches are about
2.5 ms of PyTriton's own work and 2 ms of the GPU's at batch 1, sharing the whole batch time was
pessimistic (6 of 27 within ±10%, median 1.23x, up to 38x at 0.8 of capacity) and sharing only the
GPU's part, the host work apart, was not (8 of 27, 0.60-1.04x, median 0.88x: chosen on those loads, a
development figure). Plans say so (``describe``).
"""

from __future__ import annotations

import math
import numbers
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: The most instances per GPU a plan weighs: the largest count measured.
MAX_INSTANCES = 4


@dataclass(frozen=True)
class InstanceSharing:
    """phi by the number n of batches running at once on one GPU (the new one included) and their mean
    size b, from measured points (n, b, phi) for n of 2 or more (alone, n = 1, phi is 1). For a measured
    n, phi is interpolated in log2 b between its points and held at the nearest beyond them; between
    measured counts (and between 1 and the smallest), in log2 n at the same b."""

    points: tuple[tuple[int, int, float], ...]
    #: where the points were measured, for the plans that use them to say
    source: str = ""
    #: what a check against a real server found, for the plans that use them to say with it
    caution: str = ""
    #: phi by (n, summed samples): a simulation asks the same few again and again
    _memo: dict[tuple[int, int], float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def describe(self) -> str:
        """Where the sharing was measured and, where checked, how far to trust it: what a plan says."""
        return f"{self.source}; {self.caution}" if self.caution else self.source

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("points: at least one measured (count, batch, phi) is needed")
        checked = []
        for point in self.points:
            if len(point) != 3:
                raise ValueError(f"points: each must be (count, batch, phi), not {point!r}")
            n, b, phi = point
            if not (_is_integer(n) and n >= 2 and _is_integer(b) and b >= 1):
                raise ValueError(f"points: counts must be integers of at least 2 (alone, phi is 1) and batches "
                                 f"positive integers, not {point!r}")
            if not (_is_number(phi) and 1.0 <= phi <= 4.0):
                raise ValueError(f"points: each phi must be a finite factor in [1, 4], not {point!r}")
            checked.append((int(n), int(b), float(phi)))
        if len({(n, b) for n, b, _ in checked}) != len(checked):
            raise ValueError("points: a (count, batch) is given twice")
        object.__setattr__(self, "points", tuple(checked))  # plain, immutable values: the memo stays true

    @property
    def max_batches(self) -> int:
        """The most batches at once the points reach: no more are simulated on one GPU."""
        return max(n for n, _, _ in self.points)

    def counts(self) -> tuple[int, ...]:
        """The counts measured, with 1 (alone)."""
        return tuple(sorted({1} | {n for n, _, _ in self.points}))

    def factor(self, running: int, mean_batch: float) -> float:
        """phi for ``running`` batches at once (at least 1, at most ``max_batches``) whose mean size is
        ``mean_batch`` samples."""
        if not (_is_integer(running) and 1 <= running <= self.max_batches):
            raise ValueError(f"running: must be an integer in [1, {self.max_batches}], not {running!r}")
        if not (_is_number(mean_batch) and mean_batch > 0):
            raise ValueError(f"mean_batch: must be a positive number of samples, not {mean_batch!r}")
        running, mean_batch = int(running), float(mean_batch)
        if running == 1:
            return 1.0
        counts = self.counts()
        above = next(i for i, n in enumerate(counts) if n >= running)
        n1 = counts[above]
        if n1 == running:
            return self._at_count(n1, mean_batch)
        n0 = counts[above - 1]
        phi0, phi1 = self._at_count(n0, mean_batch), self._at_count(n1, mean_batch)
        share = (math.log2(running) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
        return phi0 + share * (phi1 - phi0)

    def _at_count(self, count: int, mean_batch: float) -> float:
        """phi at a measured count (1: alone), interpolated in log2 b, held at the ends."""
        if count == 1:
            return 1.0
        curve = sorted((b, phi) for n, b, phi in self.points if n == count)
        batches = [b for b, _ in curve]
        i = bisect_right(batches, mean_batch)
        if i == 0:
            return curve[0][1]
        if i == len(curve):
            return curve[-1][1]
        (b0, phi0), (b1, phi1) = curve[i - 1], curve[i]
        share = (math.log2(mean_batch) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
        return phi0 + share * (phi1 - phi0)

    def batch_time_terms(self, size: int, running_sizes: Sequence[int]) -> tuple[int, float]:
        """(the batch size whose latency the batch takes, the factor on it) for a batch of ``size``
        that starts while batches of ``running_sizes`` run on the same GPU."""
        summed, count = size + sum(running_sizes), 1 + len(running_sizes)
        key = (count, summed)
        phi = self._memo.get(key)
        if phi is None:
            phi = self._memo[key] = self.factor(count, summed / count)
        return summed, phi


def _is_integer(value: object) -> bool:
    """An integer, numpy's included, and not a bool (as ``BatchingConfig`` takes its counts)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A finite real number, numpy's included, and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def instances_capacity_qps(median_ms: Callable[[int], float], max_batch: int, instances: int,
                           sharing: InstanceSharing | None,
                           host_ms: Callable[[int], float] = lambda batch: 0.0) -> float:
    """The most requests per second ``instances`` instances serve with batches of at most ``max_batch``,
    each sending its best batch back to back: ``max over b of k b / (phi(k, b) (median(k b) - host(k b))
    + host(b))`` with sharing (k batches of b always running together take phi times the GPU's part of one
    of k x b, and each its own serving host's work, ``host_ms``: none unless a serving path is in the
    medians), ``k max over b of b / median(b)`` without (independent instances, each as fast as one alone)."""
    if sharing is None or instances == 1:
        return instances * max(b / median_ms(b) * 1e3 for b in range(1, max_batch + 1))

    def batch_ms(b: int) -> float:  # k batches of b running together, each
        gpu = median_ms(instances * b) - host_ms(instances * b)
        if gpu < 0:
            raise ValueError(f"latency: the serving host's work in a batch of {instances * b} is more than its median")
        return sharing.factor(instances, b) * gpu + host_ms(b)

    return max(instances * b * 1e3 / batch_ms(b) for b in range(1, max_batch + 1))


#: phi(k, b) as measured on the H100: the medians over six models at each (k, b) measured.
MEASURED_SHARING = InstanceSharing(
    points=((2, 4, 1.171), (2, 8, 1.093), (2, 16, 1.090), (4, 1, 1.275), (4, 4, 1.193), (4, 8, 1.128)),
    source="H100, fp16 CUDA graphs, six zoo models, k x b up to 32, phi by k and b "
           "(benchmarks/results/instance_sharing.txt)",
    caution="checked blind against a real server with 2-4 instances on an H100 (three models it was not fitted "
            "on), the simulated p99 came within +-10% of the measured at 29 of 45 loads (0.54-1.29x, median 0.94; "
            "10 of 27, median 0.89, on the earlier loads phi by batch size was chosen on), optimistic where four "
            "instances ran batches of 1-2 at 0.8 of capacity (benchmarks/results/instances_vs_server_h100_2.txt); "
            "through Triton (PyTriton), a serving path's work kept each instance's own, 8 of 27 (0.60-1.04x, median "
            "0.88, the loads that choice was made on; benchmarks/results/instances_vs_triton_h100.txt): keep headroom")


def instance_choices(max_instances: int) -> tuple[int, ...]:
    """The instance counts a plan weighs up to ``max_instances``: the measured ones (1, 2, 4) and the
    limit itself (3 is weighed only where it is the limit: its phi is interpolated)."""
    if not isinstance(max_instances, int) or isinstance(max_instances, bool) \
            or not 1 <= max_instances <= MAX_INSTANCES:
        raise ValueError(f"max_instances: must be an integer in [1, {MAX_INSTANCES}], not {max_instances!r}")
    measured = set(MEASURED_SHARING.counts())
    return tuple(sorted({n for n in measured if n <= max_instances} | {max_instances}))


__all__: Sequence[str] = ["MAX_INSTANCES", "MEASURED_SHARING", "InstanceSharing", "instance_choices",
                          "instances_capacity_qps"]
