"""Smaller GPUs carved out of a real one: a green context holding some of its SMs.

``latpred collect ops --sms 66`` (and ``collect models``) measure on 66 of the H200's 132 SMs for
real: the process enters a CUDA green context before anything touches the GPU, and the rows go to
their own device, ``nvidia-h200-sm66``. What the H200 showed about green contexts (DESIGN.md):

- A CUDA graph runs on the SMs of the context its *capture* stream was made in, and
  ``torch.cuda.graph`` keeps one class-level default capture stream: a stream made before the
  green context would replay every graph on the whole GPU. So the default capture stream is made
  here, inside the context, and the current stream is the context's own.
- After ``pop_context()`` the next green context in the same process fails ("context is
  destroyed"): one partition per process, never left. The process ends in it.
- The driver rounds a partition to its SM granularity (8 SMs on Hopper, for example), so the SMs a
  partition really has are counted, not assumed: a kernel of many blocks records the SM id each
  block ran on (``%smid``, through Triton, which the GPU machine has), and the distinct ids are
  the partition's SMs. That count names the device and is its ``sm_count``.

Memory, memory bandwidth and L2 are not partitioned by a green context: every partition sees the
whole H200's. So these devices differ from the H200 in SMs alone, which is what the transfer
model learns from them, and what it cannot learn (bandwidth, L2) is said beside its figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Blocks launched to count the SMs a partition holds: far more than any GPU has SMs, so every SM
#: of the partition runs some block.
SMID_BLOCKS = 16_384


@dataclass(frozen=True)
class SmPartition:
    """The partition this process measures on: SMs asked for and really held, of how many."""

    requested_sms: int
    sms: int  # counted: the distinct SM ids a many-block kernel ran on
    total_sms: int
    counted_by: str  # "smid" (counted), or "requested" where counting failed (see ``note``)
    gemm_eager_us: float  # a 4096^2 fp16 GEMM, run eagerly on the partition's stream...
    gemm_graph_us: float  # ...and replayed from a graph: equal when graphs run on the partition too
    note: str = ""

    @property
    def suffix(self) -> str:
        """What the device id gains: '-sm66'."""
        return f"-sm{self.sms}"


_ACTIVE: SmPartition | None = None
_KEEP: list[Any] = []  # the green context and its streams: freed only when the process ends


def active_partition() -> SmPartition | None:
    """The partition this process entered, if any (the fingerprint names the device by it)."""
    return _ACTIVE


def enter_partition(requested_sms: int) -> SmPartition:
    """Move this process onto ``requested_sms`` SMs of GPU 0 for the rest of its life.

    Must run before the GPU is used for anything else in the process, and only once.
    """
    global _ACTIVE
    import torch

    if _ACTIVE is not None:
        raise RuntimeError(f"this process already measures on {_ACTIVE.sms} SMs: one partition per process "
                           "(a second green context after the first fails with 'context is destroyed')")
    if not torch.cuda.is_available():
        raise RuntimeError("--sms needs a CUDA GPU: green contexts partition a GPU's SMs")
    from torch.cuda.green_contexts import SUPPORTED, GreenContext

    if not SUPPORTED:
        raise RuntimeError(f"torch {torch.__version__} was built without green-context support: --sms needs it")
    total = torch.cuda.get_device_properties(0).multi_processor_count
    if not 1 <= requested_sms < total:
        raise ValueError(f"--sms must be between 1 and {total - 1} (this GPU has {total} SMs), got {requested_sms}")
    # torch types create()'s result as object where it was built without green contexts (checked above)
    context: Any = GreenContext.create(num_sms=requested_sms, device_id=0)
    context.set_context()
    # A stream made after set_context() belongs to the green context (the context's own where torch has it).
    stream = context.Stream() if hasattr(context, "Stream") else torch.cuda.Stream()
    torch.cuda.set_stream(stream)
    capture_stream = torch.cuda.Stream()  # made inside the context: graphs captured on it replay there
    torch.cuda.graph.default_capture_stream = capture_stream
    _KEEP.extend([context, stream, capture_stream])
    try:
        sms, counted_by, note = count_sms(), "smid", ""
    except Exception as exc:  # Triton missing or failing must not stop a sweep: say so instead
        sms, counted_by, note = requested_sms, "requested", f"SMs not counted ({type(exc).__name__}: {exc})"[:300]
    eager_us, graph_us = gemm_check_us()
    _ACTIVE = SmPartition(requested_sms, sms, total, counted_by, eager_us, graph_us, note)
    return _ACTIVE


def gemm_check_us(n: int = 4096, calls: int = 20) -> tuple[float, float]:
    """Microseconds per 4096^2 fp16 GEMM, eagerly and replayed from a graph captured on the default
    capture stream: the graph figure near the whole GPU's (about 207 us on an H200) while the eager
    one is slower would mean graphs escaped the partition (the trap this module guards against)."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        a @ b
    end.record()
    end.synchronize()
    eager_us = start.elapsed_time(end) * 1e3 / calls
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            a @ b
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    graph_us = start.elapsed_time(end) * 1e3 / calls
    del graph
    return round(eager_us, 1), round(graph_us, 1)


def count_sms(blocks: int = SMID_BLOCKS) -> int:
    """The distinct SMs that a kernel of ``blocks`` blocks ran on, on the current stream."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def record_smid(out_ptr):  # untyped: Triton reads annotations as types
        pid = tl.program_id(0)
        smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        tl.store(out_ptr + pid, smid)

    out = torch.full((blocks,), -1, dtype=torch.int32, device="cuda")
    record_smid[(blocks,)](out)
    torch.cuda.synchronize()
    ids = out.unique()
    if (ids < 0).any():
        raise RuntimeError("some blocks did not record an SM id")
    return int(ids.numel())
