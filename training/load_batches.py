"""The batches of one served load, read back from its request rows.

A serving folder keeps one row per request, in the client's send order, with its batch's start
and finish. One instance runs one batch at a time, so a batch is the requests sharing one start:
every reader of a load (its statistics, the server's dispatch lateness, the instance's turnaround,
the host's pauses) needs them, found here once (``load_batches``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def batch_heads(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each batch's first request, each batch's size) from the requests' batch starts."""
    heads = np.nonzero(np.r_[True, start[1:] != start[:-1]])[0]
    return heads, np.diff(np.r_[heads, len(start)])


@dataclass(frozen=True)
class Batches:
    """One load's batches in the order they started: the lowest row of each one's requests (the
    rows are in the client's send order), its start, finish and size, and the first and last
    arrival among its requests."""

    first: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    size: np.ndarray
    oldest: np.ndarray
    newest: np.ndarray


def load_batches(start: np.ndarray, finish: np.ndarray, arrival: np.ndarray | None = None) -> Batches:
    """The batches of one load from its requests' rows (each request's batch start and finish, and
    its arrival; without arrivals, ``oldest`` and ``newest`` are the start). A start time names a
    batch: one instance starts one batch at a time. The rows need not hold a batch's requests
    together: Triton's front end can take a request before one sent just ahead of it (0.3% of the
    H100 sets' batches were not consecutive rows), and ``batch_heads`` on the rows as they are
    would cut such a batch in pieces, each read as a smaller batch."""
    order = np.argsort(start, kind="stable")
    heads, sizes = batch_heads(start[order])
    rows = order[heads]  # a stable sort: each batch's lowest row comes first
    came = (start if arrival is None else arrival)[order]
    return Batches(first=rows, start=start[rows], finish=finish[rows], size=sizes,
                   oldest=np.minimum.reduceat(came, heads), newest=np.maximum.reduceat(came, heads))


__all__: Sequence[str] = ["Batches", "batch_heads", "load_batches"]
