"""Kernel-level profile of captured NAS architectures (issue #11's diagnostic of 2026-12-02).

Per (seed, precision, batch): the replay's median time and three profiled replays' kernels in
launch order, [name, microseconds, start]. Run on the GPU machine from the repository root:

    OUT=DIR SEEDS=73,88 UNITS=bf16:1,bf16:32 python3 datasets/nvidia-h200/diagnostics/profile_nas_replays.py

A tidied copy of the script that wrote ``nas_dev_replay_kernels_2026-12-02.json.gz`` (15 nas-dev
seeds, the defaults below): the profile behind the transpose family's copies and adds across a
block swap and behind building models outside inference mode (datasets/nvidia-h200/notes.md,
2026-12-02).
"""

import json
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from collectors.forward_timing import capture, time_cudagraph
from collectors.nas_space import NasModel
from collectors.precision_flags import precision_flags, torch_dtype
from predictor.precision import get_precision

SEEDS = [int(s) for s in os.environ.get("SEEDS", "73,13,61,1,49,85,109,88,52,136,40,28,112,5,17").split(",")]
UNITS = [(p, int(b)) for p, b in (u.split(":") for u in
                                  os.environ.get("UNITS", "bf16:1,bf16:32,fp32:8,fp32:1,fp16:8").split(","))]


def profile_unit(source: NasModel, precision: str, batch: int) -> dict:
    prec = get_precision(precision)
    with precision_flags(prec), torch.inference_mode():
        with torch.device("cuda"):
            model = source.build()
        model = model.to(device="cuda", dtype=torch_dtype(prec)).eval()
        x = source.example_input(batch, torch.device("cuda"), torch_dtype(prec))

        def forward() -> torch.Tensor:
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
    return {"model": source.name, "space": source.kind, "precision": precision, "batch": batch,
            "replay_ms": replay_ms, "kernels": kernels}


def main() -> None:
    out = os.path.join(os.environ["OUT"], "nas_profile.json")
    results = []
    for seed in SEEDS:
        for precision, batch in UNITS:
            started = time.perf_counter()
            try:
                results.append(profile_unit(NasModel(seed), precision, batch))
            except Exception as exc:  # one unit failing must not lose the others
                results.append({"model": f"nas-{seed}", "precision": precision, "batch": batch,
                                "error": repr(exc)[:400]})
            torch.cuda.empty_cache()
            print(results[-1]["model"], precision, batch, results[-1].get("replay_ms"),
                  f"{time.perf_counter() - started:.1f}s", flush=True)
            with open(out, "w") as f:
                json.dump(results, f)


if __name__ == "__main__":
    main()
