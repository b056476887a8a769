"""predictor.memory against the GPU memory inference forwards really took on an H200.

    python3 benchmarks/memory_estimate.py --measure OUT.json [--seeds 0-11] [--models a,b]   # on a GPU
    .venv/bin/python benchmarks/memory_estimate.py            # here: the estimate against the committed peaks

``--measure`` (the GPU machine: torch, torchvision, nvidia-ml-py) builds each model, runs one
warm-up forward under ``torch.inference_mode()``, then a second with the allocator's peak reset:
the activations are that peak less what was allocated before it (weights, input, workspaces kept
from the warm-up) plus the input; the weights are the module's parameters and buffers. NVML's
used memory before and after the CUDA context and the libraries' first calls gives the runtime's
own share (``predictor.memory.WORKSPACE_BYTES``). The measurement of 2026-12-01 (H200, torch 2.11,
CUDA 13.0: NAS seeds 0-11 and 16 zoo models, fp32 and fp16, batch 1 and 32) is committed as
``results/memory_peaks_h200.json``; without ``--measure`` this script compares the estimate with it
and writes ``results/memory_estimate.txt``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import publish  # noqa: E402
from predictor.graph import Graph  # noqa: E402
from predictor.memory import WORKSPACE_BYTES, memory_estimate  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PEAKS = RESULTS / "memory_peaks_h200.json"
NAS_GRAPHS = Path(__file__).resolve().parents[1] / "datasets" / "suites" / "nas" / "torch"
ZOO = ("resnet101", "densenet169", "vit_b_32", "convnext_small", "swin_s", "inception_v3", "efficientnet_b2",
       "mobilenet_v3_small", "vgg11_bn", "distilbert-base", "electra-small", "roberta-large", "opt-125m",
       "llama-300m", "qwen2-0.5b", "t5-small-encoder")
MiB = 2**20


def measure(out: Path, seeds: list[int], models: list[str]) -> None:
    """Peaks of every (model, precision, batch) on this GPU, written to ``out`` after each model."""
    import pynvml
    import torch
    import torch.nn.functional as F

    from collectors import nas_space
    from collectors.zoo_models import get_zoo_model

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used() -> int:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)

    res: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version(), "models": []}
    before = used()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    after_init = used()
    for dt in (torch.float16, torch.float32):  # each library's handle and workspace, once
        x = torch.randn(8, 64, 56, 56, device="cuda", dtype=dt)
        w = torch.randn(64, 64, 3, 3, device="cuda", dtype=dt)
        F.conv2d(x, w, padding=1)
        a = torch.randn(512, 512, device="cuda", dtype=dt)
        F.linear(torch.randn(4, 128, 512, device="cuda", dtype=dt), a @ a, a[0])
        q = torch.randn(2, 8, 128, 64, device="cuda", dtype=dt)
        F.scaled_dot_product_attention(q, q, q)
        F.layer_norm(q, (64,))
    torch.cuda.synchronize()
    res["context"] = dict(before=before, after_init=after_init, after_libs=used(),
                          reserved=torch.cuda.memory_reserved(), allocated=torch.cuda.memory_allocated())
    gc.collect()
    torch.cuda.empty_cache()

    def one(name: str, build: Callable[[], Any], make_input: Callable[[int, Any], Any]) -> None:
        model = build().eval()
        for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
            m = model.to("cuda", dtype)
            params = sum(p.numel() * p.element_size() for p in m.parameters())
            buffers = sum(b.numel() * b.element_size() for b in m.buffers())
            for batch in (1, 32):
                x = make_input(batch, dtype)
                with torch.inference_mode():
                    m(x)
                    torch.cuda.synchronize()
                    gc.collect()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    y = m(x)
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated()
                    del y
                res["models"].append(dict(name=name, precision=precision, batch=batch, params=params,
                                          buffers=buffers, base=base, peak=peak,
                                          peak_reserved=torch.cuda.max_memory_reserved(),
                                          input=x.numel() * x.element_size(), nvml_used=used()))
                del x
            model = m.float().cpu()
        gc.collect()
        torch.cuda.empty_cache()
        out.write_text(json.dumps(res))
        print(name, flush=True)

    for seed in seeds:
        spec = nas_space.arch_spec(seed)
        one(f"nas-{seed}", functools.partial(nas_space.build, spec),
            functools.partial(_nas_input, nas_space, spec))
    for name in models:
        zoo = get_zoo_model(name)
        one(name, zoo.build, functools.partial(_zoo_input, zoo))
    out.write_text(json.dumps(res))


def _nas_input(nas_space: Any, spec: Any, batch: int, dtype: Any) -> Any:
    return nas_space.example_input(spec, batch, "cuda", dtype)


def _zoo_input(zoo: Any, batch: int, dtype: Any) -> Any:
    return zoo.example_input(batch, "cuda", dtype)


def graph_of(name: str) -> Graph:
    return Graph.load(NAS_GRAPHS / f"{name}.json") if name.startswith("nas-") else load_zoo_graph(name)


def compare(peaks: dict[str, Any]) -> str:
    """The estimate's weights and activations against each measured forward, and a summary."""
    lines = [f"# .venv/bin/python benchmarks/memory_estimate.py   ({time.strftime('%Y-%m-%d')}; peaks measured on an "
             f"H200, torch {peaks['torch']}, CUDA {peaks['cuda']}: {PEAKS.name})",
             "# activations measured = allocator peak of a second forward - allocated before it + the input "
             "(per-call cuDNN/cuBLASLt workspaces included); weights measured = parameters + buffers",
             f"{'model':<20} {'prec':<5} {'batch':>5} {'weights est/meas':>17} {'act est MiB':>12} "
             f"{'act meas MiB':>13} {'est/meas':>9}"]
    ratios: list[float] = []
    weight_ratios: list[float] = []
    for m in peaks["models"]:
        estimate = memory_estimate(graph_of(m["name"]), m["batch"], m["precision"])
        measured = m["peak"] - m["base"] + m["input"]
        ratio = estimate.activations_bytes / measured
        weights = estimate.weights_bytes / (m["params"] + m["buffers"])
        ratios.append(ratio)
        weight_ratios.append(weights)
        lines.append(f"{m['name']:<20} {m['precision']:<5} {m['batch']:>5} {weights:>17.3f} "
                     f"{estimate.activations_bytes / MiB:>12.1f} {measured / MiB:>13.1f} {ratio:>9.2f}")
    big = [r for r, m in zip(ratios, peaks["models"]) if m["batch"] == 32]
    ctx = peaks["context"]
    lines += ["", f"activations, estimate / measured: {min(ratios):.2f}-{max(ratios):.2f}, median "
                  f"{statistics.median(ratios):.2f} ({len(ratios)} forwards); at batch 32 "
                  f"{min(big):.2f}-{max(big):.2f}, median {statistics.median(big):.2f}",
              f"weights, estimate / (parameters + buffers): {min(weight_ratios):.3f}-{max(weight_ratios):.3f}",
              f"GPU memory used (NVML): {ctx['before'] / MiB:.0f} MiB before torch's first CUDA call, "
              f"{ctx['after_init'] / MiB:.0f} after it, {ctx['after_libs'] / MiB:.0f} after the libraries' first "
              f"calls (of which torch's allocator holds {ctx['reserved'] / MiB:.0f}); predictor.memory allows "
              f"{WORKSPACE_BYTES / MiB:.0f} MiB for the runtime"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", type=Path, default=None, help="measure on this GPU, write the peaks here")
    parser.add_argument("--seeds", default="0-11", help="NAS suite seeds to measure (a-b or a,b,c)")
    parser.add_argument("--models", default=",".join(ZOO), help="zoo models to measure")
    args = parser.parse_args()
    if args.measure is not None:
        from collectors.nas_space import parse_seeds

        measure(args.measure, list(parse_seeds(args.seeds)), [m for m in args.models.split(",") if m])
        return
    publish(compare(json.loads(PEAKS.read_text())).rstrip("\n").split("\n"), RESULTS / "memory_estimate.txt")


if __name__ == "__main__":
    main()
