"""Device specs (lookup, the ceiling each operator runs against) and per-call features."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.catalogue import FAMILIES, PARAMETERS, bytes_moved, flops
from predictor.devices import DEVICES, resolve_device
from predictor.features import FEATURE_COLUMNS, feature_frame, feature_row, roofline_us

H200 = DEVICES["nvidia-h200"]
GEMM_4K = {"tokens": 4096, "k": 4096, "n": 4096}


@pytest.mark.parametrize("query", ["h200", "NVIDIA H200", "nvidia-h200", "  H200 ", "Nvidia-H200"])
def test_resolve_device_by_id_or_part_of_name(query: str) -> None:
    assert resolve_device(query) is H200


@pytest.mark.parametrize("query", ["mi300x", "gaudi3", ""])
def test_unknown_device_names_the_known_ones(query: str) -> None:
    with pytest.raises(ValueError, match="unknown device") as info:
        resolve_device(query)
    assert "nvidia-h200" in str(info.value) and "NVIDIA H200" in str(info.value)


def test_peak_flops_follows_pytorch_precision_defaults() -> None:
    tensor = H200.tensor_flops
    # PyTorch's fp32: cuDNN convolutions in TF32, matmuls in full FP32 on CUDA cores
    assert H200.peak_flops("conv2d", "fp32") == tensor["tf32"]
    assert H200.peak_flops("linear", "fp32") == H200.vector_flops
    assert H200.peak_flops("linear", "fp32", allow_tf32_matmul=True) == tensor["tf32"]
    assert H200.peak_flops("conv2d", "fp32", allow_tf32_cudnn=False) == H200.vector_flops
    assert H200.peak_flops("linear", "bf16") == tensor["bf16"]
    assert H200.peak_flops("sdpa", "fp16") == tensor["fp16"]
    # no tensor cores for elementwise work, whatever the precision
    assert H200.peak_flops("activation", "fp16") == H200.vector_flops
    assert tensor["tf32"] > H200.vector_flops


def test_roofline_of_a_big_gemm_is_compute_bound() -> None:
    roof = roofline_us("linear", GEMM_4K, "", 1, "fp16", H200)
    compute = flops("linear", GEMM_4K, "", 1) / H200.tensor_flops["fp16"] * 1e6
    memory = bytes_moved("linear", GEMM_4K, "", 1, 2) / H200.memory_bandwidth * 1e6
    assert compute > 3 * memory
    assert roof == pytest.approx(compute, rel=1e-12)
    # fp32 matmuls run on CUDA cores: same FLOPs, a far lower ceiling
    assert roofline_us("linear", GEMM_4K, "", 1, "fp32", H200) > 10 * roof


def test_roofline_of_an_activation_is_memory_bound() -> None:
    params = {"elements": 1_000_000}
    for precision, element_bytes in (("fp16", 2), ("fp32", 4)):
        roof = roofline_us("activation", params, "relu", 8, precision, H200)
        memory = bytes_moved("activation", params, "relu", 8, element_bytes) / H200.memory_bandwidth * 1e6
        assert roof / memory == pytest.approx(1.0, rel=1e-12)
    assert roofline_us("activation", params, "relu", 8, "fp32", H200) == pytest.approx(
        2 * roofline_us("activation", params, "relu", 8, "fp16", H200))


def test_the_transfer_basis_reads_what_fits_in_l2_at_the_l2s_bandwidth() -> None:
    """An H100 SXM and an H200 share SMs and clock, so a call that fits in L2 has one roofline on
    the transfer basis whatever their memories; a call that does not is charged each HBM. A
    one-device bundle's basis charges every byte the memory's bandwidth, as it was fitted."""
    h100, h200 = resolve_device("h100 sxm"), resolve_device("h200")
    small, large = {"elements": 1_000_000}, {"elements": 200_000_000}  # 4 MB and 800 MB of fp16, in and out
    on_l2 = [roofline_us("activation", small, "relu", 1, "fp16", d.datasheet_spec(l2_roofline=True))
             for d in (h100, h200)]
    assert on_l2[0] == pytest.approx(on_l2[1], rel=1e-12)
    assert on_l2[0] == pytest.approx(bytes_moved("activation", small, "relu", 1, 2) / h100.l2_bandwidth * 1e6)
    assert h100.l2_bandwidth == pytest.approx(5120 / 108 * 132 * 1.98e9)
    off_l2 = [roofline_us("activation", large, "relu", 1, "fp16", d.datasheet_spec(l2_roofline=True))
              for d in (h100, h200)]
    assert off_l2[0] / off_l2[1] == pytest.approx(4.8e12 / 3.35e12, rel=1e-12)
    for basis in (h200, h200.datasheet_spec()):  # the H200 bundle's own, and a transfer bundle's before
        assert roofline_us("activation", small, "relu", 1, "fp16", basis) == pytest.approx(
            bytes_moved("activation", small, "relu", 1, 2) / basis.memory_bandwidth * 1e6, rel=1e-12)


def test_a_cpu_has_no_l2_bandwidth_and_keeps_its_memory_roofline() -> None:
    cpu = resolve_device("epyc")
    assert cpu.boost_clock_hz is None and cpu.l2_bandwidth is None
    assert cpu.datasheet_spec(l2_roofline=True).memory_seconds(1e6) == pytest.approx(1e6 / cpu.memory_bandwidth)


def test_feature_row_has_every_column_and_nan_for_other_families_params() -> None:
    row = feature_row("linear", GEMM_4K, "", "contiguous", 8, "fp16", H200)
    assert set(row) == set(FEATURE_COLUMNS)
    assert row["p_tokens"] == 4096.0 and row["p_n"] == 4096.0
    for p in set(PARAMETERS) - set(GEMM_4K):
        assert math.isnan(row[f"p_{p}"]), p
    assert row["compute_bound"] == 1.0
    assert row["log_batch"] == 3.0
    assert row["element_bytes"] == 2
    assert row["log_roofline_us"] == pytest.approx(math.log10(roofline_us("linear", GEMM_4K, "", 8, "fp16", H200)))
    act = feature_row("activation", {"elements": 1000}, "relu", "contiguous", 1, "fp16", H200)
    assert act["compute_bound"] == 0.0
    assert act["family_code"] != row["family_code"]


TINY = {
    "conv2d": ("", "nchw", dict(c_in=64, c_out=64, h=56, w=56, kernel=3, stride=1, groups=1)),
    "linear": ("", "contiguous", {"tokens": 128, "k": 768, "n": 3072}),
    "matmul": ("", "contiguous", {"heads": 12, "m": 128, "k": 64, "n": 128}),
    "sdpa": ("", "contiguous", dict(heads=12, seq_q=128, seq_kv=128, head_dim=64, causal=1)),
    "activation": ("gelu", "contiguous", {"elements": 98_304}),
    "softmax": ("", "contiguous", {"rows": 1536, "c": 128}),
}


@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize("batch", [1, 7, 64, 1024])
def test_wave_efficiency_is_a_fraction_of_the_last_wave(family: str, batch: int) -> None:
    variant, layout, params = TINY[family]
    row = feature_row(family, params, variant, layout, batch, "bf16", H200)
    assert 0.0 < row["wave_efficiency"] <= 1.0
    assert row["waves"] > 0
    # efficiency is waves over the waves launched (the last one possibly part full)
    assert row["wave_efficiency"] == pytest.approx(row["waves"] / math.ceil(row["waves"]))
    assert all(np.isfinite(v) for k, v in row.items() if not k.startswith("p_"))


def test_feature_frame_matches_feature_row() -> None:
    import pandas as pd

    records = []
    for family, (variant, layout, params) in TINY.items():
        records.append({"family": family, "variant": variant, "layout": layout, "precision": "fp16",
                        "batch": 4, **{p: params.get(p) for p in PARAMETERS}})
    frame = feature_frame(pd.DataFrame.from_records(records), H200)
    assert list(frame.columns) == list(FEATURE_COLUMNS)
    for i, (family, (variant, layout, params)) in enumerate(TINY.items()):
        expected = feature_row(family, params, variant, layout, 4, "fp16", H200)
        got = frame.iloc[i].to_dict()
        assert np.allclose([got[c] for c in FEATURE_COLUMNS], [expected[c] for c in FEATURE_COLUMNS],
                           equal_nan=True)
    assert set(TINY) <= set(FAMILIES)


def test_cold_weight_read_is_the_weights_over_bandwidth_where_the_sweep_saw_them_warm() -> None:
    from predictor.catalogue import weight_bytes
    from predictor.features import cold_weight_us

    h200 = resolve_device("h200")
    small = {"tokens": 128, "k": 896, "n": 4864}  # Qwen2's MLP at batch 1: 8.7 MB of bf16 weights
    expected = 896 * 4864 * 2 / h200.memory_bandwidth * 1e6
    assert cold_weight_us("linear", small, "nobias", 1, "bf16", h200) == pytest.approx(expected)
    assert cold_weight_us("linear", small, "nobias", 1, "fp32", h200) == pytest.approx(2 * expected)
    assert weight_bytes("linear", small, "", 2) == (896 * 4864 + 4864) * 2  # with the bias
    conv = {"c_in": 64, "c_out": 128, "h": 28, "w": 28, "kernel": 3, "stride": 1, "groups": 2}
    assert weight_bytes("conv2d", conv, "nobias", 2) == 2 * 32 * 128 * 9
    assert weight_bytes("conv2d", conv, "row_nobias", 2) == 2 * 32 * 128 * 3  # a 1 x 3 window
    # a call whose bytes exceed L2 was measured cold already; activations have no weights
    assert cold_weight_us("linear", {"tokens": 4096, "k": 8192, "n": 8192}, "", 8, "fp32", h200) == 0.0
    assert cold_weight_us("activation", {"elements": 4096}, "relu", 1, "bf16", h200) == 0.0
