"""Kernel-level profile of captured zoo models: where a CUDA-graph prediction's error sits.

The H200 bundle predicts the large CNNs and LLMs 0.82-0.94x of their measured replay at fp16 and
bf16, batch 1 (`latpred validate`, leave one model out), where fp32 is within a few percent for
most; the capacity check inherits it (densenet169's served p99 0.65-0.87x predicted,
benchmarks/results/simulator_vs_server.txt; notes.md, 2026-12-06). Per (model, precision, batch):
the replay's median time and one profiled replay's kernels by name with count and total
microseconds (``collectors.capture_profile.device_kernels``, as ``latpred collect profile``
records its text models' replays), to compare family by family with what the per-layer models
predict for the same nodes. Run on the GPU machine from the repository root (torchvision and
transformers are there):

    OUT=DIR MODELS=densenet169,resnet101 UNITS=fp16:1,fp16:8,fp32:1 \
        python3 datasets/nvidia-h200/diagnostics/profile_zoo_replays.py

Each unit is written as soon as it is done, so a call cut short keeps what it measured.
Run on an H100 on 2026-12-06 (calls that asked for the H200 got one): at 05:37 UTC with the
defaults, then at 06:05 over the 27 zoo models that GPU measured at fp32/fp16/bf16, batch 1/8/32
(datasets/nvidia-h100-80gb-hbm3/diagnostics/zoo_replay_kernels_2026-12-06.json.gz, read by
zoo_replay_kernels.py beside it). Not yet run on the H200.
"""

import json
import os
import statistics
import time

import torch

from collectors.batching_server import model_source
from collectors.capture_profile import device_kernels
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
        model = build_model(source, torch.device("cuda"), torch_dtype(prec))
        x = source.example_input(batch, torch.device("cuda"), torch_dtype(prec))
        forward = lambda: model(x)  # noqa: E731
        replay_ms = float(statistics.median(time_cudagraph(forward)))
        kernels = device_kernels(capture(forward).replay)
    return {"model": name, "precision": precision, "batch": batch, "replay_ms": replay_ms, "replay": kernels}


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
