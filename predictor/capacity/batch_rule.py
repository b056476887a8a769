"""Triton's dynamic-batching rule: how many queued requests a free model instance takes now.

One definition, used by the simulator (:mod:`predictor.capacity.simulator`) and by the real
batching server that checks it on a GPU (:mod:`collectors.batching_server`), so that the check
compares queueing and service times, not two readings of the rule. The rule, as Triton documents
it (https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/batcher.html):

1. if a preferred batch size can be formed (some preferred size <= queued requests), send the
   largest such size at once;
2. without preferred sizes, if ``max_batch`` requests are queued, send ``max_batch`` at once;
3. otherwise, if the oldest queued request has waited ``max_queue_delay_us``, send what is there,
   up to ``max_batch``;
4. otherwise send nothing yet (0): wait for an arrival, a free instance or the delay to run out.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Seconds of slack when comparing a clock with a deadline (float sums of times are not exact).
DEADLINE_SLACK_S = 1e-12


def batch_to_send(queued: int, oldest_waited_s: float, max_batch: int, preferred: Sequence[int],
                  max_queue_delay_s: float) -> int:
    """The batch a free instance sends now under Triton's rule (0: wait), given ``queued`` requests
    whose oldest has waited ``oldest_waited_s``; ``preferred`` is sorted ascending."""
    if queued <= 0:
        return 0
    if preferred:
        fits = [p for p in preferred if p <= queued]
        if fits:
            return fits[-1]
    elif queued >= max_batch:
        return max_batch
    if oldest_waited_s + DEADLINE_SLACK_S >= max_queue_delay_s:
        return min(queued, max_batch)
    return 0
