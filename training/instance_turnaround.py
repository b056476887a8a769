"""How long a Triton model instance stays busy after its batch's compute ends, from Triton's trace.

Triton's trace stamps each batch's ``COMPUTE_START`` and ``COMPUTE_END`` around the backend's
execute. The instance is not free at ``COMPUTE_END``: the backend still hands back a response per
request and releases them before the instance takes its next payload. Measured through PyTriton on
an H100 (``datasets/nvidia-h100-80gb-hbm3/serving-triton/``), that gap was 50-70 us after a batch of
one request and 570-610 us after one of 32, growing by 16-18 us a request. The simulator serves a
batch for its service time and frees the instance at once, so the service time it is given must be
the instance's occupancy: compute plus this turnaround. Leaving it out makes a server at 0.8 of its
capacity look like one at 0.78, and a p99 there is steep in the load.

The turnaround is read where it is visible: between two batches in a row where the next could have
gone the moment the first ended (its oldest request had arrived, and waited out the queue delay,
before that end: ``back_to_back``), the gap from one's ``COMPUTE_END`` to the next's
``COMPUTE_START`` is the instance's own time. Sizes seen back to back fewer than ``MIN_SEEN`` times
take a straight line fitted over those seen more often.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from training.load_batches import load_batches

#: a batch size needs this many back-to-back gaps for its own median; rarer sizes take the line
MIN_SEEN = 5


def back_to_back(frame: pd.DataFrame, max_queue_delay_us: float) -> tuple[np.ndarray, np.ndarray]:
    """(size of the first batch, gap in us) for each pair of batches in a row in one load's rows
    (request order, Triton's times in us) where the second could have started when the first ended."""
    batches = load_batches(*(frame[c].to_numpy(dtype=np.int64) for c in ("start_us", "finish_us", "received_us")))
    ended = batches.finish[:-1]
    ready = batches.oldest[1:] + max_queue_delay_us <= ended
    gaps = batches.start[1:] - ended
    return batches.size[:-1][ready], gaps[ready]


def turnaround_ms(gaps: Iterable[tuple[np.ndarray, np.ndarray]], batches: Sequence[int]) -> dict[int, float]:
    """The instance's turnaround (ms) after a batch of each of ``batches``, from ``back_to_back``
    pairs of any number of loads: each size's median gap where seen ``MIN_SEEN`` times, else the
    least-squares line through those medians, clipped at zero; ValueError when fewer than two sizes
    were seen that often (no line to draw)."""
    pairs = list(gaps)
    sizes = np.concatenate([s for s, _ in pairs]) if pairs else np.empty(0, dtype=int)
    values = np.concatenate([g for _, g in pairs]) if pairs else np.empty(0)
    medians = {int(b): float(np.median(values[sizes == b])) for b in np.unique(sizes)
               if np.count_nonzero(sizes == b) >= MIN_SEEN}
    if len(medians) < 2:
        raise ValueError(f"turnaround: {len(medians)} batch sizes ran back to back {MIN_SEEN} times or more; "
                         "a line needs two (serve longer loads)")
    slope, intercept = np.polyfit(list(medians), list(medians.values()), 1)
    return {b: (medians[b] if b in medians else max(0.0, intercept + slope * b)) * 1e-3 for b in batches}


def with_turnaround(medians_ms: Mapping[int, float], turnaround: Mapping[int, float]) -> dict[int, float]:
    """Each batch size's service median plus the instance's turnaround after it."""
    return {b: m + turnaround[b] for b, m in medians_ms.items()}


__all__: Sequence[str] = ["MIN_SEEN", "back_to_back", "turnaround_ms", "with_turnaround"]
