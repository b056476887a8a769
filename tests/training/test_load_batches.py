"""A load's batches read back from its request rows (training/load_batches.py)."""

from __future__ import annotations

import numpy as np

from training.load_batches import load_batches


def test_a_batch_whose_requests_are_not_consecutive_rows_is_one_batch() -> None:
    """Rows in the client's send order; the server took request 2 before request 1, so batch A is
    rows 0 and 2 and batch B rows 1 and 3. Read by rows as they are, A would be two batches of one."""
    start = np.array([100, 300, 100, 300])
    finish = np.array([250, 420, 250, 420])
    received = np.array([10, 60, 5, 70])
    batches = load_batches(start, finish, received)
    np.testing.assert_array_equal(batches.first, [0, 1])
    np.testing.assert_array_equal(batches.start, [100, 300])
    np.testing.assert_array_equal(batches.finish, [250, 420])
    np.testing.assert_array_equal(batches.size, [2, 2])
    np.testing.assert_array_equal(batches.oldest, [5, 60])
    np.testing.assert_array_equal(batches.newest, [10, 70])


def test_without_arrivals_the_batch_start_stands_for_them() -> None:
    batches = load_batches(np.array([1, 1, 4]), np.array([3, 3, 6]))
    np.testing.assert_array_equal(batches.size, [2, 1])
    np.testing.assert_array_equal(batches.oldest, [1, 4])
    np.testing.assert_array_equal(batches.newest, [1, 4])
