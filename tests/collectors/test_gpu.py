"""Collector behaviour on a real CUDA GPU (run on the GPU machine: pytest -m gpu)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_fingerprint_reads_the_gpu() -> None:
    from collectors.fingerprint import read_fingerprint

    fp = read_fingerprint("cuda")
    assert fp.kind == "cuda" and fp.sm_count and fp.sm_count > 0
    assert fp.l2_bytes and fp.memory_gib and fp.cuda_version


def test_graph_timing_sees_through_launch_overhead() -> None:
    import torch

    from collectors.timing import CudaGraphTimer

    a = torch.randn(1000, device="cuda")
    b = torch.randn(1000, device="cuda")
    small = CudaGraphTimer().time(lambda: a + b)
    # The add's kernel is a microsecond or two; eager dispatch costs several times that.
    assert 0 < small.kernel_us < small.dispatch_us
    assert small.kernel_us < 5.0
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    big = CudaGraphTimer().time(lambda: x @ x)
    flops_per_s = 2 * 4096**3 / (big.kernel_us * 1e-6)
    assert 100e12 < flops_per_s < 1200e12
    assert big.cv < 0.05


def test_measurer_records_a_conv_row() -> None:
    from collectors.config import OpConfig
    from collectors.fingerprint import open_nvml, read_fingerprint
    from collectors.op_measure import OpMeasurer
    from collectors.timing import make_timer
    from predictor.dataset_schema import validate_rows

    import pandas as pd

    fp = read_fingerprint("cuda")
    measure = OpMeasurer(fp, make_timer("cuda"), open_nvml())
    cfg = OpConfig.make("conv2d", dict(c_in=64, c_out=64, h=56, w=56, kernel=3, stride=1, groups=1),
                        layout="nhwc", precision="fp16", batch=32)
    row = measure(cfg)
    assert row["status"] == "ok", row["error"]
    assert row["clock_reasons"] is not None
    validate_rows(pd.DataFrame([row]))


@pytest.mark.parametrize("variant,fused", [("", True), ("masked", True), ("bool_full", True),
                                           ("bool_padding", True), ("math", False)])
def test_sdpa_variants_reach_the_kernels_they_are_named_for(variant: str, fused: bool) -> None:
    """The 'math' variant exists because no fused kernel takes transformers' strided mask."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from collectors.op_builders import BuildSpec, build

    params = dict(heads=12, seq_q=128, seq_kv=128, head_dim=64, causal=0)
    call = build(BuildSpec("sdpa", params, variant, "contiguous", 8, torch.float16, torch.device("cuda")))
    fused_only = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    if fused:
        with sdpa_kernel(fused_only):
            call()
    else:
        with sdpa_kernel(fused_only), pytest.raises(RuntimeError):
            call()
        with sdpa_kernel([SDPBackend.MATH]):
            call()
    torch.cuda.synchronize()
