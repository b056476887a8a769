"""Issue #14's target verdicts: met only where something was checked."""

from __future__ import annotations

import math
from pathlib import Path

from training.serving_check import MaxQpsComparison, TargetCheck, check_targets, compare_loads, load_serving

H100 = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h100-80gb-hbm3"


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


def test_a_real_set_without_max_qps_answers_is_not_checked_and_a_never_met_objective_is_a_miss() -> None:
    """Through ``check_targets`` on a committed Triton set (googlenet's two loads at 0.3, where no
    objective level was measured): NOT CHECKED, not MET; an answer whose simulated curve never met
    the objective (NaN) counts against the target rather than dropping out of it."""
    data = load_serving(H100 / "serving-triton-blind3")
    rows = compare_loads(data, requests=5_000, noise_seeds=())
    measured = next(c for c in check_targets(rows, []) if c.latency_model == "measured service")
    assert measured.p99_loads == 2 and measured.verdict == "NOT CHECKED (no max-qps answer)"
    never = MaxQpsComparison("googlenet", rows[0].measured.setting, 0.6, 5.0, 900.0, False, math.nan, False,
                             math.nan, False)
    within = MaxQpsComparison("googlenet", rows[0].measured.setting, 0.8, 6.0, 900.0, False, 905.0, False,
                              math.nan, False)
    measured = next(c for c in check_targets(rows, [never, within]) if c.latency_model == "measured service")
    assert (measured.qps_within, measured.qps_answers) == (1, 2) and not measured.met
