"""predictor.capacity.simulator: queueing theory where it has an answer (M/D/1), the batcher's rule
on traces worked out by hand, batching that appears only under load, and the refusals."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, SimResult, simulate

S_MS = 1.0  # deterministic service time of one request
RHOS = (0.3, 0.6, 0.85)
#: Requests per M/D/1 run. Over 20 seeds at 300,000 requests the relative error of the mean queue wait
#: against Pollaczek-Khinchine had a standard deviation of 0.75% (rho 0.3), 0.72% (0.6) and 1.44% (0.85),
#: largest |error| 1.3%, 1.4% and 3.7% (at 100,000 requests: 1.8%, 1.6%, 3.1%). Waits near saturation are
#: correlated over ~1/(1-rho)^2 services, hence the wider spread at 0.85. The tolerances below are about
#: four of those standard deviations: a wrong queue (a batch-1 server that batches, a wait counted from
#: the wrong instant, service times off by a few percent) misses them, the noise of any seed does not.
MD1_REQUESTS = 300_000
MD1_TOLERANCE = {0.3: 0.03, 0.6: 0.03, 0.85: 0.06}


def constant(ms: float) -> LatencyModel:
    return LatencyModel(lambda _batch: ms)


@pytest.fixture(scope="module")
def md1() -> dict[float, SimResult]:
    """One instance, batch 1, deterministic service, Poisson arrivals at each utilisation."""
    return {rho: simulate(Arrivals("poisson", rate_qps=rho / S_MS * 1e3, seed=7), BatchingConfig(max_batch=1),
                          constant(S_MS), requests=MD1_REQUESTS)
            for rho in RHOS}


@pytest.mark.parametrize("rho", RHOS)
def test_batch_one_mean_queue_wait_is_pollaczek_khinchine_for_m_d_1(md1: dict[float, SimResult], rho: float) -> None:
    expected_ms = rho * S_MS / (2 * (1 - rho))
    result = md1[rho]
    assert result.mean_queue_wait_ms == pytest.approx(expected_ms, rel=MD1_TOLERANCE[rho])
    assert result.mean_latency_ms == pytest.approx(result.mean_queue_wait_ms + S_MS, rel=1e-9)
    assert result.batch_histogram == {1: result.requests}


def test_p99_grows_with_load(md1: dict[float, SimResult]) -> None:
    p99 = [md1[rho].p99_ms for rho in RHOS]
    assert p99[0] < p99[1] < p99[2]
    assert p99[0] >= S_MS and md1[0.3].p50_ms <= md1[0.3].p90_ms <= p99[0]


@pytest.mark.parametrize("rho", RHOS)
def test_below_saturation_throughput_is_the_arrival_rate_and_utilisation_is_rate_times_service(
        md1: dict[float, SimResult], rho: float) -> None:
    result = md1[rho]
    rate = rho / S_MS * 1e3
    # the realised rate of 270,000 Poisson arrivals is within 0.2% (one standard deviation) of the nominal one
    assert result.offered_qps == pytest.approx(rate, rel=0.01)
    assert result.throughput_qps == pytest.approx(result.offered_qps, rel=0.002)
    assert result.utilisation == pytest.approx(result.offered_qps * S_MS * 1e-3, rel=0.002)


def test_utilisation_is_shared_by_instances_and_an_overloaded_server_delivers_its_capacity() -> None:
    latency, config = constant(2.0), BatchingConfig(max_batch=1, instances=4)
    light = simulate(Arrivals("poisson", rate_qps=1000, seed=1), config, latency, requests=50_000)
    assert light.utilisation == pytest.approx(1000 * 2e-3 / 4, rel=0.02)
    assert light.throughput_qps == pytest.approx(light.offered_qps, rel=0.005)
    heavy = simulate(Arrivals("poisson", rate_qps=3000, seed=1), config, latency, requests=50_000)
    assert heavy.throughput_qps == pytest.approx(4 / 2e-3, rel=0.005)  # four instances, 2 ms each
    assert heavy.utilisation == pytest.approx(1.0, abs=0.005)
    assert heavy.p99_ms > 100 * light.p99_ms  # the queue grows without bound


def batch_friendly(batch: int) -> float:
    return 1.0 + 0.1 * batch  # ms: a batch of 32 serves 7.6 requests per ms, a batch of one 0.9


def test_batching_appears_under_load_and_not_when_idle() -> None:
    config = BatchingConfig(max_batch=32, max_queue_delay_us=0)
    idle = simulate(Arrivals("poisson", rate_qps=10, seed=3), config, LatencyModel(batch_friendly), requests=5_000)
    assert idle.mean_batch_size < 1.02  # another arrival within 1.1 ms of one, at 10 qps: ~1% of the time
    assert idle.p99_ms == pytest.approx(1.1, rel=1e-6)
    # 3,000 qps is more than three times what batches of one could serve: batching is what keeps up
    busy = simulate(Arrivals("poisson", rate_qps=3000, seed=3), config, LatencyModel(batch_friendly),
                    requests=50_000)
    assert busy.mean_batch_size > 2
    assert max(busy.batch_histogram) > 4
    assert busy.throughput_qps == pytest.approx(busy.offered_qps, rel=0.005)
    assert busy.p99_ms < 10


def test_a_queue_delay_trades_latency_for_bigger_batches() -> None:
    arrivals = Arrivals("poisson", rate_qps=2000, seed=5)
    no_wait = simulate(arrivals, BatchingConfig(max_batch=16), LatencyModel(batch_friendly), requests=20_000)
    waits = simulate(arrivals, BatchingConfig(max_batch=16, max_queue_delay_us=2000), LatencyModel(batch_friendly),
                     requests=20_000)
    assert waits.mean_batch_size > no_wait.mean_batch_size + 1
    assert waits.utilisation < no_wait.utilisation  # fewer, fuller batches
    assert waits.mean_queue_wait_ms > no_wait.mean_queue_wait_ms


# Traces worked out by hand (times in seconds; latency in ms):
# (a) max_batch 3, delay 500 us, latency 1 + b ms. The third arrival fills a batch at 0.3 ms (4 ms: done 4.3);
#     request 3 waits for the instance (4.3 -> 6.3), request 4 too (6.3 -> 8.3); requests 5 and 6 are
#     sent together when request 5 has waited 500 us (10.5 ms; 3 ms: done 13.5).
# (b) preferred size 2, max_batch 4, delay 1 ms, 1 ms each. The second arrival makes a preferred batch (0.1 ->
#     1.1); at 1.1 three are queued and the largest preferred size, 2, goes (-> 2.1); the last has waited out
#     its delay by then and goes alone (-> 3.1).
# (c) max_batch 2, no delay, latency b ms: two simultaneous arrivals form one batch (0 -> 2); the third waits.
TRACES = {
    "delay": ([0.0, 0.2, 0.3, 0.4, 5.0, 10.0, 10.2], BatchingConfig(max_batch=3, max_queue_delay_us=500),
              lambda b: 1.0 + b, [0.3, 0.3, 0.3, 4.3, 6.3, 10.5, 10.5], [4.3, 4.3, 4.3, 6.3, 8.3, 13.5, 13.5],
              {3: 1, 1: 2, 2: 1}),
    "preferred": ([0.0, 0.1, 0.2, 0.3, 0.4],
                  BatchingConfig(max_batch=4, preferred_batch_sizes=(2,), max_queue_delay_us=1000),
                  lambda b: 1.0, [0.1, 0.1, 1.1, 1.1, 2.1], [1.1, 1.1, 2.1, 2.1, 3.1], {2: 2, 1: 1}),
    "simultaneous": ([0.0, 0.0, 1.0], BatchingConfig(max_batch=2), lambda b: float(b),
                     [0.0, 0.0, 2.0], [2.0, 2.0, 3.0], {2: 1, 1: 1}),
}


@pytest.mark.parametrize("case", list(TRACES))
def test_a_trace_replays_exactly(case: str) -> None:
    times_ms, config, median_ms, starts_ms, finishes_ms, histogram = TRACES[case]
    trace = Arrivals("trace", times=tuple(t * 1e-3 for t in times_ms))
    result = simulate(trace, config, LatencyModel(median_ms), warmup_fraction=0)
    np.testing.assert_allclose(result.start_s * 1e3, starts_ms, rtol=0, atol=1e-9)
    np.testing.assert_allclose(result.finish_s * 1e3, finishes_ms, rtol=0, atol=1e-9)
    assert result.batch_histogram == histogram
    assert result.requests == len(times_ms)
    latencies = np.subtract(finishes_ms, times_ms)
    assert result.mean_latency_ms == pytest.approx(latencies.mean())
    assert result.p99_ms == pytest.approx(np.percentile(latencies, 99))


def test_a_callable_latency_gives_median_and_spread_per_batch() -> None:
    # at 1 qps hardly anything queues (M/G/1: mean wait = rate * E[S^2] / 2(1 - rho), about 2.4 us):
    # latency is the service time, lognormal around 2 ms with sigma 0.3
    result = simulate(Arrivals("poisson", rate_qps=1, seed=2), BatchingConfig(), lambda b: (2.0, 0.3),
                      requests=20_000, warmup_fraction=0)
    assert result.mean_queue_wait_ms < 0.01
    assert result.p50_ms == pytest.approx(2.0, rel=0.02)
    assert result.p90_ms == pytest.approx(2.0 * math.exp(0.3 * 1.2816), rel=0.03)


def test_gamma_gaps_have_the_asked_variation_and_a_duration_bounds_the_arrivals() -> None:
    result = simulate(Arrivals("gamma", rate_qps=500, cv=2.5, seed=4), BatchingConfig(), constant(0.1),
                      duration_s=200)
    gaps = np.diff(result.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(2.5, rel=0.05)
    assert len(result.arrival_s) == pytest.approx(500 * 200, rel=0.05)
    assert result.arrival_s[-1] < 200


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    def run(seed: int) -> SimResult:
        return simulate(Arrivals("gamma", rate_qps=4000, cv=1.5, seed=seed),
                        BatchingConfig(max_batch=8, preferred_batch_sizes=(4, 8), max_queue_delay_us=300, instances=2),
                        LatencyModel(batch_friendly, sigma=0.2), requests=5_000)
    first, again, other = run(11), run(11), run(12)
    assert first == again
    np.testing.assert_array_equal(first.finish_s, again.finish_s)
    assert first.p99_ms != other.p99_ms


@pytest.mark.parametrize("cv, share", [(3.0, 4), (2.0, 16), (0.5, 3), (1.0, 7)])
def test_one_servers_share_of_a_gamma_process_has_the_mean_and_variation_thinning_gives(cv: float,
                                                                                        share: int) -> None:
    """Each request of a gamma process at 1,000 qps goes to one of ``share`` servers at random: one
    server's gaps average share / rate, and their cv^2 is 1 + (cv^2 - 1) / share (a geometric number
    of the process's gaps). At 400,000 gaps, over 20 seeds, the relative error of the cv^2 had a
    standard deviation of 0.4% and of the mean 0.3% at most (largest 0.9% and 0.6%): the tolerances
    are about seven of them. A share drawn as the whole process, or as Poisson, misses the cv^2 by
    16% (cv 2 over 16) to 200% (cv 3 over 4); cv 1 stays Poisson, split or not."""
    arrivals = Arrivals("gamma", rate_qps=1000, cv=cv, share=share, seed=5)
    gaps = np.diff(arrivals.generate(400_000, None, np.random.default_rng(5)))
    assert gaps.mean() == pytest.approx(share / 1000, rel=0.02)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 + (cv**2 - 1) / share, rel=0.03)
    assert arrivals.own_rate_qps == 1000 / share
    # a duration holds the share's rate, not the whole process's
    within = arrivals.generate(None, 100.0, np.random.default_rng(6))
    assert len(within) == pytest.approx(1000 / share * 100, rel=0.05) and within[-1] < 100


def test_a_process_not_split_draws_what_it_drew_before_shares_and_poisson_thins_to_poisson() -> None:
    """``share=1`` (the default) takes the very draws it took before ``share`` was added, so every
    simulation made before keeps its numbers; a split Poisson process is Poisson at the share's rate."""
    n = 1_000
    gamma = Arrivals("gamma", rate_qps=800, cv=2.5, seed=1).generate(n, None, np.random.default_rng(9))
    shape = 1 / 2.5**2
    np.testing.assert_array_equal(gamma, np.cumsum(np.random.default_rng(9).gamma(shape, 1 / 800 / shape, n)))
    assert np.array_equal(gamma, Arrivals("gamma", rate_qps=800, cv=2.5, share=1).generate(
        n, None, np.random.default_rng(9)))
    poisson = Arrivals("poisson", rate_qps=800).generate(n, None, np.random.default_rng(9))
    np.testing.assert_array_equal(poisson, np.cumsum(np.random.default_rng(9).exponential(1 / 800, n)))
    split = Arrivals("poisson", rate_qps=3200, share=4).generate(n, None, np.random.default_rng(9))
    np.testing.assert_array_equal(split, poisson)


REFUSALS: list[tuple[str, Callable[[], object]]] = [
    ("rate_qps", lambda: Arrivals("poisson", rate_qps=0)),
    ("rate_qps", lambda: Arrivals("poisson", rate_qps=-5)),
    ("rate_qps", lambda: Arrivals("gamma", rate_qps=2e7)),
    ("rate_qps", lambda: Arrivals("poisson", rate_qps=math.nan)),
    ("rate_qps", lambda: Arrivals("poisson")),
    ("cv", lambda: Arrivals("gamma", rate_qps=10, cv=0)),
    ("cv", lambda: Arrivals("gamma", rate_qps=10, cv=1e-200)),  # its gaps' shape overflowed to inf
    ("share", lambda: Arrivals("gamma", rate_qps=10, cv=2, share=0)),
    ("share", lambda: Arrivals("gamma", rate_qps=10, cv=2, share=2.5)),  # type: ignore[arg-type]
    ("share", lambda: Arrivals("gamma", rate_qps=10, cv=2, share=100_001)),
    ("share", lambda: Arrivals("trace", times=(0.0, 1.0), share=2)),
    ("kind", lambda: Arrivals("uniform", rate_qps=10)),  # type: ignore[arg-type]
    ("times", lambda: Arrivals("trace", times=())),
    ("times", lambda: Arrivals("trace")),
    ("times", lambda: Arrivals("trace", times=(0.0, 0.2, 0.1))),
    ("times", lambda: Arrivals("trace", times=(-1.0, 0.0))),
    ("max_batch", lambda: BatchingConfig(max_batch=0)),
    ("max_batch", lambda: BatchingConfig(max_batch=2.5)),  # type: ignore[arg-type]
    ("preferred_batch_sizes", lambda: BatchingConfig(max_batch=4, preferred_batch_sizes=(8,))),
    ("max_queue_delay_us", lambda: BatchingConfig(max_queue_delay_us=-1)),
    ("instances", lambda: BatchingConfig(instances=0)),
    ("sigma", lambda: LatencyModel(batch_friendly, sigma=-0.1)),
    ("requests", lambda: simulate(Arrivals("poisson", rate_qps=10), BatchingConfig(), constant(1))),
    ("requests", lambda: simulate(Arrivals("poisson", rate_qps=10), BatchingConfig(), constant(1), requests=0)),
    ("duration_s", lambda: simulate(Arrivals("poisson", rate_qps=10), BatchingConfig(), constant(1), duration_s=-1)),
    ("warmup_fraction", lambda: simulate(Arrivals("poisson", rate_qps=10), BatchingConfig(), constant(1),
                                         requests=10, warmup_fraction=1)),
    ("latency", lambda: simulate(Arrivals("poisson", rate_qps=10), BatchingConfig(), lambda b: (0.0, 0.0),
                                 requests=10)),
]


@pytest.mark.parametrize(("field", "make"), REFUSALS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(REFUSALS)])
def test_bad_input_is_refused_naming_its_field(field: str, make: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        make()
