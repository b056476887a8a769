"""The host probe: a profile that parses, measured on the device the probe is given."""

from __future__ import annotations

import json
import time

import pytest

from collectors.cpu_score import cpu_score_ns
from collectors.host_probe import default_references, estimate_here, probe
from collectors.reference_forwards import ReferenceForwards, warmup_order
from predictor.host_profile import (
    CALIBRATION_KEYS,
    HOST_KINDS,
    HOST_PROFILE_SCHEMA_VERSION,
    REFERENCE_KEYS,
    HostProfile,
    parse_profile,
)

#: a cheap reference forward on a CPU (a ResNet at batch 1, about 8 ms), and the one a budget warms up first
ONE_REFERENCE = "nas-1004|b1|fp32"
CHEAPEST_REFERENCE = "nas-1003|b1|fp32"
#: what a deadline cannot cut (one of each architecture, in warm-up order), and one more it can
ALWAYS_KEPT = [CHEAPEST_REFERENCE, ONE_REFERENCE, "nas-1002|b1|fp32"]
FOUR_REFERENCES = ["nas-1003|b8|fp32", "nas-1002|b1|fp32", ONE_REFERENCE, CHEAPEST_REFERENCE]


def _round_trips(profile: HostProfile) -> None:
    assert parse_profile(json.loads(profile.model_dump_json())) == profile
    assert list(profile.costs_us) == list(HOST_KINDS)


def test_cpu_probe_parses_and_orders_costs() -> None:
    import torch

    threads = torch.get_num_threads()
    profile = probe("cpu", note="test", loop_us=1000, rounds=4)
    assert torch.get_num_threads() == threads  # its loops ran on one thread, and torch is as it was
    _round_trips(profile)
    assert profile.label == "measured" and profile.gpu is None and profile.note == "test"
    assert profile.reference_ms is None  # on the CPU, by default, no reference forwards
    # a call that launches nothing costs less than a convolution that computes on the CPU
    assert profile.costs_us["view"] < profile.costs_us["conv"]
    assert profile.cpu_score_ns and profile.cpu_score_ns > 0


def test_estimate_scales_the_reference_by_the_cpu_score() -> None:
    reference = probe("cpu", loop_us=1000, rounds=4)
    estimate = estimate_here(reference)
    ratio = estimate.cpu_score_ns / reference.cpu_score_ns
    assert estimate.label == "estimated" and estimate.estimated_from == reference.id
    assert estimate.costs_us["gemm"] == pytest.approx(reference.costs_us["gemm"] * ratio)
    assert estimate.id != reference.id


def test_cpu_score_is_the_median_of_its_repeats_per_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeat a neighbour's time slice made slow does not move the score: it is the median repeat,
    per iteration of the workload. (How repeatable it is on a real machine is a measurement, not a
    test: ``benchmarks/host_probe.py`` prints its median and longest over repeats.)"""
    import collectors.cpu_score as cpu_score

    iterations = 10
    clock = iter([0, 100 * iterations, 0, 900 * iterations, 0, 200 * iterations])  # three repeats: 100, 900, 200 ns
    monkeypatch.setattr(cpu_score, "time", type("Clock", (), {"perf_counter_ns": staticmethod(lambda: next(clock))}))
    assert cpu_score_ns(iterations=iterations, repeats=3) == 200.0
    monkeypatch.undo()
    assert 0 < cpu_score_ns(iterations=1_000, repeats=3) < 1e6  # the real clock: some nanoseconds an iteration


def test_a_probe_times_the_reference_forwards_it_is_given() -> None:
    profile = probe("cpu", loop_us=1000, rounds=2, references=[ONE_REFERENCE])
    _round_trips(profile)
    assert profile.schema_version == HOST_PROFILE_SCHEMA_VERSION
    assert list(profile.reference_ms or {}) == [ONE_REFERENCE] and (profile.reference_ms or {})[ONE_REFERENCE] > 0


def test_a_gpu_probe_times_the_forwards_calibration_reads_and_a_cpu_probe_none() -> None:
    assert default_references("cuda") == default_references("cuda:1") == CALIBRATION_KEYS
    assert default_references("cpu") == ()


def test_reference_rounds_stop_at_the_deadline_but_one_always_runs() -> None:
    forwards = ReferenceForwards("cpu", [ONE_REFERENCE])
    assert len(forwards.time(3, 2)[ONE_REFERENCE]) == 6  # no deadline: every round
    assert len(forwards.time(3, 2, deadline=time.perf_counter())[ONE_REFERENCE]) == 2  # passed: the first only
    assert len(forwards.time(3, 2, deadline=time.perf_counter() + 60)[ONE_REFERENCE]) == 6


def test_warmup_spans_the_architectures_and_leaves_the_dear_first_calls_last() -> None:
    order = warmup_order(REFERENCE_KEYS)
    assert sorted(order) == sorted(REFERENCE_KEYS)
    assert order[:3] == ["nas-1003|b1|fp32", "nas-1004|b1|fp32", "nas-1002|b1|fp32"]  # a cut keeps all three
    assert order[-4:] == ["nas-1002|b1|fp16", "nas-1003|b8|fp16", "nas-1004|b8|fp16", "nas-1002|b8|fp16"]


def test_no_forward_starts_its_warm_up_past_the_deadline_but_one_of_each_architecture() -> None:
    forwards = ReferenceForwards("cpu", FOUR_REFERENCES, warmup_deadline=time.perf_counter())
    assert list(forwards.timers) == ALWAYS_KEPT and forwards.skipped == ("nas-1003|b8|fp32",)
    assert set(forwards.time(1, 1)) == set(ALWAYS_KEPT)  # (in the round's shuffled order)
    kept = ReferenceForwards("cpu", FOUR_REFERENCES, warmup_deadline=time.perf_counter() + 60)
    assert set(kept.timers) == set(FOUR_REFERENCES) and kept.skipped == ()


def test_a_probe_past_its_budget_still_times_one_forward_of_each_architecture() -> None:
    profile = probe("cpu", note="x" * 500, loop_us=1000, rounds=2, references=FOUR_REFERENCES, budget_s=0.0)
    assert set(profile.reference_ms or {}) == set(ALWAYS_KEPT)
    # and the profile says so, within the note's 500 characters
    assert profile.note and len(profile.note) == 500
    assert profile.note.endswith("reference forwards: 3 of 4, 1 of 5 rounds with 0.0 s left for the probe")


@pytest.mark.gpu
def test_gpu_probe_parses() -> None:
    profile = probe("cuda")
    _round_trips(profile)
    # every reference forward a calibration reads, each at least as long as the host takes to issue its calls
    assert set(profile.reference_ms or {}) == set(CALIBRATION_KEYS)
    assert all(v > 0.05 for v in (profile.reference_ms or {}).values())
    assert profile.gpu and profile.cuda_version and profile.probe_seconds is not None  # (its time: benchmarks/)
    # on a GPU, a view launches nothing: it is cheaper than any call that launches a kernel
    assert profile.costs_us["view"] < min(profile.costs_us[k] for k in ("elementwise", "gemm", "conv", "norm"))


def test_a_runs_profile_is_the_geometric_mean_of_its_probes_and_samples() -> None:
    from collectors.host_probe import RoundSampler, run_profile

    before = probe("cpu", loop_us=1000, rounds=2)
    after = before.model_copy(update={"id": "cpu-after", "costs_us": {k: 4 * v for k, v in before.costs_us.items()}})
    sampler = RoundSampler("cpu")
    sampler()
    assert len(sampler.samples) == 1 and set(sampler.samples[0]) == set(HOST_KINDS)
    sampler.samples[0] = {k: 2 * v for k, v in before.costs_us.items()}  # a known sample: the middle
    run = run_profile(before, after, sampler.samples, note="as is")
    for kind in HOST_KINDS:  # (1 x 2 x 4) ** (1/3) = 2
        assert run.costs_us[kind] == pytest.approx(2 * before.costs_us[kind])
    note = run.note or ""
    assert run.id not in (before.id, after.id) and before.id in note and note.startswith("as is")


def test_a_runs_profile_carries_the_reference_forwards_sampled_between_its_rounds() -> None:
    from collectors.host_probe import RoundSampler, run_profile

    before = probe("cpu", loop_us=1000, rounds=2, references=[ONE_REFERENCE])
    assert before.reference_ms is not None
    first = before.reference_ms[ONE_REFERENCE]
    after = before.model_copy(update={"id": "cpu-after", "reference_ms": {ONE_REFERENCE: 4 * first}})
    sampler = RoundSampler("cpu", references=[ONE_REFERENCE])
    sampler()
    assert len(sampler.reference_samples) == 1 and list(sampler.reference_samples[0]) == [ONE_REFERENCE]
    sampler.reference_samples[0] = {ONE_REFERENCE: 2 * first}
    run = run_profile(before, after, sampler.samples, reference_samples=sampler.reference_samples)
    assert run.reference_ms == {ONE_REFERENCE: pytest.approx(2 * first)}
    # without reference forwards anywhere, the run has none
    assert RoundSampler("cpu").references == ()
    plain = before.model_copy(update={"reference_ms": None})
    assert run_profile(plain, plain, []).reference_ms is None


def test_a_probe_and_a_run_say_how_steadily_the_reference_forwards_ran() -> None:
    from collectors.host_probe import RoundSampler, run_profile

    profile = probe("cpu", loop_us=1000, rounds=2, references=[ONE_REFERENCE])
    assert profile.forward_spread is not None and profile.schema_version == 3  # (a spread needs version 3)
    plain = probe("cpu", loop_us=1000, rounds=2)  # no forwards, no spread: version 2, which older readers read
    assert plain.forward_spread is None and plain.schema_version == 2
    sampler = RoundSampler("cpu", references=[ONE_REFERENCE])
    sampler()
    sampler()
    timed = sampler.reference_timings[ONE_REFERENCE]
    assert len(timed) == 6  # every timing kept, not only each sample's median
    assert [s[ONE_REFERENCE] for s in sampler.reference_samples] == [sorted(timed[:3])[1], sorted(timed[3:])[1]]
    # the run's spread is read from the timings through its rounds, not from its probes'
    sampler.reference_timings = {ONE_REFERENCE: [1.0] * 5 + [3.0] * 5}
    run = run_profile(profile, profile, sampler.samples, reference_samples=sampler.reference_samples,
                      reference_timings=sampler.reference_timings)
    assert run.forward_spread == pytest.approx(3.0)
    # too few timings through the rounds: the probes' spreads, their geometric mean
    steady = profile.model_copy(update={"id": "cpu-steady", "forward_spread": 1.1})
    shaky = profile.model_copy(update={"id": "cpu-shaky", "forward_spread": 1.6})
    assert run_profile(steady, shaky, [], reference_timings={ONE_REFERENCE: [1.0, 2.0]}).forward_spread == \
        pytest.approx((1.1 * 1.6) ** 0.5)
    assert run_profile(profile.model_copy(update={"forward_spread": None}), profile.model_copy(
        update={"id": "cpu-other", "forward_spread": None}), []).forward_spread is None
