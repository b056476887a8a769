"""The capacity simulator against a real dynamic-batching server on the H200 (issue #14), or on a CPU.

Reads the committed measurements (``datasets/nvidia-h200/serving/``: three models, two batching
settings, six Poisson load levels each, every request's times; ``--folder`` names another, as
``datasets/<cpu>/serving/``, served in eager forwards) and simulates every load with
``training/serving_check.py``: with the measured service times (the simulator alone on trial) and
with the shipped bundle's predicted ones (what ``latpred capacity`` gives a user). Prints, per load,
measured p50 / p99 / throughput / the device's busy share and the simulated ones as ratios (simulated /
measured), the spread a measurement of that length has (short simulated runs, 20 seeds) and where
the measured p99 falls among them, and a replay of the measured arrivals; then what the server adds
that the simulator leaves out (pipe, client lateness, the batcher loop's dispatch delay); then the
most qps under p99 objectives; then the predicted service times against the measured ones; then
issue #14's targets, met or not.

Run: .venv/bin/python benchmarks/simulator_vs_server.py [--requests 200000] [--seeds 20] [--no-predicted]
[--stalls] (the host's pauses replayed, ``training/serving_stalls.py``) [--drift [--drift-from MODEL]]
(its drift, ``training/serving_drift.py``) [--serving-path NAME|PATH.json]
(the server's own time per batch added to the predicted service) [--folder F] [--out FILE]
(a minute or two on two cores). Saved: results/simulator_vs_server.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.capacity.host_stalls import STALLED_OVER, HostStalls, StalledBatches  # noqa: E402
from predictor.capacity.service_drift import ServiceDrift  # noqa: E402
from predictor.capacity.serving_path import EMPTY_MODEL, ServingPath, serving_path  # noqa: E402
from predictor.capacity.simulator import LatencyModel  # noqa: E402
from training.serving_check import (  # noqa: E402
    NOISE_SEEDS,
    OBJECTIVE_LEVELS,
    SEED,
    SERVING_DIR,
    SIM_REQUESTS,
    TARGET,
    TARGET_LEVEL,
    LoadComparison,
    MaxQpsComparison,
    ServingData,
    TableLatency,
    TargetCheck,
    bundle_predictor,
    check_targets,
    compare_loads,
    compare_max_qps,
    independent_schedules,
    load_serving,
    measured_service,
    predicted_service,
    serving_mode,
    simulated_service,
)
from training.serving_drift import models_drift  # noqa: E402
from training.serving_path_fit import MIXED, measured_serving_path, model_hosts, path_points  # noqa: E402
from training.serving_stalls import PAUSES_UP_TO_LEVEL, paused_services  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "simulator_vs_server.txt"
#: the batch sizes the service and turnaround tables show
TABLE_BATCHES = (1, 2, 4, 8, 16, 24, 32)
SHORT = {"mb8-nodelay": "mb8", "mb32-pref16,32-delay1000us": "mb32p", "mb16-delay500us": "mb16d",
         "mb32-pref8,16-delay2000us": "mb32q"}
#: what a request's arrival is, by ServingData.arrival_column
ARRIVAL = {"received_us": "server receipt",
           "sent_us": "client send (a CPU's server receives only between forwards)"}


def ratio(sim: float, measured: float) -> str:
    return f"{sim / measured:5.2f}" if measured and math.isfinite(sim) else "  -  "


def load_table(rows: Sequence[LoadComparison]) -> list[str]:
    """Per load: measured, then measured-service and predicted-service simulations as ratios."""
    head = (f"{'model':<13} {'set':<5} {'level':>5} {'qps':>6} {'n':>6} {'busy':>5} | {'p50':>6} {'p99':>6} "
            f"{'thr':>6} | {'p50':>5} {'p99':>5} {'thr':>5} {'band p99 rank':>16} {'trace':>5} | "
            f"{'p50':>5} {'p99':>5} {'thr':>5} {'p99 range':>9}")
    over = (f"{'':<45} | {'measured (ms, qps)':<20} | {'sim, measured service (sim/measured)':<41} | "
            f"{'sim, predicted'}")
    if any(r.sim_rule is not None for r in rows):  # Triton served: its documented rule beside its code's
        head = head.replace(f"{'thr':>5} {'band p99 rank':>16}",
                            f"{'thr':>5} {'rule50':>5} {'rule99':>5} {'band p99 rank':>16}")
        over = over.replace("sim, measured service (sim/measured)", "sim, measured service (sim/measured)" + " " * 12)
    lines = [over, head, "-" * len(head)]
    for r in rows:
        m, s = r.measured, r.measured.stats
        sm, p = r.sim_measured, r.sim_predicted
        lo, hi = r.short.band()
        band = f"{lo / s.p99_ms:.2f}-{hi / s.p99_ms:.2f} {r.short.rank(s.p99_ms):4.2f}"
        pred = (f"{ratio(p.p50_ms, s.p50_ms)} {ratio(p.p99_ms, s.p99_ms)} {ratio(p.throughput_qps, s.throughput_qps)}"
                if p is not None else "")
        if r.sim_predicted_range is not None:
            low, high = r.sim_predicted_range
            pred += f" {low / s.p99_ms:4.2f}-{high / s.p99_ms:4.2f}{'' if low <= s.p99_ms <= high else '!'}"
        mark = "*" if m.level <= TARGET_LEVEL + 1e-9 and abs(sm.p99_ms / s.p99_ms - 1) > TARGET else " "
        sim = (f"{ratio(sm.p50_ms, s.p50_ms)} {ratio(sm.p99_ms, s.p99_ms)}{mark}"
               f"{ratio(sm.throughput_qps, s.throughput_qps)}")
        if r.sim_rule is not None:
            sim += f" {ratio(r.sim_rule.p50_ms, s.p50_ms)} {ratio(r.sim_rule.p99_ms, s.p99_ms)}"
        lines.append(
            f"{m.model:<13} {SHORT.get(m.setting, m.setting):<5} {m.level:5.2f} {m.offered_qps:6.0f} {s.requests:6d} "
            f"{s.utilisation:5.3f} | {s.p50_ms:6.2f} {s.p99_ms:6.2f} {s.throughput_qps:6.0f} | "
            f"{sim} {band:>16} {ratio(r.sim_trace.p99_ms, s.p99_ms)} | {pred}")
    return lines


def overhead_table(rows: Sequence[LoadComparison]) -> list[str]:
    """What the server did beside the simulator's model of it, per load (microseconds)."""
    head = (f"{'model':<13} {'set':<5} {'level':>5} | {'pipe p50':>8} {'p99':>5} | {'late p50':>8} {'p99':>5} | "
            f"{'dispatch p50':>12} {'p99':>5} | {'p50 share':>9} | {'service/timed p50':>17} {'p99':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        m = r.measured
        share = m.dispatch_us[0] * 1e-3 / m.stats.p50_ms
        lines.append(
            f"{m.model:<13} {SHORT.get(m.setting, m.setting):<5} {m.level:5.2f} | "
            f"{m.pipe_us[0]:8.0f} {m.pipe_us[1]:5.0f} | {m.late_us[0]:8.0f} {m.late_us[1]:5.0f} | "
            f"{m.dispatch_us[0]:12.0f} {m.dispatch_us[1]:5.0f} | "
            f"{share:9.2%} | {m.service_ratio[0]:17.3f} {m.service_ratio[1]:5.3f}")
    return lines


def qps(value: float, bound: bool) -> str:
    return ("  none" if math.isnan(value) else f"{value:6.0f}") + ("+" if bound else " ")


def max_qps_table(answers: Sequence[MaxQpsComparison]) -> list[str]:
    """The most qps under each p99 objective, measured and simulated (curves over the same loads)."""
    head = (f"{'model':<13} {'set':<5} {'objective':>18} | {'measured':>9} | {'sim, measured service':>22} | "
            f"{'sim, predicted':>16} | {'its slow end':>15}")
    if any(math.isfinite(a.sim_rule_qps) for a in answers):
        head += f" | {'documented rule':>15}"
    lines = [head, "-" * len(head)]
    for a in answers:
        objective = f"p99@{a.objective_level:g}: {a.objective_ms:.2f} ms"
        line = (f"{a.model:<13} {SHORT.get(a.setting, a.setting):<5} {objective:>18} | "
                f"{qps(a.measured_qps, a.measured_bound):>9} | {qps(a.sim_measured_qps, a.sim_measured_bound):>13} "
                f"{ratio(a.sim_measured_qps, a.measured_qps):>8} | "
                f"{qps(a.sim_predicted_qps, a.sim_predicted_bound):>8} "
                f"{ratio(a.sim_predicted_qps, a.measured_qps):>7} | "
                f"{qps(a.sim_slow_end_qps, a.sim_slow_end_bound):>8} {ratio(a.sim_slow_end_qps, a.measured_qps):>6}")
        if math.isfinite(a.sim_rule_qps):
            line += f" | {qps(a.sim_rule_qps, a.sim_rule_bound)} {ratio(a.sim_rule_qps, a.measured_qps)}"
        lines.append(line)
    return lines


def service_table(measured: dict[str, TableLatency], predicted: dict[str, LatencyModel]) -> list[str]:
    """The predicted service time of each model over the measured one (median of 40 timed runs)."""
    batches = TABLE_BATCHES
    head = f"{'model':<13} {'b1 ms':>6} {'b32 ms':>7} | " + " ".join(f"{f'b{b}':>5}" for b in batches)
    lines = [head, "-" * len(head)]
    for model, table in measured.items():  # a size the server never ran (max batch 16 or 24) is blank
        if model not in predicted:  # the empty model, or (host-peers) a model without its host's path
            continue
        cells = " ".join(f"{predicted[model](b)[0] / table.medians_ms[b]:5.2f}" if b in table.medians_ms else " " * 5
                         for b in batches)
        b32 = f"{table.medians_ms[32]:7.3f}" if 32 in table.medians_ms else " " * 7
        lines.append(f"{model:<13} {table.medians_ms[1]:6.3f} {b32} | {cells}")
    return lines


def turnaround_table(given: dict[str, TableLatency], timed: dict[str, TableLatency]) -> list[str]:
    """Per model, the turnaround added to a few batch sizes' service (``given``: what the simulator
    was given; ``timed``: the measured batch times), and its share of that service."""
    batches = TABLE_BATCHES
    head = f"{'model':<16} | " + " ".join(f"{f'b{b}':>11}" for b in batches)
    lines = [head, "-" * len(head)]
    for model, table in timed.items():
        added = {b: given[model].medians_ms[b] - table.medians_ms[b] for b in batches if b in table.medians_ms}
        cells = " ".join(f"{added[b]:5.3f} {added[b] / table.medians_ms[b]:4.0%}" if b in added else " " * 11
                         for b in batches)
        lines.append(f"{model:<16} | {cells}")
    return lines


def target_lines(checks: Sequence[TargetCheck], rows: Sequence[LoadComparison], answers: Sequence[MaxQpsComparison],
                 schedules: int) -> list[str]:
    lines = []
    for c in checks:
        lines.append(f"{c.latency_model}: p99 within +-{TARGET:.0%} at levels <= {TARGET_LEVEL:g}: "
                     f"{c.p99_within}/{c.p99_loads} loads (worst ratio {c.worst_p99_ratio:.2f}); max qps within "
                     f"+-{TARGET:.0%}: {c.qps_within}/{c.qps_answers} (worst {c.worst_qps_ratio:.2f}): "
                     f"{c.verdict}")
    ranged = [r for r in rows if r.sim_predicted_range is not None]
    if ranged:
        held = {id(r) for r in ranged if r.sim_predicted_range is not None
                and r.sim_predicted_range[0] <= r.measured.stats.p99_ms <= r.sim_predicted_range[1]}
        low = [r for r in ranged if r.measured.level <= TARGET_LEVEL + 1e-9]
        within = sum(id(r) in held for r in low)
        lines.append("predicted service: measured p99 inside the p99 range (the predicted-service run again with "
                     "every batch at the low and at the high end of its prediction's 90% interval, as latpred "
                     f"capacity reports it): {within}/{len(low)} loads at levels <= {TARGET_LEVEL:g}, "
                     f"{len(held)}/{len(ranged)} in all")
    slow = [a.sim_slow_end_qps / a.measured_qps for a in answers
            if math.isfinite(a.sim_slow_end_qps) and a.measured_qps > 0]
    if slow:
        lines.append(f"predicted service at the slow end of its interval (latpred capacity --plan-for slow_end): max "
                     f"qps {min(slow):.2f}-{max(slow):.2f}x measured, above it in {sum(x > 1 for x in slow)} of "
                     f"{len(slow)}, more than {TARGET:.0%} above in {sum(x > 1 + TARGET for x in slow)}, within "
                     f"+-{TARGET:.0%} in {sum(abs(x - 1) <= TARGET for x in slow)}")
    inside = sum(r.short.band()[0] <= r.measured.stats.p99_ms <= r.short.band()[1] for r in rows)
    ranks = [r.short.rank(r.measured.stats.p99_ms) for r in rows]
    lines.append(f"measured p99 inside the band of short simulated runs (their 10th-90th percentile: 80% of "
                 f"independent draws would be, but the loads are {schedules} schedules' draws): {inside}/{len(rows)} "
                 f"loads; median rank {np.median(ranks):.2f}, {sum(x >= 0.9 for x in ranks)} at 0.9 or above")
    return lines


def pauses_in_words(model: str, found: StalledBatches) -> str:
    """A model's host pauses as the header gives them."""
    stalls = found.stalls
    if not stalls.pauses_ms:
        return f"{model} no pauses"
    return (f"{model} {stalls.rate_per_s:.2f}/s, median {np.median(stalls.pauses_ms):.1f} ms, "
            f"{stalls.paused_share:.2%} of the time, {found.stalled.mean():.2%} of batches")


def machine() -> str:
    """This machine in a few words: CPU model, cores, Python, how busy it was (others share it)."""
    cpu = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, python {platform.python_version()}, load average "
            f"{os.getloadavg()[0]:.2f} at the start")


#: ``--serving-path`` for each model's own host's path, measured on the host's other models
PEERS = "host-peers"


def drift_in_words(drift: ServiceDrift | None) -> str:
    """", drift 28% for 20 ms + 30% for 200 ms" (empty without drift), for the header."""
    return "" if drift is None or not drift.components else f", drift {drift.in_words()}"


def without_drift(path: ServingPath) -> ServingPath:
    """``path`` with its host's drift left out (its pauses kept)."""
    return dataclasses.replace(path, stalls=HostStalls(path.stalls.rate_per_s, path.stalls.pauses_ms))


def peer_paths(data: ServingData) -> dict[str, ServingPath]:
    """Per model of ``data`` that has a prediction: the serving path of the host that served it,
    measured on the other models that host served in the folder (a model alone on its host has
    none, nor has one served on several hosts)."""
    hosts = model_hosts(data.folder)
    points = path_points(data)
    paths = {}
    for model in data.models:
        if model == EMPTY_MODEL or hosts.get(model) == MIXED:
            continue
        peers = [m for m in data.models if m != model and hosts.get(m) == hosts.get(model)]
        if peers:
            paths[model] = measured_serving_path(data, f"{hosts.get(model, '')[:8]}-without-{model}", peers,
                                                 points=points)
    return paths


def _left_out(data: ServingData, paths: dict[str, ServingPath]) -> str:
    """The header's note on the models ``peer_paths`` gave no path, and why."""
    hosts = model_hosts(data.folder)
    out = [m for m in data.models if m not in paths and m != EMPTY_MODEL]
    reasons = [f"{m} ({'served on more than one host' if hosts.get(m) == MIXED else 'no other model on its host'})"
               for m in out]
    return "; left out: " + ", ".join(reasons) if reasons else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=SERVING_DIR, help="the serving measurements")
    parser.add_argument("--requests", type=int, default=SIM_REQUESTS, help="requests in each long simulated run")
    parser.add_argument("--seeds", type=int, default=len(NOISE_SEEDS),
                        help="short runs of the measured length per load, for the band (0: none)")
    parser.add_argument("--no-predicted", action="store_true", help="leave out the bundle's predicted service")
    parser.add_argument("--stalls", action="store_true",
                        help="give the measured-service runs the host's pauses, read off the loads' batches "
                             "(training/serving_stalls.py), and the batch times without the stalled ones")
    parser.add_argument("--drift", action="store_true",
                        help="replay the host's drift (training/serving_drift.py): the measured-service runs get each "
                             "model's own, read off its loads; a serving path keeps its own (without this flag its "
                             "drift is left out, so that one run can be compared with the other)")
    parser.add_argument("--drift-from", default=None, metavar="MODEL",
                        help="with --drift: every measured-service run gets the drift read off this model's loads "
                             f"(for example '{EMPTY_MODEL}': the host's drift measured beside the model, not on it)")
    parser.add_argument("--serving-path", default=None, metavar="NAME|PATH.json",
                        help="add this serving path (predictor/capacity/serving_path.py) to the predicted service, "
                             f"as latpred capacity --serving-path does; '{PEERS}': each model's host's own path, "
                             "measured on the other models that host served in the folder")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the table is written")
    args = parser.parse_args()
    started = time.perf_counter()
    header = [f"# .venv/bin/python benchmarks/simulator_vs_server.py {' '.join(sys.argv[1:])}".rstrip()
              + f"   ({datetime.date.today().isoformat()}, {machine()})"]
    data = load_serving(args.folder)
    fp = data.meta["fingerprint"]
    header.append(f"# measured on {fp['name']} ({fp['device_id']}, torch {fp['torch_version']}, driver "
                  f"{fp['driver_version']}), {data.meta['precision']}, {data.meta['seconds_per_level']:g} s a load; "
                  f"latency = the batch's finish - {ARRIVAL[data.arrival_column]}, first 10% of each load "
                  "skipped, as the simulator does")
    header.append(f"# simulated: Poisson at the measured offered qps, {args.requests:,} requests a run (seed {SEED}); "
                  f"band: p99 of {args.seeds} runs of the measured length (seeds {NOISE_SEEDS[0]}..), their "
                  "10th-90th percentile over the measured p99, and rank: the share of them below the measured p99; "
                  f"trace: the measured arrivals ({ARRIVAL[data.arrival_column]}) replayed")
    if data.triton:
        header.append("# Triton served: the simulator forms batches as Triton's code does (payloads formed and staged "
                      "ahead of the busy instance, predictor/capacity/triton_scheduler.py), each batch taking Triton's "
                      "time for it plus the instance's turnaround after it (training/instance_turnaround.py); "
                      "rule50/rule99: the same runs under Triton's documented rule (a batch formed when the instance "
                      "frees)")
    schedules = independent_schedules(data)
    header.append(f"# the {sum(1 for _ in data.loads())} loads rode {schedules} distinct Poisson "
                  "schedules: the collector seeded each by (setting, level), so the models at one (setting, level) "
                  "share one schedule, scaled to their rates")
    measured = {m: measured_service(data.service[data.service["model"] == m]) for m in data.models}
    predicted: dict[str, LatencyModel] = {}
    path_stalls: dict[str, HostStalls] | None = None
    if args.serving_path and args.no_predicted:
        raise SystemExit("--serving-path is added to the predicted service: leave out --no-predicted")
    if not args.no_predicted:
        predictor = bundle_predictor(fp["device_id"])
        predicted = {m: predicted_service(predictor, m, data.meta["precision"], sorted(measured[m].medians_ms))
                     for m in data.models if m != EMPTY_MODEL}
        if not predicted:
            raise SystemExit(f"{args.folder}: only the empty model was served, which nothing predicts: add "
                             "--no-predicted")
        header.append(f"# predicted: bundle {predictor.bundle.version}'s {serving_mode(predictor)} predictions, "
                      f"lognormal sigma {next(iter(predicted.values())).sigma:g} (the device's run-to-run "
                      "spread in that mode, capacity.service_time.run_spread)")
        if args.serving_path == PEERS:
            paths = {m: without_drift(p) if not args.drift else p for m, p in peer_paths(data).items()}
            predicted = {m: paths[m].around(latency) for m, latency in predicted.items() if m in paths}
            path_stalls = {m: p.stalls for m, p in paths.items() if not p.stalls.steady}
            header.append(f"# serving path {PEERS}: each model's predicted batches plus the path of its own host, "
                          "measured on that host's other models in this folder (training/serving_path_fit.py: "
                          "measured_serving_path), their host's pauses included"
                          + (" and its drift; " if args.drift else "; ")
                          + "; ".join(f"{m} {p.cost.per_batch_ms:.3f} + {p.cost.per_request_ms:.3f} ms, pauses "
                                      f"{p.stalls.rate_per_s:.2f}/s{drift_in_words(p.stalls.drift)}"
                                      for m, p in paths.items())
                          + _left_out(data, paths))
        elif args.serving_path:
            path = serving_path(args.serving_path)
            path = path if args.drift else without_drift(path)
            predicted = {m: path.around(latency) for m, latency in predicted.items()}
            path_stalls = {m: path.stalls for m in predicted} if not path.stalls.steady else None
            header.append(f"# serving path {path.name} ({path.label}; {args.serving_path}) added to each predicted "
                          f"batch: {path.cost.per_batch_ms:.3f} ms + {path.cost.per_request_ms:.3f} ms a request "
                          f"(ends {path.low.per_batch_ms:.3f}-{path.high.per_batch_ms:.3f} and "
                          f"{path.low.per_request_ms:.3f}-{path.high.per_request_ms:.3f}), sigma at least "
                          f"{path.sigma:.3f}, host pauses {path.stalls.rate_per_s:.2f}/s"
                          f"{drift_in_words(path.stalls.drift)}; {path.note}")
    seeds = tuple(range(NOISE_SEEDS[0], NOISE_SEEDS[0] + args.seeds))
    stalls: dict[str, HostStalls] | None = None
    if args.stalls:
        found, given = paused_services(data, measured)
        stalls = {m: f.stalls for m, f in found.items()}
        header.append(f"# host pauses (--stalls): a batch over {STALLED_OVER:g}x its size's median was stalled, a run "
                      "of stalled batches one pause of what they took over their medians, read from the loads up to "
                      f"{PAUSES_UP_TO_LEVEL:g}, replayed as a Poisson process in wall-clock time, the batch times "
                      "drawn without the stalled ones (training/serving_stalls.py); per model: "
                      + "; ".join(pauses_in_words(m, f) for m, f in found.items()))
    else:
        given = {m: simulated_service(data, m, measured[m]) for m in data.models}
    if args.drift and not args.stalls:  # the drift is fitted on the batches the pauses did not stall
        raise SystemExit("--drift: give --stalls too (the drift's shares are of the spread of the batches the "
                         "host did not stall, the spread the measured-service runs draw from with --stalls)")
    if args.drift_from and (not args.drift or args.drift_from not in data.models):
        raise SystemExit(f"--drift-from {args.drift_from}: give --drift too, and a model of the folder "
                         f"({', '.join(data.models)})")
    if args.drift_from:
        hosts = model_hosts(data.folder)
        if args.drift_from not in hosts:
            raise SystemExit(f"--drift-from {args.drift_from}: the folder's collect logs do not say which host served "
                             "it, so its drift cannot be said to be the other models' host's")
        elsewhere = sorted(m for m in data.models if hosts.get(m) != hosts.get(args.drift_from)
                           or hosts.get(m) == MIXED)
        if elsewhere:
            raise SystemExit(f"--drift-from {args.drift_from}: {', '.join(elsewhere)} was not served on its host "
                             "alone (the collect logs say so): a host's drift is its own")
    if args.drift:
        read_off = models_drift(data, [args.drift_from])[0] if args.drift_from else None
        drifts = {m: read_off if read_off is not None else models_drift(data, [m])[0] for m in data.models}
        stalls = {m: HostStalls(stalls[m].rate_per_s, stalls[m].pauses_ms, drifts[m]) if stalls else
                  HostStalls(0.0, (), drifts[m]) for m in data.models}
        header.append("# host drift (--drift): each batch's time over its size's median, in spreads of that size, "
                      "correlated by how far apart batches started, fitted with a fast and a slow component "
                      f"(training/serving_drift.py, loads up to {PAUSES_UP_TO_LEVEL:g}) and replayed in the "
                      "measured-service runs; "
                      + (f"read off {args.drift_from}'s loads for every model: " if args.drift_from else
                         "each model's own, per model: ")
                      + "; ".join(f"{m}{drift_in_words(d)}" for m, d in drifts.items()))
    rows = compare_loads(data, predicted or None, args.requests, seeds, timed=measured, services=given, stalls=stalls,
                         predicted_stalls=path_stalls)
    answers = compare_max_qps(rows)
    levels = ", ".join(map(str, OBJECTIVE_LEVELS))
    out = [*header, "",
           "== per load: level = offered / the setting's capacity; n = measured requests (after the first 10%); busy =",
           "the device's busy share measured; ratios are simulated / measured; * = p99 off by more than "
           f"{TARGET:.0%} at a level <= {TARGET_LEVEL:g}; p99 range: the predicted-service run's p99 with every batch",
           "at the low and at the high end of its prediction's 90% interval, over the measured p99 (! = the measured "
           "p99 outside it)", *load_table(rows), "",
           "== what the server adds that the simulator does not model (us; p50 and p99 over the measured requests or",
           "batches). pipe: server receipt - client send (outside the measured latency: it delays arrivals); late:",
           "client send - Poisson schedule; dispatch: a batch's start after the instance was free and the rule let it",
           "go (the polling loop's own time, zero in the simulator); p50 share: dispatch p50 over the measured p50;",
           "service/timed: each batch's service in the load over the timed median of its size",
           *(["for Triton's loads dispatch is measured against the documented rule, which Triton's code does not",
              "follow (it stages batches ahead of the busy instance and freezes them): it is no delay of Triton's, and",
              "what the simulator adds to each batch is the turnaround in the table below"] if data.triton else []),
           *overhead_table(rows), "",
           f"== most qps with p99 <= objective (objectives: the measured p99 at levels {levels}; linear between the",
           "six loads; + = never crossed, a lower bound)", *max_qps_table(answers)]
    if predicted:
        what = ("Triton's own time per batch (its trace: each load's batches, COMPUTE_START to COMPUTE_END, and the "
                "serial pass's for sizes the loads formed fewer than 5 times)" if data.triton else
                "median of 40 timed services, one CUDA-graph replay then an event wait")
        out += ["", f"== predicted / measured service time (measured: {what})", *service_table(measured, predicted)]
        replays = sorted(Path(args.folder).glob("graph-service-*.parquet"))
        if replays:  # what latpred predicts: the model's CUDA graph alone, timed before the server started
            import pandas as pd

            alone = pd.concat([pd.read_parquet(f) for f in replays], ignore_index=True)
            graphs = {m: measured_service(alone[alone["model"] == m]) for m in data.models}
            out += ["", "== predicted / the CUDA graph's replay alone (median of its timed replays before the server "
                    "started: what latpred predicts; the server's time over it is the serving path's)",
                    *service_table(graphs, predicted)]
    if data.triton:
        out += ["", "== the instance's turnaround after a batch (ms; training/instance_turnaround.py): COMPUTE_END to "
                "the next batch's COMPUTE_START where that batch was ready, added to each batch's service",
                *turnaround_table(given, measured)]
    out += ["", "== issue #14's targets", *target_lines(check_targets(rows, answers), rows, answers, schedules),
            f"({time.perf_counter() - started:.0f} s)"]
    publish(out, args.out)


if __name__ == "__main__":
    main()
