"""On a CPU device, the operators themselves run at the speed of the host that runs them.

A GPU's kernels take what the GPU takes whichever CPU issues them; only their dispatch follows the
host (predictor.host_profile). A CPU device's operators *are* host work: the same 2-core EPYC VM
ran the same operator calls a median 0.56x as long on 2026-12-05 as on 2026-12-04, and the same
NAS forwards 0.72x, with its probes' per-call costs at 0.58x and 0.63x (another physical host
under the same VM, or one that was busy the day before; benchmarks/cpu_host_speed.py).

So a CPU bundle names the host its operator rows were measured on (``operator_host`` in its
metadata: the profile most of them were probed beside), and a forward's operator times are scaled
by how fast the host asked for runs against it, to a power its bundle gives
(``operator_speed_exponent``, ``latpred train --host-speed-exponent``). The speed is one number
per host, the geometric mean of its costs over the kinds that compute (``OPERATOR_KINDS``): a
single probe loop is too short to say more per kind.

The power is below 1 because a probe's tiny calls move more than a forward does: the EPYC's NAS
forwards ran 0.72x where its probes read 0.63x. 0.6 was chosen on ``nas-dev`` measured on both
days (52% and 58% within +-10%, against 52% and 11% without scaling and 54% and 15% at 1). On the
Xeon every power tried lowered its zoo's leave-one-model-out (62% -> 54% at 0.6): its probes, on a
GPU machine's shared host, do not track its forwards, and its bundle scales nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace

from predictor.compose import LayerArrays
from predictor.host_profile import HostProfile

#: the host profile kinds that time a computing call (not a view or a module's Python)
OPERATOR_KINDS = ("elementwise", "gemm", "conv", "norm", "attention", "copy")


def speed_ratio(host: HostProfile, reference: HostProfile) -> float:
    """How long ``host`` takes for what ``reference`` does in 1: the geometric mean over
    OPERATOR_KINDS of the ratio of their costs (above 1: a slower host)."""
    return math.exp(sum(math.log(host.costs_us[k] / reference.costs_us[k]) for k in OPERATOR_KINDS)
                    / len(OPERATOR_KINDS))


def on_host(layers: LayerArrays, ratio: float) -> LayerArrays:
    """``layers`` (their times alone, measured on the reference host) as they run where they take
    ``ratio`` times as long: every operator's time and interval, learned or a fallback's."""
    if ratio == 1.0:
        return layers
    return replace(layers, kernel_us=layers.kernel_us * ratio, low_us=layers.low_us * ratio,
                   high_us=layers.high_us * ratio)
