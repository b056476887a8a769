"""predictor.capacity.single_instance: the one-instance loop makes SimPy's run to the bit, and a bounded
run is given up only when its p99 is above the bound (otherwise it is the whole run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from predictor.capacity.simulator import (
    ArrivalKind,
    Arrivals,
    BatchingConfig,
    LatencyFn,
    SimResult,
    simulate,
    simulate_bounded,
)


def batch_friendly(sigma: float) -> LatencyFn:
    """1 ms + 0.1 ms a sample, lognormal spread ``sigma``."""
    return lambda batch: (1.0 + 0.1 * batch, sigma)


def assert_same_run(one: SimResult, other: SimResult) -> None:
    assert one == other  # every statistic (the arrays are left out of ==)
    for name in ("arrival_s", "start_s", "finish_s"):
        np.testing.assert_array_equal(getattr(one, name), getattr(other, name))


# (kind, qps, max_batch, delay us, sigma): idle and overloaded, batch 1 and batching, with and without a
# queue delay, deterministic and spread service, Poisson and bursty gamma arrivals
CASES: list[tuple[ArrivalKind, float, int, int, float]] = [
    ("poisson", 50, 1, 0, 0.0),
    ("poisson", 800, 1, 0, 0.2),  # M/D/1-like, some queueing
    ("poisson", 3000, 8, 0, 0.0),
    ("poisson", 3000, 8, 500, 0.2),
    ("gamma", 3000, 32, 2000, 0.1),
    ("poisson", 20000, 16, 300, 0.0),  # beyond what max_batch 16 serves: the queue grows
    ("gamma", 200, 4, 5000, 0.3),  # most batches go when the delay runs out
]


@pytest.mark.parametrize(("kind", "qps", "max_batch", "delay_us", "sigma"), CASES)
def test_the_loop_makes_the_event_loops_run_to_the_bit(kind: ArrivalKind, qps: float, max_batch: int, delay_us: int,
                                                        sigma: float) -> None:
    arrivals = Arrivals(kind, rate_qps=qps, cv=1.8, seed=9)
    config = BatchingConfig(max_batch=max_batch, max_queue_delay_us=delay_us)
    events = simulate(arrivals, config, batch_friendly(sigma), requests=4_000, engine="events")
    loop = simulate(arrivals, config, batch_friendly(sigma), requests=4_000)
    assert_same_run(loop, events)
    assert events.requests == 3_600


@pytest.mark.parametrize(("max_batch", "delay_us", "sigma"), [(1, 0, 0.0), (8, 0, 0.2), (16, 500, 0.1)])
def test_the_loop_replays_a_logged_trace_as_the_event_loop_does(max_batch: int, delay_us: int, sigma: float) -> None:
    # a log's times to the millisecond: many requests arrive at once (a planned trace's share is such a trace)
    times = np.floor(np.cumsum(np.random.default_rng(3).exponential(1 / 2500, 4_000)) * 1e3) / 1e3
    trace = Arrivals("trace", times=tuple(times.tolist()))
    config = BatchingConfig(max_batch=max_batch, max_queue_delay_us=delay_us)
    events = simulate(trace, config, batch_friendly(sigma), engine="events")
    loop = simulate(trace, config, batch_friendly(sigma))
    assert_same_run(loop, events)
    assert len(np.unique(times)) < len(times) * 0.5


@pytest.mark.parametrize("factor", [0.3, 0.9, 0.999, 1.0, 1.001, 2.0])
@pytest.mark.parametrize(("qps", "delay_us"), [(3000, 0), (3000, 1000), (8000, 0)])
def test_a_bounded_run_is_given_up_only_above_its_bound_and_otherwise_is_the_whole_run(
        qps: float, delay_us: int, factor: float) -> None:
    arrivals, config = Arrivals("poisson", rate_qps=qps, seed=4), BatchingConfig(max_batch=8,
                                                                                 max_queue_delay_us=delay_us)
    whole = simulate(arrivals, config, batch_friendly(0.1), requests=5_000)
    bound = whole.p99_ms * factor
    run = simulate_bounded(arrivals, config, batch_friendly(0.1), requests=5_000, p99_bound_ms=bound)
    if run.result is None:
        assert whole.p99_ms > bound and run.simulated <= 5_000
    else:
        assert_same_run(run.result, whole)
        assert run.simulated == 5_000
    if factor <= 0.9:  # a tenth above the bound: given up; far above it: after a fraction of the run
        assert run.result is None and (factor > 0.3 or run.simulated < 2_500)
    if factor >= 1.0:
        assert run.result is not None


def test_a_run_the_loop_does_not_cover_goes_to_the_end_on_the_event_loop() -> None:
    arrivals = Arrivals("poisson", rate_qps=3000, seed=4)
    config = BatchingConfig(max_batch=8, instances=2)
    whole = simulate(arrivals, config, batch_friendly(0.1), requests=3_000)
    run = simulate_bounded(arrivals, config, batch_friendly(0.1), requests=3_000, p99_bound_ms=whole.p99_ms / 2)
    assert run.simulated == 3_000 and run.result is not None
    assert dataclasses.replace(run.result) == whole and run.result.p99_ms > whole.p99_ms / 2


@pytest.mark.parametrize(("field", "call"), [
    ("engine", lambda: simulate(Arrivals("poisson", rate_qps=10), BatchingConfig(), batch_friendly(0), requests=10,
                                engine="fast")),  # type: ignore[arg-type]  # what a caller's typo sends
    ("p99_bound_ms", lambda: simulate_bounded(Arrivals("poisson", rate_qps=10), BatchingConfig(), batch_friendly(0),
                                              requests=10, p99_bound_ms=0)),
    ("p99_bound_ms", lambda: simulate_bounded(Arrivals("poisson", rate_qps=10), BatchingConfig(), batch_friendly(0),
                                              requests=10, p99_bound_ms=float("nan"))),
])
def test_bad_input_is_refused_naming_its_field(field: str, call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        call()
