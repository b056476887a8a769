"""A cold prediction's time, this checkout against another one (a base revision), the same run.

This shared machine's speed drifts by a fifth within the hour, so a change to the cold path is
judged only by a ratio measured in alternation: nas_speed.py's cold child (``--cold-child
compiled``: a cold densenet169[:200] and a new 200-node NAS graph, batch 8, fp16, CUDA graph, the
kernel cache cleared before each) run by each checkout's own ``benchmarks/nas_speed.py``, in
processes pinned to one core, in blocks that alternate which checkout goes first. The base
checkout is a folder holding another revision, for example

    git worktree add /tmp/base HEAD~1      # the revision before the change (HEAD, while it is uncommitted)
    taskset -c 0 .venv/bin/python benchmarks/cold_ab.py /tmp/base [--blocks 4] [--rounds 15]
    git worktree remove --force /tmp/base

Both checkouts draw the same graphs (the same seeds), and share the compiled-trees cache where
their bundles are the same. Prints the median of every round per checkout and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def child(checkout: Path, rounds: int, first: int, core: int) -> dict[str, list[float]]:
    """One cold child of ``checkout``'s own nas_speed.py: its rounds' milliseconds per graph."""
    done = subprocess.run([sys.executable, str(checkout / "benchmarks" / "nas_speed.py"), "--cold-child", "compiled",
                           "--rounds", str(rounds), "--first", str(first), "--core", str(core)],
                          capture_output=True, text=True, timeout=1800, cwd=checkout)
    if done.returncode:
        raise RuntimeError(f"the cold child of {checkout} failed:\n{done.stderr[-2000:]}")
    result: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cpu_model() -> str:
    """The CPU's model name as Linux reports it (what a figure was measured on)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the other checkout (a git worktree of the base revision)")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks (default 4)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per block and checkout (default 15)")
    args = parser.parse_args()
    if not (args.base / "benchmarks" / "nas_speed.py").is_file():
        parser.error(f"{args.base} holds no benchmarks/nas_speed.py: give a checkout of latpred")
    core = min(os.sched_getaffinity(0))
    checkouts = {"base": args.base.resolve(), "this": HERE}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in checkouts}
    for block in range(args.blocks):
        names = list(checkouts) if block % 2 == 0 else list(checkouts)[::-1]
        for name in names:
            for graph, values in child(checkouts[name], args.rounds, block * 1000, core).items():
                samples[name].setdefault(graph, []).extend(values)
    print(f"# {cpu_model()}; one core ({core}); {args.blocks} alternating blocks x "
          f"{args.rounds} rounds per checkout; base {checkouts['base']}")
    print(f"{'cold prediction, ms (median of every round)':<46} {'base':>8} {'this':>8} {'ratio':>7}")
    for graph in sorted(set(samples["base"]) & set(samples["this"])):  # what both checkouts timed
        base, this = (statistics.median(samples[name][graph]) for name in checkouts)
        print(f"{graph:<46} {base:>8.3f} {this:>8.3f} {this / base:>6.2f}x")


if __name__ == "__main__":
    main()
