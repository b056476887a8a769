"""How steadily a host runs eager forwards, and what that does to an eager prediction's interval.

An eager forward at small batch runs at the pace of the CPU that issues it, and that pace wavers
with what else the host does. How closely a host repeats one forward bounds how closely any
prediction can land on it: over the zoo's eager runs on the H200 machines (22 host conditions,
machines 1-21, quiet and with the issuing core shared), the conditions whose runs spread p90/p10
by at most 1.2x put 85% of runs within +-10% of their prediction from their own probe, 1.2-1.4x
71%, above 1.4x 31-45% (by bands of 0.2); the 90% quantile of |log(predicted / measured)| grew
from 0.10-0.12 to 0.25-0.59. One interval for every host is then too wide on a steady one (it
covered 100% of machine 19's runs) and too narrow on an unsteady one (39% of a contended core's).

So a host profile carries ``forward_spread`` (the probe's reference forwards, p90/p10 of their
timings; a run's profile, of those timed between its rounds), and an eager prediction's 90%
interval on a measured GPU is sized by it: half-width ``SPREAD_INTERVAL_BASE_LOG +
SPREAD_INTERVAL_SLOPE x ln(spread)`` in log space, never narrower than a captured graph's (what
the kernel models alone are off by). A profile without one (probed before version 3) keeps the
bundle's one width.

What it does not do yet: the line was fitted on the runs' own spread, and the reference forwards
(0.7-2 ms each, three timings a sample between rounds) spread more than the zoo's longer
forwards: on machine 21, the one machine measured both ways, its profiles read 1.84-4.15x where
its runs spread 1.25-1.67x, so its intervals covered 93-100% of its runs, not 90%. The same
spread widens a batch-128 forward, which the GPU paces, as much as a batch-1 one: from the runs'
own spread the line covers 98% of the dataset's batch-128 runs and 89-91% at batch 1-32, and
weighting it by how host-bound each forward is predicted to be (1 - its CUDA-graph time over its
eager time) covered the held-out machines no better (83-98% against 82-94%): contended runs miss
by as much when the GPU paces them, so it is not done.
"""

from __future__ import annotations

import math

from predictor.host_profile import HostProfile

#: The 90% quantile of |log(predicted / measured)| of a condition's eager runs, against the log of
#: its runs' median p90/p10, fitted by least squares over the 16 conditions measured on machines
#: 1-19 (``benchmarks/host_spread_interval.py``, which prints the fit and each condition's
#: coverage); machines 20 and 21 were held out to test it on machines it was not fitted on.
SPREAD_INTERVAL_BASE_LOG = 0.044
SPREAD_INTERVAL_SLOPE = 0.588
#: above this spread a host is said to be unsteady (the conditions spreading 1.2-1.4x put 71% of
#: their runs within +-10%, those above 1.4x 31-45%)
UNSTEADY_SPREAD = 1.3


def spread_interval_log(spread: float) -> float:
    """The half-width in log space of an eager 90% interval on a host whose forwards spread
    ``spread`` (p90/p10)."""
    return SPREAD_INTERVAL_BASE_LOG + SPREAD_INTERVAL_SLOPE * math.log(spread)


def eager_interval_log(host: HostProfile, fitted_log: float, floor_log: float = 0.0) -> float:
    """The half-width of an eager prediction's 90% interval on ``host``: from its spread where its
    profile has one (at least ``floor_log``, a captured graph's width), else ``fitted_log``, the
    bundle's one width for every host."""
    if host.forward_spread is None:
        return fitted_log
    return max(spread_interval_log(host.forward_spread), floor_log)


def unsteady_warning(host: HostProfile) -> str | None:
    """What an eager prediction says of a host whose forwards wavered while it was probed, or None."""
    if host.forward_spread is None or host.forward_spread <= UNSTEADY_SPREAD:
        return None
    return (f"host {host.id} ran its reference forwards {host.forward_spread:.2f}x apart (p90/p10) when "
            f"measured: eager latency there repeats no closer than that, so this is its median with an interval "
            f"widened to match; probe again on a quieter host for a tighter one")
