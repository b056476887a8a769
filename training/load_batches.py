"""The batches of one served load, read back from its request rows.

A serving folder keeps one row per request, in arrival order, with its batch's start time. One
instance serves the queue in order, so a batch is a run of consecutive requests sharing one start:
every reader of a load (its statistics, the server's dispatch lateness, the instance's turnaround)
needs those runs, found here once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def batch_heads(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each batch's first request, each batch's size) from the requests' batch starts."""
    heads = np.nonzero(np.r_[True, start[1:] != start[:-1]])[0]
    return heads, np.diff(np.r_[heads, len(start)])


def batches_by_start(start: np.ndarray, finish: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each batch's (start, time it took, size), in the order the batches started, from its requests'
    batch start and finish in any order. Triton's front end can take a request before one sent just
    ahead of it, so a batch's requests need not be consecutive in the rows (0.6% of the H100 sets'
    batches were not), and ``batch_heads`` would cut such a batch in pieces, each judged as a smaller
    batch; one instance starts one batch at a time, so a start time names a batch."""
    order = np.argsort(start, kind="stable")
    heads, sizes = batch_heads(start[order])
    first = order[heads]
    return start[first], finish[first] - start[first], sizes


__all__: Sequence[str] = ["batch_heads", "batches_by_start"]
