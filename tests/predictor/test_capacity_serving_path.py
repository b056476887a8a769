"""The serving path: what a server adds to each predicted batch, its stored form and its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from serving_path_helpers import a_path

from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.serving_path import (
    ServingPath,
    read_serving_path,
    serving_path,
    stored_serving_path,
    stored_serving_paths,
)
from predictor.capacity.simulator import LatencyModel


def test_the_path_adds_its_per_batch_and_per_request_time_to_each_median_and_its_ends_to_the_interval() -> None:
    model = LatencyModel(lambda b: 2.0 + 0.1 * b, 0.01, interval_ms=lambda b: (1.8 + 0.1 * b, 2.4 + 0.1 * b))
    served = a_path().around(model)
    assert served(8) == pytest.approx((2.8 + 1.5 + 0.2 * 8, 0.06))
    assert served.interval_ms is not None
    low, high = served.interval_ms(8)
    assert low == pytest.approx(2.6 + 1.0 + 0.15 * 8) and high == pytest.approx(3.2 + 2.5 + 0.3 * 8)


def test_a_model_spread_wider_than_the_path_keeps_its_own_and_one_without_interval_gets_the_paths() -> None:
    served = a_path().around(LatencyModel(lambda b: 4.0, 0.15))
    assert served(1)[1] == 0.15
    assert served.interval_ms is not None and served.interval_ms(2) == pytest.approx((4.0 + 1.3, 4.0 + 3.1))


def test_the_slow_end_plan_covers_the_paths_slow_end_too() -> None:
    model = LatencyModel(lambda b: 2.0, 0.01, interval_ms=lambda b: (1.5, 3.0))
    slow = a_path().around(model).for_plan("slow_end")
    assert slow(4)[0] == pytest.approx(3.0 + 2.5 + 0.3 * 4)
    with pytest.raises(ValueError, match="model: put the serving path around"):
        a_path().around(model.for_plan("slow_end"))


def test_the_stored_form_reads_back_the_same_path() -> None:
    path = a_path(stalls=HostStalls(0.5, (10.0, 20.0)), note="a note")
    assert ServingPath.from_dict(json.loads(json.dumps(path.to_dict()))) == path


def test_only_a_path_fitted_on_other_hosts_carries_a_caution() -> None:
    assert a_path().caution is None  # a host's own path: planned for that host
    fitted = a_path(label="fitted").caution
    assert fitted is not None and "other hosts" in fitted and "--models empty" in fitted
    # an answer's form carries it and reads back as the same path (a plan's JSON saved as a path file)
    answer = a_path(label="fitted").answer_dict()
    assert answer["caution"] == fitted
    assert ServingPath.from_dict(json.loads(json.dumps(answer))) == a_path(label="fitted")
    assert a_path().answer_dict()["caution"] is None


@pytest.mark.parametrize(("change", "field"), [
    ({"per_batch_ms": -1}, "per_batch_ms"),
    ({"per_request_ms": 1e9}, "per_request_ms"),
    ({"per_batch_ms": float("nan")}, "per_batch_ms"),
    ({"per_batch_ms": True}, "per_batch_ms"),
    ({"sigma": 7}, "sigma"),
    ({"label": "guessed"}, "label"),
    ({"schema_version": 2}, "schema_version"),
    ({"low": {"per_batch_ms": 1.0}}, "low"),
    ({"high": {"per_batch_ms": 0.1, "per_request_ms": 0.01}}, "low, high"),
    ({"pauses": {"rate_per_s": -1, "pauses_ms": []}}, "pauses.rate_per_s"),
    ({"pauses": {"rate_per_s": 1, "pauses_ms": [1e9]}}, "pauses.pauses_ms"),
    ({"name": "../etc/passwd"}, "name"),
    ({"speed": 1}, "speed"),
])
def test_absurd_or_unknown_fields_are_refused_by_name(change: dict[str, Any], field: str) -> None:
    data = {**a_path().to_dict(), **change}
    with pytest.raises(ValueError, match=f"^{field}"):
        ServingPath.from_dict(data)


def test_a_missing_field_is_named() -> None:
    data = a_path().to_dict()
    del data["per_request_ms"]
    with pytest.raises(ValueError, match="^per_request_ms: missing"):
        ServingPath.from_dict(data)


def test_the_shipped_pytriton_path_loads_and_an_unknown_name_lists_the_known_ones() -> None:
    shipped = stored_serving_path("pytriton-h100")
    assert shipped.label == "fitted"
    assert shipped.low.per_batch_ms < shipped.cost.per_batch_ms < shipped.high.per_batch_ms
    assert "pytriton-h100" in stored_serving_paths()
    with pytest.raises(ValueError, match="serving_path: no serving path named 'nope' .*pytriton-h100"):
        stored_serving_path("nope")


def test_a_json_file_is_read_and_a_broken_one_is_named(tmp_path: Path) -> None:
    good = tmp_path / "mine.json"
    good.write_text(json.dumps(a_path().to_dict()))
    assert serving_path(str(good)) == a_path()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not a readable JSON serving path"):
        read_serving_path(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**a_path().to_dict(), "sigma": -1}))
    with pytest.raises(ValueError, match="wrong.json: sigma"):
        serving_path(str(wrong))
