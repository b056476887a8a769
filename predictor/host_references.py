"""Reference forwards: a host's speed read off whole eager forwards, not only off tiny calls.

The probe's per-kind loops time one call at a time, in seconds, and a host's speed drifts: on
the H200 machines the same host probed 6.5 and 10.5 us per elementwise call minutes apart, and
the NAS suite's groups of architectures ran 0.77x to 1.25x their prediction from profiles
sampled between their own rounds. Whole forwards of three fixed architectures timed in the same
rounds followed the host better: on ``nas-dev`` (2026-12-02, one lease, four groups;
``datasets/nvidia-h200/diagnostics/reference_forward_analysis.py``) 38% of eager runs were
within +-10% from their group's profile, and 65-69% with the profile's costs scaled so that the
group's reference forwards at batch 1 (and 8) came out as measured.

So a profile may carry reference forwards (``HostProfile.reference_ms``: the three ``nas-train``
architectures of ``predictor.host_profile.REFERENCE_MODELS``, timed eagerly by the probe and
between a run's rounds). ``calibrate`` multiplies its costs by the one factor that makes the
bundle's eager prediction of its fp32 forwards (``CALIBRATION_KEYS``, at batch 1 and 8) match
their measurement at the median: what the forwards saw of the host, which the tiny loops can
miss, in the units composition already reads. Only the fp32 ones: on both development sets they
calibrated as well as all 18 or better (the zoo's runs under five host conditions 48% within
+-10% against 43%; nas-dev 69.9% against 69.1%), and a probe that times six forwards, not 18,
builds and warms up a third of them (nas-1002's fp16 first calls in cuDNN took a second or more
each). The references' graphs ship here (``host_reference_graphs/``: their torch traces, the
suite's, checked equal by a test), so a service without the datasets can predict them. Forwards
timed on another GPU than the predictor's device calibrate nothing (Predictor.references_apply).

**A prediction does not apply it by default** (``Predictor(calibrate_hosts=True)`` does; the
factor is still solved, and one beyond ``WARN_BOUNDS`` is said in the answer's warnings). Measured
on a quiet host (machine 19, 2026-12-05: two zoo runs minutes apart agreed within +-10% on 98.8%
of units), the costs as probed put 89.7% and 84% of the zoo's eager runs within +-10% (two runs)
and 89.8% of ``nas-test``'s, the calibrated costs 55%, 52% and 66%: from the costs the bundle predicted the
references at 0.93-1.20x their measured time and the zoo at 0.99x, so the factor (x0.90) moved
a right prediction off. Over the
eight zoo conditions with reference forwards (machines 10, 11, 12 and 19, as is and contended),
the costs as probed put 52.8% of runs within +-10%, calibrated 44.3%; the calibration won on
machine 10 (a host 1.58x the bundle's, 52% -> 67%), on a contended machine 12 and on ``nas-test``
measured on machine 11 (45% -> 54%), and lost on the others.

What it does not do: composition is fitted, and its interval calibrated, on profiles' costs as
probed (the runs training fits, machine 1's zoo and ``nas-train``, timed no reference forwards),
and the factor is absolute: where the fit mispredicts the references themselves (1.23x under on
the ``nas-train`` group that timed them as runs), that error is read as the host's. A bundle
whose own host carried reference forwards would need the factor taken relative to its host's;
none does yet. A CPU-only estimate scales a profile's costs as probed, not as calibrated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from predictor.graph import Graph
from predictor.host_profile import CALIBRATION_KEYS, HostProfile

GRAPH_DIR = Path(__file__).parent / "host_reference_graphs"
#: the factor is searched within these bounds (a host 4x off its own probe is not a host the
#: probe describes at all)
SCALE_BOUNDS = (0.25, 4.0)
#: beyond these, an eager prediction (calibrated or not) says that the probe and the forwards disagree
WARN_BOUNDS = (1 / 1.5, 1.5)
BISECTIONS = 30


@cache
def reference_graph(model: str) -> Graph:
    """A reference architecture's torch-trace graph, as shipped."""
    return Graph.load(GRAPH_DIR / f"{model}.json")


@dataclass(frozen=True)
class Calibration:
    """How a profile's costs were scaled by its reference forwards."""

    scale: float
    forwards: int

    @property
    def clipped(self) -> bool:
        """Whether the factor stopped at a bound of ``SCALE_BOUNDS`` (the forwards are further off)."""
        return self.scale in SCALE_BOUNDS

    def describe(self) -> str:
        return f"costs x{self.scale:.2f} from {self.forwards} reference forward{'' if self.forwards == 1 else 's'}"

    def warning(self) -> str | None:
        """What a prediction says where the forwards and the probe disagree by far."""
        low, high = WARN_BOUNDS
        if low <= self.scale <= high:
            return None
        bound = ("at least " if self.scale >= high else "at most ") if self.clipped else ""
        return (f"the host's reference forwards ran {bound}{self.scale:.2f}x what its probed costs predict: the "
                "probe and the forwards saw different hosts (contention, or a host that changed speed); probe again")


def solve_scale(measured_ms: Mapping[str, float], predict_ms: Callable[[str, float], float]) -> float:
    """The factor ``s`` on a host's costs at which the median over ``measured_ms`` of
    log(predicted / measured) is zero, where ``predict_ms(key, s)`` predicts one reference
    forward with the costs times ``s``. Composition grows monotonically in every host cost,
    so the median does too, and bisection in log(s) finds it (clipped to ``SCALE_BOUNDS``)."""
    keys = list(measured_ms)

    def median_log_error(log_scale: float) -> float:
        s = math.exp(log_scale)
        return float(np.median([math.log(predict_ms(k, s) / measured_ms[k]) for k in keys]))

    low, high = (math.log(b) for b in SCALE_BOUNDS)
    if median_log_error(high) <= 0:
        return SCALE_BOUNDS[1]
    if median_log_error(low) >= 0:
        return SCALE_BOUNDS[0]
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if median_log_error(middle) > 0:
            high = middle
        else:
            low = middle
    return math.exp((low + high) / 2)


def calibrate(profile: HostProfile, predict_ms: Callable[[str, HostProfile], float],
              keys: Collection[str] = CALIBRATION_KEYS) -> tuple[HostProfile, Calibration | None]:
    """``profile`` with its costs scaled by its reference forwards, and how; the profile as it
    is where it carries none. ``predict_ms(key, host)`` is the eager prediction of one reference
    forward on ``host`` (the caller's composition constants: the bundle's, or a fold's). ``keys``
    are the forwards read (those a development replay compares; predictions read the default).

    The calibrated profile is for composing, not for storing: it carries no reference forwards
    (calibrating it again changes nothing), and its scaled costs are not validated (up to 4x a
    probed cost may leave the bounds a stored profile keeps)."""
    forwards = calibration_forwards(profile, keys)
    if not forwards:
        return profile, None

    def scaled(s: float) -> HostProfile:
        return profile.model_copy(update={"costs_us": {k: v * s for k, v in profile.costs_us.items()},
                                          "reference_ms": None})

    s = solve_scale(forwards, lambda key, s: predict_ms(key, scaled(s)))
    return scaled(s), Calibration(s, len(forwards))


def calibration_forwards(profile: HostProfile, keys: Collection[str] = CALIBRATION_KEYS) -> dict[str, float]:
    """The reference forwards of ``profile`` that a calibration reads (``keys``; by default the
    fp32 ones); empty where it carries none of them."""
    return {k: v for k, v in (profile.reference_ms or {}).items() if k in keys}
