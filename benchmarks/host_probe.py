"""How long the host probe takes (issue #12: at most 15 s), here and in a dataset's stored probes.

Prints a table: the CPU score alone (the baseline: the part of every probe that touches no
GPU), the full probe on this machine's device (the GPU where there is one), a CPU-only
estimate, and the sample a whole-model run takes between rounds; each as the median and the
longest of ``--repeats`` runs, its ratio to the baseline and its share of the 15 s budget. With
``--dataset``, also the ``probe_seconds`` every probe stored beside that dataset recorded (on the
GPU machine that measured it, under whatever conditions its note names).

    .venv/bin/python benchmarks/host_probe.py [--repeats 5] [--dataset datasets/nvidia-h200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

BUDGET_S = 15.0


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def row(what: str, seconds: list[float], baseline: float) -> str:
    median = statistics.median(seconds)
    return (f"{what:<58} {median:8.3f} {max(seconds):8.3f} {median / baseline:9.1f}x "
            f"{max(seconds) / BUDGET_S:9.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dataset", type=Path, default=None, help="also summarise its stored probes")
    args = parser.parse_args()

    import torch

    from collectors.cpu_score import cpu_score_ns
    from collectors.host_probe import RoundSampler, estimate_here, probe

    device = "cuda" if torch.cuda.is_available() else "cpu"
    reference = probe(device)  # warms torch and the device up; not timed
    sampler = RoundSampler(device)
    baseline = timed(cpu_score_ns, args.repeats)
    rows = [("CPU score alone (baseline)", baseline),
            (f"host probe on {device} (latpred host probe)", timed(lambda: probe(device), args.repeats)),
            ("CPU-only estimate (latpred host probe --cpu-only)",
             timed(lambda: estimate_here(reference), args.repeats)),
            ("sample between a run's rounds", timed(sampler, args.repeats))]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; device {device}"
          f"{' (' + torch.cuda.get_device_name(0) + ')' if device == 'cuda' else ''}; {args.repeats} repeats")
    print(f"{'what':<58} {'median s':>8} {'max s':>8} {'x baseline':>10} {'of 15 s':>9}")
    base = statistics.median(baseline)
    for what, seconds in rows:
        print(row(what, seconds, base))
    if args.dataset is not None:
        from predictor.host_profile import HOSTS_FOLDER, HostStore

        stored = [p for p in HostStore(args.dataset / HOSTS_FOLDER).all() if p.probe_seconds is not None]
        if stored:
            seconds = [float(p.probe_seconds or 0) for p in stored]
            print(f"\n{len(stored)} probes stored in {args.dataset / HOSTS_FOLDER} (measured where the dataset was): "
                  f"median {statistics.median(seconds):.2f} s, longest {max(seconds):.2f} s "
                  f"({max(seconds) / BUDGET_S:.0%} of 15 s), by note:")
            for note in sorted({p.note or "" for p in stored}):
                mine = [float(p.probe_seconds or 0) for p in stored if (p.note or "") == note]
                print(f"  {note[:60]:<60} {len(mine):3d} probes, median {statistics.median(mine):.2f} s, "
                      f"longest {max(mine):.2f} s")


if __name__ == "__main__":
    main()
