"""A cold prediction's time, this checkout against another one (a base revision), round by round.

This shared machine's speed drifts by a fifth within the hour, and alternating whole processes
(blocks of 15 rounds each) could not tell a 10% change from none: on 2026-12-07 the same change
read 0.89x, 1.04x, 0.97x and 0.99x in four such runs (``results/cold_forests.txt``). So each
checkout gets one persistent child process, pinned to the same core, loaded once; the parent
asks them for one round at a time, in turn (base, this, this, base, ...), so that neighbouring
rounds see the same machine, and a round of one follows a round of the other, as a cold
prediction follows other work. A round is nas_speed.py's cold pair: a cold densenet169[:200] and
a new 200-node NAS graph, batch 8, fp16, CUDA graph, the kernel cache cleared before each. The
children import the checkout's own ``predictor`` and ``benchmarks/nas_speed.py`` (any revision
that has ``graphs_of``, ``load_predictor`` and ``SEEDS``). Both draw the same graphs, and share
the compiled-trees cache where their bundles are the same. For example

    git worktree add /tmp/base HEAD~1      # the revision before the change (HEAD, while it is uncommitted)
    taskset -c 0 .venv/bin/python benchmarks/cold_ab.py /tmp/base [--rounds 300]
    git worktree remove --force /tmp/base

Prints per graph each checkout's median, their ratio, and the geometric mean and quartiles of
the rounds' own ratios (this / base, each against the base round next to it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
#: rounds each child runs unmeasured first (the interpreter's and the caches' warm-up)
WARMUP_ROUNDS = 10
GRAPHS = ("densenet169[:200]", "new 200-node NAS graph")


def child(checkout: Path, rounds: int, core: int) -> None:
    """The persistent child: ``checkout``'s predictor, one cold round per line read from stdin,
    its milliseconds per graph printed as a JSON list."""
    os.sched_setaffinity(0, {core})
    own = HERE / "benchmarks"  # (this script's folder, which Python put first on the path)
    sys.path[:] = [str(checkout / "benchmarks"), str(checkout)] + [p for p in sys.path if Path(p) != own]
    import gc
    import importlib

    nas_speed = importlib.import_module("nas_speed")  # the checkout's own (by name: it is no package)

    from predictor.graph import Graph
    from predictor.zoo import load_zoo_graph

    predictor = nas_speed.load_predictor("compiled")
    dense = Graph(name="densenet169[:200]", nodes=load_zoo_graph("densenet169").nodes[:200])
    fresh = nas_speed.graphs_of(nas_speed.SEEDS["cold"], rounds, nodes=200)
    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    for i, _ in enumerate(sys.stdin):
        times = []
        for graph in (dense, fresh[i % rounds]):
            predictor.forget_evaluated()  # every kernel configuration evaluated anew
            t0 = time.perf_counter()
            predictor.predict(graph, 8, "fp16", "cudagraph")
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps(times), flush=True)


def cpu_model() -> str:
    """The CPU's model name as Linux reports it (what a figure was measured on)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def alternate(checkouts: dict[str, Path], rounds: int, core: int) -> dict[str, list[list[float]]]:
    """Each checkout's rounds, asked of their children in turn, the first WARMUP_ROUNDS left out."""
    total = rounds + WARMUP_ROUNDS
    children = {name: subprocess.Popen([sys.executable, __file__, "--child", str(path), "--rounds", str(total),
                                        "--core", str(core)], cwd=path, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
                for name, path in checkouts.items()}
    try:
        for name, process in children.items():
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the cold child of {checkouts[name]} failed to start (exit {process.wait()})")
        samples: dict[str, list[list[float]]] = {name: [] for name in checkouts}
        for i in range(total):
            for name in (list(children) if i % 2 == 0 else list(children)[::-1]):
                process = children[name]
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write("round\n")
                process.stdin.flush()
                line = process.stdout.readline()
                if not line:
                    raise RuntimeError(f"the cold child of {checkouts[name]} died (exit {process.wait()})")
                if i >= WARMUP_ROUNDS:
                    samples[name].append(json.loads(line))
        return samples
    finally:
        for process in children.values():
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, nargs="?", help="the other checkout (a git worktree of the base revision)")
    parser.add_argument("--rounds", type=int, default=200, help="measured rounds per checkout (default 200)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.rounds, args.core)
        return
    if args.base is None or not (args.base / "benchmarks" / "nas_speed.py").is_file():
        parser.error(f"{args.base} holds no benchmarks/nas_speed.py: give a checkout of latpred")
    core = min(os.sched_getaffinity(0))
    checkouts = {"base": args.base.resolve(), "this": HERE}
    samples = alternate(checkouts, args.rounds, core)
    print(f"# {cpu_model()}; one core ({core}); {args.rounds} rounds per checkout, alternating round by round "
          f"(after {WARMUP_ROUNDS} unmeasured); base {checkouts['base']}")
    print(f"{'cold prediction, ms':<26} {'base':>8} {'this':>8} {'ratio':>7}   rounds' ratios: geomean (quartiles)")
    for j, graph in enumerate(GRAPHS):
        base, this = ([r[j] for r in samples[name]] for name in checkouts)
        ratios = [t / b for b, t in zip(base, this)]
        geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(f"{graph:<26} {statistics.median(base):>8.3f} {statistics.median(this):>8.3f} "
              f"{statistics.median(this) / statistics.median(base):>6.2f}x   {geomean:.3f} ({q1:.2f}-{q3:.2f})")


if __name__ == "__main__":
    main()
