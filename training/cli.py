"""The training commands: ``latpred train`` and ``latpred validate``, assembled by the ``latpred`` root.

xgboost, lightgbm and mlflow load inside the commands, so listing them needs none of those.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle, BundleError
from training.datasets_dir import H200_DATASET, SUITES_DIR

if TYPE_CHECKING:
    import pandas as pd

    from training.suite_validation import SuiteReport


@contextmanager
def _reported() -> Iterator[None]:
    """What a validation refuses (no bundle, no dataset, an unknown device or suite) as a CLI
    error, not a traceback."""
    try:
        yield
    except (ValueError, BundleError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None


def _writable_folder(out: Path) -> None:
    """Make ``--out`` now, or say why it cannot be: a file there, or a folder that cannot be made,
    was a traceback once every prediction had been made."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"{out}: cannot be made a folder for the tables ({exc.strerror or exc})",
                                 param_hint="--out") from None


def _bundle_dir(device: str, bundle: Path | None) -> Path:
    """``bundle``, or the shipped bundle of ``device``."""
    from predictor.devices import resolve_device

    return bundle or DEFAULT_BUNDLE_DIR / resolve_device(device).device_id


def _write_tables(out: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Each table as ``out/<name>.csv``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)


@click.group()
def commands() -> None:
    """The training commands, which the ``latpred`` root assembles."""


@commands.command()
@click.option("--dataset", type=click.Path(path_type=Path, exists=True, file_okay=False),
              default=H200_DATASET, show_default=True)
@click.option("--bundles", type=click.Path(path_type=Path), default=DEFAULT_BUNDLE_DIR, show_default=True,
              help="where the bundle is exported (one folder per device)")
@click.option("--store", type=click.Path(path_type=Path), default=Path("mlruns/latpred.db"), show_default=True,
              help="MLflow sqlite store (tracking and registry)")
@click.option("--limit", type=click.IntRange(min=100), default=None, help="train on a random sample of rows")
@click.option("--scale", type=click.FloatRange(min=0.05, max=4), default=1.0, show_default=True,
              help="multiplies the number of trees")
@click.option("--no-track", is_flag=True, help="skip MLflow")
@click.option("--force", is_flag=True, help="install the bundle even if it validates worse than the served one")
@click.option("--suites", "suites_dir", type=click.Path(path_type=Path, file_okay=False),
              default=SUITES_DIR, show_default=True,
              help="the NAS suites (composition fits nas-train's runs, the interval calibrates on nas-dev's)")
@click.option("--host-speed-exponent", type=click.FloatRange(min=0, max=2), default=0.0, show_default=True,
              help="a CPU: scale a forward's operator times by its host's speed against the host its rows were "
                   "measured on, to this power (0: as measured, whatever the host; predictor/operator_host.py)")
def train(dataset: Path, bundles: Path, store: Path, limit: int | None, scale: float, no_track: bool,
          force: bool, suites_dir: Path, host_speed_exponent: float) -> None:
    """Fit per-layer models (XGBoost and LightGBM), learn composition, export, track."""
    from training.train import TrainSettings, train as run_train

    try:
        report = run_train(TrainSettings(dataset=dataset, bundle_root=bundles, store=store, limit=limit,
                                         scale=scale, track=not no_track, force=force, suites=suites_dir,
                                         host_speed_exponent=host_speed_exponent))
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    for target, candidates in report.candidates.items():
        for library, fit in candidates.items():
            mark = "*" if report.chosen[target] is fit else " "
            o = fit.overall
            click.echo(f"{mark} {target:<8} {library:<8} held-out shapes: MAPE {o['mape']:.1%}, "
                       f"median {o['median_ape']:.1%}, p90 {o['p90_ape']:.1%}, within ±10% {o['within_10pct']:.1%}")
    click.echo("\nkernel time per family (held-out shapes):")
    click.echo(report.chosen["kernel"].per_family.round(3).to_string(index=False))
    lomo = report.composition.predictions
    for mode in (m for m in ("cudagraph", "eager") if (lomo["mode"] == m).any()):  # (a CPU: eager only)
        part = lomo[lomo["mode"] == mode]
        within = ((part["predicted_ms"] - part["measured_ms"]).abs() / part["measured_ms"] <= 0.1).mean()
        click.echo(f"whole models, {mode}, leave-one-model-out: {within:.1%} within ±10% ({len(part)} runs)")
    click.echo(f"bundle: {report.bundle_dir}  ({report.seconds:.0f} s)")
    if not report.installed:
        click.echo("the served bundle validates better and was kept; this one is a candidate (--force installs it)")
    if report.tracking:
        t = report.tracking
        click.echo(f"mlflow: run {t['run_id']}, {t['registered_model']} v{t['version']}"
                   f"{' (champion)' if t['champion'] else ' (champion kept: it scores higher)'}")


@commands.command()
@click.option("--bundles", type=click.Path(path_type=Path), default=DEFAULT_BUNDLE_DIR, show_default=True,
              help="where the bundle is exported (as <bundles>/transfer)")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("runs/transfer"),
              show_default=True,
              help="the validation's tables (held-out devices' operators and runs, each device's own runs)")
@click.option("--holdout", "holdouts", multiple=True,
              help="a device scored leave-one-device-out (repeatable; default: every partition)")
def transfer(bundles: Path, out: Path, holdouts: tuple[str, ...]) -> None:
    """Fit the transfer model across the measured GPUs, score it leave-one-device-out, export it."""
    from training.transfer import TransferSettings, report_text, train_transfer, write_tables

    _writable_folder(out)
    with _reported():
        report = train_transfer(TransferSettings(bundle_root=bundles, holdouts=holdouts or None, say=click.echo))
    write_tables(report, out)
    click.echo(report_text(report.held_out_ops, report.held_out_runs, report.own_runs))
    click.echo(f"bundle: {report.bundle_dir} ({report.seconds:.0f} s); tables in {out}")


@commands.command()
@click.option("--device", default="h200", show_default=True)
@click.option("--dataset", type=click.Path(path_type=Path, exists=True, file_okay=False),
              default=H200_DATASET, show_default=True)
@click.option("--bundle", type=click.Path(path_type=Path), default=None)
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("runs/validate"),
              show_default=True)
@click.option("--strict", is_flag=True,
              help="also refit the per-layer models without each held-out model's layer shapes (minutes)")
@click.option("--suite", type=click.Choice(["zoo", "nas-dev", "nas-test"]), default=None,
              help="score a suite through every importer (torch trace and each ONNX export): share within "
                   "+-10%, MAPE, Spearman and interval coverage per importer, mode, precision and batch")
@click.option("--suites", "suites_dir", type=click.Path(path_type=Path, file_okay=False),
              default=SUITES_DIR, show_default=True, help="the suites' graphs and exports")
@click.option("--models", default="", help="comma-separated: score only these models of the suite")
@click.option("--hosts", is_flag=True,
              help="score eager runs under every host condition measured (another machine, a contended core), "
                   "each from its own probe, beside one fixed host and a CPU-only estimate")
@click.option("--references/--no-references", default=False,
              help="with --suite: predict eager runs from their profiles calibrated by the profiles' reference "
                   "forwards, as Predictor(calibrate_hosts=True) does (default: their costs as probed, as a "
                   "prediction uses them; --hosts reports both)")
def validate(device: str, dataset: Path, bundle: Path | None, out: Path, strict: bool, suite: str | None,
             suites_dir: Path, models: str, hosts: bool, references: bool) -> None:
    """Predict the measured zoo leave-one-model-out, beside the roofline and FLOPs baselines; or,
    with --suite, score the zoo or a NAS suite through every importer."""
    from training.suites import require_nas_suites
    from training.validate import scatter_plot, strict_validate, validate as run_validate

    with _reported():  # every validation fits composition as training does: on nas-train's runs too
        require_nas_suites(dataset, suites_dir)
    if references and suite is None:
        raise click.UsageError("--references goes with --suite (--hosts reports both ways; the zoo's runs have "
                               "no reference forwards)")
    if hosts:
        if strict or suite is not None:
            raise click.UsageError("--hosts scores the host conditions alone: it does not combine with --strict "
                                   "or --suite")
        _validate_hosts(device, dataset, bundle, out / "hosts", suites_dir)
        return

    if suite is not None:
        if strict:
            raise click.UsageError("--strict refits on the zoo's own layers: it does not combine with --suite")
        if not suites_dir.is_dir():  # (a suite without its folder was scored through the torch trace alone)
            raise click.BadParameter(f"{suites_dir}: no such folder; --suite {suite} scores the graphs and exports "
                                     "there", param_hint="--suites")
        _validate_suite(device, dataset, bundle, out / suite, suite, suites_dir,
                        [m.strip() for m in models.split(",") if m.strip()] or None, references=references)
        return
    _writable_folder(out)
    with _reported():
        report = (strict_validate(_bundle_dir(device, bundle), dataset, suites_dir=suites_dir) if strict
                  else run_validate(_bundle_dir(device, bundle), dataset, suites_dir))
    _write_tables(out, {"predictions": report.predictions, "by_mode_precision_batch": report.table})
    pct = lambda v: f"{v:.0%}"  # noqa: E731
    click.echo(report.table.to_string(index=False, formatters={c: pct for c in report.table.columns
                                                                 if "MAPE" in c or "within" in c}))
    click.echo("")
    click.echo(report.overall.to_string(index=False, formatters={"MAPE": pct, "median APE": pct, "within10": pct}))
    click.echo(f"\nscatter plot: {scatter_plot(report.predictions, out / 'scatter.png')}; tables in {out}")


def _validate_hosts(device: str, dataset: Path, bundle: Path | None, out: Path, suites_dir: Path) -> None:
    """``latpred validate --hosts``: score, print, and write the tables to ``out``."""
    from training.host_validation import validate_hosts

    with _reported():
        report = validate_hosts(_bundle_dir(device, bundle), dataset, suites_dir)
    _write_tables(out, {"predictions": report.predictions, "by_condition_method_batch": report.table,
                        "probes": report.profiles})
    pct = lambda v: f"{v:.0%}"  # noqa: E731
    formats = {"within10": pct, "MAPE": pct, "median ratio": "{:.2f}".format, "coverage90": pct}
    click.echo(report.table.to_string(index=False, formatters=formats))
    click.echo("")
    click.echo(report.overall.to_string(index=False, formatters=formats))
    click.echo("")
    click.echo(report.profiles.to_string(index=False, float_format="{:.2f}".format))
    click.echo(f"\ntables in {out}")


def _validate_suite(device: str, dataset: Path, bundle: Path | None, out: Path, suite: str, suites_dir: Path,
                    models: list[str] | None, references: bool = False) -> None:
    """``latpred validate --suite``: score, print, and write the tables and a scatter plot to ``out``."""
    from predictor.device_bundles import bundle_folder
    from predictor.devices import resolve_device
    from training.suite_validation import validate_suite
    from training.suites import load_suite

    with _reported():
        # a GPU without a bundle of its own is scored as it is served, by the transfer bundle, which
        # predicts the device named; a one-device bundle predicts its own
        spec = resolve_device(device)
        loaded = Bundle.load(bundle or bundle_folder(spec.device_id))
        report = validate_suite(load_suite(suite, dataset, suites_dir, models), loaded, dataset, references,
                                device=spec if loaded.transfer is not None else None)
    _echo_suite_report(report, out, f"suite {suite}", suite)


def _echo_suite_report(report: SuiteReport, out: Path, heading: str, plot_title: str) -> None:
    """A suite's scores printed, and its tables and scatter plot written to ``out``."""
    from training.validate import scatter_plot

    _write_tables(out, {"predictions": report.predictions, "by_importer_mode_precision_batch": report.table})
    pct = lambda v: f"{v:.0%}"  # noqa: E731
    two = lambda v: f"{v:.3f}"  # noqa: E731
    formats = {"within10": pct, "MAPE": pct, "coverage90": pct, "spearman": two, "min spearman": two}
    models = report.predictions["model"].nunique()
    click.echo(f"{heading}: {models} model{'' if models == 1 else 's'}, "
               f"{len(report.predictions)} predictions of measured runs")
    click.echo(report.table.to_string(index=False, formatters=formats))
    click.echo("")
    click.echo(report.overall.to_string(index=False, formatters=formats))
    for importer, names in report.missing.items():
        click.echo(f"{importer}: no graph for {len(names)} model(s): {', '.join(names)}")
    click.echo(f"\nscatter plot: {scatter_plot(report.predictions, out / 'scatter.png', plot_title)}; "
               f"tables in {out}")


@commands.command()
@click.argument("dataset", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--bundle", type=click.Path(path_type=Path), default=None,
              help="the bundle to check (default: the one that predicts the runs' device)")
@click.option("--suites", "suites_dir", type=click.Path(path_type=Path, exists=True, file_okay=False),
              default=None, help="the suites folder whose zoo/onnx holds the zoo's exports (default: this "
                                 "checkout's datasets/suites)")
@click.option("--models", default="", help="comma-separated: check only these models' runs")
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs/check"), show_default=True)
def check(dataset: Path, bundle: Path | None, suites_dir: Path | None, models: str, out: Path) -> None:
    """Score latpred's predictions of whole-model runs measured on your machine (a device folder
    that 'latpred collect models' wrote), through every importer."""
    from training.runs_check import check_runs

    _writable_folder(out)  # before the predictions, not after them
    with _reported():
        result = check_runs(dataset, bundle=bundle, suites_dir=suites_dir or SUITES_DIR,
                            models=[m.strip() for m in models.split(",") if m.strip()] or None)
    device = result.device
    click.echo(f"{device.device_id} ({device.name}), predicted by bundle {result.bundle_dir.name} "
               f"{result.bundle_version} ({result.provenance}"
               + ("; the bundle was fitted on this device's own runs: where these are among them, a development "
                  "figure, not a check)" if result.fitted_on_device else "; no run of this device was fitted)"))
    for warning in result.warnings:
        click.echo(f"warning: {warning}")
    _echo_suite_report(result.report, out, f"runs of {dataset}", f"latpred on {device.device_id}")
    if result.kernels is not None:
        _write_tables(out, {"kernels_by_family_precision": result.kernels})
        rows = int(result.kernels["rows"].iloc[-1])
        fit = (": the rows this bundle's models were fitted on, a fit, not a check" if result.fitted_on_device
               else "")
        click.echo(f"\noperator rows of {dataset}: {rows} kernel times, predicted as a graph's calls would be{fit}")
        click.echo(result.kernels.to_string(index=False, formatters={
            "within10": "{:.0%}".format, "MAPE": "{:.1%}".format, "coverage90": "{:.0%}".format,
            "median ratio": "{:.3f}".format}))


@commands.command("serving-path")
@click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--models", default="", help="comma-separated: fit only these models' loads (default: all, "
                                           "which must have been served on one host)")
@click.option("--name", default=None, help="the path's name (default: the folder's name)")
@click.option("--no-pauses", is_flag=True, help="leave the host's pauses out of the path")
@click.option("--no-drift", is_flag=True, help="leave the host's drift out of the path (its batches' times then "
                                               "independent of each other)")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True, metavar="PATH.json")
def serving_path(folder: Path, models: str, name: str | None, no_pauses: bool, no_drift: bool, out: Path) -> None:
    """Fit a server's own time per batch (its serving path) from Triton loads measured on one host.

    FOLDER is what 'latpred collect serving --server triton' wrote there, for the empty model (the
    server's time alone) or any other: Triton's time per batch less the model's CUDA graph replayed
    alone. 'latpred capacity --serving-path PATH.json' adds the path to each predicted batch."""
    import json

    from training.serving_check import load_serving
    from training.serving_path_fit import measured_serving_path

    with _reported():
        data = load_serving(folder)
        try:
            path = measured_serving_path(data, name or folder.name,
                                         [m.strip() for m in models.split(",") if m.strip()], pauses=not no_pauses,
                                         drift=not no_drift)
        except ValueError as exc:  # the path's name is --name's (or the folder's, without one)
            if str(exc).startswith("name:"):
                raise click.BadParameter(str(exc), param_hint="--name") from None
            raise
    try:
        out.write_text(json.dumps(path.to_dict(), indent=1) + "\n")
    except OSError as exc:
        raise click.BadParameter(f"{out}: cannot be written ({exc.strerror or exc})", param_hint="--out") from None
    stalls = path.stalls
    click.echo(f"{path.name}: {path.cost.per_batch_ms:.3f} ms a batch + {path.cost.per_request_ms:.3f} ms a request "
               f"({path.low.per_batch_ms:.3f}-{path.high.per_batch_ms:.3f} and {path.low.per_request_ms:.3f}-"
               f"{path.high.per_request_ms:.3f}), served batches' sigma {path.sigma:.3f}, host pauses "
               f"{stalls.rate_per_s:.2f} a second, drift "
               + (stalls.drift.in_words() if stalls.drift is not None else "none")
               + f"; written to {out}")
