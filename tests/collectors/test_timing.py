"""Timing on the CPU device: a real torch op, and the repetition rule's stopping conditions."""

from __future__ import annotations

import time

import pytest
import torch

from collectors.timing import (
    CpuTimer,
    RepetitionRule,
    coefficient_of_variation,
    make_timer,
    summarize,
)


def small_op() -> object:
    x = torch.randn(32, 32)
    return lambda: x @ x


def test_cpu_timer_times_a_torch_op() -> None:
    t = CpuTimer(RepetitionRule(min_reps=3, max_reps=10, group=1), rep_target_us=300).time(small_op())
    assert t.kernel_us > 0 and t.dispatch_us > 0
    assert 0 < t.p10_us <= t.p50_us <= t.p90_us
    assert t.kernel_us == t.p50_us
    assert 3 <= t.repetitions <= 10
    assert t.calls_per_replay >= 1 and t.cv >= 0


def test_bigger_op_takes_longer() -> None:
    rule = RepetitionRule(min_reps=3, max_reps=5, group=1)
    a, b = torch.randn(8, 8), torch.randn(256, 256)
    small = CpuTimer(rule, rep_target_us=300).time(lambda: a @ a)
    big = CpuTimer(rule, rep_target_us=300).time(lambda: b @ b)
    assert big.kernel_us > 5 * small.kernel_us  # 32,768x the multiply-adds


def test_unreachable_cv_runs_to_max_reps() -> None:
    rule = RepetitionRule(target_cv=0.0, min_reps=3, max_reps=7, group=1, time_cap_s=30)
    assert CpuTimer(rule, rep_target_us=200).time(small_op()).repetitions == 7


def test_satisfied_cv_stops_at_min_reps() -> None:
    rule = RepetitionRule(target_cv=10.0, min_reps=4, max_reps=100, group=2, time_cap_s=30)
    assert CpuTimer(rule, rep_target_us=200).time(small_op()).repetitions == 4


def test_groups_are_whole() -> None:
    # min_reps 5 in groups of 2: the rule is checked after whole groups, so 6 repetitions run.
    rule = RepetitionRule(target_cv=10.0, min_reps=5, max_reps=100, group=2, time_cap_s=30)
    assert CpuTimer(rule, rep_target_us=200).time(small_op()).repetitions == 6


def test_time_cap_stops_early() -> None:
    # Each call sleeps ~2 ms, so one repetition is one call; a 0.1 s cap allows about 50.
    rule = RepetitionRule(target_cv=0.0, min_reps=3, max_reps=10**9, group=1, time_cap_s=0.1)
    started = time.perf_counter()
    t = CpuTimer(rule, rep_target_us=1000).time(lambda: time.sleep(0.002))
    assert 1 <= t.repetitions <= 60
    assert time.perf_counter() - started < 5
    assert t.kernel_us >= 2000


def test_coefficient_of_variation() -> None:
    assert coefficient_of_variation([5.0]) == 0.0
    assert coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(2**0.5 / 2)


def test_summarize_takes_the_median() -> None:
    t = summarize([1.0, 2.0, 3.0, 4.0, 100.0], dispatch_us=7.0, calls=3)
    assert t.kernel_us == t.p50_us == 3.0
    assert t.p10_us < t.p50_us < t.p90_us and t.dispatch_us == 7.0
    assert t.repetitions == 5 and t.calls_per_replay == 3


def test_make_timer() -> None:
    assert isinstance(make_timer("cpu"), CpuTimer)
    with pytest.raises(ValueError, match="tpu"):
        make_timer("tpu")
