"""Import a torch module into the graph IR by running one forward and recording its calls.

Every top-level torch call becomes a node, in issue order: the order an eager forward issues
them, which is what the eager composition needs; the copies and bias adds a call runs beside
its own kernel are nodes of their own, launched by it (those that run only from batch 2 on
say so: ``Node.min_batch``); a fused call (multi-head attention, a
transformer encoder layer's fast path) becomes a node per kernel it launches. The forward runs
as a measured one does: under ``torch.inference_mode()``, taking the fast paths a measured
forward takes. torch is imported lazily.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from predictor.graph import Graph, Node
from predictor.importers.torch_calls import (
    call_recorder,
    classify,
    hidden_kernels,
    tensors_in,
    traced_module_state,
    trailing_kernels,
)
from predictor.importers.torch_capture import capture_path_forced
from predictor.importers.torch_fused import fused_block, measured_fast_paths


def graph_from_module(model: Any, example: Any, name: str, source: str = "torch", batch_dim: int = 0) -> Graph:
    """Trace ``model(example)`` on its device (CPU is fine: only shapes matter) into a Graph.

    ``example`` is what the forward takes: one tensor; a tuple of positional arguments (``(x,
    mask)``); or a dict of keyword arguments (``{"input_ids": ids, "attention_mask": mask}``). The
    batch is the first tensor argument's size along ``batch_dim`` (a tuple was once passed whole
    as one argument and the batch taken as 1, so that every call's per-sample parameters held the
    whole example's batch).

    ``batch_dim`` is the example's batch axis: 1 for a sequence-first model ([sequence, batch,
    embed], ``nn.MultiheadAttention``'s and ``nn.TransformerEncoderLayer``'s default), whose
    calls' parameters are per sample of that batch (taking axis 0 made every norm and linear's
    rows per sample a share of the sequence, while the attention's were per sample of the batch).

    Where the captured forward runs other attention kernels than the eager one (transformers
    models), the kernels' ``capture_variant`` says so: the forward is traced a second time as
    if a CUDA stream were capturing, and its attention calls are matched in order.
    """
    model = model.eval()
    graph = _trace(model, example, name, source, batch_dim)
    with capture_path_forced():
        captured = _trace(model, example, name, source, batch_dim)
    return _with_capture_variants(graph, captured)


def _with_capture_variants(graph: Graph, captured: Graph) -> Graph:
    """The eager graph with the captured trace's sdpa variants on its sdpa nodes, in order (new
    nodes, so the catalogue checks each capture variant as the node is made)."""
    eager_sdpa = [i for i, n in enumerate(graph.nodes) if n.family == "sdpa"]
    captured_sdpa = [n for n in captured.nodes if n.family == "sdpa"]
    if len(eager_sdpa) != len(captured_sdpa):
        graph.meta["capture_trace"] = (f"the captured trace has {len(captured_sdpa)} attention calls, the "
                                       f"eager one {len(eager_sdpa)}: capture variants not recorded")
        return graph
    nodes = list(graph.nodes)
    for i, captured_node in zip(eager_sdpa, captured_sdpa):
        if captured_node.variant != nodes[i].variant and captured_node.params == nodes[i].params:
            nodes[i] = replace(nodes[i], capture_variant=captured_node.variant)
    return replace(graph, nodes=nodes)


def _trace(model: Any, example: Any, name: str, source: str, batch_dim: int) -> Graph:
    """One forward, recorded call by call."""
    import torch

    nodes: list[Node] = []
    batch = example_batch(example, batch_dim)

    def on_call(op: str, args: tuple, kwargs: dict, out: Any) -> None:
        block = fused_block(op, args, kwargs)
        if block is not None:  # one call, several kernels: each its own node
            index = len(nodes)
            # Each part keeps a dispatch of its own: the fused call runs ATen operators
            # (backend selection included), not bare launches (ViT's eager runs say so).
            for part, part_fields in block:
                nodes.append(Node(name=f"{index}:{op}/{part}", op=op, merged=[f"{index}:{op}"], **part_fields))
            return
        fields = classify(op, args, kwargs, out, batch)
        if fields is None:
            return
        index = len(nodes)
        if fields["kind"] == "kernel":  # copies the call makes before its own kernel, in order
            for j, hidden in enumerate(hidden_kernels(op, args, kwargs, batch)):
                nodes.append(Node(name=f"{index}:{op}/copy{j}", op=op, launched_by=f"{index}:{op}", **hidden))
        outs = tensors_in(out)
        nodes.append(Node(
            name=f"{index}:{op}", op=op,
            outputs=[list(t.shape) for t in outs[:2]],
            dtype=str(outs[0].dtype).replace("torch.", "") if outs else "",
            **fields,
        ))
        if fields["kind"] == "kernel":  # kernels the call runs after its own (a bias added apart)
            for j, trailing in enumerate(trailing_kernels(op, args, kwargs, out, batch)):
                nodes.append(Node(name=f"{index}:{op}/after{j}", op=op, launched_by=f"{index}:{op}", **trailing))

    # Measurement runs under inference_mode with no recorder, so fused fast paths run there:
    # the trace lets them run too (predictor.importers.torch_fused).
    args, kwargs = forward_arguments(example)
    with torch.inference_mode(), measured_fast_paths(), traced_module_state(model), call_recorder(on_call):
        model(*args, **kwargs)
    return Graph(name=name, nodes=nodes, batch=int(batch), source=source)


def forward_arguments(example: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword arguments of the forward an example stands for: a dict is the
    keyword arguments, a tuple the positional ones, anything else the one argument."""
    if isinstance(example, dict):
        return (), example
    return (example if isinstance(example, tuple) else (example,)), {}


def example_batch(example: Any, batch_dim: int = 0) -> int:
    """The batch an example holds: its first tensor argument's size along ``batch_dim`` (1 for
    an example without tensors). Other arguments are not held to it: a mask may be [sequence,
    sequence] (``nn.MultiheadAttention``'s ``attn_mask``) or broadcast from a batch of 1."""
    import torch

    args, kwargs = forward_arguments(example)
    named = list(kwargs.items()) if kwargs else [
        (f"argument {i}" if isinstance(example, tuple) else "the example", v) for i, v in enumerate(args)]
    first = next(((k, v) for k, v in named if isinstance(v, torch.Tensor) and v.dim()), None)
    if first is None:
        return 1
    name, tensor = first
    if not -tensor.dim() <= batch_dim < tensor.dim():
        raise ValueError(f"batch_dim {batch_dim} is not an axis of {name}, of shape {list(tensor.shape)}")
    return int(tensor.shape[batch_dim])
