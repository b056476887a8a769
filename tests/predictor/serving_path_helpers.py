"""A serving path for tests (predictor/capacity/serving_path.py), with any field changed."""

from __future__ import annotations

from typing import Any

from predictor.capacity.serving_path import PathCost, ServingPath


def a_path(**changes: Any) -> ServingPath:
    """A measured path of 1.5 ms a batch + 0.2 ms a request (1.0-2.5 and 0.15-0.3 its ends), sigma
    0.06, no pauses or drift, unless ``changes`` say otherwise."""
    fields: dict[str, Any] = {"name": "test-path", "server": "tritonserver", "label": "measured",
                              "cost": PathCost(1.5, 0.2), "low": PathCost(1.0, 0.15), "high": PathCost(2.5, 0.3),
                              "sigma": 0.06}
    return ServingPath(**{**fields, **changes})
