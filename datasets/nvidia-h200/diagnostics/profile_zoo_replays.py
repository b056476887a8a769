"""Kernel-level profile of captured zoo models: where a CUDA-graph prediction's error sits.

The H200 bundle predicts several large CNNs and LLMs 0.86-0.94x of their measured replay at fp16
and bf16, batch 1-8 (`latpred validate`, leave one model out), where fp32 is within a few
percent; the capacity check inherits it (densenet169's served p99 0.65-0.87x predicted,
benchmarks/results/simulator_vs_server.txt). Per (model, precision, batch): the replay's
median time and three profiled replays' kernels in launch order, [name, microseconds, start], to
compare family by family with what the per-layer models predict for the same nodes. Run on the
GPU machine from the repository root (torchvision and transformers are there):

    OUT=DIR MODELS=densenet169,resnet101 UNITS=fp16:1,fp16:8,fp32:1 \
        python3 datasets/nvidia-h200/diagnostics/profile_zoo_replays.py

Each unit is written as soon as it is done, so a call cut short keeps what it measured.
Not run yet: written on 2026-12-06, when 18 tries got no GPU machine. Checked here for syntax and
imports only (it follows ``profile_nas_replays.py``, which ran on 2026-12-02).
"""

import json
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from collectors.batching_server import model_source
from collectors.forward_timing import capture, time_cudagraph
from collectors.model_build import build_model
from collectors.precision_flags import precision_flags, torch_dtype
from predictor.precision import get_precision

MODELS = os.environ.get("MODELS", "densenet169,resnet101,resnext101_32x8d,regnet_y_1_6gf,vgg11_bn,mobilenet_v3_small")
UNITS = [(p, int(b)) for p, b in (u.split(":") for u in os.environ.get("UNITS", "fp16:1,fp16:8,fp32:1").split(","))]


def profile_unit(name: str, precision: str, batch: int) -> dict:
    """The replay's median ms and its kernels, for one model at one precision and batch."""
    prec = get_precision(precision)
    source = model_source(name)
    with precision_flags(prec), torch.inference_mode():
        dtype = torch_dtype(prec)
        model = build_model(source, torch.device("cuda"), dtype)
        x = source.example_input(batch, torch.device("cuda"), dtype)

        def forward() -> object:
            return model(x)

        for _ in range(3):
            forward()
        torch.cuda.synchronize()
        graph = capture(forward)
        replay_ms = float(statistics.median(time_cudagraph(forward)))
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if getattr(e.device_type, "name", "") == "CUDA"),
                    key=lambda e: e.time_range.start)
    kernels = [[e.name[:160], round(float(e.time_range.end - e.time_range.start), 3),
                round(float(e.time_range.start), 3)] for e in events]
    return {"model": name, "precision": precision, "batch": batch, "replay_ms": replay_ms, "kernels": kernels}


def main() -> None:
    out = os.path.join(os.environ["OUT"], "zoo_profile.json")
    results = []
    for name in MODELS.split(","):
        for precision, batch in UNITS:
            started = time.perf_counter()
            try:
                results.append(profile_unit(name, precision, batch))
            except Exception as exc:  # one unit failing must not lose the others
                results.append({"model": name, "precision": precision, "batch": batch, "error": repr(exc)[:400]})
            torch.cuda.empty_cache()
            print(name, precision, batch, results[-1].get("replay_ms"), f"{time.perf_counter() - started:.1f}s",
                  flush=True)
            with open(out, "w") as f:
                json.dump(results, f)


if __name__ == "__main__":
    main()
