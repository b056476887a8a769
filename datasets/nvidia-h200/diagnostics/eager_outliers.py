"""Why nas-133 (two post-norm encoder layers, seq 64, d 384) runs eagerly at 1.6-1.8x its
prediction in every precision and batch, where nas-97 (four such layers, d 288) is within 10%
(nas-dev, development data): each model's eager forward timed, then profiled (torch.profiler, CPU
and CUDA) once warm, its top-level operators and their host time printed.

On the GPU machine from the repository root (PYTHONPATH as for ``python3 -m latpred``):

    python3 datasets/nvidia-h200/diagnostics/eager_outliers.py [nas-133 nas-97 ...]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def main(names: list[str]) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from collectors.model_build import build_model
    from collectors.nas_space import NasModel, seed_of

    device = torch.device("cuda")
    for name in names:
        source = NasModel(seed_of(name))
        model = build_model(source, device, torch.float32)
        x = source.example_input(1, device, torch.float32)
        with torch.inference_mode():
            for _ in range(20):
                model(x)
            torch.cuda.synchronize()
            samples = []
            for _ in range(50):
                t0 = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
                samples.append((time.perf_counter() - t0) * 1e3)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                model(x)
                torch.cuda.synchronize()
        print(f"== {name} {source.spec}: eager fp32 batch 1, median {statistics.median(samples):.3f} ms "
              f"(p10 {sorted(samples)[5]:.3f}, p90 {sorted(samples)[45]:.3f})")
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=50))


if __name__ == "__main__":
    main(sys.argv[1:] or ["nas-133", "nas-97"])
