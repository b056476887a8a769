"""Several model instances per GPU: how they share it in the simulator, and the plans that weigh them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.capacity.instance_sharing import (
    MEASURED_SHARING,
    InstanceSharing,
    instance_choices,
    instances_capacity_qps,
)
from predictor.capacity.load_curve import capacity_qps
from predictor.capacity.planner import (
    MAX_SUMMED_BATCH,
    largest_batch,
    limited_choices,
    plan,
    plan_config,
    triton_config,
    weighed_instances,
    weighed_settings,
)
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate

#: a GPU whose batches cost mostly a fixed time: batching, or a second instance, gains the most
FLAT = LatencyModel(lambda b: 2.0 + 0.05 * b, 0.01)


def test_the_sharing_factor_is_the_measured_one_and_interpolated_between_batches_and_counts() -> None:
    assert MEASURED_SHARING.factor(1, 3.0) == 1.0
    # measured points, as benchmarks/results/instance_sharing.txt gives them
    assert MEASURED_SHARING.factor(2, 4) == pytest.approx(1.171)
    assert MEASURED_SHARING.factor(4, 1) == pytest.approx(1.275)
    assert MEASURED_SHARING.factor(4, 8) == pytest.approx(1.128)
    # between batches in log2 b; beyond the measured ones, the nearest
    assert MEASURED_SHARING.factor(4, 2) == pytest.approx((1.275 + 1.193) / 2)
    assert MEASURED_SHARING.factor(2, 1) == pytest.approx(1.171)
    assert MEASURED_SHARING.factor(2, 32) == pytest.approx(1.090)
    # between counts in log2 n, at the same mean batch
    assert MEASURED_SHARING.factor(3, 4) == pytest.approx(1.171 + (1.193 - 1.171) * (math.log2(3) - 1))
    # smaller batches share worse, at every count
    for n in (2, 3, 4):
        assert MEASURED_SHARING.factor(n, 1) >= MEASURED_SHARING.factor(n, 4) >= MEASURED_SHARING.factor(n, 16)
    # a batch of 4 beside batches of 4 and 8: their sum, at phi for three batches of 16 / 3 on average
    assert MEASURED_SHARING.batch_time_terms(4, [4, 8]) == (16, MEASURED_SHARING.factor(3, 16 / 3))
    assert MEASURED_SHARING.batch_time_terms(4, []) == (4, 1.0)
    with pytest.raises(ValueError, match="running"):
        MEASURED_SHARING.factor(5, 1)
    with pytest.raises(ValueError, match="mean_batch"):
        MEASURED_SHARING.factor(2, 0)
    for bad in ((), ((1, 1, 1.0),), ((2, 1, 0.5),), ((2, 0, 1.1),), ((2, 1, 1.1), (2, 1, 1.2)), ((2, 1.1),),
                ((2, True, 1.1),), ((2, 1, True),)):
        with pytest.raises(ValueError, match="points"):
            InstanceSharing(bad)  # type: ignore[arg-type]
    # numpy's numbers are numbers (BatchingConfig takes them), bools are not
    assert MEASURED_SHARING.factor(np.int64(4), np.float64(8.0)) == pytest.approx(1.128)
    for running, batch in ((True, 1.0), (2, True)):
        with pytest.raises(ValueError):
            MEASURED_SHARING.factor(running, batch)
    given = InstanceSharing(([np.int64(2), 1, np.float32(1.5)],))  # type: ignore[arg-type]
    assert given.points == ((2, 1, 1.5),) and hash(given) == hash(InstanceSharing(((2, 1, 1.5),)))


def test_the_sharing_of_a_batch_depends_on_the_sizes_running_and_its_memo_changes_nothing() -> None:
    sharing = InstanceSharing(MEASURED_SHARING.points)
    before = hash(sharing)
    assert sharing.batch_time_terms(1, [1, 1, 1])[1] == pytest.approx(1.275)
    assert sharing.batch_time_terms(8, [8, 8, 8])[1] == pytest.approx(1.128)
    assert sharing.batch_time_terms(1, [1])[1] == sharing.factor(2, 1)  # from the memo, the same
    assert hash(sharing) == before and sharing == InstanceSharing(MEASURED_SHARING.points)


def test_the_instance_counts_a_plan_weighs_are_the_measured_ones_up_to_the_limit_and_the_limit() -> None:
    assert instance_choices(1) == (1,)
    assert instance_choices(2) == (1, 2)
    assert instance_choices(3) == (1, 2, 3)
    assert instance_choices(4) == (1, 2, 4)
    for bad in (0, 5, True, 2.0):
        with pytest.raises(ValueError, match="max_instances"):
            instance_choices(bad)  # type: ignore[arg-type]
    # one instance unless the batch is limited, or more are asked for
    assert weighed_instances() == (1,)
    assert weighed_instances(batch_limit=8) == (1, 2, 4)
    assert weighed_instances(2) == (1, 2) and weighed_instances(1, batch_limit=8) == (1,)


def test_several_instances_are_weighed_only_up_to_the_largest_summed_batch() -> None:
    settings = weighed_settings((8, 64, 128), (0,), (1, 2, 4))
    assert (128, 0, 1) in settings and (128, 0, 2) not in settings
    assert (64, 0, 2) in settings and (64, 0, 4) not in settings and (8, 0, 4) in settings
    assert all(k * b <= MAX_SUMMED_BATCH for b, _, k in settings if k > 1)
    assert largest_batch((1, 2, 4, 8, 12), (1, 2, 4)) == 48
    assert largest_batch((1, 2, 4, 8, 12)) == 12


def test_one_instance_runs_as_it_did_whatever_the_sharing() -> None:
    arrivals = Arrivals("poisson", rate_qps=1500.0, seed=4)
    for scheduler in ("rule", "triton"):
        for delay in (0.0, 500.0):
            alone = BatchingConfig(max_batch=8, max_queue_delay_us=delay, scheduler=scheduler)
            shared = BatchingConfig(max_batch=8, max_queue_delay_us=delay, scheduler=scheduler,
                                    sharing=MEASURED_SHARING)
            a = simulate(arrivals, alone, FLAT, requests=5_000)
            b = simulate(arrivals, shared, FLAT, requests=5_000)
            np.testing.assert_array_equal(a.finish_s, b.finish_s)


@pytest.mark.parametrize("instances", [2, 4])
def test_saturated_instances_serve_what_their_summed_batch_allows(instances: int) -> None:
    # Overloaded, every instance always runs a full batch beside the others: each batch takes phi(k, b) x
    # latency(k x max_batch), so k instances serve k b / (phi(k, b) latency(k b)), the measured relation.
    latency = LatencyModel(lambda b: 2.0 + 0.05 * b)  # no spread: the closed form holds exactly
    expected = instances * 4 / (MEASURED_SHARING.factor(instances, 4) * latency(instances * 4)[0]) * 1e3
    assert instances_capacity_qps(lambda b: latency(b)[0], 4, instances, MEASURED_SHARING) == pytest.approx(expected)
    for scheduler, engine in (("rule", "events"), ("triton", "auto")):
        config = BatchingConfig(max_batch=4, instances=instances, scheduler=scheduler, sharing=MEASURED_SHARING)
        assert capacity_qps(latency, config) == pytest.approx(expected)
        result = simulate(Arrivals("poisson", rate_qps=3 * expected, seed=1), config, latency, requests=20_000,
                          engine=engine)
        assert result.throughput_qps == pytest.approx(expected, rel=0.01)
        # independent instances would each serve as much as one alone: more than the GPU can
        free = simulate(Arrivals("poisson", rate_qps=3 * expected, seed=1),
                        BatchingConfig(max_batch=4, instances=instances, scheduler=scheduler), latency,
                        requests=20_000, engine=engine)
        assert free.throughput_qps == pytest.approx(instances * 4 / latency(4)[0] * 1e3, rel=0.01)
        assert free.throughput_qps > 1.15 * result.throughput_qps


def test_the_event_loop_and_tritons_code_share_the_gpu_alike_without_a_delay() -> None:
    arrivals = Arrivals("poisson", rate_qps=2500.0, seed=3)
    rule = simulate(arrivals, BatchingConfig(max_batch=4, instances=2, sharing=MEASURED_SHARING), FLAT,
                    requests=20_000, engine="events")
    triton = simulate(arrivals, BatchingConfig(max_batch=4, instances=2, scheduler="triton", sharing=MEASURED_SHARING),
                      FLAT, requests=20_000)
    np.testing.assert_allclose(triton.finish_s, rule.finish_s)


def test_more_instances_than_the_sharing_was_measured_for_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="instances"):
        BatchingConfig(max_batch=4, instances=5, sharing=MEASURED_SHARING)
    with pytest.raises(ValueError, match="sharing"):
        BatchingConfig(max_batch=4, instances=2, sharing=1.1)  # type: ignore[arg-type]


def test_under_a_batch_limit_more_instances_serve_a_load_on_fewer_gpus() -> None:
    batches, delays = limited_choices(batch_limit=1)
    one = plan(FLAT, 3000, 10.0, max_batch_choices=batches, delay_us_choices=delays)
    several = plan(FLAT, 3000, 10.0, max_batch_choices=batches, delay_us_choices=delays,
                   instance_choices=weighed_instances(batch_limit=1))
    assert one.meets and several.meets and one.instances == 1
    # one instance at batch 1 serves 1 / 2.05 ms = 488 qps, at most 95% of it: 3000 qps takes 7 GPUs at least;
    # four sharing a GPU serve 4 / (1.275 x 2.2 ms) = 1,426 qps
    assert one.gpus >= 7 and several.gpus < one.gpus and several.instances > 1
    assert f"instance_group [ {{ count: {several.instances} kind: KIND_GPU }} ]" in triton_config(several)
    assert "instance_group" not in triton_config(one)
    assert several.instance_sharing == MEASURED_SHARING.describe() and one.instance_sharing is None
    assert MEASURED_SHARING.source in several.instance_sharing and "headroom" in several.instance_sharing
    # the plan's own config simulates the plan's p99 on one GPU (the planner's run, the same arrivals)
    config = plan_config(several)
    assert config.instances == several.instances and config.sharing is MEASURED_SHARING
    rerun = simulate(Arrivals("poisson", rate_qps=several.per_gpu_qps, seed=0), config, FLAT, requests=20_000)
    assert rerun.p99_ms == pytest.approx(several.p99_ms)


def test_without_a_batch_limit_below_the_largest_choice_a_plan_keeps_one_instance() -> None:
    # with four instances weighed this load's plan would take them for a lower p99 on the same GPU:
    # the sharing model's say-so at a middle load, which no measurement checked, so not by default
    assert plan(FLAT, 3000, 10.0, instance_choices=(1, 2, 4)).instances > 1
    assert weighed_instances(batch_limit=128) == weighed_instances() == (1,)
    with pytest.raises(ValueError, match="instance_choices"):
        plan(FLAT, 3000, 10.0, instance_choices=(1, 5))


def test_no_more_instances_are_weighed_than_the_gpus_memory_holds() -> None:
    import dataclasses

    from predictor.capacity.instance_memory import instances_that_fit, instances_to_weigh
    from predictor.devices import resolve_device
    from predictor.memory import memory_estimate
    from predictor.zoo import load_zoo_graph

    graph, h200 = load_zoo_graph("resnet50"), resolve_device("h200")
    assert instances_that_fit(graph, h200, 8, "fp16", "cudagraph") >= 4
    assert instances_to_weigh(graph, h200, "fp16", "cudagraph", 8, None, 8) == (1, 2, 4)
    need = memory_estimate(graph, 8, "fp16", "cudagraph")
    per_instance = need.weights_bytes + need.activations_bytes
    two = dataclasses.replace(h200, memory_bytes=need.workspace_bytes + 2 * per_instance)
    assert instances_that_fit(graph, two, 8, "fp16", "cudagraph") == 2
    assert instances_to_weigh(graph, two, "fp16", "cudagraph", 8, None, 8) == (1, 2)
    assert instances_to_weigh(graph, two, "fp16", "cudagraph", 8, 4, None) == (1, 2)
    none = dataclasses.replace(h200, memory_bytes=need.workspace_bytes)
    assert instances_that_fit(graph, none, 8, "fp16", "cudagraph") == 0
    assert instances_to_weigh(graph, none, "fp16", "cudagraph", 8, None, 8) == (1,)  # one is always weighed
    # one for eager (the sharing was measured on CUDA graphs) and under the documented rule (SimPy's runs)
    assert instances_to_weigh(graph, h200, "fp16", "eager", 8, None, 8) == (1,)
    assert instances_to_weigh(graph, h200, "fp16", "cudagraph", 8, None, 8, "rule") == (1,)


def test_batches_ending_at_one_instant_are_over_for_the_next_in_both_engines() -> None:
    # r0 runs alone 0-4 ms; r1 (1 ms) beside it, 1.5 x latency(2) = 3 ms: both end at 4 ms; r2 (2 ms)
    # starts then, alone in both engines (4 ms, to 8), not beside a batch that has just ended (3 ms, to 7)
    sharing = InstanceSharing(((2, 1, 1.5),))
    arrivals = Arrivals("trace", times=(0.0, 1e-3, 2e-3))
    latency = LatencyModel(lambda b: 4.0 if b == 1 else 2.0)
    for scheduler, engine in (("rule", "events"), ("triton", "auto")):
        config = BatchingConfig(max_batch=1, instances=2, scheduler=scheduler, sharing=sharing)
        result = simulate(arrivals, config, latency, warmup_fraction=0.0, engine=engine)
        np.testing.assert_allclose(result.finish_s, [4e-3, 4e-3, 8e-3])
