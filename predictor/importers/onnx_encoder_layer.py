"""``nn.TransformerEncoderLayer`` in an export, told by its parameters' names, costed as PyTorch
runs it.

In eval without grad, a batch-first ``nn.TransformerEncoderLayer`` with an even head count and a
ReLU or GELU feed-forward runs as one call, ``torch._transformer_encoder_layer_fwd``, given a mask
or not, float or boolean (unlike ``nn.MultiheadAttention``'s, the layer's fast path does not ask a
mask's dtype): its first feed-forward GEMM applies the activation in cuBLASLt's epilogue, so no
activation kernel runs (the torch importer's ``torch_fused.encoder_layer_block``). Otherwise the layer runs
its Python: ``self_attn``, ``dropout1``, the residual add, ``norm1``, ``linear1``, the activation,
``dropout``, ``linear2``, ``dropout2``: three dropout calls, no-ops in eval that still cost the
host a call each (the torch trace records them), which an export leaves out.

An export shows neither. Its nodes for the layer are nn.MultiheadAttention's (onnx_attention), an
Add, a LayerNormalization, a linear, the activation and another linear, in that order after the
attention whether the norms come first or last. What tells the module is its parameters' names,
which both exporters keep for biases: ``...self_attn.in_proj_bias``, ``...linear1.bias``,
``...linear2.bias``. Only the suffix is read: an exporter that shares identical initializers
names a later layer's by the first layer's (``nn.TransformerEncoder`` deep-copies one layer, so
an untrained stack has them). torchvision's ViT blocks have the same shape and take only the
attention's fast path; their names (``self_attention``, ``mlp.0``) do not match.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from predictor.importers.onnx_attention import reads_in_proj_bias
from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_module_calls import HiddenCall
from predictor.importers.onnx_ops import FAMILY_RULES, Hit, try_rule
from predictor.importers.onnx_patterns import FusedKernel, other
from predictor.importers.onnx_tensors import GraphTensors

#: the activations ``TransformerEncoderLayer.activation_relu_or_gelu`` accepts, as found here
FAST_ACTIVATIONS = ("Relu", "Gelu")

ENCODER_LAYERS = (
    "{fast} nn.TransformerEncoderLayer(s), told by their parameters' names (self_attn.in_proj_bias, "
    "linear1.bias, linear2.bias): costed as PyTorch runs them without grad, batch-first with an even head "
    "count and ReLU or GELU as one fused call (torch._transformer_encoder_layer_fwd: the activation "
    "in the first feed-forward GEMM's epilogue, no kernel of its own); {python} other(s) as their Python "
    "runs, with the three dropout calls an export leaves out")


@dataclass
class EncoderLayers:
    """What the encoder layers found change in the emitted graph."""

    #: layers costed as the fused call, and as their Python
    fast: int = 0
    python: int = 0
    #: the calls emitted after the node, or fused kernel, at each index (onnx_module_calls' form)
    calls_after: dict[int, list[tuple[HiddenCall, str]]] = field(default_factory=dict)

    def assumption(self) -> str | None:
        """The sentence ``graph.meta["assumptions"]`` gets, or None where no layer was found."""
        if not self.fast and not self.python:
            return None
        return ENCODER_LAYERS.format(fast=self.fast, python=self.python)


@dataclass(frozen=True)
class _Call:
    """One PyTorch call in the export: its nodes, the index it is emitted at (its key in the
    fused kernels, for one), what it returns, and its fused kernel if it is one."""

    indices: tuple[int, ...]
    at: int
    op: str
    output: str
    kernel: FusedKernel | None


#: node index -> (the key of the fused kernel holding it, that kernel)
Owners = dict[int, tuple[int, FusedKernel]]


def _call_of(t: GraphTensors, owner: Owners, i: int) -> _Call:
    if i in owner:
        key, f = owner[i]
        return _Call(tuple(f.indices), key, f.op, f.output, f)
    n = t.nodes[i]
    return _Call((i,), i, n.op_type if n.domain in STANDARD else "", str(n.output[0]), None)


def _readers(t: GraphTensors, owner: Owners, name: str) -> list[_Call]:
    """The calls reading tensor ``name`` (each once)."""
    calls: dict[int, _Call] = {}
    for u in t.users(name):
        if u >= 0:
            call = _call_of(t, owner, u)
            calls.setdefault(call.at, call)
    return list(calls.values())


def _bias_name(t: GraphTensors, call: _Call) -> str | None:
    """The bias a linear call adds: a fused MatMul+Add's, or a Gemm's third input."""
    if call.kernel is not None and call.op == "MatMul+Add":
        mm, add = call.indices
        return other(t.nodes[add], t.nodes[mm].output[0])
    n = t.nodes[call.indices[0]]
    return str(n.input[2]) if call.op == "Gemm" and len(n.input) > 2 else None


def _named_linear(t: GraphTensors, calls: list[_Call], suffix: str) -> _Call | None:
    return next((c for c in calls if (_bias_name(t, c) or "").endswith(suffix)), None)


def _only_reader(t: GraphTensors, owner: Owners, name: str) -> _Call | None:
    calls = _readers(t, owner, name)
    return calls[0] if len(calls) == 1 and -1 not in t.users(name) else None


def _layer(t: GraphTensors, owner: Owners, mha: FusedKernel) -> tuple[_Call, _Call, _Call] | None:
    """The layer's linear1, activation and linear2 after its attention ``mha``, or None where the
    export does not show an nn.TransformerEncoderLayer there."""
    if not reads_in_proj_bias(t, mha.indices):
        return None
    add = _only_reader(t, owner, mha.output)
    if add is None or add.op != "Add":
        return None
    norm = next((c for c in _readers(t, owner, add.output) if c.op == "LayerNormalization"), None)
    if norm is None:
        return None
    linear1 = _named_linear(t, _readers(t, owner, norm.output), "linear1.bias")
    if linear1 is None:
        return None
    activation = _only_reader(t, owner, linear1.output)
    if activation is None:
        return None
    linear2 = _only_reader(t, owner, activation.output)
    if linear2 is None or not (_bias_name(t, linear2) or "").endswith("linear2.bias"):
        return None
    return linear1, activation, linear2


def find_encoder_layers(t: GraphTensors, fused: dict[int, FusedKernel]) -> EncoderLayers:
    """Find every nn.TransformerEncoderLayer (see the module's docstring) and change ``fused`` in
    place for those PyTorch runs as one call: the activation joins the first feed-forward linear,
    emitted as that linear alone. The others get their dropout calls (``calls_after``)."""
    found = EncoderLayers()
    owner = {i: (key, f) for key, f in fused.items() for i in f.indices}
    for mha in [f for f in fused.values() if f.op == "MultiheadAttention"]:
        layer = _layer(t, owner, mha)
        if layer is None:
            continue
        linear1, activation, linear2 = layer
        if mha.fast_path and activation.op in FAST_ACTIVATIONS:  # (a mask of either dtype too)
            _fuse_activation(t, fused, owner, linear1, activation)
            found.fast += 1
            continue
        for call in (max(mha.indices), activation.at, linear2.at):  # (where each is emitted)
            found.calls_after.setdefault(call, []).append((HiddenCall("Dropout"), ""))
        found.python += 1
    return found


def _fuse_activation(t: GraphTensors, fused: dict[int, FusedKernel], owner: Owners,
                     linear1: _Call, activation: _Call) -> None:
    """linear1 and its activation become one fused kernel costed as the linear (with its bias),
    emitted where the linear is, under its name."""
    hit = linear1.kernel.hit if linear1.kernel is not None else _gemm_hit(t, linear1.indices[0])
    if hit is None:
        return
    for call in (linear1, activation):
        if call.kernel is not None:
            del fused[call.at]
    indices = sorted(set(linear1.indices) | set(activation.indices))
    merged = FusedKernel(indices, f"{linear1.op}+{activation.op}", (hit[0], hit[1], dict(hit[2])),
                         output=activation.output)
    fused[linear1.at] = merged
    owner.update({i: (linear1.at, merged) for i in indices})


def _gemm_hit(t: GraphTensors, i: int) -> Hit | None:
    """A Gemm node's linear hit (a Gemm that is no linear layer is left alone)."""
    n = t.nodes[i]
    hit: Hit | None = try_rule(FAMILY_RULES["Gemm"], t, n, node_attributes(n), None)
    return hit if hit is not None and hit[0] == "linear" else None
