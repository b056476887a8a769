"""Why a captured text model is slower than its eager kernels: a kernel-level comparison.

transformers skips the attention mask when it can read the padding mask, which it cannot while a
CUDA stream is capturing (``is_tracing()`` is true then), so a captured graph runs a materialised
mask through SDPA. This profiles, per text model, three forwards at one batch and precision:

- ``eager``: the forward as measured in the zoo runs;
- ``eager_as_captured``: the same forward with transformers told a capture is on, so it takes
  the capture-time mask path while still running eagerly (kernels visible to the profiler);
- ``replay``: one replay of the captured graph, profiled (kernels inside a graph are visible to
  CUPTI on CUDA 12 and newer) and timed.

Writes one JSON file: per model and variant, the kernels by name with count and total time.
Run on the GPU machine: ``latpred collect profile --out DIR``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from collectors.forward_timing import capture, time_cudagraph, time_eager
from collectors.model_build import build_model
from collectors.precision_flags import precision_flags, torch_dtype
from collectors.zoo_models import TEXT, get_zoo_model
from predictor.importers.torch_capture import capture_path_forced
from predictor.precision import get_precision


def device_kernels(run: Callable[[], Any]) -> dict[str, list[float]]:
    """Kernels one call of ``run`` put on the GPU: name -> [count, total microseconds]."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if getattr(event.device_type, "name", "") != "CUDA":
            continue
        entry = kernels[event.name[:200]]
        entry[0] += 1
        entry[1] += float(event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total)
    return {name: [count, round(total, 2)] for name, (count, total) in
            sorted(kernels.items(), key=lambda kv: -kv[1][1])}


def profile_model(name: str, batch: int, precision_name: str) -> dict[str, Any]:
    """The three variants of one text model at one batch and precision."""
    zoo = get_zoo_model(name)
    precision = get_precision(precision_name)
    device = torch.device("cuda")
    result: dict[str, Any] = {"model": name, "batch": batch, "precision": precision_name}
    with precision_flags(precision), torch.inference_mode():
        model = build_model(zoo, device, torch_dtype(precision))
        x = zoo.example_input(batch, device, torch_dtype(precision))
        # F821: ruff reads the `del model` below as leaving this closure unbound; forward is not
        # called after it
        forward = lambda: model(x)  # noqa: E731, F821
        result["eager_ms"] = float(statistics.median(time_eager(forward, device)))
        result["eager"] = device_kernels(forward)
        with capture_path_forced():
            result["eager_as_captured_ms"] = float(statistics.median(time_eager(forward, device)))
            result["eager_as_captured"] = device_kernels(forward)
        graph = capture(forward)
        samples = time_cudagraph(forward)
        result["replay_ms"] = float(statistics.median(samples))
        result["replay"] = device_kernels(graph.replay)
        del graph, model
    torch.cuda.empty_cache()
    return result


#: the text models, whose captured graphs take another attention path than their eager forwards.
TEXT_MODELS = tuple(m.name for m in TEXT)
OUTPUT = "capture_profile.json"


def profile_models(out: Path, models: tuple[str, ...] = TEXT_MODELS, batches: tuple[int, ...] = (8, 32),
                   precision: str = "fp16", say: Callable[[str], None] = lambda line: None) -> Path:
    """Profile each model at each batch into ``out/capture_profile.json`` (rewritten after
    every model, so a lease that ends early keeps what was done); returns its path."""
    for name in models:
        get_zoo_model(name)
    get_precision(precision)
    if not torch.cuda.is_available():
        raise RuntimeError("latpred collect profile needs a CUDA GPU: none is visible here")
    out.mkdir(parents=True, exist_ok=True)
    path = out / OUTPUT
    results: list[dict[str, Any]] = []
    for name in models:
        for batch in batches:
            started = time.perf_counter()
            try:
                results.append(profile_model(name, batch, precision))
            except Exception as exc:  # one model failing must not lose the others
                results.append({"model": name, "batch": batch, "error": f"{type(exc).__name__}: {exc}"[:500]})
            r = results[-1]
            say(f"{name} b{batch}: eager {r.get('eager_ms')} as-captured {r.get('eager_as_captured_ms')} "
                f"replay {r.get('replay_ms')} ({time.perf_counter() - started:.1f} s) {r.get('error', '')}")
            path.write_text(json.dumps(results, indent=1))
    return path
