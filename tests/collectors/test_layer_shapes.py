"""Extracting catalogue shapes from a real forward pass, merging them, and their JSON file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from collectors.layer_shapes import extract_model_shapes, load_shapes, merge_shapes, save_shapes


class Tiny(nn.Module):
    """A small network touching every family the recorder recognises."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(3, 2, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.embed = nn.Embedding(100, 32)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        y = self.act(self.bn(self.depthwise(self.conv(image))))   # [1, 8, 8, 8]
        y = self.pool(y)                                           # [1, 8, 4, 4]
        y = torch.cat([y, y], dim=1)                               # [1, 16, 4, 4]
        g = self.gap(y).flatten(1)                                 # [1, 16]
        h = self.norm(self.fc(g)).unsqueeze(1).expand(-1, 4, -1)   # [1, 4, 32]
        e = self.embed(torch.arange(4).unsqueeze(0))               # [1, 4, 32]
        h = h + e
        q = h.view(1, 4, 2, 16).transpose(1, 2)                    # [1, 2, 4, 16]
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        t = h.view(1, 4, 2, 16).transpose(1, 2).contiguous()       # a real copy
        return torch.softmax(a + t, dim=-1).mean(dim=-1)


EXPECTED = [
    ("conv2d", "", dict(c_in=3, c_out=8, h=16, w=16, kernel=3, stride=2, groups=1)),
    ("conv2d", "", dict(c_in=8, c_out=8, h=8, w=8, kernel=3, stride=1, groups=8)),
    ("batch_norm", "", dict(c=8, h=8, w=8)),
    ("activation", "relu", dict(elements=512)),
    ("pool", "max", dict(c=8, h=8, w=8, kernel=3, stride=2)),
    ("concat", "", dict(inputs=2, c=8, h=4, w=4)),
    ("pool", "adaptive_avg", dict(c=16, h=4, w=4, kernel=1, stride=1)),
    ("linear", "", dict(tokens=1, k=16, n=32)),
    ("layer_norm", "", dict(tokens=1, c=32)),
    ("embedding", "", dict(vocab=100, c=32, tokens=4)),
    ("binary", "add", dict(elements=128)),
    ("sdpa", "", dict(heads=2, seq_q=4, seq_kv=4, head_dim=16, causal=1)),
    ("transpose", "", dict(d1=4, d2=2, d3=16)),
    ("binary", "add", dict(elements=128)),
    ("softmax", "", dict(rows=8, c=16)),
    ("mean", "", dict(rows=8, c=16)),
]


def key(shape: tuple[str, str, dict[str, int]]) -> str:
    return json.dumps([shape[0], shape[1], sorted(shape[2].items())])


@pytest.fixture(scope="module")
def found() -> list[tuple[str, str, dict[str, int]]]:
    return extract_model_shapes(Tiny().eval(), torch.randn(1, 3, 16, 16))


@pytest.mark.parametrize("expected", EXPECTED, ids=lambda e: f"{e[0]}{'-' + e[1] if e[1] else ''}")
def test_expected_shape_is_recorded(found: list, expected: tuple) -> None:
    assert expected in found


def test_nothing_else_is_recorded(found: list) -> None:
    # flatten, unsqueeze, expand, view, arange and the contiguous transpose view launch no costed op.
    assert sorted(map(key, found)) == sorted(map(key, EXPECTED))


def test_params_are_plain_ints(found: list) -> None:
    for _, _, params in found:
        assert all(type(v) is int for v in params.values())


def test_merge_dedupes_and_counts_sources() -> None:
    conv = ("conv2d", "", dict(c_in=3, c_out=8, h=16, w=16, kernel=3, stride=2, groups=1))
    relu = ("activation", "relu", dict(elements=512))
    gelu = ("activation", "gelu", dict(elements=512))
    merged = merge_shapes([("net_a", [conv, relu, relu]), ("net_b", [relu, gelu])])
    assert len(merged) == 3
    by_key = {key((s["family"], s["variant"], s["params"])): s for s in merged}
    assert by_key[key(relu)]["sources"] == {"net_a": 2, "net_b": 1}
    assert by_key[key(conv)]["sources"] == {"net_a": 1}
    assert by_key[key(gelu)]["sources"] == {"net_b": 1}
    # params keep their order-independent identity
    reordered = ("conv2d", "", dict(reversed(list(conv[2].items()))))
    assert len(merge_shapes([("a", [conv]), ("b", [reordered])])) == 1


def test_save_and_load_round_trip(tmp_path: Path, found: list) -> None:
    shapes = merge_shapes([("tiny", found)])
    path = tmp_path / "nested" / "layer_shapes.json"
    save_shapes(shapes, path, {"models": ["tiny"]})
    assert load_shapes(path) == shapes
    assert json.loads(path.read_text())["meta"] == {"models": ["tiny"]}


def test_graph_shapes_keep_each_nodes_layout() -> None:
    from collectors.layer_shapes import graph_shapes
    from collectors.nas_space import space_of
    from collectors.nas_suite import trace_arch

    seed = next(s for s in range(1000, 1012) if space_of(s) == "convnext")  # channels-last depthwise convs
    graph = trace_arch(seed)
    shapes = graph_shapes(graph)
    costed = [n for n in graph.nodes if n.kind == "kernel" and n.family]
    assert 0 < len(shapes) <= len(costed)
    assert {layout for family, _, _, layout in shapes if family == "conv2d"} >= {"nhwc"}
    merged = merge_shapes([("a", shapes)])
    assert all("layout" in s for s in merged)
    assert len(merged) == len({(key(s[:3]), s[3]) for s in shapes})
    # the same params in two layouts are two shapes
    conv = ("conv2d", "", dict(c_in=8, c_out=8, h=8, w=8, kernel=7, stride=1, groups=8))
    assert len(merge_shapes([("a", [(*conv, "nchw"), (*conv, "nhwc")])])) == 2
