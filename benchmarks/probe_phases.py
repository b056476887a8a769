"""Where the seconds of ``latpred host probe`` go, phase by phase, in one process as the command
runs them (issue #12's 15 s): Python's start and the CLI's imports, torch's import, the GPU's
fingerprint, the probe's loops, building the reference forwards' models (three: the fp32 ones;
nine with --all-18), their warm-up, one round of forwards, the CPU score.

On the GPU machine, from the repository's root (``PYTHONPATH`` as for ``python3 -m latpred``):

    LAUNCH_NS=$(date +%s%N) python3 benchmarks/probe_phases.py [--label L]

``LAUNCH_NS`` (the shell's clock before Python starts) lets the first phase include the
interpreter's own start-up. Prints one line of ``phase seconds`` pairs, cumulative at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="")
    parser.add_argument("--detail", action="store_true",
                        help="also each forward's first call (wall and this process's CPU seconds), in the "
                             "order run, and torch.profiler's costliest operators of those first calls")
    parser.add_argument("--order", choices=("warmup", "schema"), default="warmup",
                        help="the forwards in the order the probe warms them up (collectors.reference_forwards."
                             "warmup_order), or in the profile schema's order (the probe's before commit d5b8abb)")
    parser.add_argument("--all-18", action="store_true",
                        help="all 18 reference forwards, as the probe timed them until commit f751b6a (default: "
                             "the six fp32 ones it times now, predictor.host_profile.CALIBRATION_KEYS)")
    parser.add_argument("--cpu-forwards", action="store_true",
                        help="time the reference forwards on the CPU too (to try this script without a GPU)")
    args = parser.parse_args()
    launched = int(os.environ.get("LAUNCH_NS", "0")) / 1e9 or time.time()
    phases: list[tuple[str, float]] = [("python start", time.time() - launched)]
    mark = time.perf_counter()

    def phase(name: str, step: Callable[[], Any]) -> Any:
        nonlocal mark
        out = step()
        now = time.perf_counter()
        phases.append((name, now - mark))
        mark = now
        return out

    def cli_imports() -> None:
        import collectors.cli  # noqa: F401
        import latpred  # noqa: F401

    phase("cli imports", cli_imports)
    phase("probe imports", lambda: __import__("collectors.host_probe"))
    phase("import torch", lambda: __import__("torch"))
    from collectors.fingerprint import read_fingerprint

    kind = phase("fingerprint", lambda: read_fingerprint("auto").kind)
    device = "cuda" if kind == "cuda" else "cpu"
    import torch

    from collectors.host_probe import REFERENCE_REPS, measure_costs

    phase("probe loops", lambda: measure_costs(device))
    if device == "cuda" or args.cpu_forwards:
        from collectors.reference_forwards import WARMUP, warmup_order
        from predictor.host_profile import CALIBRATION_KEYS, REFERENCE_KEYS

        timed = REFERENCE_KEYS if args.all_18 else CALIBRATION_KEYS
        keys = warmup_order(timed) if args.order == "warmup" else list(timed)

        phase("forwards' imports", lambda: __import__("collectors.reference_forwards"))
        from collectors.forward_timing import eager_timer, synchronize
        from collectors.model_build import bound_forward, build_model, under_precision
        from collectors.nas_space import NasModel, seed_of
        from collectors.precision_flags import torch_dtype
        from predictor.host_profile import parse_reference_key
        from predictor.precision import get_precision

        target = torch.device(device)
        models: dict[tuple[str, str], Any] = {}

        def build_models() -> None:
            for key in keys:
                name, _batch, precision = parse_reference_key(key)
                if (name, precision) not in models:
                    models[name, precision] = build_model(NasModel(seed_of(name)), target,
                                                          torch_dtype(get_precision(precision)))
            synchronize(target)

        built = len({parse_reference_key(k)[::2] for k in keys})  # (model, precision) pairs
        phase(f"build {built} models", build_models)
        timers: dict[str, Callable[[], float]] = {}

        def make_timers() -> None:
            for key in keys:
                name, batch, precision = parse_reference_key(key)
                prec = get_precision(precision)
                x = NasModel(seed_of(name)).example_input(batch, target, torch_dtype(prec))
                timers[key] = eager_timer(under_precision(prec, bound_forward(models[name, precision], x)), target)

        phase("inputs and timers", make_timers)

        def run(reps: int) -> None:
            with torch.inference_mode():
                for timer in timers.values():
                    for _ in range(reps):
                        timer()
                synchronize(target)

        if args.detail:  # the profiler's own cost makes these no phase of the command's
            phase("first calls, profiled (not the command's)", lambda: first_calls(timers, target))
        else:
            phase("first forward each", lambda: run(1))
        phase("rest of warm-up", lambda: run(WARMUP - 1))
        phase("one round", lambda: run(REFERENCE_REPS))
    from collectors.cpu_score import cpu_score_ns

    phase("cpu score", cpu_score_ns)
    total = sum(s for _, s in phases)
    print(f"{args.label:<14}" + "  ".join(f"{name} {s:.2f}" for name, s in phases) + f"  | total {total:.2f}",
          flush=True)


def first_calls(timers: dict[str, Callable[[], float]], target: Any) -> None:
    """Each forward's first call, alone, under torch.profiler (CPU activities): which operators
    the first calls spend their seconds in (cuDNN's heuristics, kernels loaded on first use)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from collectors.forward_timing import synchronize

    lines = []
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.inference_mode():
        for key, timer in timers.items():
            wall, cpu = time.perf_counter(), time.process_time()
            timer()
            synchronize(target)
            lines.append(f"  first call {key:<20} wall {time.perf_counter() - wall:.3f} s  "
                         f"cpu {time.process_time() - cpu:.3f} s")
    print("\n".join(lines))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))


if __name__ == "__main__":
    main()
