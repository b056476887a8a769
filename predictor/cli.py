"""The predictor's commands: ``latpred devices`` and ``latpred predict``, from the shipped (or a given) bundle.

The ``latpred`` root (``latpred.py``, above every package) assembles this group with the other
packages' groups; predictor knows nothing of the packages above it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from predictor import device_bundles
from predictor.bundle import DEFAULT_BUNDLE_DIR, BundleError, bundle_dirs
from predictor.compose import MODES
from predictor.devices import DEVICES
from predictor.graph_sources import load_graph
from predictor.host_lookup import resolve_host, user_store
from predictor.host_profile import HostProfile
from predictor.precision import PRECISIONS
from predictor.predict import Predictor
from predictor.select_cli import select_command
from predictor.spreadsheet_cells import SpreadsheetWriter, fixed
from predictor.variant import MAX_BATCH

if TYPE_CHECKING:  # imported where used: the capacity modules load only for 'latpred capacity'
    from predictor.capacity.host_stalls import HostStalls
    from predictor.capacity.load_trace import LoadTrace
    from predictor.capacity.planner import Plan
    from predictor.capacity.serving_path import ServingPath
    from predictor.capacity.simulator import LatencyFn, PlanFor, Scheduler


@click.group()
def commands() -> None:
    """The predictor's commands, which the ``latpred`` root assembles."""


@commands.command()
@click.option("--bundles", type=click.Path(path_type=Path), default=DEFAULT_BUNDLE_DIR, show_default=True)
def devices(bundles: Path) -> None:
    """List the devices latpred knows, whether measured, and which bundle predicts each."""
    trained = bundle_dirs(bundles)
    transfer = device_bundles.TRANSFER_BUNDLE in trained
    for spec in DEVICES.values():
        state = (f"bundle {spec.device_id}" if spec.device_id in trained
                 else "transfer bundle" if transfer and spec.kind == "gpu" else "no bundle")
        price = "price unknown" if spec.price_per_hour is None else f"${spec.price_per_hour:.2f}/h"
        size = f"{spec.sm_count} cores" if spec.kind == "cpu" else f"{spec.sm_count} SMs"
        click.echo(f"{spec.device_id}\t{spec.name}\t{size}\t{spec.provenance}\t{price}\t{state}")


def load_predictor(device: str, bundle: Path | None) -> Predictor:
    """The predictor for ``device`` from ``bundle``, or from the shipped bundle that predicts it:
    its own, or the transfer bundle (predictor.device_bundles)."""
    return device_bundles.load_predictor(device, DEFAULT_BUNDLE_DIR, bundle)


def predictor_and_host(device: str, bundle: Path | None,
                       host_spec: str | None) -> tuple[Predictor, HostProfile | None]:
    """The predictor and the ``--host`` profile a command asked for (None: the bundle's own), or a
    click error naming what is wrong: the device or bundle, or the ``--host`` given."""
    try:
        predictor = load_predictor(device, bundle)
    except (ValueError, BundleError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        host = resolve_host(host_spec, predictor.bundle, [user_store()]) if host_spec else None
    except (ValueError, KeyError) as exc:
        raise click.BadParameter(str(exc), param_hint="--host") from None
    return predictor, host


@commands.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--device", default="h200", show_default=True, help="device id or part of its name")
@click.option("--precision", type=click.Choice(list(PRECISIONS)), default="fp16", show_default=True)
@click.option("--mode", type=click.Choice(list(MODES)), default="cudagraph", show_default=True)
@click.option("--batch", type=click.IntRange(min=1, max=MAX_BATCH), default=None,
              help="batch size (default: the graph's own)")
@click.option("--dim", "dim_items", multiple=True, metavar="NAME=SIZE",
              help="set a symbolic dim of an ONNX model, e.g. --dim sequence=256 (repeatable)")
@click.option("--format", "fmt", type=click.Choice(["json", "table", "csv"]), default="table", show_default=True)
@click.option("--bundle", type=click.Path(path_type=Path), default=None, help="a bundle folder")
@click.option("--host", "host_spec", default=None, metavar="PROFILE.json|ID",
              help="the host that issues an eager forward: a profile file ('latpred host probe'), or the id "
                   "of one the bundle carries or you saved (default: the host that measured the bundle)")
def predict(paths: tuple[str, ...], device: str, precision: str, mode: str, batch: int | None,
            dim_items: tuple[str, ...], fmt: str, bundle: Path | None, host_spec: str | None) -> None:
    """Predict the latency of each PATH (an .onnx or .json graph, or a zoo name).

    An ONNX model's weights are never read, only their dims (a weight-stripped export, or one
    with external data, works; no external file is opened). Its batch dim takes --batch; other
    symbolic dims (sequence length, image size) take --dim NAME=SIZE, and one left unset is an
    error that names it."""
    from predictor.importers.onnx_dims import parse_dims

    try:
        dims = parse_dims(dim_items)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dim") from None
    predictor, host = predictor_and_host(device, bundle, host_spec)
    failed = 0
    # escaped and quoted cells (spreadsheet_cells): a graph file names itself, and sheets open this CSV
    writer = SpreadsheetWriter(sys.stdout) if fmt == "csv" else None
    if writer:
        writer.writerow(["model", "device", "batch", "precision", "mode", "total_ms", "low_ms", "high_ms",
                         "unsupported_ops", "host"])
    for path in paths:
        try:
            result = predictor.predict(load_graph(path, batch, dims), batch, precision, mode, host=host)
        except ValueError as exc:
            said = str(exc)  # (the graph sources' errors mostly name the file already)
            named = said.startswith((f"{path}:", f"{path} ", repr(path)))
            click.echo(f"error: {said}" if named else f"error: {path}: {said}", err=True)
            failed += 1
            continue
        if fmt == "json":
            click.echo(json.dumps(result.to_json()))
        elif writer:
            writer.writerow([result.model, result.device, result.batch, result.precision, result.mode,
                             fixed(result.total_ms), fixed(result.low_ms), fixed(result.high_ms),
                             sum(u["count"] for u in result.unsupported), result.host or ""])
        else:
            click.echo(f"{result.model:<24} {result.total_ms:9.3f} ms  [{result.low_ms:.3f}, {result.high_ms:.3f}]"
                       f"  {result.device} b{result.batch} {result.precision} {result.mode}")
            if result.host:
                click.echo(f"  host: {result.host}")
            for warning in result.warnings:
                click.echo(f"  warning: {warning}")
    if failed:
        raise click.ClickException(f"{failed} of {len(paths)} graph(s) could not be predicted")


@commands.command()
@click.argument("path")
@click.option("--qps", type=float, default=None,
              help="the load to serve, requests per second (one sample each); with --arrival-trace, the rate its "
                   "recorded shape is replayed at (default: its own)")
@click.option("--slo-p99-ms", type=float, required=True, help="the p99 latency objective, ms (queueing included)")
@click.option("--device", default="h200", show_default=True, help="device id or part of its name")
@click.option("--precision", type=click.Choice(list(PRECISIONS)), default="fp16", show_default=True)
@click.option("--mode", type=click.Choice(list(MODES)), default="cudagraph", show_default=True)
@click.option("--max-gpus", type=click.IntRange(min=1, max=100_000), default=64, show_default=True)
@click.option("--sigma", type=click.FloatRange(min=0, max=5), default=None,
              help="lognormal spread of a batch's service time (default: the zoo's measured run-to-run "
                   "spread, 0.01 CUDA graph, 0.15 eager; with --serving-path, at least the path's own)")
@click.option("--plan-for", type=click.Choice(["median", "slow_end"]), default="median", show_default=True,
              help="plan for the predicted latencies, or for the slow end of their 90% intervals (a plan that "
                   "holds if the model runs as slowly as its prediction allows)")
@click.option("--format", "fmt", type=click.Choice(["txt", "json"]), default="txt", show_default=True)
@click.option("--bundle", type=click.Path(path_type=Path), default=None, help="a bundle folder")
@click.option("--host", "host_spec", default=None, metavar="PROFILE.json|ID",
              help="the host that issues an eager forward (as for 'latpred predict')")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="PATH.png", help="also write the recommended setting's p50 and p99 against load on one GPU "
                                       "to this PNG (needs matplotlib: pip install 'latpred[plot]')")
@click.option("--scheduler", type=click.Choice(["triton", "rule"]), default="triton", show_default=True,
              help="how the simulated server batches: as Triton's code does (a batch sent after its queue delay "
                   "waits behind the running one) or by Triton's documented rule (a batch forms when the "
                   "instance frees); they differ only with a queue delay")
@click.option("--serving-path", "serving_path_spec", default=None, metavar="NAME|FILE.json",
              help="add a server's own time per batch to the GPU's (and the host's pauses and drift, if any): a "
                   "shipped serving path by name (e.g. pytriton-h100) or a JSON file of one ('latpred "
                   "serving-path' fits one from Triton loads measured on your host; default: none, the GPU's time "
                   "alone); with several instances per GPU each does its own path's work, and only the GPU's is "
                   "shared")
@click.option("--arrival-cv", type=float, default=1.0, show_default=True, metavar="FLOAT",
              help="coefficient of variation of the gaps between requests: 1 = Poisson, 2 = bursty (each GPU "
                   "sees its random share of the load); from 0.01 to 10")
@click.option("--batch-limit", type=click.IntRange(min=1, max=128), default=None, metavar="N",
              help="the largest max batch the deployment allows (a model exported for batches up to N): the plan "
                   "weighs 1, 2, 4, ... up to N, and N (default: up to 128), and 1, 2 or 4 model instances per GPU "
                   "(--max-instances), which under a small limit can serve more")
@click.option("--max-instances", type=click.IntRange(min=1, max=4), default=None, metavar="K",
              help="the most model instances per GPU the plan weighs (1, 2, 4, and K; their sharing of the GPU as "
                   "measured on an H100, fp16 CUDA graphs; none more than the GPU's memory holds; one for eager "
                   "and --scheduler rule); default: 4 with a --batch-limit below 128, else 1 (one instance at k "
                   "times the batch served at least as much as k instances, measured)")
@click.option("--delay-limit-us", type=click.IntRange(min=0, max=5000), default=None, metavar="US",
              help="the longest queue delay the service allows, microseconds: the plan weighs the delays up to it, "
                   "and it (0: no delay; default: up to 5000)")
@click.option("--arrival-trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="a recorded load to replay instead of generated arrivals: one arrival time in "
                                   "seconds per line, or a CSV with an 'arrival_s' column (at least 100); its shape "
                                   "is kept and its rate set by --qps, each GPU seeing its random share of it")
def capacity(path: str, qps: float | None, slo_p99_ms: float, device: str, precision: str, mode: str,
             max_gpus: int, sigma: float | None, plan_for: PlanFor, fmt: str, bundle: Path | None,
             host_spec: str | None, plot_path: Path | None, scheduler: Scheduler, serving_path_spec: str | None,
             arrival_cv: float, batch_limit: int | None, max_instances: int | None, delay_limit_us: int | None,
             trace_path: Path | None) -> None:
    """Plan GPUs and Triton dynamic batching for PATH to serve --qps within --slo-p99-ms.

    Each batch size's latency is predicted for the device, then a dynamic-batching server is
    simulated (predictor.capacity: one model instance per GPU, or up to --max-instances sharing it, the
    load split evenly at random, its arrivals Poisson unless --arrival-cv says how bursty they are, or
    --arrival-trace replays a recorded load, its whole share on each GPU) over
    maximum batches 1-128 and queue delays 0-5,000 us (up to --batch-limit and --delay-limit-us where the
    deployment allows less), and the fewest GPUs that meet the objective
    are recommended with the matching config.pbtxt block. An objective no number of GPUs meets is
    answered, with the nearest plan and why it falls short. The plan's p99 comes with its range at
    either end of the latency prediction's 90% interval; --plan-for slow_end plans for the slow end
    instead of the predicted medians. --plot draws the recommended setting's latency against load
    on one GPU, with the objective and the planned per-GPU load marked.

    The prediction is the GPU's time; a server (Triton through PyTriton measured 1.1-2.6 ms a batch
    plus 0.15-0.32 ms a request more on ten H100 hosts) takes longer, so a plan on the GPU's time
    alone can promise a p99 the server will not keep. --serving-path adds a server's own time to
    every batch, with its range, and replays its host's pauses and drift."""
    from predictor.capacity.instance_memory import instances_to_weigh
    from predictor.capacity.planner import checked_arrival_cv, limited_choices, plan, triton_config
    from predictor.capacity.plot import curve_title
    from predictor.capacity.service_time import predicted_service_time
    from predictor.capacity.serving_path import planned_service

    try:  # before the predictions, as the options below: a bad value costs no wait
        checked_arrival_cv(arrival_cv)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--arrival-cv") from None
    trace = load_arrival_trace(trace_path, arrival_cv)
    if qps is None:
        if trace is None:
            raise click.BadParameter("give the load to serve in requests per second (or --arrival-trace, whose "
                                     "own rate is then used)", param_hint="--qps")
        qps = trace.rate_qps
    if plot_path is not None:  # before the planning: a bad path or a missing extra costs no wait
        check_plot_path(plot_path)
    path_added = load_serving_path(serving_path_spec)  # before the predictions: a bad one costs no wait
    predictor, host = predictor_and_host(device, bundle, host_spec)
    refusal = predictor.device.planning_refusal()
    if refusal is not None:
        raise click.BadParameter(refusal, param_hint="--device")
    try:
        graph = load_graph(path, None, {})
    except ValueError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    service, stalls = planned_service(predicted_service_time(predictor, graph, precision, mode, host, sigma),
                                      path_added, plan_for)
    try:
        batches, delays = limited_choices(batch_limit, delay_limit_us)
        instances = instances_to_weigh(graph, predictor.device, precision, mode, max(batches), max_instances,
                                       batch_limit, scheduler)
        result = plan(service, qps, slo_p99_ms, max_gpus=max_gpus, scheduler=scheduler, stalls=stalls,
                      arrival_cv=arrival_cv, arrival_trace=trace, max_batch_choices=batches, delay_us_choices=delays,
                      instance_choices=instances)
    except ValueError as exc:  # the planner names the field: qps or slo_p99_ms
        field = str(exc).split(":", 1)[0]
        raise click.BadParameter(str(exc), param_hint={
            "qps": "--qps", "slo_p99_ms": "--slo-p99-ms", "arrival_trace": "--arrival-trace",
            "batch_limit": "--batch-limit", "delay_limit_us": "--delay-limit-us",
            "max_instances": "--max-instances"}.get(field, field)) from None
    config = triton_config(result)
    # what the latencies were predicted for, as 'latpred predict' says it: the host profile an eager
    # forward used (another may stand in for the one asked, with a warning) and the warnings
    said = predictor.predict(graph, 1, precision, mode, with_layers=False, host=host)
    if fmt == "json":
        click.echo(json.dumps({"model": graph.name, "device": predictor.device.device_id, "precision": precision,
                               "mode": mode, "plan_for": plan_for, **dataclasses.asdict(result),
                               "triton_config": config, "host": said.host, "warnings": said.warnings,
                               "serving_path": path_added.answer_dict() if path_added is not None else None}))
    else:
        echo_plan(result, config, graph.name, predictor.device.name, precision, mode, plan_for)
        if said.host is not None:
            click.echo(f"host: {said.host}")
        for warning in said.warnings:
            click.echo(f"  warning: {warning}")
        echo_serving_path(path_added)
    if plot_path is not None:
        arrivals = (f"{trace.name} replayed, scaled to each load" if trace is not None else
                    f"gaps' cv {arrival_cv:g}" if arrival_cv != 1 else None)
        write_load_curve(plot_path, service, result, stalls, trace, curve_title(
            graph.name, predictor.device.name, precision, mode, result.max_batch, result.max_queue_delay_us,
            slow_end=plan_for == "slow_end", arrivals=arrivals, instances=result.instances))
        # to stderr under --format json: stdout stays one JSON object
        sharing = f" with {result.instances} instances" if result.instances > 1 else ""
        click.echo(f"load curve of max batch {result.max_batch}, max queue delay {result.max_queue_delay_us} us "
                   f"on one GPU{sharing} written to {plot_path}", err=fmt == "json")


def load_arrival_trace(path: Path | None, arrival_cv: float) -> LoadTrace | None:
    """The ``--arrival-trace`` asked for, None without one, or a click error naming the option: the
    file and line that cannot be read, or a trace given with an --arrival-cv of its own."""
    if path is None:
        return None
    if arrival_cv != 1:
        raise click.BadParameter("give --arrival-cv or --arrival-trace, not both (a trace has its own gaps)",
                                 param_hint="--arrival-trace")
    from predictor.capacity.load_trace import read_load_trace

    try:
        return read_load_trace(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--arrival-trace") from None


def load_serving_path(spec: str | None) -> ServingPath | None:
    """The ``--serving-path`` asked for (a shipped name, or a JSON file), None without one, or a
    click error naming the option with what is wrong (an unknown name lists the known ones)."""
    if spec is None:
        return None
    from predictor.capacity.serving_path import serving_path

    try:
        return serving_path(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--serving-path") from None


def echo_serving_path(path: ServingPath | None) -> None:
    """Say what the plan's latency per batch covers: the GPU's time alone, or that plus a named
    server's own time (its median cost and range, and its host's pauses and drift)."""
    if path is None:
        click.echo("no serving path: a server's own time per batch is not included; see --serving-path")
        return
    low, high = path.low, path.high
    click.echo(f"serving path {path.name} ({path.label}, {path.server}): {path.cost.per_batch_ms:.3f} ms a batch + "
               f"{path.cost.per_request_ms:.3f} ms a request added to each batch (range {low.per_batch_ms:.3f} + "
               f"{low.per_request_ms:.3f} to {high.per_batch_ms:.3f} + {high.per_request_ms:.3f} ms)")
    if path.caution is not None:
        click.echo(f"  {path.caution}")
    if path.stalls.rate_per_s > 0:
        click.echo(f"  host pauses {path.stalls.rate_per_s:.3g} times a second, "
                   f"{path.stalls.paused_share:.1%} of the time, replayed in every run")
    drift = path.stalls.drift
    if drift is not None and drift.persistent_share > 0:
        click.echo(f"  host drift: of each batch's spread {drift.in_words()} persists (batches near each other "
                   "in time run alike), replayed in every run")


def echo_plan(result: Plan, config: str, model: str, device_name: str, precision: str, mode: str,
              plan_for: PlanFor = "median") -> None:
    """The plan as ``latpred capacity`` prints it by default: the verdict, the numbers, the Triton block."""
    qps, slo_p99_ms = result.qps, result.slo_p99_ms
    verdict = "meets the objective" if result.meets else f"does NOT meet the objective: {result.reason}"
    planned = " planned for the slow end of the latency prediction's interval," if plan_for == "slow_end" else ""
    arrivals = (f" replaying {result.arrival_trace}" if result.arrival_trace is not None else
                f" with gaps between requests of cv {result.arrival_cv:g} (1 is Poisson)" if result.arrival_cv != 1
                else "")
    click.echo(f"{model} on {result.gpus} x {device_name} ({precision}, {mode}) at {qps:g} qps{arrivals}:{planned} "
               f"{verdict}")
    instances = (f", {result.instances} model instances per GPU (sharing it as measured: {result.instance_sharing})"
                 if result.instances > 1 else "")
    click.echo(f"  max batch {result.max_batch}, max queue delay {result.max_queue_delay_us} us{instances}; per GPU "
               f"{result.per_gpu_qps:.4g} qps, p50 {result.p50_ms:.3f} ms, p99 {result.p99_ms:.3f} ms "
               f"(objective {slo_p99_ms:g}), utilisation {result.utilisation:.2f}, mean batch "
               f"{result.mean_batch_size:.2f}")
    if result.p99_low_ms is not None and result.p99_high_ms is not None:
        click.echo(f"  p99 {result.p99_low_ms:.3f} to {result.p99_high_ms:.3f} ms with every batch at either end of "
                   "its latency prediction's 90% interval")
    click.echo(config)


def check_plot_path(path: Path) -> None:
    """A click error naming --plot unless ``path`` can take a PNG: it ends in .png, its folder exists
    and can be written, and matplotlib is there to draw it."""
    from predictor.capacity.plot import PlotUnavailable, require_matplotlib

    folder = path.parent
    if path.suffix.lower() != ".png":
        raise click.BadParameter(f"{path}: the load curve is a PNG image, so the file name must end in .png",
                                 param_hint="--plot")
    if not folder.is_dir():
        raise click.BadParameter(f"{path}: the folder {folder} does not exist", param_hint="--plot")
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"{path}: the folder {folder} cannot be written", param_hint="--plot")
    try:
        require_matplotlib()
    except PlotUnavailable as exc:
        raise click.ClickException(f"--plot: {exc}") from None


def write_load_curve(path: Path, service: LatencyFn, result: Plan, stalls: HostStalls | None,
                     trace: LoadTrace | None, title: str) -> None:
    """The load curve of the plan's setting on one GPU (its instances, the plan's arrivals: Poisson, or
    one GPU's share of its bursty load or of its ``trace``), from 5% to 98% of what it can serve and through the plan's
    per-GPU load, drawn to ``path``. The planner's request count and seed, and the plan's latency
    model, host pauses and drift (``stalls``) and arrivals, make the point at the planned load the
    plan's own simulation."""
    from predictor.capacity.load_curve import capacity_qps, load_curve, qps_range
    from predictor.capacity.planner import plan_config
    from predictor.capacity.plot import render_load_curves

    config = plan_config(result)
    capacity = capacity_qps(service, config, stalls)
    points = load_curve(service, config, qps_range(capacity, include=[result.per_gpu_qps]), stalls=stalls,
                        arrival_cv=1.0 if trace is not None else result.arrival_cv, gpus=result.gpus,
                        arrival_trace=trace)
    try:
        render_load_curves(path, {"": points}, title=title, slo_p99_ms=result.slo_p99_ms,
                           planned_qps=result.per_gpu_qps, capacity_qps=capacity,
                           xlabel="offered load per GPU (requests/s)")
    except OSError as exc:
        raise click.ClickException(f"--plot: could not write {path}: {exc.strerror or exc}") from None


commands.add_command(select_command)
