"""``latpred select``: which device should serve this model, ranked by cost per million inferences.

The command-line form of ``POST /v1/select`` (predictor.selection does the ranking): every device
a shipped bundle predicts (its own bundle, or the transfer bundle from its datasheet), or those
``--devices`` names, as a table, CSV or JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from predictor import device_bundles
from predictor.bundle import DEFAULT_BUNDLE_DIR, BundleError
from predictor.compose import MODES
from predictor.devices import resolve_device
from predictor.graph_sources import load_graph
from predictor.host_lookup import resolve_host, user_store
from predictor.precision import PRECISIONS
from predictor.selection import Constraints, Selection, select
from predictor.selection_csv import write_selection_csv
from predictor.variant import MAX_BATCH


@click.command("select")
@click.argument("path")
@click.option("--batch", type=click.IntRange(min=1, max=MAX_BATCH), default=None,
              help="batch size (default: the graph's own)")
@click.option("--precision", type=click.Choice(list(PRECISIONS)), default="fp16", show_default=True)
@click.option("--mode", type=click.Choice(list(MODES)), default="cudagraph", show_default=True)
@click.option("--slo-p99-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="p99 objective of one batch's latency, ms")
@click.option("--min-throughput", type=click.FloatRange(min=0, min_open=True), default=None,
              help="inferences a second one device must serve")
@click.option("--devices", default="", help="comma-separated devices to choose among (default: every device a "
                                            "bundle predicts)")
@click.option("--host", "host_spec", default=None, metavar="PROFILE.json|ID",
              help="the host that issues an eager forward (as for 'latpred predict')")
@click.option("--dim", "dim_items", multiple=True, metavar="NAME=SIZE", help="an ONNX symbolic dim (repeatable)")
@click.option("--serving-path", "serving_path_spec", default=None, metavar="NAME|FILE.json",
              help="add a server's own time per batch to every device's: a shipped serving path by name (e.g. "
                   "pytriton-h100) or a JSON file of one ('latpred serving-path'), each sample one request; "
                   "default: none, the devices' time alone")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--bundles", type=click.Path(path_type=Path), default=DEFAULT_BUNDLE_DIR, show_default=True)
def select_command(path: str, batch: int | None, precision: str, mode: str, slo_p99_ms: float | None,
                   min_throughput: float | None, devices: str, host_spec: str | None, dim_items: tuple[str, ...],
                   serving_path_spec: str | None, fmt: str, bundles: Path) -> None:
    """Rank the devices for PATH (zoo name, ONNX or JSON graph) by cost per million inferences.

    Devices that fit the model in memory and meet --slo-p99-ms and --min-throughput come first,
    cheapest per inference first (unpriced ones after, fastest first); then the others, nearest
    first, with the reasons. Each says whether it was measured or transferred (never measured:
    predicted from its datasheet, with a wider interval). The answer says whether the choice is
    settled (which devices meet the constraints does not change at either end of their prediction
    intervals, so far as the choice depends on it; the order by cost is the medians' between
    measured devices, and in doubt where a device predicted from its datasheet could cost less at
    the fast end of its interval) or which devices, at which end of their intervals, could change it.
    --serving-path adds a server's own time per batch to every device's (the server as it runs on its
    host, whichever device it drives), so that the ranking is the served model's, not the GPU's alone."""
    from predictor.cli import load_serving_path
    from predictor.importers.onnx_dims import parse_dims

    path_added = load_serving_path(serving_path_spec)  # before the bundles load: a bad one costs no wait

    try:
        predictors = device_bundles.load_all(bundles)
        if devices.strip():
            wanted = [resolve_device(d).device_id for d in devices.split(",") if d.strip()]
            if not wanted:
                raise click.BadParameter(f"{devices!r} names no device", param_hint="--devices")
            missing = [d for d in wanted if d not in predictors]
            if missing:
                raise click.BadParameter(f"no bundle predicts {', '.join(missing)}", param_hint="--devices")
            predictors = {d: predictors[d] for d in wanted}
        if not predictors:
            raise click.ClickException(f"no bundle under {bundles}")
    except (ValueError, BundleError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        host = (resolve_host(host_spec, [p.bundle for p in predictors.values()], [user_store()])
                if host_spec else None)
    except (ValueError, KeyError) as exc:
        raise click.BadParameter(str(exc), param_hint="--host") from None
    try:
        dims = parse_dims(",".join(dim_items)) if dim_items else {}
        graph = load_graph(path, batch, dims)
    except ValueError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    try:
        selection = select(graph, predictors, graph.batch if batch is None else batch, precision, mode,
                           Constraints(slo_p99_ms, min_throughput), host, path_added)
    except ValueError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    if fmt == "json":
        click.echo(json.dumps({**dataclasses.asdict(selection), "best": selection.best.device if selection.best
                               else None, "verdict": selection.verdict, "settled": selection.settled,
                               "doubts": list(selection.doubts),
                               "serving_path": path_added.answer_dict() if path_added is not None else None}))
    elif fmt == "csv":
        write_selection_csv(selection, sys.stdout, lineterminator="\n")
    else:
        echo_table(selection)


def echo_table(selection: Selection) -> None:
    """The verdict, then one line per device."""
    s = selection
    click.echo(f"{s.model} at batch {s.batch}, {s.precision}, {s.mode}: {s.verdict}")
    if s.serving_path is not None:
        path = s.serving_path
        click.echo(f"served through {path.name} ({path.label}, {path.server}): {path.cost.per_batch_ms:.3f} ms a "
                   f"batch + {path.cost.per_request_ms:.3f} ms a request added to every device's batch")
        if path.caution is not None:
            click.echo(f"  {path.caution}")
    if s.settled:
        click.echo("settled: no device's verdict on the constraints that the choice depends on, nor its order by "
                   "cost where it was predicted from a datasheet, changes at either end of its prediction interval")
    else:
        click.echo("within the predictions' error: " + "; ".join(s.doubts))
    click.echo(f"{'#':>2} {'device':<26} {'provenance':<11} {'latency ms':>10} {'p99 ms':>9} {'per s':>10} "
               f"{'GiB':>6} {'$/h':>6} {'$/M inf':>9}  why not")
    for rank, c in enumerate(s.ranked, 1):
        price = "-" if c.price_per_hour is None else f"{c.price_per_hour:.2f}"
        cost = "-" if c.cost_per_million is None else f"{c.cost_per_million:.4g}"
        click.echo(f"{rank:>2} {c.device:<26} {c.provenance:<11} {c.latency_ms:>10.3f} {c.p99_ms:>9.3f} "
                   f"{c.throughput_qps:>10.1f} {c.memory_bytes / 2**30:>6.2f} {price:>6} {cost:>9}  "
                   f"{'; '.join(c.reasons)}")
    for device, why in s.skipped.items():
        click.echo(f"   {device}: skipped ({why})")
    hosts = {c.host: [d.device for d in s.ranked if d.host == c.host] for c in s.ranked if c.host is not None}
    for host, devices in hosts.items():  # an eager forward's host, per device (a CPU device uses its own)
        click.echo(f"host: {host}" + (f" ({', '.join(devices)})" if len(hosts) > 1 else ""))
    # (a transferred device's warning says what its provenance column does)
    warned = {w: [d.device for d in s.ranked if w in d.warnings] for c in s.ranked for w in c.warnings
              if not w.startswith("transferred:")}
    for warning, devices in warned.items():
        click.echo(f"  warning ({', '.join(devices) if len(devices) < len(s.ranked) else 'every device'}): {warning}")
