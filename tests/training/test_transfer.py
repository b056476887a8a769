"""training.transfer on a sample of the measured GPUs' real rows: the bundle it writes loads and
predicts every catalog device, measured ones with their own composition and transferred ones with
a wider interval; leave-one-device-out scores a device no fit saw; the weighting of devices."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.bundle import Bundle
from predictor.devices import DEVICES
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph
from training.suites import has_nas_runs
from training.transfer import (
    GPU_DATASETS,
    UNMEASURED_ARCHITECTURE_LOG,
    TransferReport,
    TransferSettings,
    device_weights,
    interval_half_width,
    train_transfer,
)

HELD = "nvidia-h200-sm72"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> TransferReport:
    """A small fit: 2,500 rows a device, a tenth of the trees; every zoo run of every device."""
    return train_transfer(TransferSettings(bundle_root=tmp_path_factory.mktemp("bundles"), limit=2_500, scale=0.1,
                                           holdouts=(HELD,)))


def test_the_bundle_loads_and_names_the_devices_it_measured(report: TransferReport) -> None:
    bundle = Bundle.load(report.bundle_dir)
    assert bundle.transfer is not None
    measured = set(bundle.transfer["devices"])
    assert measured == {Path(d).name for d in GPU_DATASETS} and bundle.transfer["held_out"] == [HELD]
    for device in measured:
        assert bundle.measured_on(device)
        own = bundle.composition_for(device)
        assert own["constants"]["group_scale"] and 0 < own["interval_log"]["cudagraph"] < 1
    assert not bundle.measured_on("nvidia-l4") and bundle.composition_for("nvidia-l4") == bundle.composition


def test_the_bundle_computes_features_on_the_l2_roofline_and_an_older_one_as_it_was_fitted(
        report: TransferReport, tmp_path: Path) -> None:
    """Features must be computed as the trees were fitted: the bundle written now on the datasheet
    with the L2 roofline; a transfer bundle written before it (no ``l2_roofline``) without; a
    one-device bundle on its own measured ceilings."""
    bundle = Bundle.load(report.bundle_dir)
    h100 = DEVICES["nvidia-h100-80gb-hbm3"]
    assert bundle.l2_roofline and bundle.feature_spec(h100) == h100.datasheet_spec(l2_roofline=True)
    older = tmp_path / "older"
    shutil.copytree(report.bundle_dir, older)
    metadata = json.loads((older / "metadata.json").read_text())
    del metadata["transfer"]["l2_roofline"]
    (older / "metadata.json").write_text(json.dumps(metadata))
    older_bundle = Bundle.load(older)
    assert not older_bundle.l2_roofline and older_bundle.feature_spec(h100) == h100.datasheet_spec()
    h200 = Bundle.load(Path("predictor/bundles/nvidia-h200"))
    assert h200.feature_spec(DEVICES["nvidia-h200"]) is DEVICES["nvidia-h200"]


def test_transferred_devices_get_a_wider_interval_and_say_so(report: TransferReport) -> None:
    bundle = Bundle.load(report.bundle_dir)
    graph = load_zoo_graph("resnet18")
    measured = Predictor(bundle, DEVICES[HELD]).predict(graph, 8, "fp16", "cudagraph")
    transferred = Predictor(bundle, DEVICES["nvidia-a100-sxm4-80gb"]).predict(graph, 8, "fp16", "cudagraph")
    assert measured.provenance == "measured" and not any(w.startswith("transferred") for w in measured.warnings)
    assert transferred.provenance == "transferred" and any(w.startswith("transferred") for w in transferred.warnings)
    width = lambda p: math.log(p.high_ms / p.total_ms)  # noqa: E731
    assert width(transferred) >= UNMEASURED_ARCHITECTURE_LOG
    assert width(transferred) > width(measured)


def test_a_partition_with_fewer_sms_is_predicted_slower_at_a_large_batch(report: TransferReport) -> None:
    bundle = Bundle.load(report.bundle_dir)
    graph = load_zoo_graph("resnet50")
    times = [Predictor(bundle, DEVICES[d]).predict(graph, 32, "fp16", "cudagraph").total_ms
             for d in ("nvidia-h200", "nvidia-h200-sm104", "nvidia-h200-sm72", "nvidia-h200-sm40")]
    assert times == sorted(times) and times[-1] > 1.5 * times[0]


def test_leave_one_device_out_predicts_every_zoo_run_of_the_held_out_device(report: TransferReport) -> None:
    runs = report.held_out_runs
    assert set(runs["device"]) == {HELD} and len(runs) == 81  # 27 models x batch 1/8/32, fp16 CUDA graph
    assert (runs["mode"] == "cudagraph").all() and np.isfinite(runs["predicted_ms"]).all()
    ratio = runs["predicted_ms"] / runs["measured_ms"]
    assert 0.5 < ratio.median() < 2.0  # a tenth of the trees on a sample: in range, not accurate
    assert set(report.held_out_ops["device"]) == {HELD} and len(report.held_out_ops) == 2_500
    assert report.metadata["metrics"][f"lodo_{HELD}_models_mape"] == pytest.approx(
        float(((runs["predicted_ms"] - runs["measured_ms"]).abs() / runs["measured_ms"]).mean()))


def test_a_device_with_nas_dev_runs_calibrates_its_interval_on_them_too(report: TransferReport) -> None:
    """The H100's interval from its zoo alone covered 61% of its nas-test runs: a measured device's
    interval also takes its nas-dev runs' errors, as a one-device bundle's does; a partition, with
    no NAS runs, keeps its zoo's."""
    bundle = Bundle.load(report.bundle_dir)
    own = report.own_runs
    for dataset in GPU_DATASETS:
        device = Path(dataset).name
        zoo_only = interval_half_width(own[own["device"] == device])
        width = bundle.composition_for(device)["interval_log"]["cudagraph"]
        if has_nas_runs(dataset):
            assert width != pytest.approx(zoo_only), device
        else:
            assert width == pytest.approx(zoo_only), device


def test_each_device_weighs_by_the_root_of_its_share() -> None:
    rows = pd.DataFrame({"device_id": ["a"] * 400 + ["b"] * 100 + ["c"] * 25})
    weight = device_weights(rows)
    assert weight[:400].tolist() == [1.0] * 400 and set(weight[400:500]) == {2.0} and set(weight[500:]) == {4.0}


def test_holdouts_are_resolved_by_name_and_refused_before_anything_loads() -> None:
    """An unknown device held out was a StopIteration after a minute of loading; a short name was
    refused. Both are settled first."""
    from training.transfer import GPU_DATASETS, measured_holdouts

    assert measured_holdouts(["nvidia-h100-80gb-hbm3", "h200", "nvidia-h200", "nvidia-h200-sm72"], GPU_DATASETS) == (
        "nvidia-h100-80gb-hbm3", "nvidia-h200", "nvidia-h200-sm72")
    with pytest.raises(ValueError, match="^--holdout 'nosuchgpu': "):
        measured_holdouts(["nosuchgpu"], GPU_DATASETS)
    with pytest.raises(ValueError, match="^--holdout 'h100': device 'h100' is ambiguous"):
        measured_holdouts(["h100"], GPU_DATASETS)
    with pytest.raises(ValueError, match="nvidia-l4 is not one of the measured devices"):
        measured_holdouts(["l4"], GPU_DATASETS)
