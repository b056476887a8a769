"""Where a captured zoo model's prediction misses, from one profiled replay per unit.

Reads ``zoo_replay_kernels_2026-12-06.json.gz``: the 27 zoo models this GPU measured, at fp32,
fp16 and bf16, batch 1, 8 and 32 (243 units), each unit's replay median and one profiled replay's
kernels by name (count, total us). Measured by ``datasets/nvidia-h200/diagnostics/profile_zoo_replays.py``
on an H100 lease on 2026-12-06 (06:05 UTC, 118 s; a call that asked for the H200 got this H100).
The H200 bundle predicts large CNNs 0.89-0.92x at fp16 batch 1, some LLMs 0.82-0.90x
(``datasets/nvidia-h200/notes.md``, 2026-12-06), and the transfer bundle predicts this GPU's CNNs
alike, so the profile says where.

1. For six CNNs at fp16 batch 1 and 8 and fp32 batch 1: the replay, the transfer bundle's
   prediction (a device it is fitted on: a development figure), the profiled kernels' summed
   durations and count (what the run, the dataset's median, spends beyond them is time between
   kernels; the profiling call's own replay, timed once, came out up to 1.20x slower), then per
   family what the per-layer models predict inside the model against the profiled kernels of that
   family. Kernel names are sorted into families by the substrings in ``KERNEL_FAMILIES``.
2. Would composition do better counting kernels than nodes? The captured-graph constants
   (``training.composition``: group scales, a gap, the short-kernel share, a replay, the cold-weight
   share) fitted leave-one-model-out on this GPU's 243 zoo runs three ways: a gap per node that
   launches (as shipped), a gap per kernel the profile counted (what a per-call kernel count
   would give at best), and either with the group scales split by precision (fp32 against half).

    .venv/bin/python datasets/nvidia-h100-80gb-hbm3/diagnostics/zoo_replay_kernels.py   # -> its .txt
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from predictor.compose import GROUPS, CompositionConstants, cudagraph_terms
from predictor.device_bundles import load_predictor
from predictor.zoo import load_zoo_graph
from training.composition import FIXED_GROUPS, RunArrays, run_arrays
from training.data import load_model_runs
from training.hosts import reference_profiles
from training.train import zoo_graphs

PROFILE = Path(__file__).with_name("zoo_replay_kernels_2026-12-06.json.gz")
DEVICE = "nvidia-h100-80gb-hbm3"
DETAILED = ("densenet169", "resnet101", "resnext101_32x8d", "regnet_y_1_6gf", "vgg11_bn", "mobilenet_v3_small")
DETAILED_UNITS = (("fp16", 1), ("fp16", 8), ("fp32", 1))

#: (family, lower-case substrings of a kernel name), tried in order, the first match winning. A
#: convolution in NCHW at half precision is cuDNN's layout transforms around an NHWC kernel; a
#: BatchNorm at half precision is three of PyTorch's kernels (the running variance's inverse std, a
#: copy, the transform), at fp32 one of cuDNN's (bn_fw_inf).
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
#: the predicted family each profiled family is compared with
COMPARED_AS = {"conv layout": "conv/gemm", "conv/gemm": "conv/gemm", "batch_norm": "batch_norm",
               "copy": "batch_norm", "concat": "concat", "pool": "pool", "mean": "pool", "elementwise": "elementwise"}
PREDICTED_AS = {"conv2d": "conv/gemm", "linear": "conv/gemm", "matmul": "conv/gemm", "batch_norm": "batch_norm",
                "concat": "concat", "pool": "pool", "adaptive_avg_pool2d": "pool", "mean": "pool"}


def kernel_family(name: str) -> str:
    lower = name.lower()
    return next((family for family, keys in KERNEL_FAMILIES if any(k in lower for k in keys)), "elementwise")


def families(unit: dict[str, Any], measured_ms: float) -> None:
    """Section 1 for one unit: the whole run (the dataset's median, ``measured_ms``; the profiling
    call's own replay median beside it), then predicted / profiled per family."""
    prediction = load_predictor(DEVICE).predict(load_zoo_graph(unit["model"]), unit["batch"], unit["precision"],
                                                "cudagraph")
    predicted: dict[str, float] = defaultdict(float)
    for layer in prediction.layers:
        predicted[PREDICTED_AS.get(layer.family or "", "elementwise")] += layer.kernel_us
    profiled: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for name, (count, total_us) in unit["replay"].items():
        family = COMPARED_AS[kernel_family(name)]
        profiled[family] += total_us
        counts[family] += count
    measured_us, kernels_us = measured_ms * 1e3, sum(profiled.values())
    print(f"{unit['model']} {unit['precision']} b{unit['batch']}: measured {measured_us:.0f} us (the profiling "
          f"call's replay {unit['replay_ms'] * 1e3:.0f}), predicted {prediction.total_ms * 1e3:.0f} "
          f"({prediction.total_ms * 1e3 / measured_us:.2f}x); kernels {kernels_us:.0f} us in {sum(counts.values())}, "
          f"{measured_us - kernels_us:.0f} us between them")
    order = sorted(set(predicted) | set(profiled), key=lambda f: -profiled.get(f, 0.0))
    print("    " + ", ".join(f"{f} {predicted.get(f, 0.0):.0f}/{profiled.get(f, 0.0):.0f} ({counts.get(f, 0)})"
                              for f in order))


def terms(run: RunArrays, kernels: int, per_kernel: bool, split: bool) -> np.ndarray:
    """A run's captured-graph terms (compose.cudagraph_terms), the launch count the profile's kernels
    where ``per_kernel``, the group sums in fp32's or half's columns where ``split``."""
    t = cudagraph_terms(run.layers, CompositionConstants()).copy()
    if per_kernel:
        t[len(GROUPS)] = kernels
    if not split:
        return t
    groups, zeros = t[:len(GROUPS)], np.zeros(len(GROUPS))
    half = run.precision in ("fp16", "bf16")
    return np.concatenate([zeros, groups, t[len(GROUPS):]] if half else [groups, zeros, t[len(GROUPS):]])


def fit(rows: np.ndarray, measured: np.ndarray, n_groups: int) -> np.ndarray:
    """Non-negative least squares on relative error, fallbacks' scale fixed at 1, each used group's scale
    floored at 0.2 afterwards (as training.composition fits)."""
    a = rows / measured[:, None]
    groups = [g in FIXED_GROUPS for g in GROUPS] * (n_groups // len(GROUPS))
    fixed = np.array(groups + [False] * (a.shape[1] - n_groups))
    used = (a.sum(axis=0) > 0) & ~fixed
    coef, _ = nnls(a[:, used], 1 - a[:, fixed].sum(axis=1))
    weights = np.ones(a.shape[1])
    weights[used] = coef
    scales = weights[:n_groups]
    scales[used[:n_groups]] = np.maximum(scales[used[:n_groups]], 0.2)  # training's floor on a group's scale
    return weights


def gap_per_kernel(units: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    """Section 2: leave-one-model-out on the zoo's captured runs, four ways."""
    dataset = Path("datasets") / DEVICE
    runs_table = load_model_runs(dataset)
    runs_table = runs_table[runs_table["mode"] == "cudagraph"]
    runs = run_arrays(load_predictor(DEVICE), zoo_graphs(sorted(runs_table["model"].unique())), runs_table,
                      reference_profiles(dataset))
    kernels = [sum(count for count, _ in units[(r.model, r.precision, r.batch)]["replay"].values()) for r in runs]
    models = np.array([r.model for r in runs])
    measured = np.array([r.measured_us for r in runs])
    for per_kernel, split in ((False, False), (True, False), (False, True), (True, True)):
        rows = np.array([terms(r, k, per_kernel, split) for r, k in zip(runs, kernels)])
        n_groups = len(GROUPS) * (2 if split else 1)
        ratio = np.empty(len(runs))
        for model in np.unique(models):
            held = models == model
            ratio[held] = rows[held] @ fit(rows[~held], measured[~held], n_groups) / measured[held]
        gap = fit(rows, measured, n_groups)[n_groups]
        frame = pd.DataFrame({"precision": [r.precision for r in runs], "batch": [r.batch for r in runs],
                              "ratio": ratio, "ape": np.abs(ratio - 1)})
        label = f"gap per {'kernel profiled' if per_kernel else 'node'}{', scales by precision' if split else ''}"
        print(f"\n{label}: {np.mean(frame['ape'] <= 0.1):.1%} within ±10%, {frame['ape'].mean():.1%} MAPE; "
              f"gap fitted on all runs {gap:.3f} us")
        table = frame.groupby(["precision", "batch"])["ratio"].median().unstack("batch").round(3)
        print("median predicted / measured\n" + table.to_string())


def main() -> None:
    with gzip.open(PROFILE, "rt") as f:
        units = {(u["model"], u["precision"], u["batch"]): u for u in json.load(f)}
    print(f"{DEVICE}: profiled replays ({PROFILE.name}, {len(units)} units) against the transfer bundle "
          f"{load_predictor(DEVICE).bundle.version} (fitted on this GPU's rows and runs: development figures)")
    print("\n== 1. per family: predicted inside the model / profiled kernel durations, us (profiled count); "
          "'conv/gemm' profiled includes cuDNN's layout transforms, 'batch_norm' the copy kernels")
    runs = load_model_runs(Path("datasets") / DEVICE)
    measured = runs[runs["mode"] == "cudagraph"].groupby(["model", "precision", "batch"])["latency_ms"].median()
    for model in DETAILED:
        for precision, batch in DETAILED_UNITS:
            families(units[(model, precision, batch)], float(measured[(model, precision, batch)]))
    print("\n== 2. the zoo's 243 captured runs, composition fitted leave-one-model-out (zoo runs only)")
    gap_per_kernel(units)


if __name__ == "__main__":
    main()
