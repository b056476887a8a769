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


__all__: Sequence[str] = ["batch_heads"]
