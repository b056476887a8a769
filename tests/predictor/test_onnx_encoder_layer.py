"""nn.TransformerEncoderLayer in an export, told by its parameters' names (onnx_encoder_layer):
the graph is the calls PyTorch makes for it, node for node as the torch importer records them,
on stacks exported here with the TorchScript exporter."""

from __future__ import annotations

from typing import Any

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from predictor.graph import Graph  # noqa: E402
from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402
from predictor.importers.torch_module import graph_from_module  # noqa: E402
from tests.predictor.parity_helpers import torchscript_export  # noqa: E402


def export(module: nn.Module, example: torch.Tensor) -> bytes:
    return torchscript_export(module, example, dynamic_batch=True)


def encoder(embed: int, heads: int, activation: Any = "relu", norm_first: bool = False,
            layers: int = 2) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(embed, heads, 2 * embed, dropout=0.1, activation=activation,
                                       batch_first=True, norm_first=norm_first)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def signature(graph: Graph) -> list[tuple[Any, ...]]:
    return [(n.kind, n.family, n.variant, n.layout, n.params, n.min_batch) for n in graph.nodes]


def both(module: nn.Module, example: torch.Tensor) -> tuple[Graph, Graph]:
    return graph_from_onnx(export(module, example), batch=1), graph_from_module(module, example[:1], name="torch")


@pytest.mark.parametrize("activation,norm_first", [("relu", False), ("gelu", False), ("gelu", True)])
def test_a_fast_path_layer_runs_its_activation_in_the_gemm(activation: str, norm_first: bool) -> None:
    """Four heads, batch-first, ReLU or GELU: one fused call per layer, whose first feed-forward
    GEMM applies the activation; no activation kernel, no dropout call."""
    module = encoder(64, 4, activation, norm_first)
    onnx_graph, torch_graph = both(module, torch.randn(2, 16, 64))
    assert "_transformer_encoder_layer_fwd" in {n.op for n in torch_graph.nodes}
    assert signature(onnx_graph) == signature(torch_graph)
    assert not [n for n in onnx_graph.nodes if n.family == "activation"]
    assert any("2 nn.TransformerEncoderLayer(s)" in a and "0 other(s)" in a for a in onnx_graph.meta["assumptions"])


def test_an_odd_head_count_runs_the_layers_python_with_its_dropout_calls() -> None:
    """Three heads: the layer runs its Python (F.multi_head_attention_forward, the activation as a
    kernel of its own) with three dropout calls, which the export leaves out and the graph puts
    back; the residual add reads attention's output transposed back, a strided view."""
    module = encoder(48, 3, "gelu")
    onnx_graph, torch_graph = both(module, torch.randn(2, 16, 48))
    assert [n.op for n in torch_graph.nodes if n.kind == "free"].count("dropout") == 6
    assert [n.op for n in onnx_graph.nodes if n.kind == "free"].count("Dropout") == 6
    assert [s[:4] for s in signature(onnx_graph) if s[0] == "kernel"] == [
        s[:4] for s in signature(torch_graph) if s[0] == "kernel"]
    assert len(onnx_graph.nodes) == len(torch_graph.nodes)
    residual = [n for n in onnx_graph.nodes if n.family == "binary"][1]  # after the bias add of the projection
    assert residual.layout == "strided"


def test_a_layer_with_another_activation_runs_its_python() -> None:
    """SiLU is neither ReLU nor GELU: PyTorch runs the layer's Python, attention on its own fast path."""
    module = encoder(64, 4, nn.SiLU())
    onnx_graph, torch_graph = both(module, torch.randn(2, 16, 64))
    assert "_transformer_encoder_layer_fwd" not in {n.op for n in torch_graph.nodes}
    assert sorted(str(n.family) for n in onnx_graph.nodes if n.kind == "kernel") == sorted(
        str(n.family) for n in torch_graph.nodes if n.kind == "kernel")
    assert [n.op for n in onnx_graph.nodes].count("Dropout") == 6


class VitBlock(nn.Module):
    """torchvision's ViT encoder block in shape: attention and an MLP of the same form, under
    other names (self_attention, mlp.0, mlp.3), which is no TransformerEncoderLayer."""

    def __init__(self, embed: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(embed), nn.LayerNorm(embed)
        self.self_attention = nn.MultiheadAttention(embed, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(embed, 4 * embed), nn.GELU(), nn.Dropout(), nn.Linear(4 * embed, embed))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


def test_a_block_of_the_same_shape_under_other_names_keeps_its_activation() -> None:
    graph = graph_from_onnx(export(VitBlock().eval(), torch.randn(2, 16, 64)), batch=1)
    assert [n.family for n in graph.nodes if n.kind == "kernel"].count("activation") == 1
    assert not any("TransformerEncoderLayer" in a for a in graph.meta.get("assumptions", []))
