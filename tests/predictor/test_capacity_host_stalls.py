"""A host's pauses in the capacity simulator (predictor/capacity/host_stalls.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.capacity.host_stalls import HostStalls, stalls_of_batches
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate


def finish_by_steps(starts: list[float], ends: list[float], start: float, work: float) -> float:
    """The finish of ``work`` from ``start`` around the pauses, walked pause by pause from the first."""
    t, left = start, work
    for s, e in zip(starts, ends):
        if e <= t:
            continue
        if s <= t:
            t = e
            continue
        if t + left <= s:
            break
        left -= s - t
        t = e
    return t + left


def test_a_batch_waits_out_every_pause_it_runs_into() -> None:
    schedule = HostStalls(15.0, (3.0, 12.0, 40.0)).schedule(np.random.default_rng(3))
    rng = np.random.default_rng(4)
    asked = []
    start = 0.0
    for _ in range(3000):
        start += float(rng.exponential(0.004))
        work = float(rng.uniform(0.0005, 0.03))
        asked.append((start, work, schedule.finish(start, work)))
    assert len(schedule.starts) > 50  # pauses were met
    assert all(a <= b for a, b in zip(schedule.ends, schedule.starts[1:]))  # one at a time, in order
    for start, work, got in asked:
        assert got == pytest.approx(finish_by_steps(schedule.starts, schedule.ends, start, work), abs=1e-12)
        assert got >= start + work


def test_a_batch_at_the_edge_of_a_pause_or_with_no_work() -> None:
    schedule = HostStalls(5.0, (10.0,)).schedule(np.random.default_rng(1))
    schedule.finish(10.0, 0.0)
    start, end = schedule.starts[0], schedule.ends[0]
    assert schedule.finish(start, 0.002) == pytest.approx(end + 0.002)  # starts as the pause does
    assert schedule.finish(end, 0.002) == pytest.approx(end + 0.002)  # starts as it ends: no wait
    assert schedule.finish(start - 0.001, 0.0) == start - 0.001
    assert schedule.finish(start + 0.001, 0.0) == pytest.approx(end)  # no work, but inside a pause


def test_the_pauses_drawn_do_not_depend_on_what_was_asked() -> None:
    """Asked in order, out of order, or once far ahead: the same pauses, and the same answers as a
    walk over them."""
    stalls = HostStalls(20.0, (2.0, 9.0, 30.0))
    asked = np.random.default_rng(8).uniform(0, 30, 500)
    in_order = stalls.schedule(np.random.default_rng(5))
    shuffled = stalls.schedule(np.random.default_rng(5))
    ahead = stalls.schedule(np.random.default_rng(5))
    ahead.finish(40.0, 0.0)
    for t in np.sort(asked):
        in_order.finish(float(t), 0.01)
    answers = [shuffled.finish(float(t), 0.01) for t in asked]
    in_order.finish(40.0, 0.0)
    shuffled.finish(40.0, 0.0)
    assert in_order.starts == shuffled.starts == ahead.starts
    assert in_order.ends == shuffled.ends == ahead.ends
    for t, got in zip(asked, answers):
        assert got == pytest.approx(finish_by_steps(ahead.starts, ahead.ends, float(t), 0.01), abs=1e-12)


def test_pauses_come_at_their_rate_and_take_their_share_of_the_time() -> None:
    stalls = HostStalls(2.0, (10.0, 30.0))
    schedule = stalls.schedule(np.random.default_rng(11))
    schedule.finish(20_000.0, 0.0)  # draws every pause up to 20,000 s
    assert len(schedule.starts) / 20_000 == pytest.approx(2.0, rel=0.03)
    paused = sum(e - s for s, e in zip(schedule.starts, schedule.ends)) / 20_000
    assert stalls.paused_share == pytest.approx(0.04)
    assert paused == pytest.approx(0.04, rel=0.05)


def test_stalled_batches_in_a_row_are_one_pause_of_what_they_took_over_their_medians() -> None:
    medians = {1: 0.002, 4: 0.004}
    size = np.array([1, 4, 4, 1, 1, 4, 1])
    took = np.array([0.002, 0.0041, 0.012, 0.009, 0.0021, 0.0039, 0.0050])  # stalled: 3rd, 4th, 7th
    start = np.cumsum(np.r_[0.0, took[:-1]])
    found = stalls_of_batches([(start, took, size)], medians)
    np.testing.assert_array_equal(found.stalled, [False, False, True, True, False, False, True])
    assert found.stalls.pauses_ms == pytest.approx((8.0 + 7.0, 3.0))
    assert found.stalls.rate_per_s == pytest.approx(2 / (start[-1] + took[-1]))


def test_a_host_that_never_pauses_changes_nothing() -> None:
    arrivals = Arrivals("poisson", rate_qps=800.0, seed=5)
    config = BatchingConfig(max_batch=16, preferred_batch_sizes=(8,), max_queue_delay_us=1000, scheduler="triton")
    latency = LatencyModel(lambda b: 1.0 + 0.1 * b, sigma=0.05)
    plain = simulate(arrivals, config, latency, requests=20_000)
    never = simulate(arrivals, config, latency, requests=20_000, stalls=HostStalls(0.0, ()))
    np.testing.assert_array_equal(plain.finish_s, never.finish_s)


@pytest.mark.parametrize("engine", ["auto", "events"])
def test_pauses_hold_the_requests_behind_them(engine: str) -> None:
    """The same arrivals with and without pauses: the median barely moves, the tail grows by about a
    pause, and the one-instance loop and SimPy's event loop give the same paused run."""
    arrivals = Arrivals("poisson", rate_qps=600.0, seed=2)
    config = BatchingConfig(max_batch=8, max_queue_delay_us=500)
    latency = LatencyModel(lambda b: 0.8 + 0.15 * b, sigma=0.05)
    stalls = HostStalls(1.0, (25.0,))
    plain = simulate(arrivals, config, latency, requests=30_000, engine=engine)  # type: ignore[arg-type]
    paused = simulate(arrivals, config, latency, requests=30_000, engine=engine, stalls=stalls)  # type: ignore[arg-type]
    assert paused.p50_ms < 1.2 * plain.p50_ms  # 2.5% of the time paused: most requests meet none
    assert paused.p99_ms > plain.p99_ms + 10.0
    other = simulate(arrivals, config, latency, requests=30_000,
                     engine="events" if engine == "auto" else "auto", stalls=stalls)
    np.testing.assert_allclose(other.finish_s, paused.finish_s, rtol=0, atol=1e-12)


def test_pauses_hold_every_instance_of_tritons_batcher() -> None:
    """Triton's code with two instances: a pause stops both, so the tail grows by about a pause."""
    arrivals = Arrivals("poisson", rate_qps=1500.0, seed=4)
    config = BatchingConfig(max_batch=16, preferred_batch_sizes=(4, 8), max_queue_delay_us=1000, instances=2,
                            scheduler="triton")
    latency = LatencyModel(lambda b: 1.5 + 0.1 * b, sigma=0.05)
    plain = simulate(arrivals, config, latency, requests=30_000)
    paused = simulate(arrivals, config, latency, requests=30_000, stalls=HostStalls(1.0, (25.0,)))
    np.testing.assert_array_equal(plain.arrival_s, paused.arrival_s)
    assert paused.p50_ms < 1.2 * plain.p50_ms
    assert paused.p99_ms > plain.p99_ms + 10.0


@pytest.mark.parametrize("rate, pauses, field", [
    (-1.0, (5.0,), "rate_per_s"), (math.nan, (5.0,), "rate_per_s"), (5000.0, (5.0,), "rate_per_s"),
    (True, (5.0,), "rate_per_s"), (2.0, (), "pauses_ms"), (2.0, (0.0,), "pauses_ms"), (2.0, (math.inf,), "pauses_ms"),
    (2.0, (1e9,), "pauses_ms"), (100.0, (20.0,), "paused"),
])
def test_absurd_pauses_are_refused_by_name(rate: float, pauses: tuple[float, ...], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        HostStalls(rate, pauses)


def test_the_simulator_refuses_stalls_that_are_not_a_host_stalls() -> None:
    with pytest.raises(ValueError, match="stalls"):
        simulate(Arrivals("poisson", rate_qps=10.0), BatchingConfig(), LatencyModel(lambda b: 1.0), requests=10,
                 stalls=(2.0, (5.0,)))  # type: ignore[arg-type]
