"""What is known about every tensor of an ONNX graph once its shapes are inferred.

The rules in onnx_ops and the kernel detection in onnx_patterns read the graph only through
``GraphTensors``: shapes, element types, producers and consumers, and which tensors are static
(known without running the model). onnx is imported inside the methods.
"""

from __future__ import annotations

import math
from typing import Any

from predictor.importers.onnx_load import RANDOM_OPS, constant_value, known_shapes, standard_opset

INT_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # uint8..int64, bool, uint32, uint64 (TensorProto codes)


class GraphTensors:
    """Shapes, types, producers, consumers and constness of every tensor after shape inference."""

    def __init__(self, model: Any, inferred: Any, values: dict[str, Any], batch: int) -> None:
        from onnx import numpy_helper

        self._to_array = numpy_helper.to_array
        graph = model.graph
        self.nodes = list(graph.node)
        self.batch = batch
        self.values = values
        self.opset = standard_opset(model)
        #: indices of nodes fused into attention (their inputs are read strided, as views)
        self.attention: set[int] = set()
        self.shapes = known_shapes(inferred)
        self.types: dict[str, int] = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            self.types[vi.name] = vi.type.tensor_type.elem_type
        self.weights = {t.name: t for t in graph.initializer}
        for t in graph.initializer:
            self.types[t.name] = t.data_type
        self.constants = {n.output[0]: n for n in self.nodes if n.op_type == "Constant" and n.output}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                self.producer[o] = i
            for x in n.input:
                self.consumers.setdefault(x, []).append(i)
        for o in graph.output:
            self.consumers.setdefault(o.name, []).append(-1)  # a graph output cannot be fused away
        # Static: known without running the model (weights, constants, shapes and their arithmetic).
        self.static = set(self.weights) | set(self.constants)
        for n in self.nodes:
            ins = [x for x in n.input if x]
            if n.op_type in ("Shape", "Size") or (ins and n.op_type not in RANDOM_OPS
                                                   and all(x in self.static for x in ins)):
                self.static.update(n.output)

    def shape(self, name: str) -> list[int] | None:
        return self.shapes.get(name)

    def numel(self, name: str) -> int | None:
        s = self.shape(name)
        return None if s is None else math.prod(s)

    def per_sample(self, dims: list[int]) -> int:
        """Elements of ``dims`` per sample, at least 1 (robust to a batch folded into dim 0)."""
        return max(1, math.prod(dims) // self.batch)

    def shape_like(self, name: str) -> bool:
        """A shape tensor: static, or a small integer tensor (rank <= 1)."""
        s = self.shape(name)
        return name in self.static or (self.types.get(name) in INT_TYPES and s is not None and len(s) <= 1)

    def value(self, name: str) -> Any:
        """The numpy value of a weight, Constant or folded shape tensor (up to 2**20 elements), else None."""
        if name in self.values:
            return self.values[name]
        if (self.numel(name) or 0) > 1 << 20:
            return None
        if name in self.weights:
            return self._to_array(self.weights[name])
        node = self.constants.get(name)
        return None if node is None else constant_value(node)

    def scalar(self, name: str) -> float | None:
        v = self.value(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def only_consumer(self, name: str) -> int | None:
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0] >= 0 else None
