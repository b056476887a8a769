"""Where a captured zoo model's prediction misses, family by family, from one profiled replay.

Reads ``zoo_replay_kernels_2026-12-06.json``: six zoo CNNs at fp16 batch 1 and 8 and fp32 batch 1,
each unit's replay median and one profiled replay's kernels by name (count, total us), measured by
``datasets/nvidia-h200/diagnostics/profile_zoo_replays.py`` on an H100 lease (a call that asked for
the H200 kept the H100 it held). The H200 bundle predicts such CNNs 0.82-0.94x at fp16 batch 1
(``datasets/nvidia-h200/notes.md``, 2026-12-06); the H100's measured zoo runs show the same
(these models run slower at fp16 batch 1 than at fp32 there too), so the profile says where.

For each unit it prints the replay, the transfer bundle's prediction for the H100 (a device it is
fitted on: a development figure), the profiled kernels' summed durations and count (what the replay
spends beyond them is time between kernels), then per family what the per-layer models predict
inside the model against the profiled kernels of that family. Kernel names are sorted into
families by the substrings in ``KERNEL_FAMILIES``; the first match wins.

    .venv/bin/python datasets/nvidia-h100-80gb-hbm3/diagnostics/zoo_replay_kernels.py   # -> its .txt
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from predictor.device_bundles import load_predictor
from predictor.zoo import load_zoo_graph

PROFILE = Path(__file__).with_name("zoo_replay_kernels_2026-12-06.json")
DEVICE = "nvidia-h100-80gb-hbm3"

#: (family, lower-case substrings of a kernel name), in the order they are tried. A convolution in
#: NCHW at half precision is cuDNN's layout transforms around an NHWC kernel; a BatchNorm at half
#: precision is three of PyTorch's kernels (the stats' inverse std, a copy, the transform), at fp32
#: one of cuDNN's (bn_fw_inf).
KERNEL_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("conv layout", ("nchwtonhwc", "nhwctonchw")),
    ("batch_norm", ("batch_norm", "bn_fw")),
    ("conv/gemm", ("xmma", "cutlass", "nvjet", "gemm", "gemv", "splitkreduce", "convolve", "conv2d_",
                   "conv_depthwise", "memset", "cudnn")),
    ("copy", ("direct_copy",)),
    ("concat", ("catarray",)),
    ("pool", ("pool",)),
    ("mean", ("reduce_kernel",)),
)
#: the predicted families each profiled family is compared with
PREDICTED_AS = {"conv layout": "conv/gemm", "conv/gemm": "conv/gemm", "batch_norm": "batch_norm",
                "copy": "batch_norm", "concat": "concat", "pool": "pool", "mean": "pool", "elementwise": "elementwise"}
PREDICTED_FAMILY = {"conv2d": "conv/gemm", "linear": "conv/gemm", "matmul": "conv/gemm", "batch_norm": "batch_norm",
                    "concat": "concat", "pool": "pool", "adaptive_avg_pool2d": "pool", "mean": "pool"}


def kernel_family(name: str) -> str:
    lower = name.lower()
    return next((family for family, keys in KERNEL_FAMILIES if any(k in lower for k in keys)), "elementwise")


def main() -> None:
    predictor = load_predictor(DEVICE)
    print(f"{DEVICE}: profiled replays ({PROFILE.name}) against the transfer bundle {predictor.bundle.version} "
          "(fitted on this GPU's rows and runs: a development figure)")
    print("per family: predicted inside the model / profiled kernel durations, us (profiled count); "
          "'conv/gemm' profiled includes cuDNN's layout transforms, 'batch_norm' the copy kernels\n")
    for unit in json.loads(PROFILE.read_text()):
        if "error" in unit:
            print(f"{unit['model']} {unit['precision']} b{unit['batch']}: {unit['error']}")
            continue
        prediction = predictor.predict(load_zoo_graph(unit["model"]), unit["batch"], unit["precision"], "cudagraph")
        predicted: dict[str, float] = defaultdict(float)
        for layer in prediction.layers:
            predicted[PREDICTED_FAMILY.get(layer.family or "", "elementwise")] += layer.kernel_us
        profiled: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for name, (count, total_us) in unit["replay"].items():
            family = PREDICTED_AS[kernel_family(name)]
            profiled[family] += total_us
            counts[family] += count
        replay_us, kernels_us = unit["replay_ms"] * 1e3, sum(profiled.values())
        print(f"{unit['model']} {unit['precision']} b{unit['batch']}: replay {replay_us:.0f} us, predicted "
              f"{prediction.total_ms * 1e3:.0f} ({prediction.total_ms * 1e3 / replay_us:.2f}x); kernels "
              f"{kernels_us:.0f} us in {sum(counts.values())}, {replay_us - kernels_us:.0f} us between them")
        families = sorted(set(predicted) | set(profiled), key=lambda f: -profiled.get(f, 0.0))
        print("    " + ", ".join(f"{f} {predicted.get(f, 0.0):.0f}/{profiled.get(f, 0.0):.0f} ({counts.get(f, 0)})"
                                  for f in families))


if __name__ == "__main__":
    main()
