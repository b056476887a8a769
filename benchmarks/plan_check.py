"""Capacity plans checked end to end against Triton: does the server keep the p99 a plan promises?

``simulator_vs_server.py`` checks the simulator at settings and loads chosen for the check. A
capacity planner's user gets something else: a setting the planner chose for a model, a load
they named, and a p99. This script makes such plans and scores them on Triton serving exactly them.

1. ``plan`` (here, no GPU): for each model, the plan ``latpred capacity`` makes on one GPU
   (``--max-gpus 1``) with a shipped serving path, at ``--fractions`` of the one-GPU capacity the
   plan's own latency model gives (max batch up to 32), with an objective loose enough that the
   plan is the planner's lowest-p99 setting there. Written as JSON (``--out``), the plans the
   device serves.
2. ``benchmarks/plan_check.sh`` (on the GPU): Triton through PyTriton serves each plan in a
   server of its own, its model under its setting at its rate (``latpred collect serving --server
   triton --rates``), then the empty model at two settings, the serving host's own path.
3. ``score`` (here): each plan's p99 against the p99 measured, server side (receipt to the
   batch's finish, as the simulator models it) and at the client (send to answer, which adds the
   gRPC trip both ways); whether the measured p99 is inside the plan's range (every batch at
   either end of the prediction's 90% interval); and the same setting and rate simulated with the
   serving host's own path (its empty model's) in place of the shipped one.

Run:
    .venv/bin/python benchmarks/plan_check.py plan [--device D] [--models a,b] [--out PLANS.json]
    .venv/bin/python benchmarks/plan_check.py score --plans PLANS.json --folder FOLDER [--out RESULT.txt]
FOLDER holds one serving folder per plan and one for the empty model, as ``plan_check.sh`` brings
them back (``plan-<model>-<setting>-<qps>/<device>/serving-triton``, ``empty/<device>/serving-triton``).
``plan`` refuses to overwrite a plans file: plans are committed before they are served, and a file
scored since must stay the plans that were served.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from collectors.batching_server import ServerSettings, model_source  # noqa: E402
from predictor.capacity.host_stalls import HostStalls  # noqa: E402
from predictor.capacity.load_curve import capacity_qps  # noqa: E402
from predictor.capacity.planner import MAX_BATCH_CHOICES, plan  # noqa: E402
from predictor.capacity.service_time import predicted_service_time  # noqa: E402
from predictor.capacity.serving_path import EMPTY_MODEL, ServingPath, planned_service, serving_path  # noqa: E402
from predictor.capacity.simulator import Arrivals, BatchingConfig, LatencyModel, simulate  # noqa: E402
from predictor.device_bundles import load_predictor  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402
from training.serving_check import (  # noqa: E402
    TARGET,
    WARMUP_FRACTION,
    first_measured,
    load_serving,
    predicted_service,
    request_stats,
)
from training.serving_path_fit import MIN_BATCHES, measured_serving_path, path_points  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PRECISION, MODE = "fp16", "cudagraph"
#: the largest max batch a plan may choose: the collector captures a CUDA graph and times Triton's
#: serial pass for every size up to it, seconds each on the device
MAX_BATCH = 32
#: the planner's own maximum batches, up to that
PLAN_MAX_BATCHES = tuple(b for b in MAX_BATCH_CHOICES if b <= MAX_BATCH)
#: an objective no plan here comes near: the plan is then the lowest p99 on one GPU
LOOSE_SLO_MS = 1000.0
#: the simulated requests of a plan and of the host-path simulation (the planner's own)
REQUESTS = 20_000


def within_target(ratio: float | None) -> bool:
    """Whether a ratio is within +-``TARGET`` of 1 (rounded first, so that 0.9 and 1.1 count alike)."""
    return ratio is not None and round(abs(ratio - 1), 9) <= TARGET


@dataclass(frozen=True)
class PlannedLoad:
    """One plan: a model served on one GPU with ``setting`` at ``qps``, and what the plan promised."""

    model: str
    device: str
    serving_path: str
    fraction: float
    capacity_qps: float
    qps: float
    setting: str
    max_batch: int
    max_queue_delay_us: int
    p50_ms: float
    p99_ms: float
    p99_low_ms: float | None
    p99_high_ms: float | None


def rounded(ms: float | None) -> float | None:
    """A plan's milliseconds as the plans file keeps them."""
    return None if ms is None else round(ms, 4)


def setting_name(max_batch: int, delay_us: int) -> str:
    """The collector's name of a plan's batching setting (``ServerSettings.parse`` reads it back)."""
    return f"mb{max_batch}-" + (f"delay{delay_us}us" if delay_us else "nodelay")


def served_model(predictor: Predictor, model: str, path: ServingPath | None) -> tuple[LatencyModel, HostStalls | None]:
    """What a plan is made on for ``model``: its predicted batch times plus ``path``, and the
    path's host pauses and drift (``latpred capacity``'s own steps)."""
    return planned_service(predicted_service_time(predictor, load_zoo_graph(model), PRECISION, MODE), path)


def make_plans(device: str, models: list[str], fractions: list[float], path_name: str) -> list[PlannedLoad]:
    """Each model's one-GPU plan at each fraction of the capacity its planned latency gives."""
    for model in models:  # one the collector cannot build would fail on the device, not here
        model_source(model)
    predictor = load_predictor(device)
    path = serving_path(path_name)
    predicted = {model: predicted_service_time(predictor, load_zoo_graph(model), PRECISION, MODE) for model in models}
    return plans_for(predicted, predictor.device.device_id, fractions, path)


def plans_for(predicted: dict[str, LatencyModel], device: str, fractions: list[float],
              path: ServingPath) -> list[PlannedLoad]:
    """Each model's one-GPU plan at each fraction of the capacity that its predicted batch times
    (``predicted``, as ``predicted_service_time`` gives them) plus ``path`` give: ``make_plans``'
    steps, and those of a plan made on the serving host with its own path (own_path_plans.py),
    which has the predictions but not the trees that made them."""
    plans: list[PlannedLoad] = []
    for model, latency in predicted.items():
        service, stalls = planned_service(latency, path)
        capacity = capacity_qps(service, BatchingConfig(max_batch=MAX_BATCH), stalls)
        for fraction in fractions:
            qps = float(round(fraction * capacity, -1))
            if qps <= 0 or any(q.model == model and q.qps == qps for q in plans):
                print(f"# {model}: {fraction:g} of {capacity:.0f} qps rounds to {qps:g} qps, no new plan; left out",
                      file=sys.stderr)
                continue
            made = plan(service, qps, LOOSE_SLO_MS, max_gpus=1, max_batch_choices=PLAN_MAX_BATCHES,
                        stalls=stalls)
            if not made.meets:
                print(f"# {model} at {qps:g} qps: no one-GPU plan ({made.reason}); left out", file=sys.stderr)
                continue
            plans.append(PlannedLoad(model, device, path.name, fraction, round(capacity, 1), qps,
                                     setting_name(made.max_batch, made.max_queue_delay_us), made.max_batch,
                                     made.max_queue_delay_us, round(made.p50_ms, 4), round(made.p99_ms, 4),
                                     rounded(made.p99_low_ms), rounded(made.p99_high_ms)))
    return plans


def plan_command(args: argparse.Namespace) -> None:
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: plans already made (and perhaps served) stay as they are; "
                         "give another --out")
    plans = make_plans(args.device, args.models.split(","), [float(f) for f in args.fractions.split(",")],
                       args.serving_path)
    made = made_now()
    args.out.write_text(json.dumps({"made": made, "precision": PRECISION, "mode": MODE,
                                    "plans": [asdict(p) for p in plans]}, indent=1) + "\n")
    for p in plans:
        print(described(p))
    print(f"{len(plans)} plans written to {args.out}")


def made_now() -> str:
    """When a plans or latencies file is made, as the files keep it (to the minute, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def described(p: PlannedLoad) -> str:
    """One plan in a line, as the plan steps print what they wrote."""
    return (f"{run_name(p)}: {p.model} at {p.qps:g} qps ({p.fraction:g} of {p.capacity_qps:g}): {p.setting}, "
            f"p99 {p.p99_ms:.3f} ms ({p.p99_low_ms}-{p.p99_high_ms})")


# ------------------------------------------------------------------------------------------- score
def read_plans(path: Path) -> list[PlannedLoad]:
    """The plans ``plan`` wrote."""
    return [PlannedLoad(**p) for p in json.loads(path.read_text())["plans"]]


def run_name(p: PlannedLoad) -> str:
    """The folder ``plan_check.sh`` serves one plan into: each plan in a Triton of its own, so
    that a server that dies (PyTriton's did, under load) takes no other plan's load with it."""
    return f"plan-{p.model}-{p.setting}-{p.qps:.0f}"


def served_folder(root: Path, name: str, device: str) -> Path:
    """Where ``plan_check.sh`` put one collector run's serving folder."""
    return root / name / device / "serving-triton"


@dataclass(frozen=True)
class Scored:
    """A plan and what Triton did at it (None where no load was answered)."""

    plan: PlannedLoad
    measured_qps: float | None = None
    capacity_measured_qps: float | None = None
    server_p99_ms: float | None = None
    client_p99_ms: float | None = None
    host_path_p99_ms: float | None = None
    #: why no load was answered at the plan's rate
    why: str = "no load answered at this rate (the collect log says why)"

    def ratio(self) -> float | None:
        """The plan's p99 over the server's measured one."""
        return None if self.server_p99_ms is None else self.plan.p99_ms / self.server_p99_ms

    def in_range(self) -> bool:
        """Whether the server's p99 is inside the plan's range."""
        low, high = self.plan.p99_low_ms, self.plan.p99_high_ms
        return (self.server_p99_ms is not None and low is not None and high is not None
                and low <= self.server_p99_ms <= high)


#: the name of the serving host's own path (its empty model's), in plans made with it
OWN_PATH = "serving-host"


def host_path(root: Path, device: str) -> ServingPath | None:
    """The serving host's own path, fitted on its empty model's loads (None where it was not served)."""
    folder = served_folder(root, EMPTY_MODEL, device)
    if not folder.is_dir():
        return None
    return measured_serving_path(load_serving(folder), OWN_PATH, [EMPTY_MODEL])


def score_plan(p: PlannedLoad, root: Path, predictor: Predictor, own: ServingPath | None) -> Scored:
    """One plan against the load Triton served at its rate (if any)."""
    try:
        model_source(p.model)
    except ValueError:
        return Scored(p, why="not served: not a model the collector builds")
    folder = served_folder(root, run_name(p), p.device)
    if not any(folder.glob("requests-*.parquet")):  # never served, or the server died before a load ended
        return Scored(p)
    data = load_serving(folder)
    served = data.requests[(data.requests["model"] == p.model) & (data.requests["setting"] == p.setting)]
    capacity = float(served["capacity_qps"].iloc[0]) if len(served) else None
    frame = served[np.isclose(served["offered_qps"], p.qps, rtol=1e-6)]
    if frame.empty:
        return Scored(p, capacity_measured_qps=capacity)
    frame = frame.sort_values("index", ignore_index=True)
    us = {c: frame[c].to_numpy(dtype=np.int64) * 1e-6 for c in ("sent_us", "received_us", "start_us", "finish_us",
                                                                  "answered_us")}
    server = request_stats(us["received_us"], us["start_us"], us["finish_us"])
    first = first_measured(len(frame), WARMUP_FRACTION)
    client_p99 = float(np.percentile((us["answered_us"] - us["sent_us"])[first:] * 1e3, 99))
    simulated = None
    if own is not None:
        service, stalls = served_model(predictor, p.model, own)
        setting = ServerSettings.parse(p.setting)
        config = BatchingConfig(max_batch=setting.max_batch, max_queue_delay_us=setting.max_queue_delay_us,
                                scheduler="triton")
        simulated = simulate(Arrivals("poisson", p.qps), config, service, requests=REQUESTS, stalls=stalls).p99_ms
    return Scored(p, server.throughput_qps, capacity, server.p99_ms, client_p99, simulated)


def shown(path: Path) -> str:
    """``path`` as the results file names it: from the repository's root where it is inside."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def score_lines(scored: list[Scored], plans_path: Path, root: Path, notes: list[str] | None = None) -> list[str]:
    """The results table and its summary; ``notes``, header lines of their own (``# ...``)."""
    def f(value: float | None, spec: str = ".2f") -> str:
        return "-" if value is None or not math.isfinite(value) else format(value, spec)

    first = scored[0].plan if scored else None
    lines = [f"# .venv/bin/python benchmarks/plan_check.py score --plans {shown(plans_path)} --folder {shown(root)}",
             f"# plans: {first.device if first else '-'}, {PRECISION} {MODE}, serving path "
             f"{first.serving_path if first else '-'}, one GPU, max batch up to {MAX_BATCH}; measured: Triton "
             "through PyTriton serving each plan's setting at its rate (benchmarks/plan_check.sh)",
             "# server p99: receipt to the batch's finish, as the simulator models it; client p99: send to answer; "
             f"the first {WARMUP_FRACTION:.0%} of each load skipped; plan/server: the plan's p99 over the server's; "
             "range: the server's p99 inside the plan's p99 at either end of the prediction's interval; host path: "
             "the same setting and rate simulated with the serving host's own path (its empty model) instead",
             *(notes or []),
             "",
             f"{'model':<13} {'qps':>6} {'frac':>5} {'cap meas':>8} {'setting':<17} | {'plan p50':>8} {'plan p99':>8} "
             f"{'range':>13} | {'server p99':>10} {'client p99':>10} {'plan/server':>11} {'in range':>8} | "
             f"{'host path p99':>13} {'/server':>7}",
             "-" * 150]
    for s in scored:
        p = s.plan
        ratio = s.ratio()
        mark = "" if ratio is None or within_target(ratio) else "*"
        own = None if s.host_path_p99_ms is None or s.server_p99_ms is None else s.host_path_p99_ms / s.server_p99_ms
        rng = f"{f(p.p99_low_ms)}-{f(p.p99_high_ms)}"
        lines.append(f"{p.model:<13} {p.qps:>6.0f} {p.fraction:>5.2f} {f(s.capacity_measured_qps, '.0f'):>8} "
                     f"{p.setting:<17} | {p.p50_ms:>8.2f} {p.p99_ms:>8.2f} {rng:>13} | {f(s.server_p99_ms):>10} "
                     f"{f(s.client_p99_ms):>10} {f(ratio):>10}{mark:1} {('yes' if s.in_range() else 'no'):>8} | "
                     f"{f(s.host_path_p99_ms):>13} {f(own):>7}"
                     + ("" if s.server_p99_ms is not None else f"   ({s.why})"))
    served = [s for s in scored if s.server_p99_ms is not None]
    within = sum(within_target(s.ratio()) for s in served)
    own_within = [s for s in served if s.host_path_p99_ms is not None]
    lines += ["", f"plans: {len(scored)}; served at their rate: {len(served)}; plan p99 within +-{TARGET:.0%} of the "
              f"server's: {within}; the server's p99 inside the plan's range: {sum(s.in_range() for s in served)}; "
              f"the plan's p99 at or above the server's (the promise kept): "
              f"{sum((s.ratio() or 0) >= 1 for s in served)}"]
    if own_within:
        ok = sum(within_target(s.host_path_p99_ms / s.server_p99_ms) for s in own_within  # type: ignore[operator]
                 )
        lines.append(f"with the serving host's own path: within +-{TARGET:.0%} {ok} of {len(own_within)}")
    return lines


def batch_lines(plans: list[PlannedLoad], root: Path, predictor: Predictor, paths: dict[str, ServingPath]) -> list[str]:
    """Each served plan's batch times (sizes formed at least ``MIN_BATCHES`` times, with Triton's
    turnaround, as the path fit reads them: ``path_points``) over what a plan adds up for them: the
    model's predicted batch time plus each of ``paths``, and its replay alone plus each. Where the
    plans' p99 misses, this says whether the batches or the queueing missed."""
    names = list(paths)
    lines = ["", "served batch time over the prediction (pred) or the replay alone (replay) plus a path, per batch "
             f"size formed at least {MIN_BATCHES} times: median (range over sizes)",
             f"{'plan':<36} {'sizes':>7} " + " ".join(f"{f'{w} + {n}':>22}" for n in names for w in ("pred", "replay"))]
    for p in plans:
        folder = served_folder(root, run_name(p), p.device)
        if not any(folder.glob("requests-*.parquet")):
            continue
        points = path_points(load_serving(folder))
        if points.empty:
            continue
        batches = [int(b) for b in points["batch"]]
        latency = predicted_service(predictor, p.model, PRECISION, batches)
        predicted = np.array([latency(b)[0] for b in batches])
        cells = []
        for name in names:
            added = np.array([paths[name].added_ms(b) for b in batches])
            for base in (predicted, points["replay_ms"].to_numpy()):
                ratio = points["served_ms"].to_numpy() / (base + added)
                cells.append(f"{np.median(ratio):.2f} ({ratio.min():.2f}-{ratio.max():.2f})")
        sizes = f"{points['batch'].min()}-{points['batch'].max()}"
        lines.append(f"{run_name(p):<36} {sizes:>7} " + " ".join(f"{c:>22}" for c in cells))
    return lines


def score_command(args: argparse.Namespace) -> None:
    plans = read_plans(args.plans)
    if not plans:
        raise SystemExit(f"{args.plans}: no plans")
    predictor = load_predictor(plans[0].device)
    own = host_path(args.folder, plans[0].device)
    planned_with = plans[0].serving_path
    notes: list[str] = []
    if planned_with == OWN_PATH:  # made on the serving host with its own path (own_path_plans.py)
        used, notes = own_path_used(args.plans, args.folder, own, str(predictor.bundle.version))
        # the host-path column would simulate each plan again with the path it was made with: left out
        scored = [score_plan(p, args.folder, predictor, None) for p in plans]
        paths = {"host's own": used}
    else:
        scored = [score_plan(p, args.folder, predictor, own) for p in plans]
        paths = {planned_with: serving_path(planned_with)}
        if own is not None:
            paths["host's own"] = own
    publish(score_lines(scored, args.plans, args.folder, notes) + batch_lines(plans, args.folder, predictor, paths),
            args.out)


def own_path_used(plans_path: Path, root: Path, refitted: ServingPath | None,
                  bundle: str) -> tuple[ServingPath, list[str]]:
    """The host's own path that plans made on the device were made with (``own_path.json`` beside
    them), and header lines saying so and what differs here: the path fitted again on the same
    loads, or the bundle that predicts the batch times the scoring compares with."""
    stored = root / "own_path.json"
    if not stored.exists():
        raise SystemExit(f"{root}: the plans were made with the host's own path, and its own_path.json is not there")
    used = ServingPath.from_dict(json.loads(stored.read_text()))
    made = json.loads(plans_path.read_text())
    loads = ", ".join(made.get("own_path_loads", [])) or "loads"
    notes = [f"# serving path: the serving host's own, fitted on the device from the empty model's {loads} before "
             f"the plans were made (own_path.json: {used.cost.per_batch_ms:.3f} ms a batch + "
             f"{used.cost.per_request_ms:.3f} ms a request); so no host-path column"]
    if refitted is None or not all(math.isclose(a, b, rel_tol=1e-9) for a, b in (
            (used.cost.per_batch_ms, refitted.cost.per_batch_ms),
            (used.cost.per_request_ms, refitted.cost.per_request_ms))):
        notes.append("# NOTE: the path fitted here on the same loads differs from own_path.json")
    if made.get("bundle") not in (None, bundle):
        notes.append(f"# NOTE: the plans' latencies came from bundle {made['bundle']}; the batch times below are "
                     f"compared with bundle {bundle}'s predictions")
    return used, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("plan", help="make the plans (no GPU)")
    make.add_argument("--device", default="nvidia-h100-80gb-hbm3")
    make.add_argument("--models", default="resnet101,mnasnet0_5,qwen2-0.5b",
                      help="zoo models the collector builds, or nas-<seed> (collectors.batching_server.model_source)")
    make.add_argument("--fractions", default="0.3,0.6,0.85", help="loads as fractions of the planned one-GPU capacity")
    make.add_argument("--serving-path", default="pytriton-h100")
    make.add_argument("--out", type=Path, default=RESULTS / "plan_check_plans.json")
    score = commands.add_parser("score", help="score the plans on what Triton served")
    score.add_argument("--plans", type=Path, default=RESULTS / "plan_check_plans.json")
    score.add_argument("--folder", type=Path, required=True)
    score.add_argument("--out", type=Path, default=RESULTS / "plan_check.txt")
    args = parser.parse_args()
    (plan_command if args.command == "plan" else score_command)(args)


if __name__ == "__main__":
    main()
