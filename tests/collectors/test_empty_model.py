"""The empty model: served, a server's time per batch is its own serving path alone."""

from __future__ import annotations

from collectors.batching_server import EMPTY_MODEL, EmptyModel
from collectors.serving_check import timed_model


def test_the_empty_model_is_served_by_name_on_any_device_and_takes_no_time() -> None:
    model, timed = timed_model(EMPTY_MODEL, "fp16", 4, "cuda", 5)  # no GPU needed: it runs nothing
    assert isinstance(model, EmptyModel) and model.name == "empty" and model.done()
    assert sorted(timed) == [1, 2, 3, 4]
    assert max(float(t.max()) for t in timed.values()) < 0.01  # no batch's time is the model's
