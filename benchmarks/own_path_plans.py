"""Capacity plans made with the serving host's own path, then served: the workflow that a path
fitted on other hosts sends its users to (``ServingPath.caution``).

The second H100 plan set (``results/plan_check_2.txt``) missed because its host paid more per
batch and per request than every host the shipped path was fitted on. A user who heeds the
caution serves the empty model on their own host, fits its path (``latpred serving-path FOLDER
--models empty``) and plans with it. This checks that workflow blind, in one device call:

1. ``latencies`` (here): each model's predicted batch times, median and 90% interval for every
   batch size up to ``plan_check.MAX_BATCH``, and the run spread, from the device's bundle, as
   JSON committed before the call (the GPU machine has no tree libraries to predict with).
2. ``plan_check.sh`` with ``LATENCIES`` set (on the GPU): Triton serves the empty model first;
   ``plan`` fits the host's own path on those loads and makes the plans from the committed
   latencies with it (``plan_check.plans_for``, the steps of ``latpred capacity``); Triton then
   serves each plan as ``plan_check.sh`` always does.
3. ``plan_check.py score --plans FOLDER/plans.json --folder FOLDER`` (here) scores them.

Run:
    .venv/bin/python benchmarks/own_path_plans.py latencies --device D --models a,b --out LATENCIES.json
    python3 benchmarks/own_path_plans.py plan --latencies A.json,B.json --root ROOT   (on the GPU)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.plan_check import (  # noqa: E402
    MAX_BATCH,
    MODE,
    PRECISION,
    described,
    host_path,
    made_now,
    plans_for,
    served_folder,
)
from collectors.batching_server import model_source  # noqa: E402
from predictor.capacity.serving_path import EMPTY_MODEL  # noqa: E402
from predictor.capacity.simulator import LatencyModel  # noqa: E402
from training.serving_check import load_serving  # noqa: E402

#: the version of the latencies file this script writes and reads
LATENCIES_VERSION = 1
#: the fewest loads of the empty model its path is fitted on (plan_check.sh serves four: two
#: settings at 0.3 and 0.6)
MIN_EMPTY_LOADS = 2


def latency_table(latency: LatencyModel) -> dict[str, Any]:
    """A predicted latency model as JSON: median and interval ends for batch 1..MAX_BATCH, sigma."""
    if latency.interval_ms is None:
        raise ValueError("a predicted latency model has an interval; this one has none")
    batches = range(1, MAX_BATCH + 1)
    ends = [latency.interval_ms(b) for b in batches]
    return {"sigma": latency.sigma, "median_ms": [float(latency.median_ms(b)) for b in batches],
            "low_ms": [float(lo) for lo, _ in ends], "high_ms": [float(hi) for _, hi in ends]}


def table_latency(table: dict[str, Any]) -> LatencyModel:
    """``latency_table`` read back: the same medians, interval and sigma, batch 1..MAX_BATCH (a
    larger batch is an error, not an extrapolation)."""
    median, low, high = table["median_ms"], table["low_ms"], table["high_ms"]
    if not len(median) == len(low) == len(high) == MAX_BATCH:
        raise ValueError(f"a latency table gives batch 1..{MAX_BATCH}, not {len(median)} sizes")

    def at(values: list[float], batch: int) -> float:
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch {batch}: the table gives 1..{MAX_BATCH}")
        return float(values[batch - 1])

    return LatencyModel(lambda b: at(median, b), float(table["sigma"]),
                        interval_ms=lambda b: (at(low, b), at(high, b)))


def latencies_command(args: argparse.Namespace) -> None:
    from predictor.capacity.service_time import predicted_service_time
    from predictor.device_bundles import load_predictor
    from predictor.zoo import load_zoo_graph

    if args.out.exists():
        raise SystemExit(f"{args.out} exists: latencies committed before a call stay as they are; give another --out")
    models = args.models.split(",")
    for model in models:  # one the collector cannot build would fail on the device, not here
        model_source(model)
    predictor = load_predictor(args.device)
    tables = {m: latency_table(predicted_service_time(predictor, load_zoo_graph(m), PRECISION, MODE)) for m in models}
    made = made_now()
    args.out.write_text(json.dumps({
        "version": LATENCIES_VERSION, "made": made, "device": predictor.device.device_id,
        "bundle": str(predictor.bundle.version), "precision": PRECISION, "mode": MODE,
        "fractions": [float(f) for f in args.fractions.split(",")], "models": tables}, indent=1) + "\n")
    print(f"{len(tables)} models' latencies on {predictor.device.device_id} written to {args.out}")


def served_device(root: Path) -> str:
    """The device id the collector filed the empty model's loads under (``root/empty/<device>``)."""
    found = sorted(p.parent.name for p in (root / EMPTY_MODEL).glob("*/serving-triton"))
    if len(found) != 1:
        raise SystemExit(f"{root / EMPTY_MODEL}: expected one device's serving folder, found {found or 'none'}")
    return found[0]


def latencies_for(device: str, files: list[Path]) -> dict[str, Any]:
    """The one latencies file of ``files`` made for ``device``, checked: of this script's version,
    precision and mode. Two for one device is an error (which was committed for the call?)."""
    read = [(f, json.loads(f.read_text())) for f in files]
    chosen = [(f, c) for f, c in read if c.get("device") == device]
    if len(chosen) != 1:
        raise SystemExit(f"{len(chosen)} of {', '.join(map(str, files))} hold latencies for {device}: "
                         "give exactly one")
    path, latencies = chosen[0]
    if (latencies.get("version"), latencies.get("precision"), latencies.get("mode")) != (LATENCIES_VERSION,
                                                                                         PRECISION, MODE):
        raise SystemExit(f"{path}: version {latencies.get('version')}, {latencies.get('precision')} "
                         f"{latencies.get('mode')}; this script plans from version {LATENCIES_VERSION}, "
                         f"{PRECISION} {MODE}")
    return latencies


def empty_loads(root: Path, device: str) -> list[str]:
    """The empty model's loads served (setting at level), which its path is fitted on: at least
    ``MIN_EMPTY_LOADS`` of them, or no plan (a server that crashed early leaves too few)."""
    try:
        data = load_serving(served_folder(root, EMPTY_MODEL, device))
    except ValueError as exc:  # (a crash before any load ended leaves meta.json alone)
        raise SystemExit(f"the empty model's loads cannot be read: {exc}") from None
    loads = sorted({f"{s} at {lv:g}" for s, lv in zip(data.requests["setting"], data.requests["level"])})
    if len(loads) < MIN_EMPTY_LOADS:
        raise SystemExit(f"the empty model was served at {len(loads)} load(s) ({', '.join(loads) or 'none'}): at "
                         f"least {MIN_EMPTY_LOADS} are needed to fit the host's path on")
    return loads


def plan_command(args: argparse.Namespace) -> None:
    device = served_device(args.root)
    latencies = latencies_for(device, [Path(f) for f in args.latencies.split(",")])
    loads = empty_loads(args.root, device)
    own = host_path(args.root, device)
    assert own is not None  # (served_device found the empty model's folder)
    for name in ("own_path.json", "plans.json"):  # a call's own outputs, never an earlier call's
        if (args.root / name).exists():
            raise SystemExit(f"{args.root / name} exists: plans are made once per serve of the empty model")
    (args.root / "own_path.json").write_text(json.dumps(own.to_dict(), indent=1) + "\n")
    predicted = {m: table_latency(t) for m, t in latencies["models"].items()}
    plans = plans_for(predicted, device, latencies["fractions"], own)
    made = made_now()
    (args.root / "plans.json").write_text(json.dumps({
        "made": made, "precision": PRECISION, "mode": MODE, "latencies_made": latencies["made"],
        "bundle": latencies["bundle"], "own_path_loads": loads, "plans": [asdict(p) for p in plans]}, indent=1) + "\n")
    print(f"own path {own.cost.per_batch_ms:.3f} ms a batch + {own.cost.per_request_ms:.3f} ms a request, "
          f"fitted on the empty model's {', '.join(loads)}")
    for p in plans:
        print(described(p))
    print(f"{len(plans)} plans written to {args.root / 'plans.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("latencies", help="the models' predicted batch times, for the device call (here)")
    table.add_argument("--device", required=True)
    table.add_argument("--models", default="resnet101,mnasnet0_5,qwen2-0.5b")
    table.add_argument("--fractions", default="0.3,0.6", help="loads as fractions of the planned one-GPU capacity")
    table.add_argument("--out", type=Path, required=True)
    make = commands.add_parser("plan", help="fit the host's own path and make the plans (on the GPU)")
    make.add_argument("--latencies", required=True, help="comma-separated latencies files; the served device's is used")
    make.add_argument("--root", type=Path, required=True, help="plan_check.sh's folder, the empty model served in it")
    args = parser.parse_args()
    (latencies_command if args.command == "latencies" else plan_command)(args)


if __name__ == "__main__":
    main()
