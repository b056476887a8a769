"""Zoo models built inside inference mode against built as users build them, on one host in the
same interleaved rounds, eager and CUDA graph (a diagnostic of 2026-12-02, behind
``collectors.model_build.build_model``). Run on the GPU machine from the repository root:

    OUT=DIR python3 datasets/nvidia-h200/diagnostics/ab_built_in_inference_mode.py

A tidied copy of the script that wrote ``zoo_built_in_inference_mode_ab_2026-12-02.json``: fp16,
batch 1 and 8, model names ``<zoo model>|normal`` (built by build_model) and ``<zoo model>|inside``
(built inside it).
"""

import json
import os

import torch

from collectors.fingerprint import read_fingerprint
from collectors.model_runs import measure_models
from collectors.zoo_models import get_zoo_model

MODELS = os.environ.get("MODELS", "resnet34,mobilenet_v3_small,vit_b_32,swin_s,distilbert-base,convnext_small,"
                                  "efficientnet_b2,llama-300m").split(",")


class Frozen(torch.nn.Module):
    """Holds a model built inside inference mode where ``.to()`` cannot reach it (not a submodule)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "inner", model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class BuiltInside:
    """A zoo model built and cast to fp16 on the GPU inside inference mode, as the harness did
    before 2026-12-02."""

    def __init__(self, zoo) -> None:
        self.zoo, self.kind = zoo, zoo.kind

    def build(self) -> torch.nn.Module:
        with torch.inference_mode(), torch.device("cuda"):
            return Frozen(self.zoo.build().to(device="cuda", dtype=torch.float16).eval())

    def example_input(self, batch, device, dtype):
        return self.zoo.example_input(batch, device, dtype)


def main() -> None:
    sources = {}
    for name in MODELS:
        zoo = get_zoo_model(name)
        sources[f"{name}|normal"], sources[f"{name}|inside"] = zoo, BuiltInside(zoo)
    fingerprint = read_fingerprint("cuda")
    rows = []
    for mode in ("eager", "cudagraph"):
        runs = measure_models(fingerprint, sources, (1, 8), ("fp16",), mode=mode, rounds=5, reps=3, seed=1)
        rows += [{k: r[k] for k in ("model", "batch", "precision", "mode", "latency_ms", "p10_ms", "p90_ms")}
                 for r in runs]
    with open(os.path.join(os.environ["OUT"], "ab_build.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
