"""Every catalogue family can be built and run on the CPU, in each of its variants and layouts."""

from __future__ import annotations

import pytest
import torch

from collectors.op_builders import BUILDERS, BuildSpec, build
from predictor.catalogue import FAMILIES
from predictor.catalogue.families import conv_out_hw

CPU = torch.device("cpu")
BATCH = 3

#: Per-sample output shape of each family for the shared ``op_params`` (variant-independent here,
#: except adaptive pooling and unpadded convolutions).
OUT_SHAPES: dict[str, tuple[int, ...]] = {
    "conv2d": (8, 4, 4), "linear": (4, 8), "matmul": (2, 4, 5), "sdpa": (2, 8, 16),
    "batch_norm": (4, 6, 6), "layer_norm": (4, 16), "group_norm": (8, 4, 4), "softmax": (4, 16),
    "activation": (64,), "binary": (64,), "pool": (4, 4, 4), "embedding": (4, 8),
    "concat": (12, 4, 4), "transpose": (3, 4, 8), "mean": (4,),
}


def cases() -> list[tuple[str, str, str]]:
    return [(name, v, layout) for name, fam in FAMILIES.items() for v in fam.variants for layout in fam.layouts]


def test_every_family_has_a_builder(op_params: dict[str, dict[str, int]]) -> None:
    assert set(BUILDERS) == set(FAMILIES)
    assert set(op_params) == set(OUT_SHAPES) == set(FAMILIES)


@pytest.mark.parametrize("family,variant,layout", cases())
def test_builds_and_runs(family: str, variant: str, layout: str, op_params: dict[str, dict[str, int]]) -> None:
    call = build(BuildSpec(family, op_params[family], variant, layout, BATCH, torch.float32, CPU))
    out = call()
    assert isinstance(out, torch.Tensor)
    expected = (4, 1, 1) if variant == "adaptive_avg" else OUT_SHAPES[family]
    if family == "conv2d":  # the catalogue's output size (which FLOPs and features use) is what runs
        expected = (op_params["conv2d"]["c_out"], *conv_out_hw(op_params["conv2d"], variant))
    if layout == "strided" and family == "activation":  # the op keeps its view's [heads, rows, head]
        assert out.shape[0] == BATCH and out[0].numel() == expected[0]
    else:
        assert tuple(out.shape) == (BATCH, *expected)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    if layout == "nhwc":
        assert out.is_contiguous(memory_format=torch.channels_last)


def test_sdpa_causal_masks_the_future() -> None:
    params = dict(heads=1, seq_q=4, seq_kv=4, head_dim=8, causal=1)
    outs = {}
    for causal in (0, 1):
        torch.manual_seed(0)  # the same q, k and v for both
        outs[causal] = build(BuildSpec("sdpa", {**params, "causal": causal}, "", "contiguous", 1,
                                       torch.float32, CPU))()
    # The last query sees every key either way; the first sees only the first key when causal.
    assert torch.allclose(outs[0][..., -1, :], outs[1][..., -1, :], atol=1e-5)
    assert not torch.allclose(outs[0][..., 0, :], outs[1][..., 0, :], atol=1e-3)


def test_conv_runs_in_bf16(op_params: dict[str, dict[str, int]]) -> None:
    out = build(BuildSpec("conv2d", op_params["conv2d"], "", "nhwc", 2, torch.bfloat16, CPU))()
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (2, 8, 4, 4)


def test_build_refuses_an_invalid_config(op_params: dict[str, dict[str, int]]) -> None:
    bad = {**op_params["conv2d"], "c_in": 4, "groups": 3}
    with pytest.raises(ValueError, match="groups"):
        build(BuildSpec("conv2d", bad, "", "nchw", 1, torch.float32, CPU))
    with pytest.raises(ValueError, match="layout"):
        build(BuildSpec("linear", op_params["linear"], "", "nhwc", 1, torch.float32, CPU))


@pytest.mark.parametrize("elements", [64, 150528, 97])
def test_strided_activation_reads_a_view_pytorch_cannot_vectorize(elements: int) -> None:
    """The 'strided' layout's input is neither contiguous nor dense (q of a packed qkv)."""
    from collectors.op_builders import _strided_view
    from predictor.importers.torch_calls import elementwise_layout

    spec = BuildSpec("activation", {"elements": elements}, "relu", "strided", BATCH, torch.float32, CPU)
    view = _strided_view(spec, elements)
    assert view.shape[0] == BATCH and view[0].numel() == elements
    assert not view.is_contiguous()
    assert elementwise_layout([view], None) == "strided"  # what the importer calls it, too


def test_strided_binary_broadcasts_its_second_operand_and_concat_joins_permuted_views() -> None:
    from predictor.importers.torch_calls import classify, elementwise_layout

    a = torch.randn(BATCH, 64)
    b = torch.randn(1, 64).expand(BATCH, 64)
    assert elementwise_layout([a, b], a + b) == "strided"
    parts = [torch.randn(BATCH, 4, 3, 8).transpose(1, 2) for _ in range(2)]  # [batch, c=3, h=4, w=8]
    fields = classify("cat", (parts, 1), {}, torch.cat(parts, 1), BATCH)
    assert (fields["family"], fields["layout"]) == ("concat", "strided")
    assert fields["params"] == {"inputs": 2, "c": 3, "h": 4, "w": 8}
    call = build(BuildSpec("concat", fields["params"], "", "strided", BATCH, torch.float32, CPU))
    assert tuple(call().shape) == tuple(torch.cat(parts, 1).shape)
