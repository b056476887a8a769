"""GET /v1/devices, GET /v1/models and POST /v1/models/reload (an atomic swap, followed by all workers)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from service_helpers import (
    CPU,
    DEVICE,
    WORKPLACE_CPU,
    assert_problem,
    bundle_version,
    bundles_with_host,
    transfer_version,
)

from predictor.bundle import DEFAULT_BUNDLE_DIR
from predictor.devices import DEVICES, resolve_device
from predictor.zoo import zoo_names
from service import registry as registry_module
from service.app import create_app
from service.config import ServiceConfig
from service.registry import ModelRegistry


def test_devices_say_which_have_a_bundle(client: Any) -> None:
    devices = client.get("/v1/devices").get_json()["devices"]
    assert [d["id"] for d in devices] == list(DEVICES)
    h200 = next(d for d in devices if d["id"] == DEVICE)
    assert h200["bundle_loaded"] is True and h200["model_version"] == bundle_version()
    assert h200["name"] == "NVIDIA H200" and h200["sm_count"] == 132
    assert h200["provenance"] == "measured" and h200["tdp_w"] == 700 and h200["memory_bytes"] == 141 * 2**30
    assert h200["price_per_hour"] == DEVICES[DEVICE].price_per_hour and h200["price_source"]


def test_devices_say_which_were_measured_and_which_bundle_predicts_each(client: Any) -> None:
    devices = {d["id"]: d for d in client.get("/v1/devices").get_json()["devices"]}
    assert len(devices) == len(DEVICES) > 10
    measured = {i for i, d in devices.items() if d["provenance"] == "measured"}
    assert measured == {DEVICE, "nvidia-h200-sm104", "nvidia-h200-sm72", "nvidia-h200-sm40", "nvidia-h100-80gb-hbm3",
                        "nvidia-h100-80gb-hbm3-sm72", CPU, WORKPLACE_CPU}
    assert all(d["bundle_loaded"] for d in devices.values())
    assert devices[DEVICE]["predicted_by"] == DEVICE and devices[DEVICE]["model_version"] == bundle_version()
    assert devices[CPU]["predicted_by"] == CPU and devices[CPU]["model_version"] == bundle_version(CPU)
    assert (devices[CPU]["kind"], devices[CPU]["modes"]) == ("cpu", ["eager"])
    assert devices[WORKPLACE_CPU]["predicted_by"] == WORKPLACE_CPU and devices[WORKPLACE_CPU]["kind"] == "cpu"
    assert (devices[DEVICE]["kind"], devices[DEVICE]["modes"]) == ("gpu", ["eager", "cudagraph"])
    own = (DEVICE, CPU, WORKPLACE_CPU)
    assert {d["predicted_by"] for i, d in devices.items() if i not in own} == {"transfer"}
    assert {d["model_version"] for i, d in devices.items() if i not in own} == {transfer_version()}
    l4 = devices["nvidia-l4"]
    assert (l4["name"], l4["sm_count"], l4["memory_bytes"], l4["tdp_w"]) == ("NVIDIA L4", 58, 24 * 2**30, 72)
    assert l4["provenance"] == "transferred" and l4["price_per_hour"] > 0 and "datasheet" in l4["source"]
    assert set(devices["tesla-t4"]["tensor_flops"]) == {"fp16"}  # no bf16 or tf32 tensor cores on a T4
    assert l4["boost_clock_hz"] == 2.04e9 and l4["l2_bandwidth"] == pytest.approx(5120 / 108 * 58 * 2.04e9)
    assert devices[CPU]["boost_clock_hz"] is None and devices[CPU]["l2_bandwidth"] is None


@pytest.mark.parametrize("device", ["l4", "nvidia-b200", "NVIDIA A10"])
def test_a_device_never_measured_is_predicted_from_its_datasheet_on_every_path(client: Any, device: str) -> None:
    spec = resolve_device(device)
    body = client.post("/v1/predict", json={"model": "resnet18", "device": device}).get_json()
    assert body["device"] == spec.device_id and body["provenance"] == "transferred"
    assert body["model_version"] == transfer_version() and body["warnings"][-1].startswith("transferred:")
    rows = client.get(f"/v1/latency?model=resnet18&device={device}&format=csv").get_data(as_text=True).splitlines()
    assert rows[1].endswith('"transferred"')
    h200 = client.post("/v1/predict", json={"model": "resnet18", "device": "h200"}).get_json()
    assert h200["provenance"] == "measured" and not any(w.startswith("transferred") for w in h200["warnings"])
    # the interval of a device never measured is wider than the H200's
    assert body["high_ms"] / body["total_ms"] > h200["high_ms"] / h200["total_ms"]


@pytest.fixture(scope="module")
def h200_only(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An app over the H200's bundle alone: no transfer bundle to predict the other devices."""
    tmp = tmp_path_factory.mktemp("h200-only")
    registry = ModelRegistry(bundles_with_host(tmp / "bundles", only=(DEVICE,)))
    registry.load()
    return create_app(ServiceConfig(data_dir=tmp, graph_store=tmp / "graphs", host_store=tmp / "hosts"),
                      registry=registry).test_client()


@pytest.mark.parametrize("device", ["l4", "nvidia-b200", "NVIDIA A10"])
def test_without_the_transfer_bundle_a_device_never_measured_is_a_404_naming_it(h200_only: Any, device: str) -> None:
    """The catalog knows it, no bundle serves it: a clear not-found on every path, never a 500."""
    client = h200_only
    spec = resolve_device(device)
    body = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "device": device}), 404, "device")
    assert spec.device_id in body["detail"] and "no model bundle" in body["detail"]
    latency = assert_problem(client.get(f"/v1/latency?model=resnet18&device={device}"), 404, "device")
    assert spec.device_id in latency["detail"]
    batch = client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}],
                                                   "variants": [{"device": "h200"}, {"device": device}]})
    assert batch.status_code == 200
    ok, refused = batch.get_json()["results"]
    assert ok["prediction"]["total_ms"] > 0
    assert refused["problem"]["status"] == 404 and refused["problem"]["field"] == "variants[1].device"
    assert spec.device_id in refused["problem"]["detail"]
    listed = {d["id"]: d for d in client.get("/v1/devices").get_json()["devices"]}
    assert listed[spec.device_id]["bundle_loaded"] is False and listed[spec.device_id]["predicted_by"] is None


def test_a_name_two_catalog_devices_share_is_a_404_listing_both(client: Any) -> None:
    body = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "device": "a100"}), 404, "device")
    assert "ambiguous" in body["detail"] and "nvidia-a100-sxm4-40gb" in body["detail"]


def test_models_lists_the_zoo_and_the_bundles(client: Any) -> None:
    body = client.get("/v1/models").get_json()
    assert body["zoo"] == zoo_names() and "resnet50" in body["zoo"]
    assert body["bundles"] == [{"device": DEVICE, "version": bundle_version()},  # the catalog's order
                               {"device": CPU, "version": bundle_version(CPU)},
                               {"device": WORKPLACE_CPU, "version": bundle_version(WORKPLACE_CPU)},
                               {"device": "transfer", "version": transfer_version()}]
    assert body["errors"] == {}


def _copy_bundles(tmp_path: Path) -> Path:
    root = tmp_path / "bundles"
    shutil.copytree(DEFAULT_BUNDLE_DIR / DEVICE, root / DEVICE)
    return root


def test_reload_swaps_in_a_new_version_atomically(tmp_path: Path) -> None:
    root = _copy_bundles(tmp_path)
    config = ServiceConfig(bundle_dir=root, data_dir=tmp_path, open_writes=True)
    app = create_app(config, load=False)
    reg = app.extensions["latpred"].registry
    reg.load()
    client = app.test_client()
    before = reg.snapshot
    meta = root / DEVICE / "metadata.json"
    meta.write_text(meta.read_text().replace(bundle_version(), "2099-new"))
    r = client.post("/v1/models/reload")
    assert r.status_code == 200
    assert r.get_json()["bundles"] == [{"device": DEVICE, "version": "2099-new"}]
    assert reg.snapshot is not before and before.versions() == {DEVICE: bundle_version()}
    assert client.get("/readyz").get_json()["model_version"] == "2099-new"
    assert 'latpred_model_info{device="nvidia-h200",version="2099-new"} 1.0' in client.get("/metrics").get_data(
        as_text=True)
    assert (config.graph_store / ".reload").exists()


def test_a_failed_reload_keeps_the_old_bundle_and_says_why(tmp_path: Path) -> None:
    root = _copy_bundles(tmp_path)
    app = create_app(ServiceConfig(bundle_dir=root, data_dir=tmp_path, open_writes=True), load=False)
    app.extensions["latpred"].registry.load()
    client = app.test_client()
    victim = next((root / DEVICE).glob("kernel-*.txt.gz"))
    victim.write_bytes(victim.read_bytes()[:100])  # truncated: its checksum no longer matches
    body = assert_problem(client.post("/v1/models/reload"), 409)
    assert body["bundles"] == [{"device": DEVICE, "version": bundle_version()}]
    assert "corrupt or truncated" in body["failed"][DEVICE]
    assert "corrupt or truncated" in client.get("/v1/models").get_json()["errors"][DEVICE]
    assert client.post("/v1/predict", json={"model": "resnet18"}).status_code == 200


def test_other_workers_follow_a_reload(tmp_path: Path, monkeypatch: Any) -> None:
    """Two apps on one store stand for two gunicorn workers: a reload on one reaches the other."""
    monkeypatch.setattr(registry_module, "MARKER_CHECK_S", 0.0)
    root = _copy_bundles(tmp_path)
    config = ServiceConfig(bundle_dir=root, data_dir=tmp_path, open_writes=True)
    first, second = create_app(config, load=False), create_app(config, load=False)
    for app in (first, second):
        app.extensions["latpred"].registry.load()
    meta = root / DEVICE / "metadata.json"
    meta.write_text(meta.read_text().replace(bundle_version(), "2099-next"))
    assert first.test_client().post("/v1/models/reload").status_code == 200
    other: ModelRegistry = second.extensions["latpred"].registry
    second.test_client().get("/livez")  # any request checks the marker and starts a background reload
    assert other.wait(timeout=30)
    assert other.snapshot.versions() == {DEVICE: "2099-next"}
