"""The several-instance server's loop, on the CPU: instances that take a fixed time per batch stand in
for CUDA graphs replaying on their own streams (the GPU run is `benchmarks/instance_serving.sh`)."""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest

from collectors.batching_server import REQUEST_DTYPE, ServerSettings
from collectors.instance_serving import instance_setting, serve_instances


class TimedInstances:
    """k instances whose batch of b takes ``seconds(b)`` of wall time, concurrently."""

    def __init__(self, count: int, seconds: float) -> None:
        self.name, self.precision, self.seconds = "timed", "fp16", seconds
        self.ends = [0.0] * count
        self.launched: list[tuple[int, int]] = []

    def launch(self, instance: int, batch: int) -> None:
        self.ends[instance] = time.perf_counter() + self.seconds
        self.launched.append((instance, batch))

    def done(self, instance: int) -> bool:
        return time.perf_counter() >= self.ends[instance]


def test_setting_names_carry_the_instances_and_bad_ones_are_refused() -> None:
    assert instance_setting("mb4-nodelay-x2") == ServerSettings("mb4-nodelay-x2", 4, instances=2)
    assert instance_setting("mb4-nodelay").instances == 1
    for bad in ("mb4-x2", "mb0-nodelay-x2", "mb4-nodelay-x5", "mb4-delay500us-x2", "mb4-pref2-nodelay-x2"):
        with pytest.raises(ValueError, match="setting"):
            instance_setting(bad)


def test_free_instances_take_queued_requests_at_once_up_to_the_max_batch() -> None:
    # six requests at once, two instances of max batch 2, 20 ms a batch: two batches at once, then one
    receiving, sending = multiprocessing.Pipe(duplex=False)
    message = np.zeros(6, dtype=REQUEST_DTYPE)
    message["index"] = np.arange(6)
    sending.send_bytes(message.tobytes())
    model = TimedInstances(2, 0.02)
    run = serve_instances(receiving, model, instance_setting("mb2-nodelay-x2"), 6,  # type: ignore[arg-type]
                          timeout_s=5.0)
    assert sorted(model.launched) == [(0, 2), (0, 2), (1, 2)]
    assert (run.batch_size == 2).all()
    waits = run.finish_s - run.start_s
    assert (waits >= 0.02).all() and run.start_s[4] - run.start_s[0] >= 0.02  # the third batch waited for one
    assert run.start_s[2] - run.start_s[0] < 0.01  # the second started beside the first
