"""Planning for a recorded load (``arrival_trace``, predictor.capacity.load_trace): a Poisson trace plans
as Poisson arrivals do; a spike takes more GPUs wherever it falls in the trace, its start included; each
GPU replays its random share of the whole trace at the qps asked; grids and load curves replay it as
plans do; files are read as logs are written, and what cannot be read is named by file and line."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from predictor.capacity.gpu_arrivals import gpu_arrivals
from predictor.capacity.grid import plan_grid
from predictor.capacity.load_curve import load_curve
from predictor.capacity.load_trace import MIN_TRACE_REQUESTS, LoadTrace, parse_load_trace, read_load_trace
from predictor.capacity.planner import plan
from predictor.capacity.runs import Runs
from predictor.capacity.simulator import BatchingConfig
from tests.predictor.planning_helpers import batch_friendly, quick, without_costs


def poisson_times(rate_qps: float, seconds: float, seed: int) -> np.ndarray:
    times = np.cumsum(np.random.default_rng(seed).exponential(1 / rate_qps, int(rate_qps * seconds * 1.2) + 100))
    return times[times < seconds]


def spiky(at_s: float, seconds: float = 20.0) -> LoadTrace:
    """2,000 qps for ``seconds`` with one second at 6,000 qps from ``at_s``."""
    spike = at_s + poisson_times(4_000, 1.0, 6)
    return LoadTrace(np.sort(np.concatenate([poisson_times(2_000, seconds, 5), spike])), f"spike at {at_s} s")


@pytest.mark.parametrize("qps, slo_ms", [(2_000, 5.0), (9_000, 6.0)])
def test_a_poisson_trace_plans_as_poisson_arrivals_do(qps: float, slo_ms: float) -> None:
    trace = LoadTrace(poisson_times(qps, 20, 1), "poisson")
    generated, replayed = quick(qps, slo_ms), quick(qps, slo_ms, arrival_trace=trace)
    assert replayed.meets and replayed.gpus == generated.gpus
    assert replayed.p99_ms == pytest.approx(generated.p99_ms, rel=0.03)
    assert replayed.arrival_cv == pytest.approx(1.0, abs=0.02) and replayed.arrival_trace == trace.describe()
    assert f"poisson: {trace.requests:,} requests over 20 s" in replayed.arrival_trace


@pytest.mark.parametrize("at_s", [0.0, 10.0, 19.0])
def test_a_spike_takes_more_gpus_wherever_it_falls_in_the_trace(at_s: float) -> None:
    """A second at three times the rate: one GPU serves the mean rate's Poisson arrivals within 5 ms,
    not the spike, at the start of the trace (which a warm-up cut from the trace's start would hide),
    in its middle or at its end."""
    trace = spiky(at_s)
    generated, replayed = quick(trace.rate_qps, 5.0), quick(trace.rate_qps, 5.0, arrival_trace=trace)
    assert generated.gpus == 1 and replayed.meets and replayed.gpus == 2


def test_each_gpu_replays_its_random_share_of_the_whole_trace() -> None:
    trace = LoadTrace(poisson_times(1_000, 30, 2) + 1.7e9, "log")  # epoch seconds: the origin is dropped
    assert trace.times_s[0] == 0 and trace.rate_qps == pytest.approx(1_000, rel=0.02)
    # one GPU at the trace's rate: every request once, at its own time, after a warm-up of its end
    times, warm = trace.gpu_share(trace.rate_qps, 1, 0, 20_000)
    assert len(times) - warm == trace.requests and warm == math.ceil(trace.requests / 9)
    np.testing.assert_allclose(times[warm:] - times[warm], trace.times_s, rtol=0, atol=1e-9)
    # twice the rate: the same requests in half the time
    fast, _ = trace.gpu_share(2 * trace.rate_qps, 1, 0, 20_000)
    np.testing.assert_allclose(fast[warm:] - fast[warm], trace.times_s / 2, rtol=0, atol=1e-9)
    # four GPUs: one request in four, in as many passes as 20,000 measured requests take (three)
    shared, warm4 = trace.gpu_share(trace.rate_qps, 4, 0, 20_000)
    passes = math.ceil(20_000 * 4 / trace.requests)
    expected = passes * trace.requests / 4
    assert abs(len(shared) - warm4 - expected) < 4 * math.sqrt(expected) and len(shared) - warm4 >= 0.95 * 20_000
    assert np.all(np.diff(shared) >= 0) and shared[0] == 0
    # and the simulator leaves exactly the warm-up out of its statistics
    gpu = gpu_arrivals(trace.rate_qps, 4, 0, 20_000, trace=trace)
    assert gpu.requests is None and gpu.count == len(shared) and int(gpu.count * gpu.warmup_fraction) == warm4
    # the same seed and GPUs, the same share; another GPU count, another draw
    again, _ = trace.gpu_share(trace.rate_qps, 4, 0, 20_000)
    np.testing.assert_array_equal(again, shared)


def test_a_trace_is_replayed_at_each_qps_asked() -> None:
    trace = spiky(10.0)
    low = quick(trace.rate_qps, 5.0, arrival_trace=trace)
    high = quick(3 * trace.rate_qps, 5.0, arrival_trace=trace)
    assert (low.qps, high.qps) == (trace.rate_qps, 3 * trace.rate_qps) and high.gpus > low.gpus
    assert high.throughput_qps == pytest.approx(high.qps, rel=0.05)


def test_a_grid_replays_the_trace_in_every_cell_as_a_plan_does_alone() -> None:
    trace = spiky(5.0, seconds=10.0)
    cells = plan_grid(batch_friendly, [trace.rate_qps, 2 * trace.rate_qps], [5.0, 8.0], arrival_trace=trace)
    alone = [plan(batch_friendly, q, s, arrival_trace=trace) for q in (trace.rate_qps, 2 * trace.rate_qps)
             for s in (5.0, 8.0)]
    assert [without_costs(c) for c in cells] == [without_costs(a) for a in alone]


def test_the_load_curve_of_a_trace_plan_passes_through_it() -> None:
    trace = spiky(5.0, seconds=10.0)
    chosen = plan(batch_friendly, 2 * trace.rate_qps, 5.0, arrival_trace=trace)
    assert chosen.meets and chosen.gpus > 1
    config = BatchingConfig(max_batch=chosen.max_batch, max_queue_delay_us=chosen.max_queue_delay_us,
                            scheduler=chosen.scheduler)
    (point,) = load_curve(batch_friendly, config, [chosen.per_gpu_qps], gpus=chosen.gpus, arrival_trace=trace)
    assert point.p99_ms == pytest.approx(chosen.p99_ms, rel=1e-9)


def test_runs_are_shared_only_between_plans_of_the_same_trace() -> None:
    trace = spiky(5.0, seconds=10.0)
    copy = LoadTrace(trace.times_s.copy(), trace.name)  # equal times, another trace: its own runs
    for runs in (Runs(batch_friendly, 20_000, 0), Runs(batch_friendly, 20_000, 0, trace=copy)):
        with pytest.raises(ValueError, match="^runs: .*arrival_trace"):
            plan(batch_friendly, 2_000, 5.0, runs=runs, arrival_trace=trace)
    for call in (lambda: plan(batch_friendly, 2_000, 5.0, arrival_cv=2.0, arrival_trace=trace),
                 lambda: load_curve(batch_friendly, BatchingConfig(), [500], arrival_cv=2.0, arrival_trace=trace)):
        with pytest.raises(ValueError, match="^arrival_cv: give arrival_cv or arrival_trace, not both"):
            call()


@pytest.mark.parametrize("seed", range(8))
def test_a_share_is_at_least_the_requests_asked_in_whole_passes(seed: int) -> None:
    trace = LoadTrace(poisson_times(4_000, 10, seed), "log")  # about 40,000 requests
    times, warm = trace.gpu_share(trace.rate_qps, 2, seed, 20_000)
    measured = times[warm:] - times[warm]
    assert len(measured) >= 20_000
    period = trace.span_s + trace.mean_gap_s
    last_pass = int(measured[-1] // period)
    # whole passes: the last request sent here falls in the last pass's final stretch, not its middle
    assert measured[-1] - last_pass * period > 0.9 * trace.span_s
    assert len(measured) == pytest.approx((last_pass + 1) * trace.requests / 2, rel=0.05)


@pytest.mark.timeout(120)
def test_a_short_trace_over_many_gpus_costs_its_share_not_the_fleet() -> None:
    """A 100-request trace split over 100,000 GPUs: one GPU's share is drawn as the gaps between its
    own requests' indices (20,000 of them), not as two billion coin flips; the plan is answered."""
    trace = LoadTrace(poisson_times(1_000, 0.2, 1)[:100], "short")
    times, warm = trace.gpu_share(2_000, 100_000, 0, 20_000)
    assert 20_000 <= len(times) - warm < 21_000 and np.all(np.diff(times) >= 0)
    answered = plan(batch_friendly, 2_000, 1.0, max_gpus=100_000, arrival_trace=trace)
    assert not answered.meets and "fastest batch" in answered.reason


def test_a_trace_run_is_not_started_past_the_budget() -> None:
    """Each run replays a GPU's whole share (here about 55,600 requests with its warm-up): a plan whose
    budget two of them would pass stops before the second, answers with what it found and says so,
    having simulated at most the stopped plan's one more run and its range beyond the one it made."""
    trace = LoadTrace(poisson_times(5_000, 10, 2), "long")
    run = len(trace.gpu_share(trace.rate_qps, 1, 0, 20_000)[0])
    stopped = plan(batch_friendly, trace.rate_qps, 5.0, budget=int(1.5 * run), arrival_trace=trace)
    assert stopped.budget_spent and "stopped at its budget" in stopped.reason
    assert stopped.simulated_requests <= 4 * run


def test_a_file_is_read_as_logs_are_written(tmp_path: Path) -> None:
    times = poisson_times(500, 2, 3)
    plain = tmp_path / "plain.txt"
    plain.write_text("# seconds since the log began\n\n" + "\n".join(f"{t:.6f}" for t in times[::-1]) + "\n")
    csv = tmp_path / "log.csv"
    csv.write_text('request,"arrival_s",status\n' + "".join(f"r{i},{1.7e9 + t:.6f},200\n" for i, t in enumerate(times)))
    for path in (plain, csv):
        trace = read_load_trace(path)
        assert trace.name == path.name and trace.requests == len(times)
        np.testing.assert_allclose(trace.times_s, times - times[0], rtol=0, atol=1e-5)


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    times = poisson_times(500, 1, 4)
    for text in ("\ufeffarrival_s\n" + "".join(f"{t}\n" for t in times), "\ufeff" + "".join(f"{t}\n" for t in times)):
        assert parse_load_trace(text, "excel.csv").requests == len(times)
    excel = tmp_path / "excel.csv"
    excel.write_bytes(("arrival_s\n" + "".join(f"{t}\n" for t in times)).encode("utf-8-sig"))
    assert read_load_trace(excel).requests == len(times)


@pytest.mark.parametrize("text, message", [
    ("time,status\n1,200\n", "line 1: a header must name an 'arrival_s' column .* it names time, status"),
    ("0.5\n0.7\nsoon\n", "line 3: 'soon' is not an arrival time in seconds"),
    ("arrival_s\n" + "1.0\n" * 200, "every request arrives at the same instant"),
    ("\n".join(str(i) for i in range(10)), f"10 arrivals say little about bursts; give at least {MIN_TRACE_REQUESTS}"),
    ("# nothing\n", "holds no arrival times"),
    ("\n".join(f"{i * 1e-9:.12f}" for i in range(200)), "is 1e\\+09 requests per second, outside .*: are the times"),
    ("\n".join(f"{i * 1e7:.1f}" for i in range(200)), "is 1e-07 requests per second, outside .*: are the times"),
])
def test_what_cannot_be_read_is_named_by_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^trace.csv:? .*{message}"):
        parse_load_trace(text, "trace.csv")


def test_a_file_that_is_not_a_trace_is_named(tmp_path: Path) -> None:
    binary = tmp_path / "model.onnx"
    binary.write_bytes(b"\x08\x07\xff\xfe\x00")
    with pytest.raises(ValueError, match="model.onnx: is not text"):
        read_load_trace(binary)
    with pytest.raises(ValueError, match="missing.csv: No such file"):
        read_load_trace(tmp_path / "missing.csv")
