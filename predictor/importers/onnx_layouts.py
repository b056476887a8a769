"""The memory layout PyTorch would give every tensor of an ONNX graph, walked in graph order.

An export's Reshape, Transpose, Expand, Slice, Squeeze and Unsqueeze nodes are PyTorch views:
free, unless the tensor they view cannot be viewed so, in which case ``reshape`` copies. Which is
which depends on strides, which ONNX does not keep; this pass replays them (onnx_strides) so
that the graph assembly knows which Reshape copies, which batched MatMul copies an operand, and
which elementwise kernels read a strided operand. A tensor whose shape is unknown is taken as
contiguous.
"""

from __future__ import annotations

from typing import Any

from predictor.importers import onnx_strides as st
from predictor.importers.onnx_load import node_attributes
from predictor.importers.onnx_tensors import GraphTensors

#: ONNX ops PyTorch runs as views of their first input.
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice", "Split", "Identity",
            "Dropout"}
#: Elementwise ops: their output takes the layout TensorIterator gives it.
ELEMENTWISE_LAYOUT_OPS = {
    "Add", "Mul", "Sub", "Div", "Pow", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Erf", "Sin", "Cos",
    "Cast", "CastLike", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "Celu", "Mish", "PRelu",
    "ThresholdedRelu", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "And", "Or", "Xor", "Not", "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf", "Mod",
    "Relu", "Gelu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Clip",
}


#: Kernels whose output keeps a channels-last input's memory format (conv, norm, pooling).
CHANNELS_LAST_OPS = {"Conv", "BatchNormalization", "MaxPool", "AveragePool", "InstanceNormalization"}


def node_axes(t: GraphTensors, n: Any, attrs: dict[str, Any]) -> list[int] | None:
    """A node's axes: the attribute (older opsets) or the second input's folded value."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(n.input) > 1 and n.input[1]:
        v = t.value(n.input[1])
        return None if v is None else [int(a) for a in v.reshape(-1)]
    return None


class TensorLayouts:
    """Strides per tensor name, and per node whether a reshape copies (``copies``)."""

    def __init__(self, t: GraphTensors, bshd_outputs: set[str] | None = None, fresh: set[str] | None = None) -> None:
        """``bshd_outputs``: tensors that fused attention writes as [batch, seq, heads, dim] in
        memory and returns as [batch, heads, seq, dim] (PyTorch's fused sdpa kernels do);
        ``fresh``: tensors a fused call writes contiguous, whatever views the export shows inside."""
        self.t = t
        self.strides: dict[str, st.Strides] = {}
        #: Reshape/Flatten nodes (by index) whose input cannot be viewed so: reshape copies it
        self.copies: set[int] = set()
        bshd, made = bshd_outputs or set(), fresh or set()
        for i, n in enumerate(t.nodes):
            try:
                self._visit(i, n)
            except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
                pass  # an odd node: its outputs stay contiguous
            for o in n.output:
                s = t.shape(o)
                if o in made:
                    self.strides.pop(o, None)
                if o in bshd and s is not None and len(s) == 4:
                    b, h, q, d = s
                    self.strides[o] = (q * h * d, d, h * d, 1)

    def of(self, name: str) -> tuple[list[int], st.Strides] | None:
        """(shape, strides) of a tensor, or None where its shape is unknown."""
        s = self.t.shape(name)
        if s is None:
            return None
        strides = self.strides.get(name)
        if strides is None or len(strides) != len(s):
            strides = st.contiguous(s)
        return s, strides

    def _visit(self, i: int, n: Any) -> None:
        t = self.t
        if not n.output or not n.input:
            return
        out = t.shape(n.output[0])
        src = self.of(n.input[0])
        if out is None or src is None:
            return
        shape, strides = src
        op = n.op_type
        a = node_attributes(n)
        new: st.Strides | None
        if op in ("Identity", "Dropout"):
            new = strides
        elif op == "Transpose":
            perm = a.get("perm") or list(range(len(shape) - 1, -1, -1))
            new = st.permute(strides, perm)
        elif op in ("Reshape", "Flatten"):
            new = st.view_strides(shape, strides, out)
            if new is None:
                self.copies.add(i)
        elif op == "Squeeze":
            axes = node_axes(t, n, a)
            drop = {x % len(shape) for x in axes} if axes is not None else {d for d, v in enumerate(shape) if v == 1}
            new = tuple(s for d, s in enumerate(strides) if d not in drop)
        elif op == "Unsqueeze":
            axes = sorted(x % len(out) for x in (node_axes(t, n, a) or []))
            cur_shape, cur = list(shape), strides
            for d in axes:
                cur = st.unsqueeze(cur_shape, cur, d)
                cur_shape.insert(d, 1)
            new = cur
        elif op == "Expand":
            new = st.broadcast_strides(shape, strides, out)
        elif op in ("Slice", "Split"):
            new = strides  # a slice keeps the strides (steps other than 1 are rare in exports)
            if op == "Slice" and len(n.input) > 4 and n.input[4]:
                steps, axes = t.value(n.input[4]), t.value(n.input[3]) if n.input[3] else None
                if steps is not None:
                    ax = [int(x) for x in axes.reshape(-1)] if axes is not None else list(range(steps.size))
                    scaled = list(strides)
                    for d, step in zip(ax, steps.reshape(-1)):
                        scaled[d % len(shape)] *= int(step)
                    new = tuple(scaled)
            for o in n.output[1:]:
                self.strides[o] = new
        elif op == "Gather" and n.input[1] in t.static and t.shape(n.input[1]) == []:
            axis = a.get("axis", 0) % len(shape)  # select(): the dim is gone
            new = tuple(s for d, s in enumerate(strides) if d != axis)
        elif op in CHANNELS_LAST_OPS:
            if not self.channels_last(n.input[0]) or len(out) != 4:
                return
            new = st.channels_last(out)  # cuDNN keeps a channels-last input's format
        elif op in ELEMENTWISE_LAYOUT_OPS:
            operands = [self.of(x) for x in n.input if x and not t.is_scalar(x)]
            new = st.elementwise_out_strides(out, [o for o in operands if o is not None])
        else:
            return  # a kernel that writes a new contiguous tensor
        if new is not None and len(new) == len(out):
            self.strides[n.output[0]] = new

    def elementwise_layout(self, inputs: list[str], output: str) -> str:
        """'strided' or 'contiguous', as the torch importer decides for an elementwise call."""
        out = self.t.shape(output)
        operands = [self.of(x) for x in inputs if x]
        if out is None or any(o is None for o in operands):
            return "contiguous"
        return st.elementwise_layout([o for o in operands if o is not None], out)

    def copy_blocks(self, name: str) -> tuple[int, int, int] | None:
        """The transpose family's (d1, d2, d3) of copying a tensor into row-major order, where
        its dims are two blocks swapped above a short run (the torch importer's ``_copy``)."""
        o = self.of(name)
        if o is None or len(o[0]) < 2 or o[0][0] != self.t.batch:
            return None
        return st.uncoalesced_blocks(o[0], o[1], st.contiguous(o[0]))

    def transposed_operand(self, inputs: list[str], output: str) -> tuple[int, int, int] | None:
        """The transpose family's (d1, d2, d3) of an elementwise op whose full-size operand is
        laid out with two blocks swapped against its output (the torch importer's
        ``_transposed_add``), or None. An initializer (a position table) is broadcast over the
        batch, even where a batch of 1 gives it the output's shape."""
        out = self.of(output)
        if out is None or len(out[0]) < 2 or out[0][0] != self.t.batch:
            return None
        for x in inputs:
            o = self.of(x) if x and x not in self.t.static else None
            if o is not None and list(o[0]) == list(out[0]):
                blocks = st.uncoalesced_blocks(out[0], out[1], o[1])
                if blocks is not None:
                    return blocks
        return None

    def channels_last(self, name: str) -> bool:
        """A 4-d tensor laid out channels-last and not contiguous (the torch importer's
        ``_channels_last``): PyTorch runs convolutions, norms and pooling on it in NHWC."""
        o = self.of(name)
        return o is not None and len(o[0]) == 4 and not st.is_contiguous(*o) and st.is_channels_last(*o)

    def image_layout(self, names: list[str], layouts: tuple[str, ...]) -> str:
        """The layout of a family with an image layout (torch_calls._layout): 'nhwc' for a
        channels-last first input, 'strided' (where the family has it) when any input is not
        contiguous, else 'nchw'."""
        if names and self.channels_last(names[0]):
            return "nhwc"
        shapes = [self.of(x) for x in names]
        if "strided" in layouts and any(o is not None and not st.is_contiguous(*o) for o in shapes):
            return "strided"
        return "nchw"

    def is_dense(self, name: str) -> bool:
        o = self.of(name)
        return o is None or st.is_dense(*o)

    def matmul_copies(self, a: str, b: str) -> list[int]:
        """Elements of the operands a batched ``torch.matmul`` would copy first."""
        x, y = self.of(a), self.of(b)
        if x is None or y is None or len(x[0]) < 3 or len(y[0]) < 3:
            return []
        return st.matmul_copies(x, y)

    def memory_order(self, name: str) -> list[int] | None:
        """The dims of a tensor from outermost to innermost in memory (None: shape unknown)."""
        o = self.of(name)
        if o is None:
            return None
        shape, strides = o
        return sorted(range(len(shape)), key=lambda d: (-strides[d], d))
