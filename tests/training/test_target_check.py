"""Issue #14's target verdicts: met only where something was checked."""

from __future__ import annotations

from training.serving_check import TargetCheck


def check(p99: tuple[int, int], qps: tuple[int, int]) -> TargetCheck:
    return TargetCheck("measured service", p99[0], p99[1], 1.0, qps[0], qps[1], 1.0)


def test_every_load_and_answer_within_is_met_and_one_miss_is_not() -> None:
    assert check((2, 2), (3, 3)).met and check((2, 2), (3, 3)).verdict == "MET"
    assert not check((1, 2), (3, 3)).met and check((1, 2), (3, 3)).verdict == "NOT MET"


def test_a_set_with_no_max_qps_answer_or_no_load_is_not_checked_rather_than_met() -> None:
    no_answers = check((2, 2), (0, 0))
    assert not no_answers.met and no_answers.verdict == "NOT CHECKED (no max-qps answer)"
    nothing = check((0, 0), (0, 0))
    assert nothing.verdict == "NOT CHECKED (no load up to the target level and no max-qps answer)"
