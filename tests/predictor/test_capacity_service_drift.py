"""A host's drift in the capacity simulator (predictor/capacity/service_drift.py): correlated batch times."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from serving_path_helpers import a_path

from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.service_drift import DriftComponent, ServiceDrift
from predictor.capacity.serving_path import ServingPath
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate

DRIFT = ServiceDrift((DriftComponent(0.3, 20.0), DriftComponent(0.3, 200.0)))


def drawn(drift: ServiceDrift, gap_s: float = 0.003, count: int = 60_000, seed: int = 1
          ) -> tuple[np.ndarray, np.ndarray]:
    """Normals of batches starting every ``gap_s`` on average (exponential gaps): (times, normals)."""
    times = np.cumsum(np.random.default_rng(seed + 100).exponential(gap_s, count))
    normals = drift.normals(np.random.default_rng(seed))
    return times, np.array([normals.at(float(t)) for t in times])


def test_each_batch_keeps_a_standard_normal_and_batches_correlate_as_the_components_say() -> None:
    times, z = drawn(DRIFT)
    assert z.mean() == pytest.approx(0.0, abs=0.05)
    assert z.std() == pytest.approx(1.0, abs=0.03)
    for apart in (1, 5, 20, 80):
        lag_ms = float(np.median(times[apart:] - times[:-apart])) * 1e3
        measured = float(np.corrcoef(z[apart:], z[:-apart])[0, 1])
        assert measured == pytest.approx(DRIFT.correlation(lag_ms), abs=0.05), (apart, lag_ms)


def test_batches_far_apart_are_independent_and_no_components_is_no_drift() -> None:
    normals = DRIFT.normals(np.random.default_rng(3))
    z = np.array([normals.at(2.0 * i) for i in range(8000)])  # two seconds apart: ten slow times
    assert abs(np.corrcoef(z[1:], z[:-1])[0, 1]) < 0.04
    _, fresh = drawn(ServiceDrift(()), count=20_000)
    assert abs(np.corrcoef(fresh[1:], fresh[:-1])[0, 1]) < 0.03


def test_a_batch_asked_before_the_last_reads_the_last_state() -> None:
    """Another instance's batch may start before the last one asked: the drift does not run backwards."""
    only_drift = ServiceDrift((DriftComponent(1.0, 50.0),))
    normals = only_drift.normals(np.random.default_rng(2))
    first = normals.at(1.0)
    assert normals.at(0.5) == first and normals.at(1.0) == first  # the whole share persists: nothing fresh


@pytest.mark.parametrize(("components", "field"), [
    ((DriftComponent(-0.1, 10.0),), r"components\[0\].share"),
    ((DriftComponent(0.5, 0.0),), r"components\[0\].time_ms"),
    ((DriftComponent(0.5, float("inf")),), r"components\[0\].time_ms"),
    ((DriftComponent(0.7, 10.0), DriftComponent(0.6, 100.0)), "components: their shares sum"),
    (tuple(DriftComponent(0.1, 10.0) for _ in range(5)), "components: at most"),
])
def test_absurd_drift_is_refused_by_name(components: tuple[DriftComponent, ...], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}"):
        ServiceDrift(components)


def test_a_path_stores_its_drift_and_one_stored_without_it_has_none() -> None:
    path = a_path(stalls=HostStalls(0.5, (10.0,), DRIFT))
    assert ServingPath.from_dict(json.loads(json.dumps(path.to_dict()))) == path
    old = path.to_dict()
    del old["drift"]  # as the paths stored before the drift were
    assert ServingPath.from_dict(old).stalls == HostStalls(0.5, (10.0,))


@pytest.mark.parametrize(("drift", "field"), [
    ({"share": 0.3, "time_ms": 20}, "drift: must be a list"),
    ([{"share": 0.3}], r"drift\[0\]: must be an object"),
    ([{"share": 2, "time_ms": 20}], r"drift\[0\].share"),
    ([{"share": 0.3, "time_ms": -5}], r"drift\[0\].time_ms"),
    ([{"share": 0.8, "time_ms": 20}, {"share": 0.8, "time_ms": 200}], "drift.components: their shares sum"),
])
def test_a_stored_paths_absurd_drift_is_refused_by_name(drift: Any, field: str) -> None:
    data = {**a_path().to_dict(), "drift": drift}
    with pytest.raises(ValueError, match=f"^{field}"):
        ServingPath.from_dict(data)


def p99_of(stalls: HostStalls | None, load: float, seed: int = 5) -> tuple[float, float]:
    """(p99 ms, utilisation) of a one-instance server at ``load`` of its batch-1 capacity."""
    latency = LatencyModel(lambda b: 2.0 + 0.1 * b, 0.15)
    result = simulate(Arrivals("poisson", rate_qps=load * 1e3 / 2.1, seed=seed), BatchingConfig(max_batch=8),
                      latency, requests=60_000, stalls=stalls)
    return result.p99_ms, result.utilisation


def test_drift_raises_p99_under_load_and_without_it_the_runs_are_those_of_before() -> None:
    """Slow batches that come together queue requests behind them: p99 rises with the drift's share,
    more as load grows; a steady HostStalls (or a drift of no share) simulates exactly as none."""
    plain = p99_of(None, 0.8)
    assert p99_of(HostStalls(0.0, ()), 0.8) == plain
    assert p99_of(HostStalls(0.0, (), ServiceDrift(())), 0.8) == plain
    weak = p99_of(HostStalls(0.0, (), ServiceDrift((DriftComponent(0.3, 100.0),))), 0.8)[0]
    strong = p99_of(HostStalls(0.0, (), ServiceDrift((DriftComponent(0.9, 100.0),))), 0.8)[0]
    assert plain[0] < weak < strong
    light = p99_of(HostStalls(0.0, (), ServiceDrift((DriftComponent(0.9, 100.0),))), 0.2)[0]
    assert strong / plain[0] > light / p99_of(None, 0.2)[0]
    assert math.isfinite(strong)
