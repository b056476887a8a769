"""The simulator-against-server check (issue #14) on the committed H200 serving measurements: the
loader, the measured statistics on a frame small enough to work out by hand, that they read a load
the way the simulator reads its own runs, and the real simulator against one measured light load."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from predictor.capacity.instance_sharing import MEASURED_SHARING
from predictor.capacity.simulator import BatchingConfig
from training.serving_check import (
    MeasuredLoad,
    ServingData,
    TableLatency,
    batching_config,
    dispatch_lateness_us,
    independent_schedules,
    load_serving,
    max_qps_under,
    measure_load,
    measured_service,
    request_stats,
    simulate_load,
    simulate_trace,
)

MODELS = ["densenet169", "resnet101", "roberta-large"]
MB8 = "mb8-nodelay"
MB32 = "mb32-pref16,32-delay1000us"
LEVELS = [0.3, 0.6, 0.7, 0.8, 0.85, 0.9]


@pytest.fixture(scope="module")
def data() -> ServingData:
    return load_serving()


def one_load(data: ServingData, model: str, setting: str, level: float) -> tuple[MeasuredLoad, TableLatency]:
    service = measured_service(data.service[data.service["model"] == model])
    frame = next(f for m, s, lv, f in data.loads() if (m, s, lv) == (model, setting, level))
    medians_s = {b: ms * 1e-3 for b, ms in service.medians_ms.items()}
    return measure_load(model, setting, level, frame, data.settings[setting], medians_s), service


def test_the_loader_reads_every_committed_load_and_the_settings_as_simulator_configs(data: ServingData) -> None:
    assert data.models == MODELS
    assert data.settings[MB8] == BatchingConfig(max_batch=8)
    assert data.settings[MB32] == BatchingConfig(max_batch=32, preferred_batch_sizes=(16, 32),
                                                 max_queue_delay_us=1000.0)
    loads = list(data.loads())
    assert sorted((m, s, lv) for m, s, lv, _ in loads) == sorted(
        (m, s, lv) for m in MODELS for s in (MB8, MB32) for lv in LEVELS)
    for _, _, level, frame in loads:
        assert list(frame["index"]) == list(range(len(frame)))  # in request order, none missing
        assert frame["offered_qps"].iloc[0] == pytest.approx(level * frame["capacity_qps"].iloc[0])
        assert (frame["received_us"] >= frame["sent_us"]).all() and (frame["finish_us"] > frame["start_us"]).all()
    # every batch size 1..32 timed 40 times per model, and its median is what the server ran
    assert data.service.groupby(["model", "batch"]).size().to_dict() == {
        (m, b): 40 for m in MODELS for b in range(1, 33)}
    service = measured_service(data.service[data.service["model"] == "resnet101"])
    assert service.medians_ms[1] == pytest.approx(2.02, abs=0.01)
    assert 0 < service.sigmas[1] < 0.02
    with pytest.raises(ValueError, match="batch 33 was not measured"):
        service(33)


def test_the_three_models_at_one_setting_and_level_rode_one_schedule(data: ServingData) -> None:
    # the collector's seed depends on setting and level only, so 36 loads hold 12 independent draws
    assert independent_schedules(data) == 12


# Ten requests arriving at 0, 1, ..., 9 s in six batches on one instance:
#   batch   requests  start  finish   latencies (s)
#   A       0         0.0    0.5      0.5 (warm-up: the first 10%)
#   B       1, 2      2.0    3.0      2.0, 1.0
#   C       3         3.0    3.5      0.5
#   D       4, 5, 6   6.0    7.0      3.0, 2.0, 1.0
#   E       7         7.0    8.0      1.0
#   F       8, 9      9.0    10.0     2.0, 1.0
ARRIVAL = np.arange(10.0)
START = np.array([0.0, 2.0, 2.0, 3.0, 6.0, 6.0, 6.0, 7.0, 9.0, 9.0])
FINISH = np.array([0.5, 3.0, 3.0, 3.5, 7.0, 7.0, 7.0, 8.0, 10.0, 10.0])


def test_measured_statistics_of_a_hand_made_load() -> None:
    stats = request_stats(ARRIVAL, START, FINISH)
    assert stats.requests == 9
    # measured latencies sorted: 0.5 1 1 1 1 2 2 2 3 s; p50 the fifth; p99 at rank 0.99 x 8 = 7.92,
    # between 2 and 3 s (numpy's linear percentile, as the simulator's)
    assert stats.p50_ms == pytest.approx(1000.0)
    assert stats.p99_ms == pytest.approx(2920.0)
    # window: first measured arrival (1 s) to the last (9 s); finishes inside it: B, C, D, E = 7 requests
    assert stats.throughput_qps == pytest.approx(7 / 8)
    # busy inside [1, 9]: B 1.0 + C 0.5 + D 1.0 + E 1.0 (A ends before, F starts at 9) = 3.5 s of 8
    assert stats.utilisation == pytest.approx(3.5 / 8)
    # batches whose first request is measured: B, C, D, E, F
    assert stats.mean_batch_size == pytest.approx(9 / 5)


def test_dispatch_lateness_is_the_start_after_the_instance_was_free_and_the_rule_allowed_it() -> None:
    us = (1e6 * ARRIVAL).astype(np.int64), (1e6 * START).astype(np.int64), (1e6 * FINISH).astype(np.int64)
    # no delay: a batch may go once the previous one finished and its oldest request is there
    # A: 0; B: free 0.5, oldest 1 -> 2 - 1; C: 3 - 3; D: 6 - max(3.5, 4); E: 7 - 7; F: 9 - 8 (seconds)
    late = dispatch_lateness_us(*us, BatchingConfig(max_batch=8))
    assert late.tolist() == pytest.approx([0, 1e6, 0, 2e6, 0, 1e6])
    # preferred size 2 with a 0.5 s delay: a batch may go at the earlier of its second request's
    # arrival and its oldest request's delay running out. B: min(2, 1 + 0.5) = 1.5 s (the rule would
    # have sent request 1 alone then), so B went 0.5 s late; C (size 1, not preferred) only at
    # 3 + 0.5 s: it went 0.5 s early, which the real server's rule never does
    late = dispatch_lateness_us(*us, BatchingConfig(max_batch=4, preferred_batch_sizes=(2,),
                                                    max_queue_delay_us=5e5))
    assert late[1] == pytest.approx(0.5e6) and late[2] == pytest.approx(-0.5e6)


def test_the_measured_statistics_read_a_simulated_run_as_the_simulator_does(data: ServingData) -> None:
    """request_stats on a simulated run's own times gives the simulator's numbers: measured and
    simulated loads are read by one rule (window, warm-up, busy share, batch sizes)."""
    service = measured_service(data.service[data.service["model"] == "roberta-large"])
    for setting, qps in ((MB8, 1400.0), (MB32, 1900.0)):
        run = simulate_load(qps, data.settings[setting], service, requests=3000, seed=3)
        stats = request_stats(run.arrival_s, run.start_s, run.finish_s)
        assert stats.requests == run.requests
        for name in ("p50_ms", "p99_ms", "throughput_qps", "utilisation", "mean_batch_size"):
            assert getattr(stats, name) == pytest.approx(getattr(run, name), rel=1e-9), name


def test_max_qps_under_an_objective_interpolates_the_last_crossing() -> None:
    assert max_qps_under([100, 200, 300], [5.0, 7.0, 11.0], 9.0) == (pytest.approx(250.0), False)
    # with a queue delay p99 can first fall as load grows: the answer is the last crossing
    assert max_qps_under([100, 200, 300, 400], [8.0, 6.0, 7.0, 12.0], 7.5) == (pytest.approx(310.0), False)
    assert max_qps_under([300, 100, 200], [11.0, 5.0, 7.0], 12.0) == (300.0, True)  # never crossed: a bound
    qps, bound = max_qps_under([100, 200], [5.0, 7.0], 4.0)
    assert math.isnan(qps) and not bound


def test_the_measured_statistics_of_a_committed_load(data: ServingData) -> None:
    load, _ = one_load(data, "resnet101", MB8, 0.3)
    assert load.stats.requests == 2996  # 3328 less the first 332
    assert load.offered_qps == pytest.approx(832.11, abs=0.01)
    assert load.stats.throughput_qps == pytest.approx(load.offered_qps, rel=0.03)  # a light load keeps up
    assert 4.5 < load.stats.p99_ms < 5.2 and load.stats.p50_ms < load.stats.p99_ms
    # what the simulator leaves out is microseconds against milliseconds of latency
    assert 0 < load.pipe_us[0] < 50 and 0 <= load.dispatch_us[0] < 50
    assert load.service_ratio[0] == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("setting", [MB8, MB32])
def test_the_simulator_with_measured_service_matches_a_light_measured_load(data: ServingData, setting: str) -> None:
    """resnet101 at level 0.3. Tolerance 3%: over 20 seeds of 30,000 simulated requests p50, p99 and
    throughput stayed within 1.6% of the measured ones, while service times 5% too short (smaller
    than the bundle's 7-15% errors on CNNs) move p50 by 6% and p99 by 5.5-7%, outside it."""
    load, service = one_load(data, "resnet101", setting, 0.3)
    config = data.settings[setting]

    def close(latency: TableLatency) -> bool:
        run = simulate_load(load.offered_qps, config, latency, requests=30_000)
        return all(abs(sim / measured - 1) <= 0.03 for sim, measured in (
            (run.p50_ms, load.stats.p50_ms), (run.p99_ms, load.stats.p99_ms),
            (run.throughput_qps, load.stats.throughput_qps)))

    assert close(service)
    assert not close(TableLatency({b: ms * 0.95 for b, ms in service.medians_ms.items()}, service.sigmas))
    # the measured arrivals replayed: the same requests, so the same tolerance holds without Poisson luck
    replay = simulate_trace(load, config, service)
    assert replay.p99_ms == pytest.approx(load.stats.p99_ms, rel=0.03)


def test_measure_load_reads_the_collectors_columns_in_microseconds() -> None:
    """The hand-made load as the collector writes it (integer microseconds), with a 10 us pipe and
    a client 20 us late: the same statistics, and the pipe, lateness and service ratios by hand."""
    frame = pd.DataFrame({
        "offered_qps": 1.0, "index": range(10), "scheduled_us": (ARRIVAL * 1e6 - 30).astype(np.int64),
        "sent_us": (ARRIVAL * 1e6 - 10).astype(np.int64), "received_us": (ARRIVAL * 1e6).astype(np.int64),
        "start_us": (START * 1e6).astype(np.int64), "finish_us": (FINISH * 1e6).astype(np.int64),
        "batch_size": [1, 2, 2, 1, 3, 3, 3, 1, 2, 2]})
    medians_s = {1: 0.5, 2: 1.0, 3: 1.0}
    load = measure_load("toy", MB8, 0.3, frame, BatchingConfig(max_batch=8), medians_s)
    expected = request_stats(ARRIVAL, START, FINISH)
    for name in ("requests", "p50_ms", "p99_ms", "throughput_qps", "utilisation", "mean_batch_size"):
        assert getattr(load.stats, name) == pytest.approx(getattr(expected, name)), name
    assert load.pipe_us == (pytest.approx(10.0), pytest.approx(10.0))
    assert load.late_us == (pytest.approx(20.0), pytest.approx(20.0))
    # measured batches B..F served 1.0, 0.5, 1.0, 1.0, 1.0 s against medians 1.0, 0.5, 1.0, 0.5, 1.0
    assert load.service_ratio[0] == pytest.approx(1.0)
    assert load.service_ratio[1] == pytest.approx(1.0 + 0.96 * 1.0)  # E's 2.0 is the top of five
    # from the client's send, as a CPU's server is read: each latency 10 us longer, the rest alike
    sent = measure_load("toy", MB8, 0.3, frame, BatchingConfig(max_batch=8), medians_s, arrival_column="sent_us")
    assert sent.stats.p50_ms == pytest.approx(expected.p50_ms + 0.010)
    assert sent.stats.requests == expected.requests and list(sent.received_s) == pytest.approx(ARRIVAL - 1e-5)


def test_a_cpu_serving_folder_is_read_from_the_client_s_send_a_gpu_s_from_the_receipt(data: ServingData) -> None:
    assert data.arrival_column == "received_us"
    cpu = ServingData(data.folder, {**data.meta, "fingerprint": {**data.meta["fingerprint"], "kind": "cpu"}},
                      data.settings, data.requests, data.service)
    assert cpu.arrival_column == "sent_us"


def test_the_predicted_service_is_the_mode_a_device_serves_in_with_its_spread() -> None:
    """A GPU's server replays CUDA graphs (sigma 0.01); a CPU, which has none, runs eager forwards with a
    CPU's spread (0.10): the shipped bundles' own predictions in that mode, batch by batch."""
    from predictor.capacity.service_time import CPU_EAGER_SIGMA, DEFAULT_SIGMA
    from predictor.zoo import load_zoo_graph
    from training.serving_check import bundle_predictor, predicted_service, serving_mode

    for device, mode, sigma in (("nvidia-h200", "cudagraph", DEFAULT_SIGMA["cudagraph"]),
                                ("cpu-amd-epyc", "eager", CPU_EAGER_SIGMA)):
        predictor = bundle_predictor(device)
        precision = "fp32" if mode == "eager" else "fp16"
        latency = predicted_service(predictor, "alexnet", precision, [1, 4])
        assert serving_mode(predictor) == mode and latency.sigma == sigma
        graph = load_zoo_graph("alexnet")
        out = {b: predictor.predict(graph, b, precision, mode) for b in (1, 4)}
        assert {b: latency(b) for b in (1, 4)} == {b: (o.total_ms, sigma) for b, o in out.items()}
        assert latency.interval_ms is not None
        assert {b: latency.interval_ms(b) for b in (1, 4)} == {b: (o.low_ms, o.high_ms) for b, o in out.items()}
        assert latency.at_bound("high")(4) == (out[4].high_ms, sigma)
        with pytest.raises(KeyError):  # a size the server never ran is not predicted
            latency(2)


def test_a_setting_with_several_instances_simulates_them_sharing_the_gpu() -> None:
    one = {"name": "mb4-nodelay", "max_batch": 4, "preferred": [], "max_queue_delay_us": 0.0}
    assert batching_config(one, "triton") == BatchingConfig(max_batch=4, scheduler="triton")  # written before counts
    two = batching_config({**one, "name": "mb4-nodelay-x2", "instances": 2}, "triton")
    assert two.instances == 2 and two.sharing is MEASURED_SHARING
    assert batching_config({**one, "instances": 1}).sharing is None


def test_an_instance_is_free_for_a_batch_when_all_but_the_others_before_it_ended() -> None:
    from training.serving_check import instance_free_us

    finish = np.array([10.0, 12.0, 11.0, 30.0, 25.0])
    np.testing.assert_array_equal(instance_free_us(finish, 1), [-np.inf, 10.0, 12.0, 11.0, 30.0])
    # two instances: the second-latest finish before each batch (at most one other may still run)
    np.testing.assert_array_equal(instance_free_us(finish, 2), [-np.inf, -np.inf, 10.0, 11.0, 12.0])
