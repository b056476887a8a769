"""How many model instances one GPU's memory holds: the cap on the instances a capacity plan weighs.

Each instance Triton runs holds its own copy of the model's weights and its own activations (and, for
a CUDA graph, the memory its captured graphs keep), while the process's CUDA context and libraries are
paid once (instances in one process, as PyTriton's in-process callables and libtorch's backend run
them). So k instances need ``k x (weights + activations at the largest batch) + workspace``, each part
as ``predictor.memory`` estimates it for hardware selection (weights within 0.6% of PyTorch's on the
H200; activations 0.47-1.81x the measured peaks at batch 32: an estimate, not a guarantee).
"""

from __future__ import annotations

from collections.abc import Sequence

from predictor.capacity.planner import weighed_instances
from predictor.devices import DeviceSpec
from predictor.graph import Graph
from predictor.memory import memory_estimate


def instances_that_fit(graph: Graph, device: DeviceSpec, max_batch: int, precision: str, mode: str) -> int:
    """How many instances of ``graph``, each running batches of up to ``max_batch`` at ``precision`` in
    ``mode``, ``device``'s memory holds beside one process's workspace (0 where not even one does)."""
    estimate = memory_estimate(graph, max_batch, precision, mode)
    per_instance = max(1, estimate.weights_bytes + estimate.activations_bytes)
    return max(0, (device.memory_bytes - estimate.workspace_bytes) // per_instance)


def instances_asked(mode: str, scheduler: str, max_instances: int | None, batch_limit: int | None) -> tuple[int, ...]:
    """The instance counts asked for (``planner.weighed_instances``), before the memory's cap: one for an
    eager plan and under Triton's documented rule (``instances_to_weigh`` says why)."""
    if mode != "cudagraph" or scheduler != "triton":
        return (1,)
    return weighed_instances(max_instances, batch_limit)


def instances_to_weigh(graph: Graph, device: DeviceSpec, precision: str, mode: str, max_batch: int,
                       max_instances: int | None, batch_limit: int | None,
                       scheduler: str = "triton") -> tuple[int, ...]:
    """The instance counts a plan of ``graph`` on ``device`` weighs (``planner.weighed_instances``: the
    limit asked, or its default), none that the memory would not hold at ``max_batch`` (its largest).
    One only for an eager plan (the sharing was measured on CUDA graphs; an eager forward's host is
    another question) and under Triton's documented rule (``scheduler="rule"``: several instances run
    on SimPy's event loop there, which cannot give a run up early, and would cost a plan 5-10x its
    time); the graph must predict at ``precision`` (``predictor.memory`` raises otherwise)."""
    asked = instances_asked(mode, scheduler, max_instances, batch_limit)
    if len(asked) == 1:
        return asked
    return weighed_instances(max_instances, batch_limit, instances_that_fit(graph, device, max_batch, precision, mode))


__all__: Sequence[str] = ["instances_asked", "instances_that_fit", "instances_to_weigh"]
