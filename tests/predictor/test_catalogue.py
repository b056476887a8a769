"""The operator catalogue: FLOPs and bytes formulas, and the checks that refuse bad configurations."""

from __future__ import annotations

import itertools

import pytest

from predictor.catalogue import FAMILIES, bytes_moved, flops, get_family
from predictor.precision import PRECISIONS, get_precision

DATA_MOVEMENT = {"embedding", "concat", "transpose"}
#: Families whose bytes hold a term of fixed element size (fp32 norm statistics, int64 ids).
FIXED_SIZE_TERMS = {"batch_norm", "embedding"}


def all_variants() -> list[tuple[str, str]]:
    return [(name, v) for name, fam in FAMILIES.items() for v in fam.variants]


def test_every_family_has_a_shared_test_config(op_params: dict[str, dict[str, int]]) -> None:
    assert set(op_params) == set(FAMILIES)


@pytest.mark.parametrize("family,variant", all_variants())
def test_flops_and_bytes_are_positive(family: str, variant: str, op_params: dict[str, dict[str, int]]) -> None:
    params = op_params[family]
    get_family(family).check(params, variant)
    f = flops(family, params, variant, 2)
    if family in DATA_MOVEMENT and variant != "add":  # transpose's 'add' adds as it moves
        assert f == 0.0
    else:
        assert f > 0
    assert bytes_moved(family, params, variant, 2, 4) > 0

#: boolean masks are one byte per element and the math path's scores are fp32, whatever the
#: precision of the attention itself.
FIXED_WIDTH_VARIANTS = {("sdpa", "bool_padding"), ("sdpa", "bool_full"), ("sdpa", "math")}


@pytest.mark.parametrize("family,variant", all_variants())
def test_bytes_scale_with_element_size(family: str, variant: str, op_params: dict[str, dict[str, int]]) -> None:
    params = op_params[family]
    fp32 = bytes_moved(family, params, variant, 2, get_precision("fp32").element_bytes)
    fp16 = bytes_moved(family, params, variant, 2, get_precision("fp16").element_bytes)
    if family in FIXED_SIZE_TERMS or (family, variant) in FIXED_WIDTH_VARIANTS:
        assert fp32 / 2 < fp16 < fp32
    else:
        assert fp16 == pytest.approx(fp32 / 2)


@pytest.mark.parametrize("family,variant", all_variants())
def test_flops_and_bytes_grow_with_batch(family: str, variant: str, op_params: dict[str, dict[str, int]]) -> None:
    params = op_params[family]
    assert bytes_moved(family, params, variant, 4, 4) > bytes_moved(family, params, variant, 1, 4)
    if family not in DATA_MOVEMENT:
        assert flops(family, params, variant, 4) == pytest.approx(4 * flops(family, params, variant, 1))


def test_known_conv_flops() -> None:
    params = dict(c_in=64, c_out=64, h=56, w=56, kernel=3, stride=1, groups=1)
    assert flops("conv2d", params, "", 1) == 2 * 64 * 56 * 56 * 64 * 9


def test_depthwise_and_strided_conv_flops() -> None:
    depthwise = dict(c_in=32, c_out=32, h=56, w=56, kernel=3, stride=1, groups=32)
    assert flops("conv2d", depthwise, "", 1) == 2 * 32 * 56 * 56 * 1 * 9
    strided = dict(c_in=64, c_out=64, h=56, w=56, kernel=3, stride=2, groups=1)
    assert flops("conv2d", strided, "", 1) == 2 * 64 * 28 * 28 * 64 * 9


def test_factorised_conv_windows_are_one_row_or_one_column() -> None:
    """Inception's 1x7 and 7x1 layers: 7 taps, not 49, and the map keeps its size."""
    from predictor.catalogue.families import conv_out_hw

    params = dict(c_in=128, c_out=192, h=17, w=17, kernel=7, stride=1, groups=1)
    for variant in ("row_nobias", "col_nobias"):
        assert conv_out_hw(params, variant) == (17, 17)
        assert flops("conv2d", params, variant, 2) == 2 * 2 * 192 * 17 * 17 * 128 * 7
        assert bytes_moved("conv2d", params, variant, 1, 2) == 2 * (128 * 17 * 17 + 192 * 128 * 7 + 192 * 17 * 17)
    assert flops("conv2d", params, "nobias", 1) == 7 * flops("conv2d", params, "row_nobias", 1)
    get_family("conv2d").check({**params, "h": 1, "kernel": 7}, "row_nobias")  # a 1x7 runs over one row
    with pytest.raises(ValueError, match="kernel larger"):  # a square 7x7 does not fit it unpadded
        get_family("conv2d").check({**params, "h": 1, "kernel": 7}, "valid_nobias")


def test_a_conv_output_is_conv_out_along_each_side_with_that_sides_padding() -> None:
    """``conv_out_hw`` computes both sides in one expression (a cold graph asks it for every new
    convolution); it must stay ``conv_out`` of each side with ``conv_padding`` of its window."""
    from predictor.catalogue.families import CONV_COL, CONV_ROW, conv_out, conv_out_hw, conv_padding, conv_window

    for variant in ("", "nobias", "valid", "valid_nobias", CONV_ROW, CONV_COL):
        for h, w, kernel, stride in itertools.product((1, 7, 8, 17, 224), (1, 5, 16), (1, 2, 3, 7), (1, 2, 3)):
            params = dict(h=h, w=w, kernel=kernel, stride=stride)
            kh, kw = conv_window(params, variant)
            expected = (conv_out(h, kh, stride, conv_padding(kh, variant)),
                        conv_out(w, kw, stride, conv_padding(kw, variant)))
            assert conv_out_hw(params, variant) == expected, (params, variant)


def test_elementwise_families_take_the_strided_layout() -> None:
    for family in ("activation", "binary"):
        assert get_family(family).layouts == ("contiguous", "strided")
    assert "strided" in get_family("concat").layouts
    with pytest.raises(ValueError, match="layout"):
        get_family("linear").check(dict(tokens=4, k=16, n=8), "", "strided")


def test_causal_attention_counts_half() -> None:
    full = dict(heads=2, seq_q=8, seq_kv=8, head_dim=16, causal=0)
    assert flops("sdpa", {**full, "causal": 1}, "", 1) == flops("sdpa", full, "", 1) / 2


def test_linear_flops_and_bytes() -> None:
    p = dict(tokens=4, k=16, n=8)
    assert flops("linear", p, "", 2) == 2 * 2 * 4 * 16 * 8
    assert bytes_moved("linear", p, "", 2, 4) == 4 * (2 * 4 * 16 + 16 * 8 + 8 + 2 * 4 * 8)


CONV = get_family("conv2d")
GOOD_CONV = dict(c_in=8, c_out=8, h=8, w=8, kernel=3, stride=1, groups=1)


@pytest.mark.parametrize("params,variant,layout,named", [
    ({k: v for k, v in GOOD_CONV.items() if k != "h"}, "", "nchw", "h"),
    ({**GOOD_CONV, "bogus": 2}, "", "nchw", "bogus"),
    ({**GOOD_CONV, "c_in": 0}, "", "nchw", "c_in"),
    ({**GOOD_CONV, "stride": -1}, "", "nchw", "stride"),
    (GOOD_CONV, "winograd", "nchw", "variant"),
    (GOOD_CONV, "", "ncdhw", "layout"),
    ({**GOOD_CONV, "c_in": 4, "groups": 3}, "", "nchw", "groups"),
], ids=["missing", "unknown", "zero", "negative", "variant", "layout", "groups"])
def test_check_refuses_naming_the_parameter(params: dict, variant: str, layout: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        CONV.check(params, variant, layout)


def test_check_accepts_good_configs() -> None:
    CONV.check(GOOD_CONV, "", "nhwc")
    CONV.check({**GOOD_CONV, "groups": 8}, "", "nchw")
    get_family("sdpa").check(dict(heads=1, seq_q=4, seq_kv=4, head_dim=8, causal=0))


def test_check_refuses_non_integer_and_bad_causal() -> None:
    with pytest.raises(ValueError, match="c_in"):
        CONV.check({**GOOD_CONV, "c_in": 8.0}, "", "nchw")
    with pytest.raises(ValueError, match="causal"):
        get_family("sdpa").check(dict(heads=1, seq_q=4, seq_kv=4, head_dim=8, causal=2))


def test_unknown_family_lists_known_ones() -> None:
    with pytest.raises(ValueError) as exc:
        get_family("nope")
    assert "nope" in str(exc.value)
    for name in FAMILIES:
        assert name in str(exc.value)


def test_unknown_precision_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as exc:
        get_precision("fp8")
    assert "fp8" in str(exc.value)
    for name in PRECISIONS:
        assert name in str(exc.value)


def test_precision_lookup_ignores_case() -> None:
    assert get_precision("BF16").element_bytes == 2
    assert get_precision("tf32").allow_tf32_matmul and not get_precision("fp32").allow_tf32_matmul
