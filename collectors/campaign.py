"""One device's dataset on disk, and the collection steps that fill it.

Layout under ``<root>/<device_id>/``: ``ops/`` and ``models/`` hold the live parquet shards
(operator rows, and whole-model runs of the one protocol), ``nas/`` the NAS suite's whole-model
runs (the same protocol and schema; training fits on nas-train's and calibrates on nas-dev's),
``archive/<name>/`` whole-model runs a later measurement superseded (kept for comparison, read by nothing in training),
``hosts/`` the host profiles probed at the start and end of every sweep and run (rows name the
one probed before them), ``fingerprint.json`` the device, ``sweep_log.jsonl`` one line per collection run (what the
dataset card's rates and device time are computed from), ``README.md`` the card. The
layer-shape catalogue ``<root>/layer_shapes.json`` is shared by every device.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from collectors.fingerprint import DeviceFingerprint, open_nvml, read_fingerprint
from collectors.host_probe import RoundSampler, run_profile
from collectors.layer_shapes import load_shapes
from collectors.model_build import ModelSource
from collectors.model_runs import MODEL_BATCHES, MODEL_PRECISIONS, PROTOCOL, ModelUnit, failed_row, measure_models
from collectors.nas_space import NasModel, model_name, seed_of
from collectors.op_measure import OpMeasurer
from collectors.sampler import SamplerSettings, sample_configs
from collectors.shards import model_run_store, op_store
from collectors.sweep import SweepReport, run_sweep
from collectors.timing import make_timer
from collectors.zoo_models import get_zoo_model
from predictor.host_profile import HOSTS_FOLDER, HostProfile, HostStore
from predictor.model_run_schema import MODEL_RUNS_FOLDER, MODES, NAS_RUNS_FOLDER
from predictor.precision import get_precision

SHAPES_FILE = "layer_shapes.json"


class Campaign:
    """Paths and stores of one device's dataset folder."""

    def __init__(self, root: Path, fingerprint: DeviceFingerprint) -> None:
        self.root = Path(root)
        self.fp = fingerprint
        self.directory = self.root / fingerprint.device_id
        self.ops = op_store(self.directory / "ops")
        self.models = model_run_store(self.directory / MODEL_RUNS_FOLDER)
        self.nas = model_run_store(self.directory / NAS_RUNS_FOLDER)
        self.hosts = HostStore(self.directory / HOSTS_FOLDER)

    @property
    def probe_device(self) -> str:
        """What the host probe issues to: the GPU, or the CPU of a CPU-only device."""
        return "cuda" if self.fp.kind == "cuda" else "cpu"

    def probe_host(self, note: str | None = None, say: Callable[[str], None] = lambda line: None) -> HostProfile:
        """Probe the host issuing to this device (collectors.host_probe) and store the profile
        beside the data: eager rows are only as good as knowing which host measured them."""
        from collectors.host_probe import probe

        profile = probe(self.probe_device, note)
        self.hosts.put(profile)
        costs = ", ".join(f"{k} {v:.2f}" for k, v in profile.costs_us.items())
        steadiness = f"; forwards spread {profile.forward_spread:.2f}x" if profile.forward_spread else ""
        say(f"host {profile.id} ({profile.probe_seconds:.1f} s): {costs} us{steadiness}")
        return profile

    def round_sampler(self) -> RoundSampler:
        """What samples the host between a whole-model run's rounds (collectors.host_probe)."""
        return RoundSampler(self.probe_device)

    def run_host(self, before: HostProfile, after: HostProfile, sampler: RoundSampler, rows: list[dict[str, Any]],
                 note: str | None = None, say: Callable[[str], None] = lambda line: None) -> HostProfile:
        """Store the run's profile (its probes and the samples between its rounds) and name it in
        every one of ``rows``: what the rounds saw of the host, which a pair of probes alone can miss."""
        profile = run_profile(before, after, sampler.samples, note, sampler.reference_samples,
                              sampler.reference_timings)
        self.hosts.put(profile)
        if profile.forward_spread is not None:
            say(f"run host {profile.id}: reference forwards spread {profile.forward_spread:.2f}x through its rounds")
        for row in rows:
            row["host_profile"] = profile.id
        return profile

    def record_fingerprint(self) -> None:
        """Write the device fingerprint beside the data (kept current across resumed runs)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "fingerprint.json").write_text(json.dumps(self.fp.as_dict(), indent=1))

    def log(self, kind: str, report: SweepReport, settings: dict[str, Any]) -> None:
        """Append one sweep run's report to the log the dataset card reads."""
        entry = {"kind": kind, "finished": pd.Timestamp.now(tz="UTC").isoformat(), **asdict(report),
                 "per_second": report.per_second, "settings": settings}
        with open(self.directory / "sweep_log.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")


def require_validation() -> None:
    """Fail before measuring, not at the first flush, where shards cannot be validated."""
    try:
        import pandera.pandas  # noqa: F401
    except ImportError:
        raise RuntimeError("pandera is not installed, so no shard could be validated and written: "
                           "install latpred[collect] (on a machine without a registry, carry its "
                           "wheels: see the README)") from None


def shapes_path(root: Path) -> Path:
    return Path(root) / SHAPES_FILE


def collect_ops(root: Path, device: str, settings: SamplerSettings, budget_s: float | None,
                flush_every: int = 1000, progress: bool | None = None, host_note: str | None = None,
                say: Callable[[str], None] = lambda line: None) -> SweepReport:
    """Sample the configurations for ``settings`` and measure those not yet on disk, with the
    host probed before (every row names that profile) and after (the drift, in the log)."""
    require_validation()
    path = shapes_path(root)
    if not path.exists():
        raise FileNotFoundError(
            f"no layer-shape catalogue at {path}: run 'latpred collect shapes' (needs torchvision "
            "and transformers) or point --out at a dataset root that has one"
        )
    fp = read_fingerprint(device)
    campaign = Campaign(root, fp)
    campaign.record_fingerprint()
    configs = sample_configs(load_shapes(path), settings)
    before = campaign.probe_host(host_note, say)
    measurer = OpMeasurer(fp, make_timer(fp.kind), open_nvml() if fp.kind == "cuda" else None,
                          seed=settings.seed, host_profile=before.id)
    report = run_sweep(configs, campaign.ops, measurer, flush_every=flush_every,
                       budget_s=budget_s, progress=progress, description=f"ops on {fp.device_id}")
    try:
        probes = [before.id, campaign.probe_host(host_note, say).id]
    except KeyboardInterrupt:  # a second Ctrl-C: the rows are on disk, and the log still says what was done
        probes = [before.id]
    campaign.log("ops", report, {**asdict(settings), "host_profiles": probes})
    return report


def _open_whole_model_campaign(root: Path, device: str,
                               modes: tuple[str, ...]) -> tuple[DeviceFingerprint, Campaign, Any]:
    """Everything checked before a whole-model run writes anything: pandera present (shards are
    validated as they are written), CUDA where graphs are captured; then the campaign with its
    fingerprint recorded, and NVML on a GPU (for the clock reasons each round records)."""
    require_validation()
    fp = read_fingerprint(device)
    if "cudagraph" in modes and fp.kind != "cuda":
        raise ValueError(f"cudagraph runs need a CUDA GPU; this device is {fp.kind}")
    campaign = Campaign(root, fp)
    campaign.record_fingerprint()
    return fp, campaign, open_nvml() if fp.kind == "cuda" else None


def collect_models(root: Path, device: str, models: list[str], batches: tuple[int, ...] = MODEL_BATCHES,
                   precisions: tuple[str, ...] = MODEL_PRECISIONS, modes: tuple[str, ...] = ("eager",),
                   rounds: int = 5, reps: int = 3, seed: int = 0, host_note: str | None = None,
                   say: Callable[[str], None] = lambda line: None) -> SweepReport:
    """Measure, per mode, the zoo models with a unit not yet on disk, in interleaved rounds: a
    shard per mode, written as soon as that mode is done, and a line in the sweep log. The host
    is probed before each mode's rounds (its rows name that profile) and after them.

    A model with any unit missing is measured whole (its units share the rounds) and only the
    missing rows are written. Everything is checked before anything is written.
    """
    batches, precisions = _check_units(modes, batches, precisions)
    models = list(dict.fromkeys(models))
    for name in models:
        get_zoo_model(name)
    fp, campaign, nvml = _open_whole_model_campaign(root, device, modes)
    done = campaign.models.completed_ids()
    planned = written = 0
    started = time.perf_counter()
    for mode in modes:
        units = [ModelUnit(m, b, p) for m in models for p in precisions for b in batches]
        missing = {u for u in units if u.run_id(mode) not in done}
        planned += len(units)
        wanted = list(dict.fromkeys(u.model for u in units if u in missing))
        if not wanted:
            continue
        mode_started = time.perf_counter()
        before = campaign.probe_host(host_note, say)
        sampler = campaign.round_sampler()
        rows = [r for r in measure_models(fp, wanted, batches, precisions, mode, rounds, reps, seed, nvml,
                                          between_rounds=sampler)
                if r["run_id"] not in done]
        after = campaign.probe_host(host_note, say)
        run = campaign.run_host(before, after, sampler, rows, host_note, say)
        campaign.models.write(rows)
        written += len(rows)
        seconds = time.perf_counter() - mode_started
        campaign.log("models", SweepReport(len(missing), len(units) - len(missing), len(rows), 0, seconds,
                                           "complete"),
                     {"protocol": PROTOCOL, "mode": mode, "models": wanted, "batches": batches,
                      "precisions": precisions, "rounds": rounds, "reps": reps, "seed": seed,
                      "host_profiles": [before.id, after.id, run.id]})
        say(f"{mode}: {len(rows)} rows in {seconds:.0f} s")
    return SweepReport(planned, planned - written, written, 0, time.perf_counter() - started, "complete")


def _check_units(modes: tuple[str, ...], batches: tuple[int, ...],
                 precisions: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)}: expected {', '.join(MODES)}")
    batches = tuple(dict.fromkeys(batches))
    if not batches or any(b < 1 for b in batches):
        raise ValueError(f"batches must be positive integers, got {batches!r}")
    return batches, tuple(dict.fromkeys(get_precision(p).name for p in precisions))


NAS_BATCHES = (1, 8, 32)
NAS_MODES = ("eager", "cudagraph")
NAS_GROUP = 24


def _measure_group(fp: DeviceFingerprint, sources: dict[str, ModelSource], batches: tuple[int, ...],
                   precisions: tuple[str, ...], mode: str, rounds: int, reps: int, seed: int, nvml: Any,
                   say: Callable[[str], None], between_rounds: Callable[[], object] | None = None
                   ) -> list[dict[str, Any]]:
    """Rows of ``sources`` in ``mode``, interleaved; where the group fails as a whole (an
    architecture that does not build, run or capture, or memory), each architecture is measured
    on its own, and one that still fails gets 'failed' rows, so that a resumed run moves on."""
    try:
        return measure_models(fp, sources, batches, precisions, mode, rounds, reps, seed, nvml, between_rounds)
    except (RuntimeError, ValueError) as exc:
        say(f"{mode}: the group failed ({type(exc).__name__}: {str(exc)[:200]}); measuring its architectures "
            "one by one")
    _release()
    rows: list[dict[str, Any]] = []
    for name, source in sources.items():
        try:
            rows += measure_models(fp, {name: source}, batches, precisions, mode, rounds, reps, seed, nvml,
                                   between_rounds)
        except (RuntimeError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            say(f"{name} [{mode}] failed: {error[:200]}")
            rows += [failed_row(ModelUnit(name, b, p), mode, fp, source.kind, error)
                     for p in precisions for b in batches]
        _release()
    return rows


def _release() -> None:
    """Free what a measurement left (modules, captured graphs' memory pools) before the next."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def collect_nas(root: Path, device: str, seeds: list[int], batches: tuple[int, ...] = NAS_BATCHES,
                precisions: tuple[str, ...] = MODEL_PRECISIONS, modes: tuple[str, ...] = NAS_MODES,
                group: int = NAS_GROUP, rounds: int = 6, reps: int = 3, seed: int = 0,
                max_seconds: float | None = None, host_note: str | None = None,
                say: Callable[[str], None] = lambda line: None) -> SweepReport:
    """Measure the NAS architectures of ``seeds`` (``nas-<seed>``) with a unit not yet on disk,
    by the whole-model protocol, a group of ``group`` architectures at a time: within a group,
    every mode's rounds interleave all its architectures' units; the group's rows are written as
    one shard to ``<root>/<device>/nas`` as soon as it is done, with a line in the sweep log, and
    the group is freed before the next (captured graphs hold their memory until then).

    Groups are cut from ``seeds`` in order, so a resumed run makes the same groups and measures
    only what is missing (an architecture with any unit missing in a mode is measured whole in
    that mode, and only its missing rows are written). With ``max_seconds``, no group is started
    that would end past it, judged by the longest group so far: the run stops cleanly, and the
    next resumes.
    """
    batches, precisions = _check_units(modes, batches, precisions)
    if group < 1:
        raise ValueError(f"group must be at least 1, got {group}")
    seeds = list(dict.fromkeys(seeds))
    fp, campaign, nvml = _open_whole_model_campaign(root, device, modes)
    done = campaign.nas.completed_ids()
    # every unit asked for, and those on disk, whether or not a budget stops the run before its group
    planned = len(seeds) * len(precisions) * len(batches) * len(modes)
    already = sum(ModelUnit(model_name(s), b, p).run_id(mode) in done
                  for s in seeds for p in precisions for b in batches for mode in modes)
    written = failed = 0
    started = time.perf_counter()
    longest, stopped = 0.0, "complete"
    for first in range(0, len(seeds), group):
        chunk = seeds[first:first + group]
        units = {mode: [ModelUnit(model_name(s), b, p) for s in chunk for p in precisions for b in batches]
                 for mode in modes}
        missing = {mode: [u for u in units[mode] if u.run_id(mode) not in done] for mode in modes}
        on_disk = sum(len(units[m]) - len(missing[m]) for m in modes)
        if not any(missing.values()):
            continue
        elapsed = time.perf_counter() - started
        if max_seconds is not None and elapsed + longest > max_seconds:
            stopped = "budget"
            say(f"stopping before seeds {chunk[0]}-{chunk[-1]}: {elapsed:.0f} s spent, the longest group took "
                f"{longest:.0f} s, the budget is {max_seconds:.0f} s")
            break
        group_started = time.perf_counter()
        before = campaign.probe_host(host_note, say)
        sampler = campaign.round_sampler()
        rows: list[dict[str, Any]] = []
        for mode in modes:
            wanted = list(dict.fromkeys(u.model for u in missing[mode]))
            if wanted:
                sources: dict[str, ModelSource] = {name: NasModel(seed_of(name)) for name in wanted}
                rows += [r for r in _measure_group(fp, sources, batches, precisions, mode, rounds, reps, seed, nvml,
                                                   say, sampler) if r["run_id"] not in done]
                _release()
        after = campaign.probe_host(host_note, say)
        run = campaign.run_host(before, after, sampler, rows, host_note, say)
        campaign.nas.write(rows)
        seconds = time.perf_counter() - group_started
        longest = max(longest, seconds)
        bad = sum(1 for r in rows if r["status"] != "ok")
        written, failed = written + len(rows), failed + bad
        need = sum(len(m) for m in missing.values())
        campaign.log("nas", SweepReport(need, on_disk, len(rows) - bad, bad, seconds, "complete"),
                     {"protocol": PROTOCOL, "seeds": chunk, "modes": modes, "batches": batches,
                      "precisions": precisions, "rounds": rounds, "reps": reps, "seed": seed, "group": group,
                      "host_profiles": [before.id, after.id, run.id]})
        say(f"seeds {chunk[0]}-{chunk[-1]}: {len(rows)} rows ({bad} failed) in {seconds:.0f} s")
    # (the groups a budget left for a later run are planned, but neither on disk nor written)
    return SweepReport(planned, already, written - failed, failed, time.perf_counter() - started, stopped)


def collect_shapes(root: Path, device: str, models: list[str]) -> dict[str, Any]:
    """Extract the layer shapes of ``models`` (batch 1, fp32) into the shared catalogue."""
    import torch

    from collectors.layer_shapes import extract_model_shapes, merge_shapes, save_shapes

    fp = read_fingerprint(device)
    target = torch.device("cuda" if fp.kind == "cuda" else "cpu")
    per_model, failures = [], {}
    for name in models:
        zoo = get_zoo_model(name)
        try:
            with torch.device(target):
                model = zoo.build().eval()
            per_model.append((name, extract_model_shapes(model, zoo.example_input(1, target, torch.float32))))
        except Exception as exc:  # one model that will not trace must not lose the others
            failures[name] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            model = None
    shapes = merge_shapes(per_model)
    import torchvision
    import transformers

    meta = {"models": [n for n, _ in per_model], "failures": failures,
            "torch": torch.__version__, "torchvision": torchvision.__version__,
            "transformers": transformers.__version__}
    save_shapes(shapes, shapes_path(root), meta)
    return {"shapes": len(shapes), **meta}


def collect_nas_shapes(root: Path, seeds: list[int], say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Write the layer shapes of NAS architectures ``seeds`` (batch 1, their torch traces, each
    node in its own layout) as ``<root>/layer_shapes.json``: a catalogue for an operator sweep at
    the scales the NAS spaces draw, which the zoo's shapes do not reach.

    Only training seeds are accepted: a shape taken from a ``nas-dev`` or ``nas-test``
    architecture would put the suites' own layers into the per-layer models' training rows. A
    catalogue already at ``<root>`` made from other models or seeds is never replaced (the zoo's,
    ``datasets/layer_shapes.json``, sits at the default root).
    """
    import torch

    from collectors.layer_shapes import graph_shapes, merge_shapes, save_shapes
    from collectors.nas_space import TRAIN_SEEDS_FROM, format_seeds, split
    from collectors.nas_suite import trace_arch

    scored = [s for s in seeds if split(s) != "nas-train"]
    if scored:
        raise ValueError(f"seeds {format_seeds(scored)} belong to the scored suites (nas-dev, nas-test): "
                         f"a shape catalogue takes training seeds only, {TRAIN_SEEDS_FROM} and up")
    if not seeds:
        raise ValueError("no seeds given: pass --nas-seeds, e.g. 1000-1287")
    path = shapes_path(root)
    if path.exists() and json.loads(path.read_text()).get("meta", {}).get("nas_seeds") != format_seeds(seeds):
        raise ValueError(f"{path} holds another shape catalogue (not of NAS seeds {format_seeds(seeds)}): "
                         "pass --out a folder of its own")
    per_model = []
    for seed in seeds:
        graph = trace_arch(seed)
        per_model.append((model_name(seed), graph_shapes(graph)))
        say(f"{model_name(seed)} ({graph.meta['space']}): {len(per_model[-1][1])} costed nodes")
    shapes = merge_shapes(per_model)
    meta = {"nas_seeds": format_seeds(seeds), "torch": torch.__version__,
            "made_by": f"latpred collect shapes --nas-seeds {format_seeds(seeds)}"}
    save_shapes(shapes, shapes_path(root), meta)
    return {"shapes": len(shapes), **meta}
