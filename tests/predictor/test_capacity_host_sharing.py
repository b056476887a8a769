"""Several instances on one GPU share its work, not the serving host's: each instance runs its own
serving path (``LatencyModel.host``, put there by ``ServingPath.around``)."""

from __future__ import annotations

import pytest
from serving_path_helpers import a_path

from predictor.capacity.instance_sharing import MEASURED_SHARING, instances_capacity_qps
from predictor.capacity.load_curve import capacity_qps
from predictor.capacity.planner import limited_choices, plan, weighed_instances
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, host_ms, simulate

#: the GPU's part of a batch: mostly a fixed time, as small models' are
GPU = LatencyModel(lambda b: 2.0 + 0.05 * b)
#: 1.5 ms a batch and 0.2 ms a request of the server's own, no spread: closed forms hold exactly
PATH = a_path(sigma=0.0)
SERVED = PATH.around(GPU)


def test_a_batch_beside_another_takes_the_shared_gpu_part_of_their_sum_and_its_own_path() -> None:
    # eight requests at once, two instances of max batch 4: the first batch starts alone, the second
    # beside it: phi(2, 4) x the GPU's part of a batch of 8, plus the path of its own 4 requests
    arrivals = Arrivals("trace", times=(0.0,) * 8)
    alone_ms = 2.0 + 0.05 * 4 + 1.5 + 0.2 * 4
    beside_ms = MEASURED_SHARING.factor(2, 4) * (2.0 + 0.05 * 8) + 1.5 + 0.2 * 4
    config = BatchingConfig(max_batch=4, instances=2, sharing=MEASURED_SHARING)
    result = simulate(arrivals, config, SERVED, warmup_fraction=0.0, engine="events")
    assert sorted(set((result.finish_s * 1e3).round(9))) == pytest.approx(sorted([alone_ms, beside_ms]))
    # Triton's code sends the first request at once, alone, and the second beside it, each a batch of 1
    config = BatchingConfig(max_batch=4, instances=2, scheduler="triton", sharing=MEASURED_SHARING)
    result = simulate(arrivals, config, SERVED, warmup_fraction=0.0)
    first_two = sorted(set((result.finish_s * 1e3).round(9)))[:2]
    assert first_two == pytest.approx([2.05 + 1.7, MEASURED_SHARING.factor(2, 1) * 2.1 + 1.7])
    # were the path shared too (the same medians, no host named), the second batch would take phi x all of it
    whole = LatencyModel(SERVED.median_ms)
    result = simulate(arrivals, BatchingConfig(max_batch=4, instances=2, sharing=MEASURED_SHARING), whole,
                      warmup_fraction=0.0, engine="events")
    assert result.finish_s.max() * 1e3 == pytest.approx(MEASURED_SHARING.factor(2, 4) * (2.4 + 1.5 + 1.6))


@pytest.mark.parametrize("instances", [2, 4])
def test_saturated_instances_serve_what_the_shared_gpu_and_their_own_paths_allow(instances: int) -> None:
    b = 4
    expected = instances * b * 1e3 / (MEASURED_SHARING.factor(instances, b) * (2.0 + 0.05 * instances * b)
                                      + 1.5 + 0.2 * b)
    assert instances_capacity_qps(lambda n: SERVED(n)[0], b, instances, MEASURED_SHARING,
                                  SERVED.host_ms) == pytest.approx(expected)
    for scheduler, engine in (("rule", "events"), ("triton", "auto")):
        config = BatchingConfig(max_batch=b, instances=instances, scheduler=scheduler, sharing=MEASURED_SHARING)
        assert capacity_qps(SERVED, config) == pytest.approx(expected)
        result = simulate(Arrivals("poisson", rate_qps=3 * expected, seed=1), config, SERVED, requests=20_000,
                          engine=engine)
        assert result.throughput_qps == pytest.approx(expected, rel=0.01)
    # the path charged as shared GPU work would cap the same instances lower
    shared_path = instances_capacity_qps(lambda n: SERVED(n)[0], b, instances, MEASURED_SHARING)
    assert shared_path < 0.9 * expected


def test_the_host_part_follows_the_end_of_the_range_a_model_is_at() -> None:
    predicted = LatencyModel(lambda b: 2.0, 0.01, interval_ms=lambda b: (1.5, 3.0))
    served = a_path().around(predicted)
    assert served.host is not None and served.host_ms(4) == pytest.approx(1.5 + 0.2 * 4)
    assert served.for_plan("slow_end").host_ms(4) == pytest.approx(2.5 + 0.3 * 4)
    assert served.at_bound("low").host_ms(4) == pytest.approx(1.0 + 0.15 * 4)
    assert served.at_bound("high").host_ms(4) == pytest.approx(2.5 + 0.3 * 4)
    # each end's medians include that end of the path, so the GPU's part stays the prediction's end
    assert served.for_plan("slow_end")(4)[0] - served.for_plan("slow_end").host_ms(4) == pytest.approx(3.0)
    assert host_ms(predicted, 4) == 0.0 and host_ms(lambda b: (2.0, 0.0), 4) == 0.0


def test_a_second_path_around_a_served_model_and_an_unknown_end_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="already includes a serving path"):
        a_path().around(SERVED)
    with pytest.raises(ValueError, match="host_end"):
        LatencyModel(lambda b: 2.0, host=PATH, host_end="slowest")  # type: ignore[arg-type]


def test_under_a_batch_limit_a_served_model_needs_fewer_gpus_than_one_whose_path_were_shared() -> None:
    # batch 1 only: 2.05 ms on the GPU plus 1.7 ms of path; four instances run four paths at once
    batches, delays = limited_choices(batch_limit=1)
    served = plan(SERVED, 3000, 12.0, max_batch_choices=batches, delay_us_choices=delays,
                  instance_choices=weighed_instances(batch_limit=1))
    shared = plan(LatencyModel(SERVED.median_ms), 3000, 12.0, max_batch_choices=batches, delay_us_choices=delays,
                  instance_choices=weighed_instances(batch_limit=1))
    assert served.meets and shared.meets and served.instances > 1
    assert served.gpus < shared.gpus



def test_a_host_part_larger_than_its_batch_is_refused_where_instances_share() -> None:
    # a model that names a host's work (1.5 ms + 0.2 a request) its medians (1 ms) do not include
    broken = LatencyModel(lambda b: 1.0, host=PATH)
    config = BatchingConfig(max_batch=1, instances=2, sharing=MEASURED_SHARING)
    with pytest.raises(ValueError, match="serving host's work in a batch of 2"):
        simulate(Arrivals("trace", times=(0.0, 0.0)), config, broken, warmup_fraction=0.0, engine="events")
    with pytest.raises(ValueError, match="serving host's work in a batch of 2"):
        capacity_qps(broken, config)
