"""A model's service time per batch size, from the predictor: what the simulator and planner take.

The median of a batch is the whole-model prediction at that batch (``Predictor.predict``), asked
once per batch size. The spread around it is the run-to-run spread of the zoo's measured runs, as
a lognormal sigma: CUDA-graph replays varied by a median coefficient of variation of 0.4% (75th
percentile 0.7%) and eager forwards by 14% (22%) (``datasets/nvidia-h200/models``, the ``cv``
column), so the defaults are 0.01 and 0.15. A CPU computes each call before it returns, with no
GPU queue to hide the host's jitter in: the eager forwards of the two measured CPUs varied by a
median coefficient of variation of 10.6% (75th percentile 16%; 8.0% on the H200 machine's 16 vCPUs,
11.9% on this workplace's 2; ``datasets/cpu-*/models``), so 0.10 (``run_spread``). The
prediction's own interval is not that spread: it says how far the model may be off, the same way
for every request, which shifts the whole curve rather than widening it. The planner's answer
holds for the median prediction, and it simulates its chosen setting again at either end of the
interval (``LatencyModel.interval_ms``) to say how far its p99 may move.
"""

from __future__ import annotations

from predictor.capacity.simulator import LatencyModel
from predictor.graph import Graph
from predictor.host_profile import HostProfile
from predictor.predict import Predictor

#: lognormal sigma of one batch's service time, per execution mode (see the module docstring)
DEFAULT_SIGMA = {"cudagraph": 0.01, "eager": 0.15}
#: the same, for a CPU (kind "cpu"), which runs eager forwards only
CPU_EAGER_SIGMA = 0.10


def run_spread(device_kind: str, mode: str) -> float:
    """The lognormal sigma of one batch's run-to-run spread on a device of ``device_kind`` in ``mode``."""
    return CPU_EAGER_SIGMA if device_kind == "cpu" and mode == "eager" else DEFAULT_SIGMA[mode]


def predicted_service_time(predictor: Predictor, graph: Graph, precision: str, mode: str,
                           host: HostProfile | None = None, sigma: float | None = None) -> LatencyModel:
    """batch -> (predicted median ms, sigma) for ``graph`` on ``predictor``'s device, with the
    prediction's interval (``interval_ms``), each batch predicted once (the planner asks every
    size up to its largest maximum batch); sigma is the device's run-to-run spread in ``mode``
    (``run_spread``) unless given."""
    spread = run_spread(predictor.device.kind, mode) if sigma is None else sigma
    predicted: dict[int, tuple[float, float, float]] = {}

    def prediction(batch: int) -> tuple[float, float, float]:
        if batch not in predicted:
            out = predictor.predict(graph, batch, precision, mode, with_layers=False, host=host)
            predicted[batch] = (out.total_ms, out.low_ms, out.high_ms)
        return predicted[batch]

    return LatencyModel(lambda batch: prediction(batch)[0], spread,
                        interval_ms=lambda batch: prediction(batch)[1:])
