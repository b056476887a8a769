"""What one GPU of a fleet sees of the whole load: the arrivals every plan, grid and load curve simulates.

The load is split at random over G GPUs (the planner's balancer, ``planner``), and one GPU stands
for all. How its arrivals look depends on how the whole load is described:

- Poisson (``arrival_cv`` 1): Poisson at qps / G (thinned Poisson is Poisson);
- bursty or steady (``arrival_cv`` otherwise): the GPU's share of a gamma renewal process
  (``simulator.Arrivals.share``);
- a recorded trace (``load_trace.LoadTrace``): the trace at qps, thinned to one request in G and
  replayed whole (``LoadTrace.gpu_share``).

One function makes them, so that a plan's run, its p99 range and its load curve's point at the
planned load are the same simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from predictor.capacity.load_trace import LoadTrace
from predictor.capacity.simulator import WARMUP_FRACTION, Arrivals


@dataclass(frozen=True)
class GpuArrivals:
    """One GPU's arrivals and how to run them: ``requests`` generated (None: a trace, replayed whole),
    the first ``warmup_fraction`` of them warming the server up."""

    arrivals: Arrivals
    requests: int | None
    warmup_fraction: float

    @property
    def count(self) -> int:
        """Requests a whole run simulates, warm-up included: what it costs a plan's budget."""
        if self.requests is not None:
            return self.requests
        assert self.arrivals.times is not None
        return len(self.arrivals.times)


def gpu_arrivals(qps: float, gpus: int, seed: int, requests: int, arrival_cv: float = 1.0,
                 trace: LoadTrace | None = None) -> GpuArrivals:
    """One GPU's arrivals when a load of ``qps`` on the whole is split at random over ``gpus``: see the
    module docstring. ``requests`` is a generated run's length, and a trace's measured requests at least."""
    if trace is not None:
        times, warm = trace.gpu_share(qps, gpus, seed, requests)
        # (warm + 0.5) / n: simulate takes int(n * fraction) warm-up requests, which is then exactly warm
        return GpuArrivals(Arrivals("trace", times=tuple(times.tolist()), seed=seed), None,
                           (warm + 0.5) / len(times))
    if arrival_cv == 1:
        return GpuArrivals(Arrivals("poisson", rate_qps=qps / gpus, seed=seed), requests, WARMUP_FRACTION)
    return GpuArrivals(Arrivals("gamma", rate_qps=qps, cv=arrival_cv, share=gpus, seed=seed), requests,
                       WARMUP_FRACTION)


__all__: Sequence[str] = ["GpuArrivals", "gpu_arrivals"]
