"""What is known about every tensor of an ONNX graph once its shapes are inferred.

The rules in onnx_ops and the kernel detection in onnx_patterns read the graph only through
``GraphTensors``: shapes, element types, producers and consumers, which tensors are static (known
without running the model: weights, constants, shapes and what is computed from them only), which
of those are host values (shape arithmetic: small, computed by Python in PyTorch, never on the
GPU), and which static tensors hold one value everywhere (a mask that masks nothing). onnx is
imported inside the methods.
"""

from __future__ import annotations

import math
from typing import Any

from predictor.importers.onnx_load import RANDOM_OPS, constant_value, known_shapes, standard_opset

INT_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # uint8..int64, bool, uint32, uint64 (TensorProto codes)
#: A static tensor up to this many elements is a host value (a shape, an axis list, a scalar):
#: PyTorch computes it in Python, and no kernel ever runs on it.
HOST_ELEMENTS = 64
#: Ops that carry their input's single value to their output unchanged (or cast).
_UNIFORM_VIEWS = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice",
                  "Cast", "Tile", "Gather", "Dropout"}
_UNIFORM_MATH = {
    "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
    "Div": lambda a, b: a / b if b else None, "Equal": lambda a, b: a == b, "And": lambda a, b: a and b,
    "Or": lambda a, b: a or b, "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
    "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
}


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
        self.producer_name = model.producer_name
        #: which PyTorch exporter made the model (onnx_exporters.exporter), once asked
        self.made_by: str | None = None
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
        self.inputs = [vi.name for vi in graph.input if vi.name not in self.weights]
        self.outputs = {vi.name for vi in graph.output}
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
        self._uniform: dict[str, Any] = {}

    def shape(self, name: str) -> list[int] | None:
        return self.shapes.get(name)

    def numel(self, name: str) -> int | None:
        s = self.shape(name)
        return None if s is None else math.prod(s)

    def per_sample(self, dims: list[int]) -> int:
        """Elements of ``dims`` per sample, at least 1 (robust to a batch folded into dim 0)."""
        return max(1, math.prod(dims) // self.batch)

    def is_host(self, name: str) -> bool:
        """A host value: static and small (a shape, axes, a scalar), or a Shape/Size result.
        PyTorch computes these in Python; an ONNX node that makes one launches nothing."""
        if name not in self.static:
            return False
        i = self.producer.get(name)
        if i is not None and self.nodes[i].op_type in ("Shape", "Size"):
            return True
        n = self.numel(name)
        return n is not None and n <= HOST_ELEMENTS

    def is_scalar(self, name: str) -> bool:
        """A one-element static operand: a Python number in the PyTorch code."""
        return name in self.static and self.numel(name) == 1

    def shape_like(self, name: str) -> bool:
        """A shape tensor: static, or a small integer tensor (rank <= 1)."""
        s = self.shape(name)
        return name in self.static or (self.types.get(name) in INT_TYPES and s is not None and len(s) <= 1)

    def value(self, name: str) -> Any:
        """The numpy value of a weight, Constant or folded shape tensor (up to 2**20 elements) whose
        data is at hand (a large weight's data is never read), else None."""
        if name in self.values:
            return self.values[name]
        if (self.numel(name) or 0) > 1 << 20:
            return None
        try:
            if name in self.weights:
                return self._to_array(self.weights[name])
            node = self.constants.get(name)
            return None if node is None else constant_value(node)
        except Exception:  # a weight without its data (left out by the loader): unknown
            return None

    def scalar(self, name: str) -> float | None:
        v = self.value(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def uniform(self, name: str) -> Any:
        """The single value every element of a static tensor holds (a mask that masks nothing
        is all zeros or all True, whatever its size), else None."""
        if name in self._uniform:
            return self._uniform[name]
        self._uniform[name] = None  # a cycle cannot recurse forever
        value = self._find_uniform(name) if name in self.static else None
        self._uniform[name] = value
        return value

    def _find_uniform(self, name: str) -> Any:
        import numpy as np

        v = self.value(name)
        if v is not None:
            flat = np.asarray(v).reshape(-1)
            return flat[0].item() if flat.size and bool((flat == flat[0]).all()) else None
        i = self.producer.get(name)
        if i is None:
            return None
        n = self.nodes[i]
        ins = [x for x in n.input if x]
        if n.op_type == "ConstantOfShape":
            attr = next((a for a in n.attribute if a.name == "value"), None)
            return 0.0 if attr is None else self._to_array(attr.t).reshape(-1)[0].item()
        if n.op_type in _UNIFORM_VIEWS and ins:
            return self.uniform(ins[0])
        if n.op_type == "Where" and len(ins) == 3:
            cond = self.uniform(ins[0])
            if cond is None:
                a, b = self.uniform(ins[1]), self.uniform(ins[2])
                return a if a is not None and a == b else None
            return self.uniform(ins[1] if cond else ins[2])
        if n.op_type == "Not" and ins:
            x = self.uniform(ins[0])
            return None if x is None else not x
        if n.op_type in _UNIFORM_MATH and len(ins) == 2:
            a, b = self.uniform(ins[0]), self.uniform(ins[1])
            if a is None or b is None:
                return None
            try:
                return _UNIFORM_MATH[n.op_type](a, b)
            except (TypeError, ValueError, ArithmeticError):
                return None
        return None

    def users(self, name: str) -> list[int]:
        """The nodes reading ``name``'s values (-1 for a graph output): a Shape or Size node reads
        only its dims, which PyTorch knows without the tensor."""
        return [i for i in self.consumers.get(name, []) if i < 0 or self.nodes[i].op_type not in ("Shape", "Size")]

    def only_consumer(self, name: str) -> int | None:
        users = self.users(name)
        return users[0] if len(users) == 1 and users[0] >= 0 else None
