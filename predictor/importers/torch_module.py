"""Import a torch module into the graph IR by running one forward and recording its calls.

Every top-level torch call becomes a node, in issue order: the order an eager forward issues
them, which is what the eager composition needs. torch is imported lazily.
"""

from __future__ import annotations

from typing import Any

from predictor.graph import Graph, Node
from predictor.importers.torch_calls import _tensors, attention_block, call_recorder, classify, hidden_kernels
from predictor.importers.torch_capture import capture_path_forced


def graph_from_module(model: Any, example: Any, name: str, source: str = "torch") -> Graph:
    """Trace ``model(example)`` on its device (CPU is fine: only shapes matter) into a Graph.

    Where the captured forward runs other attention kernels than the eager one (transformers
    models), the kernels' ``capture_variant`` says so: the forward is traced a second time as
    if a CUDA stream were capturing, and its attention calls are matched in order.
    """
    model = model.eval()
    graph = _trace(model, example, name, source)
    with capture_path_forced():
        captured = _trace(model, example, name, source)
    _mark_capture_variants(graph, captured)
    graph.check()
    return graph


def _mark_capture_variants(graph: Graph, captured: Graph) -> None:
    """Copy the captured trace's sdpa variants onto the eager graph's sdpa nodes, in order."""
    eager_sdpa = [n for n in graph.nodes if n.family == "sdpa"]
    captured_sdpa = [n for n in captured.nodes if n.family == "sdpa"]
    if len(eager_sdpa) != len(captured_sdpa):
        graph.meta["capture_trace"] = (f"the captured trace has {len(captured_sdpa)} attention calls, the "
                                       f"eager one {len(eager_sdpa)}: capture variants not recorded")
        return
    for eager_node, captured_node in zip(eager_sdpa, captured_sdpa):
        if captured_node.variant != eager_node.variant and captured_node.params == eager_node.params:
            eager_node.capture_variant = captured_node.variant


def _trace(model: Any, example: Any, name: str, source: str) -> Graph:
    """One forward, recorded call by call."""
    import torch

    nodes: list[Node] = []
    batch = int(example.shape[0]) if isinstance(example, torch.Tensor) and example.dim() else 1

    def on_call(op: str, args: tuple, kwargs: dict, out: Any) -> None:
        block = attention_block(op, args)
        if block is not None:  # one call, several kernels: each its own node
            index = len(nodes)
            # Each part keeps a dispatch of its own: the fused call runs three aten operators
            # (backend selection included), not three bare launches (ViT's eager runs say so).
            for part, fields in zip(("qkv", "attention", "out_proj"), block):
                nodes.append(Node(name=f"{index}:{op}/{part}", op=op, merged=[f"{index}:{op}"], **fields))
            return
        fields = classify(op, args, kwargs, out, batch)
        if fields is None:
            return
        index = len(nodes)
        if fields["kind"] == "kernel":  # copies the call makes before its own kernel, in order
            for j, hidden in enumerate(hidden_kernels(op, args, kwargs, batch)):
                nodes.append(Node(name=f"{index}:{op}/copy{j}", op=op, launched_by=f"{index}:{op}", **hidden))
        outs = _tensors(out)
        nodes.append(Node(
            name=f"{index}:{op}", op=op,
            outputs=[list(t.shape) for t in outs[:2]],
            dtype=str(outs[0].dtype).replace("torch.", "") if outs else "",
            **fields,
        ))

    with torch.inference_mode(), call_recorder(on_call):
        model(example)
    return Graph(name=name, nodes=nodes, batch=int(batch), source=source)
