"""A cold prediction's time, this checkout against another one (a base revision), round by round.

This shared machine's speed drifts by a fifth within the hour, and alternating whole processes
(blocks of 15 rounds each) could not tell a 10% change from none: on 2026-12-07 the same change
read 0.89x, 1.04x, 0.97x and 0.99x in four such runs (``results/cold_forests.txt``). So each
checkout gets one persistent child process, pinned to the same core, loaded once; the parent
asks them for one round at a time, strictly in turn (base, this, base, ...), so that
neighbouring rounds see the same machine and every round follows one of the other child, as a
cold prediction follows other work (in the order base, this, this, base, ... a child that ran
twice in a row was 1.3x quicker the second time on densenet169: its code still in the caches).
A round is nas_speed.py's cold pair: a cold densenet169[:200] and a new 200-node NAS graph,
batch 8, fp16, CUDA graph, the kernel cache cleared before each. The
children import the checkout's own ``predictor`` and ``benchmarks/nas_speed.py`` (any revision
that has ``graphs_of``, ``load_predictor`` and ``SEEDS``). Both draw the same graphs, and share
the compiled-trees cache where their bundles are the same. For example

    git worktree add /tmp/base HEAD~1      # the revision before the change (HEAD, while it is uncommitted)
    taskset -c 0 .venv/bin/python benchmarks/cold_ab.py /tmp/base [--rounds 300]
    git worktree remove --force /tmp/base

Prints per graph each checkout's median, their ratio, and over the pairs (each round of this
checkout over the geometric mean of the base's rounds either side of it) the geometric mean with
its 95% interval, and the quartiles.
"""

from __future__ import annotations

import argparse
import contextlib
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


def _ask(process: subprocess.Popen[str], checkout: Path) -> list[float]:
    """One round of a child: its milliseconds per graph."""
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write("round\n")
        process.stdin.flush()
    except BrokenPipeError:
        raise RuntimeError(f"the cold child of {checkout} died (exit {process.wait()})") from None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"the cold child of {checkout} died (exit {process.wait()})")
    times: list[float] = json.loads(line)
    return times


def alternate(base: Path, this: Path, rounds: int, core: int) -> tuple[list[list[float]], list[list[float]]]:
    """Rounds asked of the two children strictly in turn (base, this, base, this, ..., base), so that
    every round follows one of the other child; the base's rounds, one more than this one's, and
    this one's, the first WARMUP_ROUNDS of each left out."""
    total = rounds + WARMUP_ROUNDS
    children = [subprocess.Popen([sys.executable, __file__, "--child", str(path), "--rounds", str(total + 1),
                                  "--core", str(core)], cwd=path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
                for path in (base, this)]
    try:
        for process, path in zip(children, (base, this)):
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                process.kill()  # (its stdin still open: it might wait on it)
                raise RuntimeError(f"the cold child of {path} failed to start (exit {process.wait()})")
        base_rounds, this_rounds = [], []
        for _ in range(total):
            base_rounds.append(_ask(children[0], base))
            this_rounds.append(_ask(children[1], this))
        base_rounds.append(_ask(children[0], base))  # the base round after this one's last
        return base_rounds[WARMUP_ROUNDS:], this_rounds[WARMUP_ROUNDS:]
    finally:
        for process in children:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
    if args.rounds < 2:
        parser.error("--rounds: at least 2")
    sys.path.insert(0, str(HERE))  # (the parent only: a child imports its own checkout's code)
    from collectors.fingerprint import cpu_model

    core = min(os.sched_getaffinity(0))
    base_path = args.base.resolve()
    base_rounds, this_rounds = alternate(base_path, HERE, args.rounds, core)
    print(f"# {cpu_model()}; one core ({core}); {args.rounds} rounds per checkout, strictly in turn, base first "
          f"and last (after {WARMUP_ROUNDS} unmeasured each); base {base_path}")
    print("# pair: each round of this checkout over the geometric mean of the base's rounds either side of it")
    print(f"{'cold prediction, ms':<26} {'base':>8} {'this':>8} {'ratio':>7}   "
          "pairs: geomean (95% interval; quartiles)")
    for j, graph in enumerate(GRAPHS):
        base = [r[j] for r in base_rounds]
        this = [r[j] for r in this_rounds]
        logs = [math.log(t) - (math.log(base[i]) + math.log(base[i + 1])) / 2 for i, t in enumerate(this)]
        mean, half = statistics.fmean(logs), 1.96 * statistics.stdev(logs) / math.sqrt(len(logs))
        q1, _, q3 = statistics.quantiles([math.exp(x) for x in logs], n=4)
        print(f"{graph:<26} {statistics.median(base):>8.3f} {statistics.median(this):>8.3f} "
              f"{statistics.median(this) / statistics.median(base):>6.2f}x   {math.exp(mean):.3f} "
              f"({math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}; {q1:.2f}-{q3:.2f})")


if __name__ == "__main__":
    main()
