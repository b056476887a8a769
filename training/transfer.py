"""The transfer model: kernel times on a GPU never measured, predicted from its datasheet.

One kernel model is fitted on the operator rows of every measured GPU at once (the H200 and its
green-context partitions, the H100 and one partition of it: ``GPU_DATASETS``). The device enters
through its specs: every call's features (its roofline from the peak rate of its precision and the
memory bandwidth, the waves its tiles make over the SMs, whether its bytes fit in L2) are computed
on the device's *datasheet* ceilings, since a device never measured has nothing else, so every
device is put on that one basis (``DeviceSpec.datasheet_spec``). Its roofline reads a call whose
bytes fit in L2 at the L2's bandwidth, sized from the SMs and the boost clock
(``DeviceSpec.memory_seconds``; the bundle says ``l2_roofline``): charged the HBM's, such calls made
the H100 (3.35 TB/s) look 1.14x slower than it runs beside the H200 (4.8 TB/s), with which it shares
SMs and clock; left out, 15.8% -> 8.4% whole-model MAPE (a development figure: the idea came from
that miss), the 72-SM partition 7.8% -> 6.3%. The target is what a one-device bundle learns, the
kernel time as a ratio to that roofline: a faster memory or more FLOP/s scale a prediction through
the roofline, and the trees learn how far from it kernels run. The specs were also tried as columns
of their own (SMs, bandwidth, L2, peak rates): held-out partitions came out worse (sm104 8.6%
against 7.9% whole-model MAPE, sm40 11.5% against 9.9%): with three distinct SM counts to split on,
trees cut between them as steps, while the spec-derived features vary smoothly. A launch floor of 2
us added to the roofline in the target (so that a tiny kernel would not scale with a slow device's
roofline) was tried too: sm40's kernels improved (16.8% to 10.9% MAPE) but its whole models did not
(9.9% to 10.9%; sm104 7.9% to 7.7%), so it was left out.

What the measured devices can teach, and what they cannot: a partition differs from its GPU in
SMs alone (a green context does not partition memory, bandwidth or L2; their datasheet figures
are derived from how the H200's 40- and 104-SM partitions scaled, see the catalog), and the H100
from the H200 in HBM and L2 alone, so the trees learn how kernels follow the SM count, from 40 to
132 SMs, and from two points how they follow bandwidth and L2. How they follow another
architecture is the roofline's assumption, not something measured here; a transferred device's
interval is widened by ``UNMEASURED_ARCHITECTURE_LOG`` for that, a prior rather than a fit.

Composition: each measured device gets CUDA-graph constants fitted on its own zoo runs (and its
interval from them, leave-one-model-out, and from its nas-dev runs where it has them); a device
never measured gets the constants fitted on every measured device's runs together, and the
interval of leave-one-device-out validation (each device but the H200 predicted by models fitted
without its rows and runs) widened as above. Eager
composition is the host's (issue #12): its shares come from the H200's eager runs, and every
device is issued by the host profile asked for (the H200 bundle's by default).

``latpred transfer`` fits it, scores leave-one-device-out and writes the bundle
(``predictor/bundles/transfer``), which the service and the CLI use for every catalog GPU
without a bundle of its own.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.compose import CompositionConstants
from predictor.device_bundles import TRANSFER_BUNDLE
from predictor.devices import DeviceSpec
from predictor.graph import Graph
from predictor.host_profile import HostProfile
from predictor.predict import Predictor
from training.bundle_export import export_bundle, in_memory_bundle
from training.composition import (
    RunArrays,
    fit_constants,
    fit_graph_constants,
    held_out_constants,
    predict_run,
    run_arrays,
)
from training.data import OpData, dataset_fingerprint, dataset_hash, load_model_runs, load_ops
from training.datasets_dir import DATASETS_DIR
from training.fit import FitResult, fit_target, refit_on_all_rows
from training.hosts import BundleHosts, bundle_hosts, reference_profiles
from training.metrics import ape, summarize_ape
from training.ops_check import predicted_kernel_us
from training.suites import DEFAULT_SUITES_DIR, nas_dev_arrays, nas_train_arrays
from training.train import zoo_graphs

#: the measured GPUs' datasets the transfer model is fitted on
GPU_DATASETS = tuple(DATASETS_DIR / d for d in
                     ("nvidia-h200", "nvidia-h200-sm104", "nvidia-h200-sm72", "nvidia-h200-sm40",
                      "nvidia-h100-80gb-hbm3", "nvidia-h100-80gb-hbm3-sm72"))
#: where the bundle goes (one folder beside the one-device bundles)
BUNDLE_NAME = TRANSFER_BUNDLE
#: whether this model's roofline reads what fits in L2 at the L2's bandwidth: the bundle records it
#: (``Bundle.l2_roofline``), so its features are computed at prediction as they were fitted
L2_ROOFLINE = True


def transfer_basis(device: DeviceSpec) -> DeviceSpec:
    """The spec a device's operator rows are featurized on for this model: its datasheet, with the
    L2 roofline (what ``Bundle.feature_spec`` gives for the bundle this writes)."""
    return device.datasheet_spec(l2_roofline=L2_ROOFLINE)


#: Half the leaves of a one-device bundle's trees, and half its trees: fitted on 155,000 rows it
#: scored as well on held-out devices (below) in a quarter of the size, and every byte is committed.
KERNEL_PARAMS: dict[str, Any] = {"num_leaves": 63}
KERNEL_SCALE = 0.5


def device_weights(rows: pd.DataFrame) -> np.ndarray:
    """Per row, sqrt(rows of the largest device / rows of its device): the partitions' 4,000 rows
    each beside the H200's 141,000 would barely move the trees' splits on the device columns, while
    weighting every device alike would let 4,000 rows outvote the 141,000 on everything else."""
    counts = rows["device_id"].map(rows["device_id"].value_counts())
    return np.sqrt(counts.max() / counts.to_numpy(dtype=float))
#: The interval allowance of a device whose architecture no measured device shares: published
#: cross-GPU predictors land 0.4% to 28% off on GPUs they never saw (NeuSight), and nothing here
#: measures how far ours lands, so a prior of log(1.25) is added to the half-width. Not fitted.
UNMEASURED_ARCHITECTURE_LOG = math.log(1.25)


@dataclass
class MeasuredDevice:
    """One measured GPU: its spec, operator rows (transfer features) and zoo runs with their graphs."""

    dataset: Path
    spec: DeviceSpec
    ops: OpData
    runs: pd.DataFrame
    graphs: dict[str, Graph]
    hosts: dict[str, HostProfile]

    @property
    def device_id(self) -> str:
        return self.spec.device_id


def load_device(dataset: Path, limit: int | None = None, seed: int = 0) -> MeasuredDevice:
    """A measured GPU's dataset, read for the transfer model (``limit``: a random sample of its
    operator rows, for tests)."""
    ops = load_ops(dataset, limit=limit, seed=seed, basis=transfer_basis)
    runs = load_model_runs(dataset)
    return MeasuredDevice(Path(dataset), ops.device, ops, runs, zoo_graphs(sorted(runs["model"].unique())),
                          reference_profiles(dataset))


def pooled(datas: Sequence[OpData]) -> OpData:
    """Operator rows of several devices as one training set. Shape groups stay device-blind, so
    the held-out fold holds each of its shapes on every device at once: no shape is learned on
    one GPU and scored on another."""
    return OpData(
        rows=pd.concat([d.rows for d in datas], ignore_index=True),
        features=pd.concat([d.features for d in datas], ignore_index=True),
        groups=pd.concat([d.groups for d in datas], ignore_index=True),
        device=datas[0].device,
        host_cost_us=np.concatenate([d.host_cost_us for d in datas]),
    )


@dataclass
class TransferSettings:
    datasets: tuple[Path, ...] = GPU_DATASETS
    bundle_root: Path = DEFAULT_BUNDLE_DIR
    threads: int = 2
    seed: int = 0
    scale: float = 1.0
    suites: Path = DEFAULT_SUITES_DIR
    #: operator rows read per device (None: all; a sample for tests)
    limit: int | None = None
    #: devices scored leave-one-device-out (default: every measured device but the first, the
    #: H200: without its rows only fp16 rows of the partitions would be left)
    holdouts: tuple[str, ...] | None = None
    say: Callable[[str], None] = field(default=lambda line: None)


def fit_models(data: OpData, settings: TransferSettings) -> dict[str, FitResult]:
    """The kernel model (per-family LightGBM) and the dispatch model (one LightGBM, as a one-device
    bundle's: dispatch is the host's), each scored on held-out shapes and then refitted on every row."""
    fits = {}
    weight = device_weights(data.rows)
    for target, structure, scale, params in (("kernel", "per_family", KERNEL_SCALE * settings.scale, KERNEL_PARAMS),
                                             ("dispatch", "single", settings.scale, None)):
        fit = fit_target(data, target, "lightgbm", settings.threads, settings.seed, scale, structure, params, weight)
        fits[target] = refit_on_all_rows(data, fit, settings.threads, settings.seed, scale, params, weight)
    return fits


def memory_bundle(fits: dict[str, FitResult], measured: Sequence[str]) -> Bundle:
    """The fitted models as a transfer bundle in memory, measured on ``measured``."""
    return in_memory_bundle(BUNDLE_NAME, fits, {"transfer": {"devices": {d: {} for d in measured},
                                                             "l2_roofline": L2_ROOFLINE}})


@dataclass
class DeviceArrays:
    """A device's runs predicted layer by layer: its zoo runs, and the NAS training architectures'
    runs where its dataset has them (a one-device bundle's composition fits on both; the transfer
    bundle shipped was fitted before their eager runs joined)."""

    zoo: list[RunArrays]
    nas_train: list[RunArrays]
    #: nas-dev's runs where asked for and measured: the interval's calibration, never fitted
    nas_dev: list[RunArrays] = field(default_factory=list)

    @property
    def fitted(self) -> list[RunArrays]:
        """What composition constants are fitted on."""
        return self.zoo + self.nas_train


def device_arrays(bundle: Bundle, device: MeasuredDevice, suites: Path, with_nas_dev: bool = False) -> DeviceArrays:
    """Every run of ``device`` predicted layer by layer with ``bundle`` (nas-dev's too where
    ``with_nas_dev``: the shipped composition's interval is calibrated on them, a fold's is not)."""
    predictor = Predictor(bundle, device.spec)
    return DeviceArrays(run_arrays(predictor, device.graphs, device.runs, device.hosts),
                        nas_train_arrays(predictor, device.dataset, suites),
                        nas_dev_arrays(predictor, device.dataset, suites) if with_nas_dev else [])


def kernel_errors(fits: dict[str, FitResult], device: MeasuredDevice) -> pd.DataFrame:
    """Per operator row of ``device``: family, measured and predicted kernel time (us)."""
    predicted = predicted_kernel_us(memory_bundle(fits, []).targets["kernel"], device.ops)
    return pd.DataFrame({"family": device.ops.rows["family"].to_numpy(), "measured_us":
                         device.ops.rows["kernel_us"].to_numpy(dtype=float), "predicted_us": predicted})


def run_table(device_id: str, arrays: Sequence[RunArrays], constants: CompositionConstants) -> pd.DataFrame:
    """Measured against predicted latency of each CUDA-graph run (eager runs belong to the host)."""
    return pd.DataFrame([{"device": device_id, "model": r.model, "batch": r.batch, "precision": r.precision,
                          "mode": r.mode, "measured_ms": r.measured_us / 1e3,
                          "predicted_ms": predict_run(r, constants) / 1e3}
                         for r in arrays if r.mode == "cudagraph"])


def graph_only(runs: Sequence[RunArrays]) -> list[RunArrays]:
    return [r for r in runs if r.mode == "cudagraph"]


def leave_one_device_out(devices: Sequence[MeasuredDevice], held: str,
                         settings: TransferSettings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit the models on every device's rows but ``held``'s and the constants on the others' runs,
    then predict ``held``: (its operator rows, its whole-model CUDA-graph runs), measured against
    predicted. What a device never measured gets, scored where the truth is known."""
    train = [d for d in devices if d.device_id != held]
    target = next(d for d in devices if d.device_id == held)
    fits = fit_models(pooled([d.ops for d in train]), settings)
    bundle = memory_bundle(fits, [d.device_id for d in train])
    constants = fit_constants([r for d in train for r in graph_only(device_arrays(bundle, d, settings.suites).fitted)])
    predicted = run_table(held, device_arrays(bundle, target, settings.suites).zoo, constants)
    return kernel_errors(fits, target), predicted


def interval_half_width(table: pd.DataFrame) -> float:
    """The 90% quantile of |log(predicted / measured)|: a 90% interval's half-width in log space."""
    ratio = table["predicted_ms"].to_numpy(dtype=float) / table["measured_ms"].to_numpy(dtype=float)
    return float(np.quantile(np.abs(np.log(ratio)), 0.9))


def device_composition(arrays: DeviceArrays, general: CompositionConstants,
                       eager_interval: float) -> tuple[dict[str, Any], pd.DataFrame]:
    """A measured device's own composition: CUDA-graph constants fitted on its runs (eager ones
    are the host's, from ``general``), its interval from its zoo runs leave-one-model-out and its
    captured nas-dev runs (``arrays.nas_dev``, in no fit) predicted by those constants, as
    a one-device bundle's is (training.composition.leave_one_model_out); and the zoo's table. The
    H100's interval from its zoo alone (x1.12) covered 61% of its nas-test runs."""
    runs = graph_only(arrays.zoo)
    g = fit_graph_constants(graph_only(arrays.fitted))
    own = replace(general, group_scale=g.group_scale, gap_us=g.gap_us, short_kernel_share=g.short_kernel_share,
                  replay_us=g.replay_us, cold_weight_share=g.cold_weight_share)
    held = held_out_constants(runs, graph_only(arrays.nas_train))
    table = pd.DataFrame([{"model": r.model, "batch": r.batch, "precision": r.precision, "mode": r.mode,
                           "measured_ms": r.measured_us / 1e3, "predicted_ms": predict_run(r, held[r.model]) / 1e3}
                          for r in runs])
    calibrated = pd.DataFrame([{"measured_ms": r.measured_us / 1e3, "predicted_ms": predict_run(r, own) / 1e3}
                               for r in graph_only(arrays.nas_dev)], columns=["measured_ms", "predicted_ms"])
    interval = interval_half_width(pd.concat([table[["measured_ms", "predicted_ms"]], calibrated], ignore_index=True))
    return {"constants": own.as_dict(), "interval_log": {"cudagraph": interval, "eager": eager_interval}}, table


@dataclass
class TransferReport:
    bundle_dir: Path
    #: leave-one-device-out, per held-out device: operator rows and whole-model runs
    held_out_ops: pd.DataFrame
    held_out_runs: pd.DataFrame
    #: each measured device's runs leave-one-model-out with its own constants
    own_runs: pd.DataFrame
    metadata: dict[str, Any]
    seconds: float


def measured_holdouts(holdouts: Sequence[str], datasets: Sequence[Path]) -> tuple[str, ...]:
    """The devices asked to be held out (by id or part of a name, as everywhere), each one of the
    measured datasets': checked before the minute it takes to load them (an unknown one was a
    StopIteration traceback after it)."""
    from predictor.devices import resolve_device

    measured = [dataset_fingerprint(Path(d))["device_id"] for d in datasets]
    ids = []
    for asked in holdouts:
        try:
            device_id = resolve_device(asked).device_id
        except ValueError as exc:
            raise ValueError(f"--holdout {asked!r}: {exc}") from None
        if device_id not in measured:
            raise ValueError(f"--holdout {asked!r}: {device_id} is not one of the measured devices the transfer "
                             f"model is fitted across ({', '.join(measured)})")
        ids.append(device_id)
    return tuple(dict.fromkeys(ids))


def train_transfer(settings: TransferSettings) -> TransferReport:
    """Score leave-one-device-out, fit on every measured GPU, write the bundle."""
    started = time.perf_counter()
    say = settings.say
    asked = None if settings.holdouts is None else measured_holdouts(settings.holdouts, settings.datasets)
    devices = [load_device(d, settings.limit, settings.seed) for d in settings.datasets]
    say("devices: " + ", ".join(f"{d.device_id} ({len(d.ops.rows):,} rows, {len(d.runs)} runs)" for d in devices))
    holdouts = asked if asked is not None else tuple(d.device_id for d in devices[1:])
    ops_tables, run_tables = [], []
    for held in holdouts:
        ops, runs = leave_one_device_out(devices, held, settings)
        ops_tables.append(ops.assign(device=held))
        run_tables.append(runs)
        errors = ape(runs["predicted_ms"], runs["measured_ms"])
        say(f"held out {held}: whole models MAPE {errors.mean():.1%}, within ±10% {(errors <= 0.1).mean():.0%}; "
            f"kernels MAPE {ape(ops['predicted_us'], ops['measured_us']).mean():.1%}")
    held_out_ops = pd.concat(ops_tables, ignore_index=True) if ops_tables else pd.DataFrame()
    held_out_runs = pd.concat(run_tables, ignore_index=True) if run_tables else pd.DataFrame()

    fits = fit_models(pooled([d.ops for d in devices]), settings)
    bundle = memory_bundle(fits, [d.device_id for d in devices])
    arrays = {d.device_id: device_arrays(bundle, d, settings.suites, with_nas_dev=True) for d in devices}
    general = fit_constants([r for a in arrays.values() for r in a.fitted])  # eager: the H200's runs
    h200 = devices[0]
    hosts = bundle_hosts(h200.runs, h200.hosts, h200.dataset)
    profiles = _host_profiles(Path(settings.bundle_root) / h200.device_id, hosts)
    eager_lomo = _eager_interval(arrays[h200.device_id], h200.device_id)
    transferred_interval = (interval_half_width(held_out_runs) if len(held_out_runs) else 0.25) \
        + UNMEASURED_ARCHITECTURE_LOG
    per_device, own_tables = {}, []
    for d in devices:
        per_device[d.device_id], table = device_composition(arrays[d.device_id], general, eager_lomo)
        own_tables.append(table.assign(device=d.device_id))
    metrics = _metrics(held_out_ops, held_out_runs)
    metadata = {
        "version": time.strftime("%Y%m%d-%H%M%S", time.gmtime()),
        "dataset_hashes": {d.device_id: dataset_hash(d.dataset) for d in devices},
        "rows": {d.device_id: len(d.ops.rows) for d in devices},
        "metrics": metrics,
        "composition": {"constants": general.as_dict(),
                        "interval_log": {"cudagraph": transferred_interval,
                                         "eager": eager_lomo + UNMEASURED_ARCHITECTURE_LOG},
                        "estimated_host_extra_log": hosts.estimated_extra_log,
                        "unmeasured_architecture_log": UNMEASURED_ARCHITECTURE_LOG},
        "transfer": {"devices": per_device, "trained_on": [d.device_id for d in devices],
                     "held_out": list(holdouts), "l2_roofline": L2_ROOFLINE},
        **profiles,
    }
    for composition in per_device.values():
        composition["estimated_host_extra_log"] = hosts.estimated_extra_log
    bundle_dir = export_bundle(Path(settings.bundle_root) / BUNDLE_NAME, BUNDLE_NAME, fits, metadata)
    Bundle.load(bundle_dir)  # refuse to report success on a bundle that does not load
    return TransferReport(bundle_dir, held_out_ops, held_out_runs,
                          pd.concat(own_tables, ignore_index=True), metadata, time.perf_counter() - started)


def _host_profiles(own_bundle: Path, hosts: BundleHosts) -> dict[str, Any]:
    """The host profiles the bundle carries: the first device's own bundle's where it has one (an
    eager forward on any device is issued by the host that measured the H200's runs, and one id
    must name one profile wherever it is served: recomputed means differ in their last bits), else
    those its dataset gives."""
    try:
        metadata = json.loads((own_bundle / "metadata.json").read_text())
        return {"host_profile": metadata["host_profile"], "host_profiles": metadata["host_profiles"]}
    except (OSError, ValueError, KeyError):
        return {"host_profile": hosts.default.model_dump(mode="json"),
                "host_profiles": {p.id: p.model_dump(mode="json") for p in hosts.known}}


def _eager_interval(arrays: DeviceArrays, device_id: str) -> float:
    """The eager interval half-width of the device whose eager runs the host shares are fitted on
    (the H200), leave-one-model-out on its zoo runs, each from the host profile probed beside it."""
    held = held_out_constants(arrays.zoo, arrays.nas_train)
    table = pd.DataFrame([{"measured_ms": r.measured_us, "predicted_ms": predict_run(r, held[r.model])}
                          for r in arrays.zoo if r.mode == "eager" and r.host is not None])
    if table.empty:
        raise ValueError(f"{device_id} has no eager run with a host profile: the transfer bundle's eager "
                         "composition needs the H200's")
    return interval_half_width(table)


def _metrics(ops: pd.DataFrame, runs: pd.DataFrame) -> dict[str, float]:
    """Leave-one-device-out figures, overall and per held-out device."""
    metrics: dict[str, float] = {}
    for device, table in [("all", runs), *runs.groupby("device")] if len(runs) else []:
        for k, v in summarize_ape(ape(table["predicted_ms"], table["measured_ms"])).items():
            metrics[f"lodo_{device}_models_{k}"] = float(v)
    for device, table in [("all", ops), *ops.groupby("device")] if len(ops) else []:
        for k, v in summarize_ape(ape(table["predicted_us"], table["measured_us"])).items():
            metrics[f"lodo_{device}_kernels_{k}"] = float(v)
    return metrics


def write_tables(report: TransferReport, out: Path) -> None:
    """The validation's tables as CSV under ``out`` (held-out devices, measured devices' own runs)
    and the metrics as JSON."""
    out.mkdir(parents=True, exist_ok=True)
    report.held_out_ops.to_csv(out / "held_out_ops.csv", index=False)
    report.held_out_runs.to_csv(out / "held_out_runs.csv", index=False)
    report.own_runs.to_csv(out / "own_runs.csv", index=False)
    (out / "metrics.json").write_text(json.dumps(report.metadata["metrics"], indent=1, sort_keys=True))


def report_text(held_out_ops: pd.DataFrame, held_out_runs: pd.DataFrame, own_runs: pd.DataFrame) -> str:
    """The validation as ``latpred transfer`` prints it: each held-out device's whole-model runs
    (MAPE, share within +-10%, median predicted/measured, MAPE per batch), its kernels' MAPE per
    family, and each measured device's own runs leave-one-model-out."""
    def errors(table: pd.DataFrame, predicted: str, measured: str) -> pd.Series:
        return (table[predicted] / table[measured] - 1).abs()

    lines = ["leave one device out: fitted without the device's operator rows and runs, as a device never "
             "measured is (CUDA graph, batch 1/8/32, the precisions of the device's runs)"]
    rows = []
    for device, table in held_out_runs.groupby("device") if len(held_out_runs) else []:
        e = errors(table, "predicted_ms", "measured_ms")
        by_batch = table.assign(e=e).groupby("batch")["e"].mean()
        rows.append({"device": device, "precisions": ",".join(sorted(table["precision"].unique())),
                     "runs": len(table), "MAPE": e.mean(), "within 10%": (e <= 0.1).mean(),
                     "median pred/meas": (table["predicted_ms"] / table["measured_ms"]).median(),
                     **{f"MAPE b{b}": v for b, v in by_batch.items()}})
    if rows:
        lines.append(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if len(held_out_ops):
        e = errors(held_out_ops, "predicted_us", "measured_us")
        per_family = held_out_ops.assign(e=e).pivot_table(index="family", columns="device", values="e",
                                                          aggfunc="mean")
        lines += ["", "kernel time, MAPE per family (the device's own operator rows, which no fit saw; the same "
                      "shapes were measured on the other devices)",
                  per_family.to_string(float_format=lambda v: f"{v:.3f}"),
                  "all: " + ", ".join(f"{d} {v:.3f}" for d, v in held_out_ops.assign(e=e).groupby("device")["e"]
                                      .mean().items())]
    own = []
    for device, table in own_runs.groupby("device"):
        e = errors(table, "predicted_ms", "measured_ms")
        own.append({"device": device, "runs": len(table), "MAPE": e.mean(), "within 10%": (e <= 0.1).mean()})
    lines += ["", "each measured device's own runs, leave-one-model-out (the models fitted on its rows: a "
                  "development figure)", pd.DataFrame(own).to_string(index=False, float_format=lambda v: f"{v:.3f}")]
    return "\n".join(lines)
