"""A measured server's host pauses, read off its own batches, for the simulator to replay.

``predictor.capacity.host_stalls`` models the pauses; this module finds them in a serving folder
(``training.serving_check.ServingData``): each load's batches in the order they ran, each one's
time against its size's median, runs of stalled batches as episodes. The simulator is then given
the batch times without the stalled batches (``service_without_stalls``) and the pauses apart, in
wall-clock time, so that a pause holds every request that arrives during it, as it did on the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from predictor.capacity.host_stalls import STALLED_OVER, StalledBatches, stalls_of_batches
from training.load_batches import load_batches
from training.serving_check import ServingData, TableLatency, measured_service, simulated_service

#: the pauses are read from loads up to this level of the setting's capacity (where issue #14's
#: p99 target applies): above it the server's own backlog slows its batches (on the first two Triton
#: sets' hosts 7 of the 9 stalled stretches came in the 22 loads at 0.85 and 0.9, 2 in the 58 loads
#: up to 0.8), and that is the load, not the host pausing
PAUSES_UP_TO_LEVEL = 0.8


def batch_series(data: ServingData, model: str, max_level: float = math.inf
                 ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per load of ``model`` up to ``max_level``: its batches' (start s, time s, size), in the order
    they ran (the server's batch start and finish: Triton's COMPUTE_START and COMPUTE_END), of
    settings with one instance, whose batches never overlap (beside another instance's a batch is
    slowed by the sharing, not by a pause of the host)."""
    series = []
    for name, setting, level, frame in data.loads():
        if name != model or level > max_level + 1e-9 or data.settings[setting].instances > 1:
            continue
        batches = load_batches(frame["start_us"].to_numpy(dtype=np.int64), frame["finish_us"].to_numpy(dtype=np.int64))
        series.append((batches.start * 1e-6, (batches.finish - batches.start) * 1e-6, batches.size))
    return series


def host_stalls(data: ServingData, model: str, timed: TableLatency,
                max_level: float = PAUSES_UP_TO_LEVEL) -> StalledBatches:
    """The pauses of the host while it served ``model``'s loads up to ``max_level``; ``timed`` is
    that model's ``measured_service`` (each size's median batch time)."""
    medians_s = {b: m * 1e-3 for b, m in timed.medians_ms.items()}
    return stalls_of_batches(batch_series(data, model, max_level), medians_s)


def service_without_stalls(service: pd.DataFrame, timed: TableLatency) -> pd.DataFrame:
    """``service``'s rows (one model's batch times) less the stalled ones, by the rule
    ``stalls_of_batches`` uses: what the batches take when the host does not pause."""
    medians_s = service["batch"].map(lambda b: timed.medians_ms[int(b)] * 1e-3)
    return service[service["service_s"] <= STALLED_OVER * medians_s]


def paused_services(data: ServingData, timed: Mapping[str, TableLatency]
                    ) -> tuple[dict[str, StalledBatches], dict[str, TableLatency]]:
    """Per model of ``data``: its host's pauses (``host_stalls``), and the service the simulator is
    given beside them (``simulated_service`` of the batch times without the stalled ones); ``timed``
    is each model's ``measured_service``."""
    found = {m: host_stalls(data, m, timed[m]) for m in data.models}
    services = {m: simulated_service(data, m, measured_service(
        service_without_stalls(data.service[data.service["model"] == m], timed[m]))) for m in data.models}
    return found, services


__all__: Sequence[str] = ["PAUSES_UP_TO_LEVEL", "batch_series", "host_stalls", "paused_services",
                          "service_without_stalls"]
