"""A CPU as a measured device: its catalog entry, its serial eager composition, its bundles (the
H200 machine's CPU, trained on datasets/cpu-intel-r-xeon-r-processor, and this workplace's, on
datasets/cpu-amd-epyc) and what it refuses; in selection beside the GPUs."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle, BundleError
from predictor.bundle_check import smoke_test
from predictor.capacity.service_time import run_spread
from predictor.compose import CompositionConstants, compose, layer_times
from predictor.device_bundles import bundle_folder, expand_transfer, load_all
from predictor.device_catalog import validate
from predictor.devices import DEVICES, resolve_device
from predictor.host_profile import HOST_KINDS, estimate_profile
from predictor.memory import WORKSPACE_BYTES, memory_estimate
from predictor.operator_host import speed_ratio
from predictor.predict import Predictor
from predictor.selection import Z99, select
from predictor.zoo import load_zoo_graph

CPU = "cpu-intel-r-xeon-r-processor"
#: every measured CPU that ships a bundle: each must be what its own dataset fits
MEASURED_CPUS = (CPU, "cpu-amd-epyc")
DATASETS = Path(__file__).resolve().parents[2] / "datasets"

#: a CPU entry as a user's catalog would add one: no tensor cores
CPU_ENTRY = {"name": "Acme C1 (32 cores)", "provenance": "measured", "kind": "cpu", "sm_count": 32,
             "l2_bytes": 64 * 2**20, "memory_bytes": 256 * 2**30, "memory_bandwidth": 2e11, "tensor_flops": {},
             "vector_flops": 3e12, "tdp_w": 300, "source": "test"}


@pytest.fixture(scope="module")
def cpu() -> Predictor:
    return Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / CPU), resolve_device(CPU))


def test_a_cpu_entry_needs_no_tensor_cores_where_a_gpu_still_needs_fp16() -> None:
    entries = validate({"acme-c1": CPU_ENTRY}, "test")
    assert entries["acme-c1"].kind == "cpu" and entries["acme-c1"].tensor_flops == {}
    with pytest.raises(ValueError, match=r"'acme-g1': tensor_flops: fp16 is required"):
        validate({"acme-g1": {**CPU_ENTRY, "kind": "gpu"}}, "test")
    with pytest.raises(ValueError, match=r"'acme-c1': kind: "):
        validate({"acme-c1": {**CPU_ENTRY, "kind": "tpu"}}, "test")


def test_the_shipped_cpu_runs_eager_forwards_in_fp32_only() -> None:
    spec = resolve_device("xeon")
    assert spec.device_id == CPU and spec.kind == "cpu" and spec.provenance == "measured"
    assert resolve_device("epyc").device_id == "cpu-amd-epyc" and resolve_device("epyc").modes == ("eager",)
    assert spec.modes == ("eager",) and DEVICES["nvidia-h200"].modes == ("eager", "cudagraph")
    assert spec.refusal("fp32", "eager") is None
    assert str(spec.refusal("fp32", "cudagraph")).startswith("mode: ")
    assert str(spec.refusal("fp16", "eager")).startswith("precision: ")
    assert resolve_device("h200").device_id == "nvidia-h200"  # its name does not take the GPU's
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("gpu")


def test_a_serial_forward_is_the_sum_of_its_layers(cpu: Predictor) -> None:
    graph = load_zoo_graph("resnet34").at_precision("fp32", 8)
    arrays = cpu.layers(graph, 8, "fp32", "eager")
    assert cpu.constants.serial and cpu.host is not None
    # the GPU-only shares set too: a serial forward and its breakdown must ignore them alike
    for c in (cpu.constants, replace(cpu.constants, short_kernel_share=0.5, cold_weight_share=2.0, sync_us=30.0)):
        total = compose(arrays, c, "eager", cpu.host)
        times = layer_times(arrays, c, cpu.host)
        assert total == pytest.approx(float(times.kernel_us.sum() + times.host_us.sum()) + c.sync_us, rel=1e-9)
    # the dispatch inside each call's measured time is not counted a second time as host time
    assert layer_times(arrays, cpu.constants, cpu.host).host_us.max() < 100


def test_a_serial_forward_grows_with_each_host_cost_it_reads(cpu: Predictor) -> None:
    graph = load_zoo_graph("mobilenet_v3_small").at_precision("fp32", 1)
    arrays = cpu.layers(graph, 1, "fp32", "eager")
    c = replace(cpu.constants, view_share=1.0, call_share=max(cpu.constants.call_share, 1.0))
    assert cpu.host is not None
    base = cpu.host.costs()
    for kind in ("module_call", "view"):
        slower = np.array(base, dtype=float)
        slower[HOST_KINDS.index(kind)] *= 2
        assert compose(arrays, c, "eager", slower) > compose(arrays, c, "eager", np.array(base, dtype=float))


def test_the_epycs_operators_run_at_the_speed_of_the_host_asked_for() -> None:
    """On a CPU the operators are the host's own work: on a host whose every cost is twice the
    bundle's, the EPYC's operator times (and their breakdown) take 2**0.6 as long, its bundle's
    power, and the Python around them twice; a GPU's kernels do not follow the host."""
    cpu = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "cpu-amd-epyc"), resolve_device("epyc"))
    assert cpu.host is not None and cpu.operator_host is not None and cpu.operator_speed_exponent == 0.6
    assert speed_ratio(cpu.operator_host, cpu.operator_host) == 1.0
    graph = load_zoo_graph("resnet18")
    slower = cpu.host.model_copy(update={"id": "twice-as-slow",
                                         "costs_us": {k: 2 * v for k, v in cpu.host.costs_us.items()}})
    assert speed_ratio(slower, cpu.host) == pytest.approx(2.0)
    own = cpu.predict(graph, 1, "fp32", "eager", host=cpu.host)
    slow = cpu.predict(graph, 1, "fp32", "eager", host=slower)
    kernel, host = (sum(x.kernel_us for x in own.layers), sum(x.host_us for x in own.layers))
    assert sum(x.kernel_us for x in slow.layers) == pytest.approx(2**0.6 * kernel, rel=1e-9)
    assert sum(x.host_us for x in slow.layers) == pytest.approx(2 * host, rel=1e-9)
    assert slow.total_ms == pytest.approx((2**0.6 * kernel + 2 * host + cpu.constants.sync_us) / 1e3, rel=1e-9)
    # only the Python around the calls is slower: the operators run as on the bundle's host
    python_only = cpu.host.model_copy(update={"id": "slow-python", "costs_us": {
        **cpu.host.costs_us, **{k: 2 * cpu.host.costs_us[k] for k in ("view", "module_call")}}})
    assert speed_ratio(python_only, cpu.host) == 1.0
    assert sum(x.kernel_us for x in cpu.predict(graph, 1, "fp32", "eager", host=python_only).layers) == \
        pytest.approx(sum(x.kernel_us for x in own.layers), rel=1e-12)
    layers = cpu.layers(graph.at_precision("fp32", 1), 1, "fp32", "eager")
    for other in (load_all()["nvidia-h200"], Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / CPU), resolve_device(CPU))):
        assert other.operator_host is None and other.on_host(layers, slower) is layers  # (they scale nothing)


def test_the_bundle_names_the_host_most_of_its_operator_rows_ran_on() -> None:
    from training.data import load_ops
    from training.hosts import operator_host, reference_profiles

    device = "cpu-amd-epyc"
    rows = load_ops(DATASETS / device).rows
    references = reference_profiles(DATASETS / device)
    named = operator_host(rows, references)
    cpu = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device), resolve_device(device))
    assert named is not None and cpu.operator_host is not None
    assert cpu.operator_host.id == named.id and cpu.operator_host.costs_us == pytest.approx(named.costs_us)
    assert (rows["host_profile"].map(lambda i: references[i].id if i in references else None) == named.id).mean() >= 0.3
    assert operator_host(rows.assign(host_profile="no-such-probe"), references) is None


def test_only_a_cpu_bundle_scales_its_operators_by_the_host() -> None:
    from training.data import load_ops
    from training.hosts import operator_host, reference_profiles
    from training.train import _operator_host_metadata

    data = load_ops(DATASETS / "cpu-amd-epyc")
    references = reference_profiles(DATASETS / "cpu-amd-epyc")
    assert _operator_host_metadata(data, references, 0.0) == {}  # as measured: the bundle says nothing
    named = operator_host(data.rows, references)
    metadata = _operator_host_metadata(data, references, 0.6)
    assert named is not None and metadata["operator_speed_exponent"] == 0.6
    assert metadata["operator_host"]["id"] == named.id
    with pytest.raises(ValueError, match=r"^host_speed_exponent: nvidia-h200 is a GPU"):
        _operator_host_metadata(replace(data, device=DEVICES["nvidia-h200"]), references, 0.6)
    with pytest.raises(ValueError, match=r"^host_speed_exponent: no operator row names a host profile"):
        _operator_host_metadata(replace(data, rows=data.rows.assign(host_profile="gone")), references, 0.6)


@pytest.mark.parametrize("device", MEASURED_CPUS)
def test_the_cpu_bundle_predicts_the_zoo_and_refuses_what_a_cpu_does_not_run(device: str) -> None:
    cpu = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device), resolve_device(device))
    smoke_test(cpu)  # eager only: a CPU bundle verifies without a CUDA graph
    out = cpu.predict(load_zoo_graph("resnet34"), 1, "fp32", "eager", with_layers=False)
    assert out.device == device and out.provenance == "measured" and out.host and out.host.startswith("cpu-")
    assert out.low_ms < out.total_ms < out.high_ms
    with pytest.raises(ValueError, match=r"^mode: .*runs eager only"):
        cpu.predict(load_zoo_graph("resnet34"), 1, "fp32", "cudagraph")
    with pytest.raises(ValueError, match=r"^precision: .*fp32 only, not bf16"):
        cpu.predict(load_zoo_graph("resnet34"), 1, "bf16", "eager")


@pytest.mark.parametrize("device", MEASURED_CPUS)
def test_its_predictions_follow_its_measured_runs(device: str) -> None:
    """The shipped bundle on the CPU's own zoo and nas-train runs (composition was fitted on them: a
    development check, not an accuracy figure; the README's are leave-one-model-out and nas-test)."""
    import pandas as pd

    from training.composition import run_arrays
    from training.data import load_model_runs
    from training.hosts import reference_profiles
    from training.suites import nas_train_arrays
    from training.train import zoo_graphs

    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device), resolve_device(device))
    runs = load_model_runs(DATASETS / device)
    arrays = run_arrays(predictor, zoo_graphs(sorted(runs["model"].unique())), runs,
                        reference_profiles(DATASETS / device)) + nas_train_arrays(predictor, DATASETS / device)
    assert len(arrays) >= 200 and all(r.serial and r.host is not None for r in arrays)
    ratio = pd.Series([compose(r.layers, predictor.constants, "eager", r.host) / r.measured_us for r in arrays])
    assert 0.9 < ratio.median() < 1.1 and (ratio - 1).abs().quantile(0.9) < 0.35


@pytest.mark.parametrize("device", MEASURED_CPUS)
def test_the_shipped_constants_are_what_its_dataset_fits(device: str) -> None:
    """The bundle's serial constants, read back from its metadata.json, are a refit of the
    dataset's zoo and nas-train runs through the bundle's own per-layer models: nothing hand-set,
    nothing stale."""
    import json

    from training.composition import SERIAL_SCALE_BOUNDS, fit_constants, run_arrays
    from training.data import load_model_runs
    from training.hosts import reference_profiles
    from training.suites import nas_train_arrays
    from training.train import zoo_graphs

    metadata = json.loads((DEFAULT_BUNDLE_DIR / device / "metadata.json").read_text())
    shipped = CompositionConstants(**metadata["composition"]["constants"])
    assert "cudagraph" not in metadata["composition"]["interval_log"]  # no runs, no interval (and no NaN)
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device), resolve_device(device))
    runs = load_model_runs(DATASETS / device)
    nas_train = nas_train_arrays(predictor, DATASETS / device)  # composition fits them beside the zoo
    assert nas_train and all(r.serial for r in nas_train)
    refit = fit_constants(run_arrays(predictor, zoo_graphs(sorted(runs["model"].unique())), runs,
                                     reference_profiles(DATASETS / device)) + nas_train)
    assert refit.serial and shipped.serial and refit.call_share == pytest.approx(shipped.call_share, rel=1e-6)
    assert refit.group_scale == pytest.approx(shipped.group_scale, rel=1e-6)
    low, high = SERIAL_SCALE_BOUNDS
    assert all(low - 1e-9 <= v <= high + 1e-9 for v in shipped.group_scale.values())


def test_runs_of_a_cpu_and_a_gpu_are_never_fitted_together(cpu: Predictor) -> None:
    from training.composition import RunArrays, fit_constants

    layers = cpu.layers(load_zoo_graph("alexnet").at_precision("fp32", 1), 1, "fp32", "eager")
    serial = RunArrays("alexnet", 1, "fp32", "eager", 5000.0, layers, 1.0, 1.0, cpu.host, serial=True)
    with pytest.raises(ValueError, match="cannot share"):
        fit_constants([serial, replace(serial, serial=False)])
    with pytest.raises(ValueError, match="host profiles"):
        fit_constants([replace(serial, host=None)])


def test_a_cpu_in_a_batch_of_variants_is_refused_by_field_not_by_tensor_cores(cpu: Predictor) -> None:
    from predictor.variant import Variant

    graphs = [load_zoo_graph("alexnet")]
    with pytest.raises(ValueError, match=r"^precision: "):
        cpu.predict_many(graphs, [Variant(batch=1, precision="fp16", mode="eager")])
    with pytest.raises(ValueError, match=r"^mode: "):
        cpu.predict_many(graphs, [Variant(batch=1, precision="fp32", mode="cudagraph")])
    assert cpu.new_kernels([(graphs[0], 1, "fp32", "cudagraph")]) == (0, 0)  # nothing to evaluate for a refusal


def test_a_host_probed_beside_a_gpu_is_not_a_cpus_profile(cpu: Predictor) -> None:
    h200 = load_all()["nvidia-h200"].host
    assert h200 is not None and h200.gpu and cpu.host is not None
    out = cpu.predict(load_zoo_graph("resnet18"), 1, "fp32", "eager", with_layers=False, host=h200)
    own = cpu.predict(load_zoo_graph("resnet18"), 1, "fp32", "eager", with_layers=False)
    assert out.total_ms == own.total_ms and out.host == f"{own.host} for {h200.id}"
    assert any(h200.id in w and cpu.host.id in w for w in out.warnings)


def test_an_estimate_of_a_gpus_host_is_not_a_cpus_profile(cpu: Predictor) -> None:
    # what `latpred host probe --cpu-only` makes by default: the H200's host scaled to this CPU, whose
    # costs are CUDA launches (gpu None all the same); a CPU device's forward keeps its own profile
    h200 = load_all()["nvidia-h200"].host
    assert h200 is not None and cpu.host is not None and cpu.host.cpu_score_ns is not None
    estimate = estimate_profile(h200, cpu.host.cpu_score_ns * 1.5, cpu_model="a CPU", cpu_cores=4,
                                measured_at="2026-12-07T00:00:00Z")
    assert estimate.gpu is None and estimate.times_gpu_launches and not cpu.host.times_gpu_launches
    out = cpu.predict(load_zoo_graph("resnet18"), 1, "fp32", "eager", with_layers=False, host=estimate)
    own = cpu.predict(load_zoo_graph("resnet18"), 1, "fp32", "eager", with_layers=False)
    assert out.total_ms == own.total_ms and out.host == f"{own.host} for {estimate.id}"
    assert any(estimate.id in w and h200.id in w and cpu.host.id in w for w in out.warnings)
    # scaled from a CPU's own profile it still times a CPU's operators: used as given, without a word
    of_a_cpu = estimate_profile(cpu.host, cpu.host.cpu_score_ns * 1.5, cpu_model="a CPU", cpu_cores=4,
                                measured_at="2026-12-07T00:00:00Z")
    assert not of_a_cpu.times_gpu_launches
    slower = cpu.predict(load_zoo_graph("resnet18"), 1, "fp32", "eager", with_layers=False, host=of_a_cpu)
    assert slower.total_ms > own.total_ms and of_a_cpu.id in (slower.host or "")
    assert not any(of_a_cpu.id in w for w in slower.warnings)
    # an estimate that names no reference is used as given, as before the rule, on either device
    unnamed = estimate.model_copy(update={"estimated_from": None})
    as_given = cpu.predict(load_zoo_graph("resnet18"), 1, "fp32", "eager", with_layers=False, host=unnamed)
    assert as_given.host is not None and as_given.host.startswith(unnamed.id) and as_given.total_ms != own.total_ms
    h200_predictor = load_all()["nvidia-h200"]
    gpu_as_given = h200_predictor.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", with_layers=False,
                                          host=unnamed)
    assert gpu_as_given.host is not None and gpu_as_given.host.startswith(unnamed.id)


def test_a_host_probed_without_a_gpu_is_estimated_for_a_gpus_forward(cpu: Predictor) -> None:
    # what `latpred host probe` measures where there is no GPU: this CPU's own operators, not launches
    probed = cpu.host
    h200 = load_all()["nvidia-h200"]
    assert probed is not None and probed.gpu is None and probed.label == "measured" and h200.host is not None
    out = h200.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", with_layers=False, host=probed)
    estimate = estimate_profile(h200.host, probed.cpu_score_ns or 0.0, cpu_model=probed.cpu_model,
                                cpu_cores=probed.cpu_cores, hostname=probed.hostname,
                                measured_at=probed.measured_at,
                                note=f"estimated for a GPU from {probed.id}, probed without one")
    expected = h200.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", with_layers=False, host=estimate)
    assert out.total_ms == expected.total_ms and (out.low_ms, out.high_ms) == (expected.low_ms, expected.high_ms)
    assert out.host == f"{expected.host} for {probed.id}" and estimate.id in out.host and "estimated" in out.host
    assert any(probed.id in w and estimate.id in w and "--cpu-only" in w for w in out.warnings)
    # an estimate scaled from a CPU's own profile times that CPU's operators too: estimated for the GPU alike
    of_a_cpu = estimate_profile(probed, probed.cpu_score_ns or 0.0, cpu_model=probed.cpu_model,
                                cpu_cores=probed.cpu_cores, measured_at=probed.measured_at)
    again = h200.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", with_layers=False, host=of_a_cpu)
    assert again.total_ms == pytest.approx(expected.total_ms, rel=1e-12) and f"for {of_a_cpu.id}" in (again.host or "")
    assert any(of_a_cpu.id in w and probed.id in w for w in again.warnings)
    assert "itself estimated from" in (h200.host_for_device(of_a_cpu)[0].note or "")
    # a captured graph issues no call: no host, no warning; an old profile without a CPU score is used, and said
    captured = h200.predict(load_zoo_graph("resnet18"), 1, "fp16", "cudagraph", with_layers=False, host=probed)
    assert captured.host is None and not any(probed.id in w for w in captured.warnings)
    unscored = probed.model_copy(update={"cpu_score_ns": None})
    as_probed = h200.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", with_layers=False, host=unscored)
    assert probed.id in (as_probed.host or "") and any("no cpu_score_ns" in w for w in as_probed.warnings)


def test_the_transfer_bundle_never_predicts_a_cpu(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="a CPU"):
        bundle_folder(CPU, tmp_path)  # no folder of its own: no transfer bundle stands in
    predictors = load_all()
    assert predictors[CPU].bundle.transfer is None
    transfer_only = expand_transfer({"transfer": predictors["nvidia-l4"]})
    assert CPU not in transfer_only and "nvidia-l4" in transfer_only


def test_selection_ranks_the_cpu_for_eager_fp32_and_says_why_not_otherwise() -> None:
    predictors = load_all()
    graph = load_zoo_graph("resnet34")
    eager = select(graph, predictors, 1, "fp32", "eager")
    cpu = next(c for c in eager.ranked if c.device == CPU)
    gpu = next(c for c in eager.ranked if c.device == "nvidia-h200")
    assert cpu.latency_ms > gpu.latency_ms  # 16 vCPUs against an H200
    assert cpu.cost_per_million is None  # unpriced: ranked after the priced devices
    assert cpu.memory_bytes == gpu.memory_bytes - WORKSPACE_BYTES  # no CUDA context on a CPU
    assert gpu.memory_bytes == memory_estimate(graph, 1, "fp32").total_bytes
    # a CPU's eager runs spread less than a GPU's, whose host races its kernel queue
    assert cpu.p99_ms / cpu.latency_ms == pytest.approx(math.exp(Z99 * run_spread("cpu", "eager")), rel=1e-9)
    assert gpu.p99_ms / gpu.latency_ms == pytest.approx(math.exp(Z99 * run_spread("gpu", "eager")), rel=1e-9)
    assert run_spread("cpu", "eager") < run_spread("gpu", "eager")
    captured = select(graph, predictors, 1, "fp16", "cudagraph")
    assert CPU not in {c.device for c in captured.ranked}
    assert captured.skipped[CPU].startswith("mode: ")
