"""The collectors' commands: ``latpred device``, ``latpred host probe`` and ``latpred collect``
(shapes, graphs, ops, models, nas, nas-suite, profile, onnx, card).

Every measuring step is a ``latpred collect`` command, so the GPU machine runs one entry point
(``python -m latpred`` from the checkout). Each command imports torch and the measuring modules
when it runs: this module itself needs only click and the precisions' names, so loading the
group stays cheap where torch is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from predictor.precision import PRECISIONS

DEVICE_CHOICE = click.Choice(["auto", "cuda", "cpu"])
#: every measuring command probes the host before and after; this says under what conditions
HOST_NOTE = click.option("--host-note", default=None,
                         help="the host's conditions, kept in the profiles probed before and after")
#: measure on part of the GPU: collectors.partition says how, and why one partition per process
SMS = click.option("--sms", type=click.IntRange(min=1), default=None,
                   help="measure on this many of the GPU's SMs (a green context); rows go to <device>-sm<N>, "
                        "N the SMs the partition really holds")


def _enter_partition(sms: int | None) -> None:
    """Enter the green context before anything touches the GPU (collectors.partition)."""
    if sms is None:
        return
    from collectors.partition import enter_partition

    try:
        part = enter_partition(sms)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"partition: {part.sms} of {part.total_sms} SMs ({sms} asked for, {part.counted_by})"
               + (f"; {part.note}" if part.note else ""))


@click.group()
def commands() -> None:
    """The collectors' commands, which the ``latpred`` root assembles."""


def _fail(exc: Exception) -> NoReturn:
    raise click.ClickException(str(exc)) from None


def _items(text: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated option, stripped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _ints(text: str) -> tuple[int, ...]:
    """A comma-separated option of integers (batch sizes)."""
    return tuple(int(item) for item in _items(text))


@commands.command()
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the fingerprint as JSON")
def device(device: str, as_json: bool) -> None:
    """Fingerprint the GPU (or, without one, the CPU) that a sweep would measure."""
    from collectors.fingerprint import read_fingerprint

    try:
        fp = read_fingerprint(device)
    except RuntimeError as exc:
        _fail(exc)
    info = fp.as_dict()
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    for note in fp.notes:
        click.echo(f"note: {note}")
    for key, value in info.items():
        if key != "notes" and value is not None:
            click.echo(f"{key:>18}: {value}")


@commands.group()
def collect() -> None:
    """Measure operators and whole models into a dataset."""


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("datasets"), show_default=True)
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True)
@click.option("--nas-seeds", default="",
              help="NAS training architectures (e.g. 1000-1287) instead of the zoo; traced on the CPU "
                   "(--device does not apply)")
def shapes(out: Path, device: str, nas_seeds: str) -> None:
    """Extract the layer shapes of the zoo's models (needs torchvision and transformers), or of
    NAS training architectures, into OUT/layer_shapes.json."""
    from collectors.campaign import collect_nas_shapes, collect_shapes
    from collectors.nas_space import parse_seeds
    from collectors.zoo_models import ZOO

    if nas_seeds:
        try:
            summary = collect_nas_shapes(out, parse_seeds(nas_seeds), say=click.echo)
        except ValueError as exc:
            _fail(exc)
        click.echo(json.dumps({k: summary[k] for k in ("shapes", "nas_seeds")}, indent=1))
        return
    summary = collect_shapes(out, device, list(ZOO))
    click.echo(json.dumps({k: summary[k] for k in ("shapes", "models", "failures")}, indent=1))


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="folder for the graphs (default: predictor/zoo_graphs)")
def graphs(out: Path | None) -> None:
    """Trace the zoo and the held-out models into shipped graph IR files (needs torchvision)."""
    import torch

    from collectors.zoo_models import HELD_OUT_GRAPH_MODELS, ZOO
    from predictor.importers.precision_traces import merge_precision_traces
    from predictor.importers.torch_module import graph_from_module
    from predictor.zoo import GRAPH_DIR

    target = out or GRAPH_DIR
    target.mkdir(parents=True, exist_ok=True)

    def trace(name: str, zoo: Any, dtype: Any) -> Any:
        return graph_from_module(zoo.build().to(dtype), zoo.example_input(1, "cpu", dtype), name,
                                 source=f"{zoo.kind}:{name}")

    for name, zoo in {**ZOO, **HELD_OUT_GRAPH_MODELS}.items():
        # Text models are traced in bfloat16: what they keep in float32 (RMSNorm, rotary
        # embeddings, T5's norms) and their casts only show in a half-precision trace. They
        # are traced in float16 too, for the calls their code makes only in float16.
        dtype = torch.bfloat16 if zoo.kind == "text" else torch.float32
        graph = trace(name, zoo, dtype)
        if zoo.kind == "text":
            graph = merge_precision_traces(graph, ["fp32", "tf32", "bf16"], trace(name, zoo, torch.float16),
                                           ["fp16"])
        graph.meta.update({"held_out": name in HELD_OUT_GRAPH_MODELS, "kind": zoo.kind,
                           "traced_dtype": str(dtype).replace("torch.", "")})
        graph.save(target / f"{name}.json")
        only = sum(1 for n in graph.nodes if n.precisions)
        click.echo(f"{name}: {len(graph.nodes)} nodes" + (f", {only} at some precisions only" if only else ""))


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("datasets"), show_default=True,
              help="dataset root; rows go to OUT/<device-id>/ops")
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--target", type=click.IntRange(min=1), default=44_000, show_default=True,
              help="configurations to draw")
@click.option("--families", default="", help="comma-separated families (default: all)")
@click.option("--precisions", default=",".join(PRECISIONS), show_default=True)
@click.option("--variants", default="", help="measure every shape in these variants instead of its own")
@click.option("--layouts", default="", help="only these layouts (e.g. nchw)")
@click.option("--budget-s", type=click.FloatRange(min=0), default=None,
              help="stop cleanly after this many seconds (resume later)")
@click.option("--flush-every", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--max-bytes", type=click.FloatRange(min=1), default=3e9, show_default=True,
              help="skip batches whose fp32 working set exceeds this")
@click.option("--max-flops", type=click.FloatRange(min=1), default=3e11, show_default=True,
              help="skip batches whose arithmetic exceeds this")
@click.option("--min-flops", type=click.FloatRange(min=0), default=0, show_default=True,
              help="skip batches whose arithmetic is below this (to extend a sweep to larger calls)")
@click.option("--random-shapes", type=click.IntRange(min=0), default=120, show_default=True,
              help="random shapes drawn per family beside the catalogue's (0: only real shapes)")
@HOST_NOTE
@SMS
def ops(out: Path, device: str, seed: int, target: int, families: str, precisions: str, variants: str,
        layouts: str, budget_s: float | None, flush_every: int, max_bytes: float, max_flops: float,
        min_flops: float, random_shapes: int, host_note: str | None, sms: int | None) -> None:
    """Sweep operator configurations; resumes where an earlier run stopped."""
    _enter_partition(sms)
    from collectors.campaign import collect_ops
    from collectors.sampler import SamplerSettings
    from predictor.catalogue import FAMILIES, get_family
    from predictor.precision import get_precision

    try:
        fams = _items(families) or tuple(FAMILIES)
        for f in fams:
            get_family(f)
        precs = tuple(dict.fromkeys(get_precision(p).name for p in _items(precisions)))
        wanted_variants = _items(variants) or None
        wanted_layouts = _items(layouts) or None
        known_variants = {v for f in fams for v in get_family(f).variants}
        known_layouts = {x for f in fams for x in get_family(f).layouts}
        for v in wanted_variants or ():
            if v not in known_variants:
                raise ValueError(f"--variants: {v!r} is not a variant of {', '.join(fams)} "
                                 f"(known: {', '.join(sorted(x for x in known_variants if x))})")
        for x in wanted_layouts or ():
            if x not in known_layouts:
                raise ValueError(f"--layouts: {x!r} is not a layout of {', '.join(fams)} "
                                 f"(known: {', '.join(sorted(known_layouts))})")
        settings = SamplerSettings(seed=seed, target_configs=target, families=fams,
                                   precisions=precs, max_bytes=max_bytes, max_flops=max_flops,
                                   min_flops=min_flops, variants=wanted_variants, layouts=wanted_layouts,
                                   random_shapes_per_family=random_shapes)
        report = collect_ops(out, device, settings, budget_s, flush_every, host_note=host_note, say=click.echo)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"ops: {report.measured} measured ({report.failed} failed), {report.already_done} "
               f"already on disk, {report.per_second:.1f} configs/s, stopped: {report.stopped}")


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("datasets"), show_default=True,
              help="dataset root; rows go to OUT/<device-id>/models")
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True)
@click.option("--models", default="", help="comma-separated zoo models (default: the whole zoo)")
@click.option("--batches", default="1,8,32,128", show_default=True)
@click.option("--precisions", default="fp32,fp16,bf16", show_default=True)
@click.option("--modes", default="eager", show_default=True,
              help="comma-separated, of eager and cudagraph; each mode is its own set of rounds")
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True,
              help="rounds, each timing every unit in a fresh random order")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="forwards (or replays) of a unit per round")
@click.option("--seed", type=int, default=0, show_default=True, help="seeds the rounds' orders")
@HOST_NOTE
@SMS
def models(out: Path, device: str, models: str, batches: str, precisions: str, modes: str, rounds: int,
           reps: int, seed: int, host_note: str | None, sms: int | None) -> None:
    """Time zoo models in interleaved rounds (eager or as CUDA graphs); resumes by run id."""
    _enter_partition(sms)
    from collectors.campaign import collect_models
    from collectors.zoo_models import ZOO

    try:
        names = list(_items(models)) or list(ZOO)
        batch_sizes = _ints(batches)
        precs = _items(precisions)
        wanted_modes = _items(modes)
        report = collect_models(out, device, names, batch_sizes, precs, wanted_modes, rounds, reps, seed,
                                host_note=host_note, say=click.echo)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"models: {report.measured} rows written, {report.already_done} already on disk")


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("datasets"), show_default=True,
              help="dataset root; rows go to OUT/<device-id>/nas")
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True)
@click.option("--seeds", default="0-143", show_default=True, help="architectures, e.g. 0-143 or 0-23,48")
@click.option("--batches", default="1,8,32", show_default=True)
@click.option("--precisions", default="fp32,fp16,bf16", show_default=True)
@click.option("--modes", default="eager,cudagraph", show_default=True,
              help="comma-separated, of eager and cudagraph; each group runs every mode's rounds")
@click.option("--group", type=click.IntRange(min=1), default=24, show_default=True,
              help="architectures interleaved and held at once (captured graphs hold memory)")
@click.option("--rounds", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="seeds the rounds' orders")
@click.option("--max-seconds", type=click.FloatRange(min=0), default=None,
              help="start no group that would end past this (by the longest group so far); resume later")
@HOST_NOTE
@SMS
def nas(out: Path, device: str, seeds: str, batches: str, precisions: str, modes: str, group: int, rounds: int,
        reps: int, seed: int, max_seconds: float | None, host_note: str | None, sms: int | None) -> None:
    """Time the NAS suite's architectures (nas-<seed>) in groups of interleaved rounds; resumes by run id."""
    _enter_partition(sms)
    from collectors.campaign import collect_nas
    from collectors.nas_space import parse_seeds

    try:
        report = collect_nas(out, device, parse_seeds(seeds), _ints(batches), _items(precisions), _items(modes),
                             group, rounds, reps, seed, max_seconds, host_note=host_note, say=click.echo)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"nas: {report.measured} rows written ({report.failed} failed), {report.already_done} already on "
               f"disk, in {report.seconds:.0f} s, stopped: {report.stopped}")


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("datasets"), show_default=True,
              help="dataset root; files go to OUT/<device-id>/serving")
@click.option("--models", default="", help="comma-separated zoo models or nas-<seed> architectures, or 'empty' "
                                           "(a model that runs nothing: the server's own time per batch, its "
                                           "serving path, for 'latpred serving-path') "
                                           "(default: collectors.serving_check.MODELS)")
@click.option("--precision", default="fp16", show_default=True)
@click.option("--levels", default="", help="loads as fractions of capacity (default: collectors.serving_check.LEVELS)")
@click.option("--rates", default="", help="loads as requests a second instead of --levels (a capacity plan's loads; "
                                          "--server triton only): a rate at 0.95 of the capacity measured or above "
                                          "is not offered")
@click.option("--seconds", type=click.FloatRange(min=0.1), default=4.0, show_default=True,
              help="seconds of arrivals per load")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="torch's intra-op threads for the server's forwards (default: torch's own, all cores on a "
                   "CPU); the measurements go to OUT/<device-id>/serving-threads<N>")
@click.option("--server", type=click.Choice(["ours", "triton"]), default="ours", show_default=True,
              help="'ours': collectors.batching_server, Triton's batching rule in our own process; 'triton': "
                   "Triton itself through PyTriton (pip install nvidia-pytriton), measurements in "
                   "OUT/<device-id>/serving-triton")
@click.option("--setting", "setting_names", multiple=True,
              help="a batching setting by name, as mb16-delay500us, mb32-pref16,32-delay1000us, or mb4-nodelay-x2 "
                   "for two model instances (--server triton only) (repeat for more; default: "
                   "collectors.serving_check.SETTINGS)")
def serving(out: Path, models: str, precision: str, levels: str, rates: str, seconds: float, seed: int, device: str,
            threads: int | None, server: str, setting_names: tuple[str, ...]) -> None:
    """Serve zoo models with a real dynamic-batching server under Poisson load (CUDA); a stopped run
    writes what it measured, and the same command resumes with the settings a model lacks."""
    from collectors.batching_server import EMPTY_MODEL, ServerSettings, model_source
    from collectors.serving_check import LEVELS, MODELS, SETTINGS, run_serving_check
    from predictor.precision import get_precision

    try:
        settings = tuple(ServerSettings.parse(name) for name in setting_names) or SETTINGS
        names = _items(models) or MODELS
        for name in names:
            if name != EMPTY_MODEL:
                model_source(name)
        wanted = tuple(float(x) for x in _items(levels)) or LEVELS
        if not all(0 < x < 1 for x in wanted):
            raise ValueError(f"--levels must be fractions of capacity in (0, 1), got {levels!r}")
        try:
            rates_qps = tuple(float(x) for x in _items(rates))
        except ValueError:
            raise ValueError(f"--rates must be requests a second, comma-separated, got {rates!r}") from None
        if rates_qps and (levels or server != "triton"):
            raise ValueError("--rates replaces --levels, and only with --server triton")
        if server == "triton":
            if threads is not None:
                raise ValueError("--threads is for our own server's CPU forwards, not --server triton")
            from collectors.triton_serving import run_triton_check

            folder = run_triton_check(out, device, names, get_precision(precision).name, settings=settings,
                                      levels=wanted, seconds_per_level=seconds, seed=seed, say=click.echo,
                                      rates_qps=rates_qps)
        else:
            folder = run_serving_check(out, device, names, get_precision(precision).name, settings=settings,
                                       levels=wanted, seconds_per_level=seconds, seed=seed, threads=threads,
                                       say=click.echo)
    except (ValueError, RuntimeError, KeyError) as exc:
        _fail(exc)
    click.echo(f"serving: measurements in {folder}")


@collect.command("nas-suite")
@click.option("--out", type=click.Path(path_type=Path), default=Path("datasets/suites/nas"), show_default=True,
              help="folder for archs.jsonl, suite.json, torch/ and onnx/")
@click.option("--seeds", default="0-143", show_default=True)
@click.option("--exporters", default="dynamo,legacy", show_default=True,
              help="ONNX exporters, each tried separately (onnx/<exporter>/); a failure is logged, not fatal")
def nas_suite(out: Path, seeds: str, exporters: str) -> None:
    """Write the NAS suite's specs, torch-trace graphs and weight-stripped ONNX files (CPU; needs onnx)."""
    from collectors.nas_space import parse_seeds
    from collectors.nas_suite import write_suite

    try:
        records = write_suite(out, parse_seeds(seeds), _items(exporters),
                              say=click.echo)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"nas-suite: {len(records)} architectures in {out}")


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="folder for capture_profile.json")
@click.option("--models", default="", help="comma-separated zoo models (default: the text models)")
@click.option("--batches", default="8,32", show_default=True)
@click.option("--precision", default="fp16", show_default=True)
def profile(out: Path, models: str, batches: str, precision: str) -> None:
    """Profile the kernels of text models eagerly, eagerly as if captured, and replayed (CUDA)."""
    from collectors.capture_profile import TEXT_MODELS, profile_models

    try:
        names = _items(models) or TEXT_MODELS
        batch_sizes = _ints(batches)
        path = profile_models(out, names, batch_sizes, precision, say=click.echo)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"wrote {path}")


@collect.command()
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="folder for <exporter>/<model>.onnx and exports.jsonl")
@click.option("--models", default="", help="comma-separated zoo models (default: the zoo and the held-out graphs)")
@click.option("--nas-seeds", default="", help="export these NAS architectures (e.g. 0-143) instead of zoo models")
@click.option("--exporters", default="dynamo,legacy", show_default=True,
              help="each exports every model separately: torch.onnx.export's default (dynamo) and TorchScript")
def onnx(out: Path, models: str, nas_seeds: str, exporters: str) -> None:
    """Export zoo models or NAS architectures to weight-stripped ONNX, as a user would (needs onnx;
    the zoo needs torchvision and transformers)."""
    from collectors.model_build import ModelSource
    from collectors.nas_space import NasModel, model_name, parse_seeds
    from collectors.onnx_export import export_models
    from collectors.zoo_models import HELD_OUT_GRAPH_MODELS, ZOO

    try:
        sources: dict[str, ModelSource]
        if nas_seeds:
            if models:
                raise ValueError("give --models or --nas-seeds, not both")
            sources = {model_name(s): NasModel(s) for s in parse_seeds(nas_seeds)}
        else:
            known = {**ZOO, **HELD_OUT_GRAPH_MODELS}
            names = list(_items(models)) or list(known)
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(f"not zoo models: {', '.join(unknown)}; expected some of {', '.join(known)}")
            sources = {n: known[n] for n in names}
        records = export_models(out, sources, _items(exporters),
                                say=click.echo)
    except (ValueError, RuntimeError) as exc:
        _fail(exc)
    click.echo(f"onnx: {sum(1 for r in records if r['exporter'])} exported, "
               f"{sum(1 for r in records if not r['exporter'])} failed")


@collect.command()
@click.argument("dataset", type=click.Path(path_type=Path, exists=True, file_okay=False))
def card(dataset: Path) -> None:
    """Write DATASET/README.md, the dataset card, from the data and the sweep log."""
    from collectors.card import write_card

    path = write_card(dataset)
    click.echo(f"wrote {path}")


@collect.command()
@click.argument("dataset", type=click.Path(path_type=Path, exists=True, file_okay=False))
def compact(dataset: Path) -> None:
    """Fold DATASET's operator and whole-model shards into one zstd shard per folder (same rows,
    same order): what a long sweep leaves is many small shards, nearly twice the bytes in git."""
    from collectors.shards import model_run_store, op_store
    from predictor.model_run_schema import MODEL_RUNS_FOLDER, NAS_RUNS_FOLDER

    stores = [op_store(dataset / "ops"), model_run_store(dataset / MODEL_RUNS_FOLDER),
              model_run_store(dataset / NAS_RUNS_FOLDER)]
    for store in stores:
        if store.shards():
            try:
                before, rows = store.compact()
            except ValueError as exc:
                _fail(exc)
            click.echo(f"{store.directory}: {before} shard(s) -> 1, {rows} rows")


@commands.group()
def host() -> None:
    """Probe this host's per-call costs: the host profile eager predictions are made for."""


@host.command()
@click.option("--device", type=DEVICE_CHOICE, default="auto", show_default=True,
              help="the device the probe issues to (auto: the GPU if there is one)")
@click.option("--cpu-only", is_flag=True,
              help="no GPU or torch here: estimate a profile from this CPU's single-thread speed, scaling the "
                   "reference (labelled 'estimated', with wider intervals)")
@click.option("--reference", default=None, metavar="PROFILE.json|ID",
              help="with --cpu-only: the measured profile to scale (default: the one the shipped bundle names)")
@click.option("--note", default=None, help="the conditions the probe runs under, kept in the profile")
@click.option("--no-references", is_flag=True,
              help="skip the reference forwards (a few seconds on a GPU): predictions use the profile's costs "
                   "as probed either way; without the forwards nothing can say where they disagree with them, "
                   "nor calibrate them (Predictor(calibrate_hosts=True), latpred validate --references)")
@click.option("--budget-s", type=click.FloatRange(min=1.0, max=600.0), default=None,
              help="seconds the command may take, from its process's start [default: 15]: on a slow or shared "
                   "core a probe keeps fewer reference forwards within 15 s (its note says how many); give it "
                   "more to keep them all")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="write the profile here (default: print it)")
@click.option("--save", is_flag=True, help="also store it where 'latpred predict --host ID' finds it")
def probe(device: str, cpu_only: bool, reference: str | None, note: str | None, no_references: bool,
          budget_s: float | None, out: Path | None, save: bool) -> None:
    """Measure this host's profile, with the six fp32 reference forwards a calibration reads
    (10-15 s on the H200 when it timed all 18, Python's and CUDA's start-up included: within
    --budget-s of the process's start, reference forwards whose warm-up would start too late to
    end in it are left out, bar one of each architecture), or estimate it without a GPU."""
    from collectors.process_clock import command_started

    started = command_started()  # Python's start, torch, the GPU's fingerprint, CUDA's: all in the budget
    if cpu_only and no_references:
        raise click.UsageError("--no-references is for a measured probe: a CPU-only estimate times no forwards")
    if cpu_only and budget_s is not None:
        raise click.UsageError("--budget-s is for a measured probe: a CPU-only estimate takes a tenth of a second")
    if out is not None and not out.parent.is_dir():  # said before the probe, not after it
        raise click.BadParameter(f"{out.parent} is not a folder", param_hint="--out")
    try:
        profile = (_estimated_profile(reference, note) if cpu_only
                   else _measured_profile(device, note, references=not no_references, started=started,
                                          budget_s=budget_s))
        if save:  # the store's module loads the bundle's (pandas): a second of a contended probe, so only here
            from predictor.host_lookup import user_store

            try:
                user_store().put(profile)
            except OSError as exc:  # (LATPRED_HOSTS_DIR a file, or not writable): the profile is still printed
                click.echo(profile.model_dump_json(indent=1))
                raise click.ClickException(f"--save: the profile could not be stored in {user_store().directory} "
                                           f"({exc.strerror or exc}); it is printed above") from None
    except (ValueError, KeyError, RuntimeError) as exc:
        _fail(exc)
    text = profile.model_dump_json(indent=1)
    if out is None:
        click.echo(text)
    else:
        try:
            out.write_text(text + "\n")
        except OSError as exc:
            click.echo(text)
            raise click.ClickException(f"--out {out}: {exc.strerror or exc}; the profile is printed above") from None
        click.echo(f"host profile {profile.id} written to {out} ({time.perf_counter() - started:.1f} s)", err=True)
    if save:
        click.echo(f"saved as {profile.id}: latpred predict ... --mode eager --host {profile.id}", err=True)
    if not cpu_only and profile.gpu is None:
        click.echo("note: probed without a GPU, so this profile times this CPU's own operators: what a CPU "
                   "device's eager forward reads. A GPU's eager forward predicted for it is estimated from its CPU "
                   "score, as --cpu-only does", err=True)
    from predictor.host_spread import unsteady_warning

    if (unsteady := unsteady_warning(profile)) is not None:  # said now, where the user can probe again
        click.echo(f"warning: {unsteady}", err=True)


def _measured_profile(device: str, note: str | None, references: bool = True,
                      started: float | None = None, budget_s: float | None = None) -> Any:
    """A probe of ``device`` whose budget (``budget_s``, by default PROBE_BUDGET_S) counts from
    ``started`` (default: now; the command passes its process's start): on the H200, Python's
    start, the imports, torch's among them, and the GPU's fingerprint took 4-5 s before the probe
    as is and 8-10 s on a contended core (benchmarks/results/probe_phases.txt), and a user waits
    for all of it."""
    from collectors.fingerprint import read_fingerprint
    from collectors.host_probe import PROBE_BUDGET_S, probe as run_probe

    started = time.perf_counter() if started is None else started
    kind = read_fingerprint(device).kind
    return run_probe("cuda" if kind == "cuda" else "cpu", note, references=None if references else (),
                     budget_s=(PROBE_BUDGET_S if budget_s is None else budget_s) - (time.perf_counter() - started))


def _estimated_profile(reference: str | None, note: str | None) -> Any:
    from collectors.host_probe import estimate_here
    from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle, bundle_dirs
    from predictor.host_lookup import resolve_host, user_store
    from predictor.predict import default_host

    bundles = [Bundle.load(d) for d in bundle_dirs(DEFAULT_BUNDLE_DIR).values()]
    if reference is None:
        found = [h for h in (default_host(b) for b in bundles) if h is not None]
        # a GPU's host first: the estimate stands for a host issuing a GPU's kernels, which a CPU
        # device's profile (its calls compute on the CPU) does not time
        found.sort(key=lambda h: h.times_gpu_launches is not True)
        if not found:
            raise ValueError("no shipped bundle names a host profile to scale: give one with --reference")
        return estimate_here(found[0], note)
    if not bundles:
        from predictor.host_profile import load_profile

        return estimate_here(load_profile(Path(reference)), note)
    return estimate_here(resolve_host(reference, bundles, [user_store()]), note)
