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
    import pandas as pd

    from collectors.fingerprint import open_nvml, read_fingerprint
    from collectors.op_config import OpConfig
    from collectors.op_measure import OpMeasurer
    from collectors.timing import make_timer
    from predictor.dataset_schema import validate_rows

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


def _kernel_names(call) -> list[str]:
    """The CUDA kernels one call launches, by the profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type.name == "CUDA"]


@pytest.mark.parametrize("family,variant", [("activation", "relu"), ("binary", "mul")])
def test_strided_layout_leaves_the_vectorized_kernel(family: str, variant: str) -> None:
    """Layout 'strided' exists because PyTorch's vectorized elementwise kernel cannot take it."""
    import torch

    from collectors.op_builders import BuildSpec, build

    def kernels(layout: str) -> list[str]:
        spec = BuildSpec(family, {"elements": 150528}, variant, layout, 8, torch.float16, torch.device("cuda"))
        return _kernel_names(build(spec))

    assert any("vectorized_elementwise_kernel" in k for k in kernels("contiguous"))
    strided = kernels("strided")
    assert strided and not any("vectorized" in k for k in strided)


def test_importer_counts_the_kernels_window_attention_launches() -> None:
    """Swin's window attention on a packed qkv: the importer's nodes (with the matmuls' operand
    copies and a two-dim roll) are the kernels the GPU runs, call for call."""
    import torch
    from torch import nn

    from predictor.importers.torch_module import graph_from_module

    class Window(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(96, 288)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.roll(x, (3, 3), (1, 2)).reshape(-1, 49, 96)
            qkv = self.qkv(x).reshape(-1, 49, 3, 3, 32).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0] * 0.17, qkv[1], qkv[2]
            return (q @ k.transpose(-2, -1)).softmax(-1) @ v

    model = Window().cuda().half().eval()
    x = torch.randn(4, 7, 7, 96, device="cuda", dtype=torch.half)
    graph = graph_from_module(model, x, "window")
    predicted = sum(n.kind != "free" for n in graph.nodes)
    with torch.inference_mode():
        launched = _kernel_names(lambda: model(x))
    assert predicted == len(launched), ([n.name for n in graph.nodes if n.kind != "free"], launched)


def test_a_transposed_stream_runs_the_kernels_the_importer_costs() -> None:
    """A patch stream laid out [batch, c, tokens] (nas-88's): the importer's nodes are the kernels
    the GPU runs, and the norm's copy and the residual add, which it costs by the transpose family,
    run PyTorch's generic elementwise kernel, as that family's two builders do."""
    import torch
    from torch import nn

    from collectors.op_builders import BuildSpec, build
    from predictor.importers.torch_module import graph_from_module

    class Stream(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.fc = nn.LayerNorm(64), nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.transpose(1, 2)  # a patch embedding's [batch, c, tokens] seen as [batch, tokens, c]
            return x + self.fc(self.norm(x))

    model = Stream().cuda().half().eval()
    x = torch.randn(8, 64, 144, device="cuda", dtype=torch.half)
    graph = graph_from_module(model, x, "stream")
    assert [n.variant for n in graph.nodes if n.family == "transpose"] == ["", "add"]
    with torch.inference_mode():
        launched = _kernel_names(lambda: model(x))
    predicted = [n.name for n in graph.nodes if n.kind != "free"]
    assert len(predicted) == len(launched), (predicted, launched)
    for variant in ("", "add"):
        spec = BuildSpec("transpose", {"d1": 64, "d2": 144, "d3": 1}, variant, "contiguous", 8, torch.float16,
                         torch.device("cuda"))
        kernels = _kernel_names(build(spec))
        assert kernels and not any("vectorized" in k for k in kernels), kernels


def test_interleaved_replays_agree_with_one_model_timed_alone() -> None:
    """The protocol's cudagraph rows time the same replays as time_cudagraph of one model."""
    import statistics

    import torch

    from collectors.fingerprint import open_nvml, read_fingerprint
    from collectors.forward_timing import time_cudagraph
    from collectors.model_runs import measure_models
    from collectors.zoo_models import get_zoo_model

    rows = measure_models(read_fingerprint("cuda"), ["distilbert-base"], (1, 8), ("fp16",), mode="cudagraph",
                          rounds=2, reps=3, seed=0, nvml=open_nvml())
    assert [(r["batch"], r["mode"], r["run_id"]) for r in rows] == [
        (1, "cudagraph", "distilbert-base|b1|fp16|cudagraph|interleaved-all"),
        (8, "cudagraph", "distilbert-base|b8|fp16|cudagraph|interleaved-all")]
    zoo = get_zoo_model("distilbert-base")
    with torch.inference_mode():
        model = zoo.build().to(device="cuda", dtype=torch.float16).eval()
        x = zoo.example_input(8, torch.device("cuda"), torch.float16)
        alone = statistics.median(time_cudagraph(lambda: model(x)))
    assert 0.8 < rows[1]["latency_ms"] / alone < 1.25


def test_a_partition_runs_kernels_and_graphs_on_its_own_sms() -> None:
    """``--sms`` in a process of its own (a green context per process): the SMs are counted from
    the kernels' SM ids, graphs replay on the partition (eager and replayed GEMM alike), and the
    fingerprint names the partition."""
    import json
    import subprocess
    import sys

    code = ("import json; from collectors.partition import enter_partition; "
            "from collectors.fingerprint import read_fingerprint; p = enter_partition(40); "
            "f = read_fingerprint('cuda'); "
            "print(json.dumps([p.sms, p.counted_by, p.gemm_eager_us, p.gemm_graph_us, f.device_id, f.sm_count]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    sms, counted_by, eager_us, graph_us, device_id, sm_count = json.loads(out.stdout.strip().splitlines()[-1])
    assert counted_by == "smid" and 40 <= sms < 132 and sm_count == sms and device_id.endswith(f"-sm{sms}")
    assert abs(graph_us / eager_us - 1) < 0.1  # a graph that escaped the partition would run near 207 us
    assert graph_us > 300  # the whole H200 takes about 207 us


def test_the_batching_server_serves_a_poisson_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A short real run of ``latpred collect serving``'s server and client: every request served,
    batches within the setting's maximum, latency at least the batch-1 service time."""
    import pandas as pd

    from collectors.batching_server import ServerSettings
    from collectors.serving_check import run_serving_check

    folder = run_serving_check(tmp_path, "cuda", ["resnet34"], "fp16",
                               settings=(ServerSettings("mb4", max_batch=4),), levels=(0.5,),
                               seconds_per_level=1.0, requests=(500, 2000), reps=5)
    rows = pd.read_parquet(folder / "requests-resnet34-fp16.parquet")
    service = pd.read_parquet(folder / "service-resnet34-fp16.parquet")
    assert len(rows) >= 500 and rows["finish_us"].notna().all() and rows["batch_size"].between(1, 4).all()
    b1 = service.loc[service["batch"] == 1, "service_s"].median() * 1e6
    assert ((rows["finish_us"] - rows["received_us"]) >= 0.8 * b1).all()
    assert (rows["start_us"] >= rows["received_us"]).all()
