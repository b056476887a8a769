"""Import a torch module into the graph IR by running one forward and recording its calls.

Every top-level torch call becomes a node, in issue order: the order an eager forward issues
them, which is what the eager composition needs. torch is imported lazily.
"""

from __future__ import annotations

from typing import Any

from predictor.graph import Graph, Node
from predictor.importers.torch_calls import _tensors, attention_block, call_recorder, classify


def graph_from_module(model: Any, example: Any, name: str, source: str = "torch") -> Graph:
    """Trace ``model(example)`` on its device (CPU is fine: only shapes matter) into a Graph."""
    import torch

    nodes: list[Node] = []
    batch = int(example.shape[0]) if isinstance(example, torch.Tensor) and example.dim() else 1

    def on_call(op: str, args: tuple, kwargs: dict, out: Any) -> None:
        block = attention_block(op, args)
        if block is not None:  # one call, several kernels: each its own node
            index = len(nodes)
            for part, fields in zip(("qkv", "attention", "out_proj"), block):
                nodes.append(Node(name=f"{index}:{op}/{part}", op=op, merged=[f"{index}:{op}"], **fields))
            return
        fields = classify(op, args, kwargs, out, batch)
        if fields is None:
            return
        outs = _tensors(out)
        nodes.append(Node(
            name=f"{len(nodes)}:{op}", op=op,
            outputs=[list(t.shape) for t in outs[:2]],
            dtype=str(outs[0].dtype).replace("torch.", "") if outs else "",
            **fields,
        ))

    model = model.eval()
    with torch.inference_mode(), call_recorder(on_call):
        model(example)
    graph = Graph(name=name, nodes=nodes, batch=int(batch), source=source)
    graph.check()
    return graph
