"""What k model instances on one GPU do to each batch's latency and to throughput, against one alone.

Triton's ``instance_group { count: k }`` loads k copies of a model on a GPU; each takes its own
batches and issues them on its own CUDA stream, and waits for its batch to finish before it takes
the next. The capacity planner (``predictor/capacity/planner.py``) always plans one instance per
GPU because nothing told it what a second or third instance costs each batch: k instances
overlap kernels that leave the GPU partly idle (small batches, small models), so throughput can
grow while each batch takes longer. This measures that, for CUDA-graph execution at fp16.

For each unit (model, batch, k): k independent instances, each its own copy of the model
(``collectors.model_build.build_model``: eval, fp16, on the GPU), its own static input
(``ZooModel.example_input``), its own CUDA stream and its own captured graph
(``collectors.forward_timing.capture``, as ``collectors.batching_server.CapturedModel`` captures
one). k threads start together (a barrier) and each, for a warm-up (a quarter of ``--seconds``
unless ``--warmup-s`` says otherwise) and then ``--seconds``, loops ``t0 = perf_counter();
graph.replay(); stream.synchronize(); latency = perf_counter() - t0``: the host clock from issuing
the batch to seeing it done, as a serving instance waits for its batch (one replay is one launch,
so the host clock does not inflate it as it does a small kernel's). A thread keeps replaying,
unrecorded, until every thread's window has ended, so every recorded batch ran beside all k
instances. Each instance's throughput is its batches x batch size over the time from its first
recorded start to its last recorded finish (no rounding to whole batches in the window); the
unit's throughput is their sum. The Python loop holds the GIL for a few microseconds a batch
(replay and synchronize release it): negligible beside batches of 100 us and more, but a
C++ backend's instances would not share even that.

Modules and graphs are built lazily, once per (model, instance index) and (model, batch,
instance index), reused by every unit and round of the model, and freed when the model is done.
Units run in interleaved rounds: each model in turn (building is the slow part), and for it each
round visits all its (batch, k) units in a seeded shuffled order, so drift of clocks and power
lands on k=1 and k>1 alike; a ratio pairs a unit with k=1 of the same (model, batch, round, boot).

Held-out models (``predictor.holdout``) are never measured, so resnet50, bert-base, vit_b_16 and
efficientnet_b0 are stood in for by the zoo's nearest: resnet101 (also served in
``benchmarks/triton_serving.sh``), distilbert-base, vit_b_32 and efficientnet_b2. A model whose
package (torchvision, transformers) is missing is skipped with its reason.

Run (GPU machine, via ``benchmarks/instance_concurrency.sh``, or directly)::

    python3 benchmarks/instance_concurrency.py --out $OUT/instance_concurrency.jsonl --limit-s 500 \\
        [--models resnet101,densenet169] [--batches 1,4,8,16,32] [--instances 1,2,3,4] [--seconds 1.0] [--rounds 2]
    .venv/bin/python benchmarks/instance_concurrency.py --dry-run --out /tmp/ic.jsonl --seconds 0.2  # no GPU

``--dry-run`` runs the same loop on the CPU with eager forwards of a tiny ``nn.Sequential`` per
model name (no graphs, no streams): it checks the control flow, the resume and the table only.

Writes ``--out`` (JSON lines, appended and fsynced one at a time): a ``header`` record per start
(GPU, torch, CUDA, cuDNN, driver, CPU model, boot id, date, the settings), then one ``unit``
record per measured unit (model, precision, batch, instances, round, batches per instance,
latency median/mean/p10/p90/p99 in ms over all instances' batches, each instance's median,
throughput in samples/s, NVML's clock-event reasons around it). A rerun with the same ``--out``
skips the units (model, precision, batch, k, round) already there. It stops before ``--limit-s``
seconds of wall time and lists what was left. At the end it prints, from the whole file, per
(model, batch): k=1's median latency and throughput, and for each k the latency and throughput
ratios to k=1 (medians over rounds).

Wall time of the defaults (6 models x 5 batches x 4 k x 2 rounds = 240 units) on an H100, estimated:
each unit takes its 0.25 s warm-up + 1.0 s window + the cool-down (one batch) and thread starts,
about 1.3 s, so 240 x 1.3 = ~310 s; building 4 instances and capturing 20 graphs per model is
about 5-15 s (~60 s for six); importing torch, torchvision and transformers and starting CUDA
~10-15 s: about 385 s in all, inside the 420 s aimed at and the 500 s of ``--limit-s``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.util import find_spec
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import torch

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.fingerprint import Nvml, open_nvml, read_fingerprint  # noqa: E402
from collectors.forward_timing import capture  # noqa: E402
from collectors.model_build import ModelSource, build_model  # noqa: E402
from collectors.precision_flags import precision_flags, torch_dtype  # noqa: E402
from collectors.zoo_models import get_zoo_model  # noqa: E402
from predictor.clock_reasons import THROTTLE_MASK  # noqa: E402
from predictor.holdout import check_not_held_out  # noqa: E402
from predictor.precision import get_precision  # noqa: E402

MODELS = ("resnet101", "densenet169", "mobilenet_v3_small", "distilbert-base", "vit_b_32", "efficientnet_b2")
BATCHES = (1, 4, 8, 16, 32)
INSTANCES = (1, 2, 3, 4)
#: a thread records at least this many batches, even past its window (a batch longer than the window)
MIN_BATCHES = 3
#: first guesses of the seconds to build one instance and capture one graph, until a model shows its own
BUILD_GUESS_S, CAPTURE_GUESS_S = 3.0, 0.5
#: the seconds a unit takes beyond its warm-up and window (cool-down, threads), until units show it
OVERHEAD_GUESS_S = 0.3
#: --dry-run's tiny model's width
TINY_WIDTH = 64
TABLE_MARK = "== instance concurrency: ratios to one instance (medians over rounds)"


@dataclass(frozen=True)
class Unit:
    """One measurement: ``instances`` instances of ``model`` replaying batches of ``batch`` at once."""

    model: str
    precision: str
    batch: int
    instances: int
    round: int

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        """What a resumed run looks for in the file."""
        return (self.model, self.precision, self.batch, self.instances, self.round)


class Replica(Protocol):
    """One model instance as its serving thread runs it: ``context`` is entered in that thread
    (a CUDA stream is current per thread), ``step`` runs one batch to its end."""

    def context(self) -> AbstractContextManager[Any]: ...

    def step(self) -> None: ...


@dataclass
class GraphReplica:
    """A captured forward replayed on the instance's own stream, waited for on the host."""

    graph: torch.cuda.CUDAGraph
    stream: torch.cuda.Stream

    def context(self) -> AbstractContextManager[Any]:
        return torch.cuda.stream(self.stream)

    def step(self) -> None:
        self.graph.replay()  # launches on the current stream: this instance's
        self.stream.synchronize()


@dataclass
class EagerReplica:
    """An eager CPU forward (``--dry-run`` only)."""

    module: torch.nn.Module
    x: torch.Tensor

    def context(self) -> AbstractContextManager[Any]:
        return torch.inference_mode()

    def step(self) -> None:
        self.module(self.x)


@dataclass
class InstancePool:
    """A model's instances and their graphs, built on first need and kept for every unit and round
    of the model: one module per instance index, one (input, graph) per (batch, instance index).
    Tracks how long building and capturing took, to budget what is still missing."""

    name: str
    source: ModelSource | None  # None: --dry-run's tiny CPU model
    precision: str
    modules: list[Any] = field(default_factory=list)
    streams: list[torch.cuda.Stream] = field(default_factory=list)
    graphs: dict[tuple[int, int], tuple[Any, Any]] = field(default_factory=dict)
    build_s: list[float] = field(default_factory=list)
    capture_s: list[float] = field(default_factory=list)

    def missing_s(self, batch: int, k: int) -> float:
        """Seconds it would take to build what ``k`` instances at ``batch`` still lack."""
        builds = max(0, k - len(self.modules))
        captures = sum((batch, i) not in self.graphs for i in range(k))
        guess = 1.0 if self.source is not None else 0.01  # --dry-run's tiny model builds at once
        build = float(np.mean(self.build_s)) if self.build_s else BUILD_GUESS_S * guess
        grab = float(np.mean(self.capture_s)) if self.capture_s else CAPTURE_GUESS_S * guess
        return builds * build + captures * grab

    def replicas(self, batch: int, k: int) -> list[Replica]:
        """The first ``k`` instances ready to run batches of ``batch``."""
        prec = get_precision(self.precision)
        dtype = torch_dtype(prec)
        while len(self.modules) < k:
            t0 = time.perf_counter()
            if self.source is None:
                self.modules.append(tiny_model(len(self.modules)))
            else:
                self.modules.append(build_model(self.source, torch.device("cuda"), dtype))
                self.streams.append(torch.cuda.Stream())
            self.build_s.append(time.perf_counter() - t0)
        out: list[Replica] = []
        for i in range(k):
            if (batch, i) not in self.graphs:
                t0 = time.perf_counter()
                if self.source is None:
                    self.graphs[batch, i] = (torch.randn(batch, TINY_WIDTH), None)
                else:  # as collectors.batching_server.CapturedModel captures a batch size
                    with torch.inference_mode(), precision_flags(prec):
                        x = self.source.example_input(batch, torch.device("cuda"), dtype)
                        self.graphs[batch, i] = (x, capture(functools.partial(self.modules[i], x)))
                self.capture_s.append(time.perf_counter() - t0)
            x, graph = self.graphs[batch, i]
            out.append(EagerReplica(self.modules[i], x) if graph is None else GraphReplica(graph, self.streams[i]))
        return out

    def close(self) -> None:
        """Free the graphs (their memory pools), inputs and modules."""
        self.graphs.clear()
        self.modules.clear()
        self.streams.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()



def tiny_model(seed: int) -> torch.nn.Module:
    """``--dry-run``'s model: a small MLP, each instance its own copy."""
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(TINY_WIDTH, 256), torch.nn.ReLU(), torch.nn.Linear(256, TINY_WIDTH)]
    return torch.nn.Sequential(*layers).eval()


class Countdown:
    """Set ``done`` once ``n`` threads have arrived."""

    def __init__(self, n: int) -> None:
        self._left = n
        self._lock = threading.Lock()
        self.done = threading.Event()

    def arrive(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left <= 0:
                self.done.set()


@dataclass
class Served:
    """What one instance's thread recorded: latencies (s), first recorded start, last recorded finish."""

    latencies: list[float]
    first_s: float
    last_s: float


def serve(replica: Replica, barrier: threading.Barrier, epoch: list[float], warmup_s: float, seconds: float,
          finished: Countdown) -> Served:
    """One instance's loop: warm up, then record each batch's host-clock latency for ``seconds``;
    then keep replaying, unrecorded, until every instance is through, so that no recorded batch
    ran with fewer than all of them."""
    arrived = False
    try:
        with replica.context():
            barrier.wait()
            warm_end = epoch[0] + warmup_s  # one start for all, set by the barrier's action
            end = warm_end + seconds
            latencies: list[float] = []
            first = last = 0.0
            while True:
                t0 = time.perf_counter()
                if t0 >= end and len(latencies) >= MIN_BATCHES:
                    break
                replica.step()
                t1 = time.perf_counter()
                if t0 >= warm_end:
                    if not latencies:
                        first = t0
                    latencies.append(t1 - t0)
                    last = t1
            finished.arrive()
            arrived = True
            while not finished.done.is_set():
                replica.step()
        return Served(latencies, first, last)
    finally:
        if not arrived:
            finished.arrive()


def run_unit(replicas: Sequence[Replica], warmup_s: float, seconds: float) -> list[Served]:
    """Run every replica in its own thread, all started by one barrier; their records in order."""
    k = len(replicas)
    epoch: list[float] = []
    barrier = threading.Barrier(k, action=lambda: epoch.append(time.perf_counter()), timeout=120)
    finished = Countdown(k)
    results: list[Served | None] = [None] * k
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = serve(replicas[i], barrier, epoch, warmup_s, seconds, finished)
        except BaseException as error:  # reraised in the main thread
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,), name=f"instance-{i}") for i in range(k)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:  # the first real error, not the broken barrier it left the other threads
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
    return [r for r in results if r is not None]


def summarise(unit: Unit, served: list[Served], seconds: float, warmup_s: float, boot: str, dry_run: bool,
              reasons: int | None, wall_s: float) -> dict[str, Any]:
    """The unit's record: latency over all instances' batches, throughput summed over instances."""
    ms = np.concatenate([np.asarray(s.latencies) for s in served]) * 1e3
    p10, p50, p90, p99 = (float(v) for v in np.percentile(ms, [10, 50, 90, 99]))
    rates = [len(s.latencies) * unit.batch / (s.last_s - s.first_s) for s in served]
    return {
        "type": "unit", "model": unit.model, "precision": unit.precision, "batch": unit.batch,
        "instances": unit.instances, "round": unit.round,
        "batches_per_instance": [len(s.latencies) for s in served],
        "latency_median_ms": p50, "latency_mean_ms": float(ms.mean()), "latency_p10_ms": p10,
        "latency_p90_ms": p90, "latency_p99_ms": p99,
        "instance_median_ms": [float(np.median(s.latencies)) * 1e3 for s in served],
        "throughput_sps": float(sum(rates)), "instance_throughput_sps": [float(r) for r in rates],
        "seconds": seconds, "warmup_s": warmup_s, "wall_s": round(wall_s, 3),
        "clock_reasons": reasons, "throttled": bool(reasons and reasons & THROTTLE_MASK),
        "boot_id": boot, "dry_run": dry_run, "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def boot_id() -> str:
    """This boot's id: tells apart machines (and leases) that share a GPU model."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def header(args: argparse.Namespace, warmup_s: float) -> dict[str, Any]:
    """Which machine, GPU and software measured the units that follow (gpu_machine_header's fields
    and the device fingerprint's)."""
    fingerprint = read_fingerprint("cpu" if args.dry_run else "cuda").as_dict()
    return {
        "type": "header", "dry_run": args.dry_run, "boot_id": boot_id(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": None if args.dry_run else fingerprint["name"], "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": fingerprint["cudnn_version"], "driver": fingerprint["driver_version"],
        "cpu_model": fingerprint["cpu_model"], "cpu_cores": fingerprint["cpu_cores"], "python": sys.version.split()[0],
        "fingerprint": fingerprint, "argv": sys.argv[1:],
        "settings": {"models": args.models, "precision": args.precision, "batches": args.batches,
                     "instances": args.instances, "seconds": args.seconds, "warmup_s": warmup_s,
                     "rounds": args.rounds, "seed": args.seed, "limit_s": args.limit_s},
    }


def read_records(path: Path) -> list[dict[str, Any]]:
    """The file's records; a line cut short (a run killed mid-write) is skipped and said so."""
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"{path}:{number}: not a JSON record (cut short?), ignored", flush=True)
    return records


def open_for_append(path: Path) -> IO[str]:
    """``path`` opened to append, starting on a line of its own even after a cut-short line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cut = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    f = path.open("a")
    if cut:
        f.write("\n")
    return f


def append(f: IO[str], record: dict[str, Any]) -> None:
    """One record, on disk before the next unit starts (a killed run loses at most the unit under way)."""
    f.write(json.dumps(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def unavailable(name: str, dry_run: bool) -> str | None:
    """Why ``name`` cannot be measured here, or None."""
    try:
        check_not_held_out(name)
        source = get_zoo_model(name)
    except ValueError as error:
        return str(error)
    package = "torchvision" if source.kind == "vision" else "transformers"
    if not dry_run and find_spec(package) is None:
        return f"{name} is built with {package}, which is not installed here"
    return None


def round_order(model: str, precision: str, batches: Sequence[int], instances: Sequence[int], r: int,
                seed: int) -> list[Unit]:
    """Round ``r``'s units of ``model``, in an order shuffled by (seed, model, round): the same on a rerun."""
    units = [Unit(model, precision, b, k, r) for b in batches for k in instances]
    random.Random(f"{seed}|{model}|{r}").shuffle(units)
    return units


def ratio_table(records: list[dict[str, Any]]) -> list[str]:
    """Per (model, batch): k=1's median latency and throughput, and for each k > 1 the ratio of its
    median latency and of its throughput to k=1's in the same round on the same boot (medians over
    rounds)."""
    groups: dict[tuple[str, str, int], dict[tuple[int, str], dict[int, dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(dict))
    for rec in records:
        if rec.get("type") == "unit":
            groups[rec["model"], rec["precision"], rec["batch"]][rec["round"], rec["boot_id"]][rec["instances"]] = rec
    if not groups:
        return [TABLE_MARK, "no units recorded"]
    ks = sorted({k for by_round in groups.values() for units in by_round.values() for k in units if k != 1})
    heads = ["model", "prec", "batch", "k1 ms", "k1 samples/s"] + [f"k{k} {what}" for k in ks for what in ("lat x",
                                                                                                          "thr x")]
    rows: list[list[str]] = []
    for (model, precision, batch), by_round in groups.items():
        ones = [u[1] for u in by_round.values() if 1 in u]
        row = [model, precision, str(batch),
               f"{np.median([r['latency_median_ms'] for r in ones]):.3f}" if ones else "-",
               f"{np.median([r['throughput_sps'] for r in ones]):.0f}" if ones else "-"]
        for k in ks:
            pairs = [(u[k], u[1]) for u in by_round.values() if k in u and 1 in u]
            if pairs:
                lat = np.median([a["latency_median_ms"] / b["latency_median_ms"] for a, b in pairs])
                thr = np.median([a["throughput_sps"] / b["throughput_sps"] for a, b in pairs])
                row += [f"{lat:.2f}", f"{thr:.2f}"]
            else:
                row += ["-", "-"]
        rows.append(row)
    first_seen = {model: i for i, model in enumerate(dict.fromkeys(r[0] for r in rows))}
    rows.sort(key=lambda row: (first_seen[row[0]], row[1], int(row[2])))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    lines = [TABLE_MARK, "  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.append("lat x: median batch latency with k instances / with one; thr x: samples/s of all k / of one")
    return lines


def int_list(text: str) -> list[int]:
    """'1,4,8' -> [1, 4, 8], each at least 1."""
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers, comma-separated")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file, appended to and resumed from")
    parser.add_argument("--models", type=lambda t: [m.strip() for m in t.split(",") if m.strip()],
                        default=list(MODELS), help="zoo model names, comma-separated")
    parser.add_argument("--batches", type=int_list, default=list(BATCHES))
    parser.add_argument("--instances", type=int_list, default=list(INSTANCES), help="instance counts k")
    parser.add_argument("--precision", default="fp16", choices=("fp16", "bf16", "fp32"))
    parser.add_argument("--seconds", type=float, default=1.0, help="recorded window of each unit")
    parser.add_argument("--warmup-s", type=float, default=None, help="warm-up of each unit (default: seconds / 4)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-s", type=float, default=500.0, help="stop before this much wall time")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, eager forwards of a tiny nn.Sequential: tests the loop, resume and table")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.limit_s <= 0:
        parser.error("--seconds and --limit-s must be positive, --rounds at least 1")
    if 1 not in args.instances:
        parser.error("--instances must include 1: every ratio is against one instance")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit(f"instance_concurrency: CUDA is not available (torch {torch.__version__}, built with CUDA "
                 f"{torch.version.cuda}): no GPU is visible to torch. Run it on the GPU machine "
                 "(benchmarks/instance_concurrency.sh), or pass --dry-run to test the loop on the CPU.")
    if args.dry_run:  # one CPU thread per instance: torch's intra-op pool under k callers stalls for ms
        torch.set_num_threads(1)
    warmup_s = args.seconds / 4 if args.warmup_s is None else args.warmup_s
    records = read_records(args.out)
    earlier = {bool(r.get("dry_run")) for r in records if r.get("type") == "header"}
    if earlier and earlier != {args.dry_run}:
        sys.exit(f"instance_concurrency: {args.out} holds {'dry-run' if True in earlier else 'GPU'} units; "
                 "give another --out")
    done = {(r["model"], r["precision"], r["batch"], r["instances"], r["round"]) for r in records
            if r.get("type") == "unit"}
    nvml: Nvml | None = None if args.dry_run else open_nvml(0)
    this_boot = boot_id()

    def elapsed() -> float:
        return time.monotonic() - started

    measurable: list[str] = []
    for name in args.models:
        reason = unavailable(name, args.dry_run)
        if reason:
            print(f"skip {name}: {reason}", flush=True)
        else:
            measurable.append(name)
    plan = {m: [u for r in range(args.rounds)
                for u in round_order(m, args.precision, args.batches, args.instances, r, args.seed)]
            for m in measurable}
    todo = sum(u.key not in done for units in plan.values() for u in units)
    unit_guess = warmup_s + args.seconds + OVERHEAD_GUESS_S
    print(f"{todo} units to run ({sum(map(len, plan.values())) - todo} already in {args.out}), about "
          f"{todo * unit_guess:.0f} s of units plus builds and captures; limit {args.limit_s:.0f} s", flush=True)

    overheads: list[float] = []
    stopped = False
    with open_for_append(args.out) as f:
        append(f, header(args, warmup_s))
        for model in measurable:
            units = [u for u in plan[model] if u.key not in done]
            if not units:
                continue
            source = None if args.dry_run else get_zoo_model(model)
            pool = InstancePool(model, source, args.precision)
            try:
                for unit in units:
                    overhead = max(overheads) if overheads else OVERHEAD_GUESS_S
                    need = warmup_s + args.seconds + overhead + pool.missing_s(unit.batch, unit.instances)
                    if elapsed() + need > args.limit_s:
                        stopped = True
                        break
                    replicas = pool.replicas(unit.batch, unit.instances)
                    before = nvml.clock_event_reasons() if nvml else None
                    t0 = time.perf_counter()
                    served = run_unit(replicas, warmup_s, args.seconds)
                    wall = time.perf_counter() - t0
                    after = nvml.clock_event_reasons() if nvml else None
                    overheads.append(wall - warmup_s - args.seconds)
                    reasons = None if nvml is None else (before or 0) | (after or 0)
                    record = summarise(unit, served, args.seconds, warmup_s, this_boot, args.dry_run, reasons, wall)
                    append(f, record)
                    done.add(unit.key)
                    print(f"[{elapsed():5.0f} s] r{unit.round} {model} b{unit.batch} k{unit.instances}: "
                          f"{record['latency_median_ms']:.3f} ms median, p99 {record['latency_p99_ms']:.3f}, "
                          f"{record['throughput_sps']:.0f} samples/s, batches {record['batches_per_instance']}",
                          flush=True)
            except Exception as error:  # one model's failure (out of memory, a capture refused) spares the others
                print(f"{model}: stopped by {type(error).__name__}: {error}", flush=True)
                traceback.print_exc(limit=4)
            finally:
                pool.close()
            if stopped:
                break

    left = [u for m in measurable for u in plan[m] if u.key not in done]
    if left:
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for u in left:
            counts[u.model, u.round] += 1
        why = f"stopped before the {args.limit_s:.0f} s limit" if stopped else "not measured (see above)"
        print(f"{len(left)} units left undone, {why}: "
              + ", ".join(f"{m} round {r}: {n}" for (m, r), n in counts.items())
              + "; rerun with the same --out to resume", flush=True)
    else:
        print(f"all {sum(map(len, plan.values()))} units of {', '.join(measurable)} are in {args.out}", flush=True)
    print(f"wall time {elapsed():.0f} s", flush=True)
    print("\n".join(ratio_table(read_records(args.out))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
