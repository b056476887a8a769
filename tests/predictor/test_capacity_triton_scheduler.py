"""Triton's batcher as its code runs it (predictor/capacity/triton_scheduler.py).

Without a queue delay or preferred sizes Triton's code and its documented rule form the same
batches: a queued payload grows until an instance takes it, which is what "a free instance takes
what is queued" gives. With a delay they part: a payload sent after waiting out the delay is
frozen while the instance is busy, and payloads queued behind a running one merge when it is
taken (or, when they do not fit, stop growing). The scenarios below are traced by hand through
``dynamic_batch_scheduler.cc`` and ``instance_queue.cc`` (see the module docstring).
"""

from __future__ import annotations

import numpy as np
import pytest

from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate
from predictor.capacity.single_instance import serve
from predictor.capacity.triton_scheduler import _TritonServer, serve_like_triton


def constant(ms: float):  # noqa: ANN201 - a service-time callable
    return lambda size, start: ms * 1e-3


@pytest.mark.parametrize("rate", [300.0, 900.0, 1500.0])
def test_without_a_delay_it_forms_the_rules_batches(rate: float) -> None:
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, 20_000))

    def service(size: int, start: float) -> float:
        return 0.002 + 0.0004 * size

    rule = serve(arrivals, 8, 0.0, service)
    triton = serve_like_triton(arrivals, 8, (), 0.0, 1, service)
    np.testing.assert_array_equal(triton.start_s, rule.start_s)
    np.testing.assert_array_equal(triton.finish_s, rule.finish_s)


@pytest.mark.parametrize("instances", [2, 3])
def test_without_a_delay_it_matches_the_rule_with_several_instances(instances: int) -> None:
    latency = LatencyModel(lambda b: 2.0 + 0.3 * b, 0.1)
    arrivals = Arrivals("poisson", rate_qps=1000.0 * instances, seed=3)
    rule = simulate(arrivals, BatchingConfig(max_batch=8, instances=instances), latency, requests=20_000,
                    engine="events")
    triton = simulate(arrivals, BatchingConfig(max_batch=8, instances=instances, scheduler="triton"), latency,
                      requests=20_000)
    np.testing.assert_allclose(triton.finish_s, rule.finish_s)


def test_a_payload_sent_after_its_delay_stays_frozen_while_the_instance_is_busy() -> None:
    # r0 waits out the 1 ms delay and runs 1-5 ms. r1 (1.5 ms) waits out its delay and is staged alone
    # at 2.5 ms; the batcher then waits for 16 queued requests (the next preferred size) before it
    # looks again, so r2 (3 ms) and r3 (4 ms) stay queued and go in the batch after r1's.
    arrivals = np.array([0.0, 1.5e-3, 3e-3, 4e-3])
    triton = serve_like_triton(arrivals, 32, (16, 32), 1e-3, 1, constant(4.0))
    np.testing.assert_allclose(triton.finish_s, [5e-3, 9e-3, 13e-3, 13e-3])
    np.testing.assert_allclose(triton.batches[:, 2], [1, 1, 2])
    # the documented rule: the free instance takes all three at 5 ms
    rule = simulate(Arrivals("trace", times=tuple(arrivals)), BatchingConfig(32, (16, 32), 1000.0),
                    LatencyModel(lambda b: 4.0), warmup_fraction=0.0)
    np.testing.assert_allclose(rule.finish_s, [5e-3, 9e-3, 9e-3, 9e-3])


def test_payloads_queued_behind_a_running_batch_merge_when_it_is_taken() -> None:
    # Preferred size 2 of at most 4, delay 1 ms. r0 runs 1-11 ms. r1 and r2 make the preferred
    # size and are staged at 2.1 ms; r4's arrival wakes the batcher, which adds r3 to that payload
    # (crossing the largest preferred size marks it saturated) and starts another with r4, staged
    # when r4's delay runs out. At 11 ms the instance takes the first and merges the second (its
    # oldest request has waited longer than the delay, and 3 + 1 fit in 4): one batch of four.
    arrivals = np.array([0.0, 2e-3, 2.1e-3, 2.2e-3, 2.3e-3])
    triton = serve_like_triton(arrivals, 4, (2,), 1e-3, 1, constant(10.0))
    np.testing.assert_allclose(triton.batches[:, 2], [1, 4])
    np.testing.assert_allclose(triton.finish_s, [11e-3, 21e-3, 21e-3, 21e-3, 21e-3])


def test_a_payload_too_big_to_merge_stops_growing_when_the_one_ahead_is_taken() -> None:
    # Preferred 4 and 8 of at most 8, delay 1 ms, 10 ms a batch. r0 runs 1-11 ms. r1-r8 (2.0-2.7 ms)
    # fill one payload of 8; r9-r12 (3.0-3.3 ms) make a second of 4; both slots are then taken, so
    # r13-r20 (3.5-4.2 ms) wait in the queue. At 11 ms the instance takes the 8, and Dequeue marks
    # the 4 behind it EXECUTING before finding that 8 + 4 do not fit: the 4 stays unmerged and the
    # batcher, finding it stale, puts r13-r20 in a new payload. Measured Triton ran a full batch,
    # then the small one frozen behind it, in turn; had the 4 kept growing it would run 8, then 4.
    arrivals = np.r_[0.0, 2.0 + 0.1 * np.arange(8), 3.0 + 0.1 * np.arange(4), 3.5 + 0.1 * np.arange(8)] * 1e-3
    triton = serve_like_triton(arrivals, 8, (4, 8), 1e-3, 1, constant(10.0))
    np.testing.assert_allclose(triton.batches[:, 2], [1, 8, 4, 8])
    np.testing.assert_allclose(triton.batches[:, 0], [1e-3, 11e-3, 21e-3, 31e-3])


def test_every_request_is_served_once_in_order_under_overload() -> None:
    arrivals = np.cumsum(np.random.default_rng(2).exponential(1 / 4000, 5_000))
    served = serve_like_triton(arrivals, 16, (), 500e-6, 1, lambda size, start: 0.002 + 0.0002 * size)
    assert not np.isnan(served.finish_s).any()
    assert served.batches[:, 2].sum() == len(arrivals)
    assert (served.batches[:, 2] <= 16).all()
    np.testing.assert_array_equal(served.batches[:, 3], np.cumsum(served.batches[:, 2]) - served.batches[:, 2])
    assert (served.start_s >= arrivals).all() and (np.diff(served.batches[:, 0]) > 0).all()


def test_the_staged_payloads_make_a_delayed_setting_slower_than_the_rule_says() -> None:
    latency = LatencyModel(lambda b: 5.0 + 0.15 * b, 0.05)
    arrivals = Arrivals("poisson", rate_qps=600.0, seed=5)
    rule = simulate(arrivals, BatchingConfig(32, (16, 32), 1000.0), latency, requests=20_000)
    triton = simulate(arrivals, BatchingConfig(32, (16, 32), 1000.0, scheduler="triton"), latency, requests=20_000)
    assert triton.p50_ms > 1.2 * rule.p50_ms


def test_an_unknown_scheduler_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="scheduler"):
        BatchingConfig(8, scheduler="fifo")  # type: ignore[arg-type]


def test_the_walk_over_idle_stretches_gives_the_event_loops_very_run() -> None:
    """One instance, a delay, no preferred size: the loop walks the stretches where the instance
    idles batch by batch (``_serve_from_empty``); over random loads, settings and lognormal service
    it gives the same batches, to the last bit, as the event loop alone."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        rate = float(rng.choice([50, 500, 3000]))
        max_batch = int(rng.choice([1, 4, 16]))
        delay = float(rng.choice([50e-6, 2e-3]))
        arrivals = np.cumsum(rng.exponential(1 / rate, 2000))
        base, per_request = rng.uniform(0.5e-3, 5e-3), rng.uniform(0, 2e-4)

        def service(seed: int = trial, base: float = base, per_request: float = per_request) -> object:
            draws = np.random.default_rng(seed)
            return lambda size, start: (base + per_request * size) * float(np.exp(0.1 * draws.standard_normal()))

        events = _TritonServer(arrivals, max_batch, (), delay, 1, service())  # type: ignore[arg-type]
        events.skip_idle = False
        walked = _TritonServer(arrivals, max_batch, (), delay, 1, service())  # type: ignore[arg-type]
        assert walked.skip_idle
        np.testing.assert_array_equal(walked.run().batches, events.run().batches)


@pytest.mark.timeout(60)  # it looped forever: a hang is the failure
def test_a_queue_delay_is_waited_out_hours_into_a_run() -> None:
    # A GPU at a fraction of a qps is simulated over hours: past about 8,000 s a picosecond added
    # to the clock left it where it was, and the batcher waiting out the last picoseconds of its
    # delay asked again forever (``latpred capacity gpt2 --mode eager --qps 0.2`` hung)
    arrivals = 40_000.0 + np.cumsum(np.random.default_rng(5).exponential(1 / 300.0, 2000))
    served = serve_like_triton(arrivals, 8, (), 1e-4, 1, lambda size, start: 0.005 + 0.001 * size)
    assert len(served.finish_s) == 2000 and bool((served.start_s >= arrivals).all())
    # the delay is honoured: nothing starts before its batch's first request has waited it out or the batch is full
    firsts = served.batches[:, 3].astype(int)
    full = served.batches[:, 2] == 8
    assert bool(((served.batches[:, 0] - arrivals[firsts] >= 1e-4 - 1e-9) | full).all())
