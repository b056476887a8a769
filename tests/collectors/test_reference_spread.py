"""collectors.reference_forwards.spread: how steadily a host ran its reference forwards."""

from __future__ import annotations

import pytest

from collectors.reference_forwards import MIN_SPREAD_SAMPLES, spread
from predictor.host_profile import MAX_FORWARD_SPREAD


def test_a_steady_host_spreads_little_and_one_that_wavers_by_as_much_as_it_wavers() -> None:
    steady = {"a": [1.00, 1.01, 1.02, 0.99, 1.00, 1.01, 1.00, 0.99], "b": [2.0, 2.02, 1.98, 2.0, 2.01, 1.99]}
    assert spread(steady) == pytest.approx(1.02, abs=0.02)
    # half the forwards preempted for as long again as they take: p90/p10 is the 2x it wavers by
    wavering = {"a": [1.0] * 8 + [2.0] * 8}
    assert spread(wavering) == pytest.approx(2.0)


def test_the_spread_is_the_median_over_forwards_with_enough_timings() -> None:
    timings = {"steady": [1.0] * 10, "shaky": [1.0] * 5 + [3.0] * 5, "wild": [1.0] * 5 + [9.0] * 5,
               "too few": [1.0, 50.0]}
    assert spread(timings) == pytest.approx(3.0)  # the median of 1, 3 and 9; "too few" not read
    assert spread({"too few": [1.0] * (MIN_SPREAD_SAMPLES - 1)}) is None
    assert spread({}) is None


def test_a_timing_of_nothing_is_not_read_and_a_wild_spread_is_capped() -> None:
    """A clock that read zero (or less) says nothing of the host; a spread is capped at what a
    profile holds, so that a run's minutes of measured rows are never lost to an absurd one."""
    assert spread({"a": [0.0, -1.0] + [1.0] * 8}) == pytest.approx(1.0)
    assert spread({"a": [0.0] * 4 + [1.0, 2.0]}) is None  # two timings left: too few
    assert spread({"a": [1e-6] * 5 + [1.0] * 5}) == MAX_FORWARD_SPREAD
