"""What PyTorch's exporters leave out of an export that PyTorch still runs: a folded BatchNorm, a
bias that was all zeros.

In eval, both of PyTorch's exporters fold a BatchNorm that follows a convolution into the
convolution's weights, while PyTorch runs ``conv2d`` and then ``batch_norm`` (two kernels, two
calls). The fold leaves a trace of its own in each exporter's output:

- TorchScript (``dynamo=False``): the folded weights are constants the exporter made, named
  ``onnx::Conv_<n>``, where a module's own parameters keep their path (``layer1.0.conv1.weight``).
  Deduplicated weights reach the Conv through Identity nodes, followed back here.
- dynamo (``torch.export`` then onnxscript's optimizer, ``FuseBatchNormIntoConv``): the Conv
  writes the value the BatchNorm wrote, ``getitem*`` (an eval BatchNorm returns a tuple in the
  exported program), or a bias named after the weight (``<weight>_bias``). The fold names the bias
  it makes so only for a convolution that had none; one that had a bias of its own (VGG's
  ``features.0.bias``) keeps that bias's name, with the folded values in it.

The dynamo exporter's optimizer also removes a Conv's or Gemm's bias that is all zeros
(onnxscript's ``RemoveZeroBias``), which PyTorch would still add. That leaves no trace (a Conv
made without a bias looks the same), and only a model whose biases are zeros is affected (an
untrained one whose code initialises them so, as torchvision does): such a Conv is costed as it
is shown, without the bias. The zoo's exports are made ``as_trained`` (collectors.onnx_export),
so that none of theirs is; the NAS modules' biases are torch's random ones.

The fold's traces are naming conventions of the exporters, not part of ONNX: an export from elsewhere, or
renamed, shows no folded BatchNorm and is costed as its Conv alone. Whether the convolution had a
bias of its own is seen in a dynamo export (above); in a TorchScript one it cannot be told (the
fold's bias is an ``onnx::Conv_<n>`` constant either way): torchvision's convolutions before a norm
mostly have none (VGG's have one), and none is assumed. Each assumption made is returned as a
sentence for ``graph.meta``.
"""

from __future__ import annotations

import re
from typing import Any

from predictor.importers.onnx_tensors import GraphTensors

_DYNAMO_BN_VALUE = re.compile(r"^getitem(_\d+)?$")


def exporter(t: GraphTensors) -> str:
    """'dynamo', 'legacy' (TorchScript) or '' for an export PyTorch did not make (kept on ``t``)."""
    if t.made_by is None:
        named = [n.name for n in t.nodes if n.name]
        if t.producer_name != "pytorch":
            t.made_by = ""
        elif named and sum(nm.startswith("node_") for nm in named) * 2 > len(named):
            t.made_by = "dynamo"
        else:
            t.made_by = "legacy"
    return t.made_by


def _source(t: GraphTensors, name: str) -> str:
    """Follow Identity nodes back to the tensor they alias."""
    for _ in range(16):
        i = t.producer.get(name)
        if i is None or t.nodes[i].op_type != "Identity":
            return name
        name = str(t.nodes[i].input[0])
    return name


def folded_batch_norm(t: GraphTensors, node: Any) -> bool:
    """Whether ``node`` (a Conv) carries a BatchNorm that the exporter folded."""
    made_by = exporter(t)
    if node.op_type != "Conv" or len(node.input) < 2:
        return False
    weight = _source(t, str(node.input[1]))
    if made_by == "legacy":
        return weight in t.weights and weight.startswith("onnx::Conv_")
    if made_by == "dynamo":
        bias = _source(t, str(node.input[2])) if len(node.input) > 2 and node.input[2] else ""
        return bool(_DYNAMO_BN_VALUE.match(str(node.output[0]))) or bias == f"{weight}_bias"
    return False


def has_bias(t: GraphTensors, node: Any) -> bool:
    """Whether PyTorch runs ``node`` (a Conv or Gemm) with a bias: the one it shows, but for a Conv
    carrying a folded BatchNorm only the bias it had before the fold (dynamo: one not named
    ``<weight>_bias``; TorchScript: never, as it cannot be told)."""
    shown = len(node.input) > 2 and bool(node.input[2])
    if shown and node.op_type == "Conv" and folded_batch_norm(t, node):
        return exporter(t) == "dynamo" and _source(t, str(node.input[2])) != f"{_source(t, str(node.input[1]))}_bias"
    return shown


FOLDED_BN_ASSUMPTION = ("{count} convolution(s) carry a BatchNorm the {made_by} exporter folded into them "
                        "(seen from its weight and value names): each is costed as PyTorch runs it in eval, "
                        "the convolution (with a bias of its own where the export shows one; a TorchScript "
                        "export cannot, and none is assumed), then batch_norm")
