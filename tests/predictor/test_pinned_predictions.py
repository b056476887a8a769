"""Predictions stay what they were: the committed table (pinned_predictions) against today's code."""

from __future__ import annotations

import pytest

from tests.predictor.pinned_predictions import KEYS, VALUES, predictions, read

#: Refactors must not move a prediction; a change that means to (a retrained bundle) rewrites the table.
RELATIVE = 1e-9


def test_every_zoo_prediction_matches_the_pinned_table() -> None:
    pinned = {tuple(row[k] for k in KEYS): row for row in read()}
    now = predictions()
    assert len(now) == len(pinned) > 1000
    for row in now:
        expected = pinned[tuple(str(row[k]) for k in KEYS)]
        for value in VALUES:
            assert row[value] == pytest.approx(float(expected[value]), rel=RELATIVE, abs=0.0), (
                f"{[row[k] for k in KEYS]} {value}")
