"""The device catalog: the shipped file, a user's file laid over it, and what validation refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, bundle_dirs
from predictor.device_catalog import CATALOG_ENV, SHIPPED_CATALOG, load_catalog, read_file, user_catalog_path, validate
from predictor.devices import DEVICES, devices_from_catalog, resolve_device

REPO = Path(__file__).resolve().parents[2]

#: the GPUs issue #14 asked for, by the id CUDA's name for each slugifies to
NAMED = {
    "nvidia-h200": "NVIDIA H200", "nvidia-h200-sm104": "NVIDIA H200 (104 SMs)",
    "nvidia-h200-sm72": "NVIDIA H200 (72 SMs)", "nvidia-h200-sm40": "NVIDIA H200 (40 SMs)",
    "nvidia-a100-sxm4-40gb": "NVIDIA A100 40GB SXM",
    "nvidia-a100-sxm4-80gb": "NVIDIA A100 80GB SXM", "nvidia-h100-80gb-hbm3": "NVIDIA H100 SXM",
    "nvidia-h100-80gb-hbm3-sm72": "NVIDIA H100 SXM (72 SMs)",
    "nvidia-h100-pcie": "NVIDIA H100 PCIe", "nvidia-l4": "NVIDIA L4", "nvidia-l40s": "NVIDIA L40S",
    "tesla-t4": "NVIDIA T4", "nvidia-a10": "NVIDIA A10", "nvidia-geforce-rtx-4090": "NVIDIA GeForce RTX 4090",
    "nvidia-b200": "NVIDIA B200",
    # and CPUs, timed through torch on the CPU: the GPU machine's host, and the CPU latpred runs on here
    "cpu-intel-r-xeon-r-processor": "Intel Xeon (16 vCPUs)", "cpu-amd-epyc": "AMD EPYC (2 vCPUs)",
}

#: a complete entry for a device the shipped catalog does not have
ACME: dict[str, Any] = {
    "name": "Acme X1", "provenance": "transferred", "sm_count": 96, "l2_bytes": 64 * 2**20,
    "memory_bytes": 96 * 2**30, "memory_bandwidth": 2.4e12,
    "tensor_flops": {"fp16": 500e12, "bf16": 500e12, "tf32": 250e12}, "vector_flops": 40e12, "tdp_w": 500,
    "boost_clock_hz": 1.8e9, "price_per_hour": 2.25, "source": "Acme X1 datasheet rev 3",
}


def toml_value(value: Any) -> str:
    """A value as TOML (enough for a catalog: numbers, strings, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # nan, inf and -1.0 are TOML as Python writes them
    if isinstance(value, str):
        return json.dumps(value)
    return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"


def write_catalog(path: Path, devices: dict[str, dict[str, Any]]) -> Path:
    path.write_text("".join(f"[devices.{device_id}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items())
                            + "\n" for device_id, fields in devices.items()))
    return path


# ---------------------------------------------------------------- the shipped catalog
def test_the_shipped_catalog_holds_the_named_devices_in_order() -> None:
    entries = load_catalog()
    assert {device_id: e.name for device_id, e in entries.items()} == NAMED
    assert list(DEVICES) == list(entries) and next(iter(DEVICES)) == "nvidia-h200"
    for spec in DEVICES.values():  # every figure says where it came from, and every GPU's price
        assert spec.source.strip()
        assert (spec.price_per_hour is not None and spec.price_source) if spec.kind == "gpu" else (
            spec.price_per_hour is None)  # a CPU is not sold apart from its GPU machine


def test_measured_means_a_dataset_and_models_fitted_on_it_in_the_repository() -> None:
    """'measured' is a claim about this repository: it holds the device's dataset, and a bundle
    fitted on it (its own, or the transfer bundle, which lists the devices whose runs it fitted)."""
    folders = bundle_dirs(DEFAULT_BUNDLE_DIR)
    transfer = json.loads((folders["transfer"] / "metadata.json").read_text())["transfer"]["devices"]
    measured = {d for d, spec in DEVICES.items() if spec.provenance == "measured"}
    assert measured == (set(folders) - {"transfer"}) | set(transfer)
    assert measured == {"nvidia-h200", "nvidia-h200-sm104", "nvidia-h200-sm72", "nvidia-h200-sm40",
                        "nvidia-h100-80gb-hbm3", "nvidia-h100-80gb-hbm3-sm72", "cpu-intel-r-xeon-r-processor",
                        "cpu-amd-epyc"}
    assert all((REPO / "datasets" / d / "fingerprint.json").is_file() for d in measured)
    assert {spec.provenance for d, spec in DEVICES.items() if d not in measured} == {"transferred"}


def test_the_h200_keeps_the_measured_ceilings_its_bundle_was_built_with() -> None:
    """The bundle's roofline features were computed with these: datasheet figures here would
    move every H200 prediction."""
    h200 = DEVICES["nvidia-h200"]
    assert (h200.sm_count, h200.l2_bytes, h200.memory_bandwidth, h200.vector_flops) == (132, 62_914_560, 4.3e12, 60e12)
    assert h200.tensor_flops == {"bf16": 790e12, "fp16": 790e12, "tf32": 395e12}
    assert (h200.tdp_w, h200.memory_bytes) == (700, 141 * 2**30)


def test_datasheet_figures_are_dense_and_ordered_as_hardware_is() -> None:
    for spec in DEVICES.values():
        t = spec.tensor_flops
        assert spec.l2_bytes < spec.memory_bytes and spec.tdp_w > 0
        if spec.kind == "cpu":  # no tensor cores
            assert t == {}, spec.device_id
            continue
        assert t["fp16"] > spec.vector_flops and t.get("tf32", 0) < t["fp16"], spec.device_id
    # a sparsity figure would be twice these
    assert DEVICES["nvidia-h100-80gb-hbm3"].tensor_flops["bf16"] == pytest.approx(989.5e12)
    assert DEVICES["nvidia-a100-sxm4-80gb"].tensor_flops["tf32"] == 156e12
    assert DEVICES["nvidia-b200"].tensor_flops["fp16"] == 2.25e15


def test_a_t4_has_no_bf16_nor_tf32_tensor_cores() -> None:
    t4 = resolve_device("t4")
    assert set(t4.tensor_flops) == {"fp16"}
    with pytest.raises(ValueError, match="NVIDIA T4 has no bf16 tensor cores"):
        t4.peak_flops("linear", "bf16")
    # TF32 allowed or not, Turing runs fp32 on its CUDA cores
    assert t4.peak_flops("conv2d", "fp32", allow_tf32_cudnn=True) == t4.vector_flops
    assert t4.peak_flops("linear", "fp16") == 65e12


@pytest.mark.parametrize("query, device_id", [
    ("l4", "nvidia-l4"), ("L40S", "nvidia-l40s"), ("a10", "nvidia-a10"), ("t4", "tesla-t4"),
    ("4090", "nvidia-geforce-rtx-4090"), ("b200", "nvidia-b200"), ("h100 sxm", "nvidia-h100-80gb-hbm3"),
    ("H100 PCIe", "nvidia-h100-pcie"), ("a100 80gb", "nvidia-a100-sxm4-80gb"), ("nvidia-a100-sxm4-40gb",
                                                                                "nvidia-a100-sxm4-40gb"),
    # what torch calls the GPU (a host profile's gpu): the whole GPU, not its partition with the same words
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"), ("NVIDIA H200", "nvidia-h200"),
])
def test_resolve_prefers_whole_words(query: str, device_id: str) -> None:
    assert resolve_device(query).device_id == device_id


@pytest.mark.parametrize("query, matches", [("a100", ["nvidia-a100-sxm4-40gb", "nvidia-a100-sxm4-80gb"]),
                                            ("h100", ["nvidia-h100-80gb-hbm3", "nvidia-h100-pcie"])])
def test_a_name_two_devices_share_is_ambiguous(query: str, matches: list[str]) -> None:
    with pytest.raises(ValueError, match="is ambiguous") as info:
        resolve_device(query)
    assert all(m in str(info.value) for m in matches) and "nvidia-h200" not in str(info.value)


# ---------------------------------------------------------------- a user's catalog
def test_a_user_file_changes_a_price_and_adds_a_device(tmp_path: Path) -> None:
    user = write_catalog(tmp_path / "mine.toml", {"nvidia-l4": {"price_per_hour": 0.41}, "acme-x1": ACME})
    entries = load_catalog(user=user)
    l4, shipped_l4 = entries["nvidia-l4"], load_catalog()["nvidia-l4"]
    assert l4.price_per_hour == 0.41 and l4.price_source == f"set in {user}"
    assert l4.model_dump(exclude={"price_per_hour", "price_source"}) == shipped_l4.model_dump(
        exclude={"price_per_hour", "price_source"})
    assert list(entries)[-1] == "acme-x1" and list(entries)[:-1] == list(NAMED)
    devices = devices_from_catalog(entries)
    assert devices["acme-x1"].memory_bytes == 96 * 2**30 and devices["acme-x1"].provenance == "transferred"


def test_a_user_file_may_be_json_and_may_clear_a_price(tmp_path: Path) -> None:
    user = tmp_path / "mine.json"
    user.write_text(json.dumps({"devices": {"nvidia-b200": {"price_per_hour": None, "price_source": "ask sales"}}}))
    b200 = load_catalog(user=user)["nvidia-b200"]
    assert b200.price_per_hour is None and b200.price_source == "ask sales"


def test_the_environment_names_the_user_file_for_every_command(tmp_path: Path) -> None:
    """DEVICES is read at import: a fresh interpreter with the variable set sees the user's file."""
    user = write_catalog(tmp_path / "mine.toml", {"acme-x1": ACME, "tesla-t4": {"price_per_hour": 0.35}})
    assert user_catalog_path({CATALOG_ENV: str(user)}) == user and user_catalog_path({}) is None
    code = ("from predictor.devices import DEVICES, resolve_device\n"
            "print(resolve_device('acme').device_id, DEVICES['tesla-t4'].price_per_hour)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, CATALOG_ENV: str(user), "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["acme-x1", "0.35"]


def test_a_user_file_that_does_not_validate_stops_the_import_naming_it(tmp_path: Path) -> None:
    user = write_catalog(tmp_path / "mine.toml", {"nvidia-l4": {"memory_bandwidth": 3e15}})
    out = subprocess.run([sys.executable, "-c", "import predictor.devices"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env={**os.environ, CATALOG_ENV: str(user), "PYTHONPATH": str(REPO)})
    assert out.returncode != 0
    assert "device 'nvidia-l4': memory_bandwidth" in out.stderr and str(user) in out.stderr


def test_a_command_answers_a_refused_user_file_as_an_error_not_a_traceback(tmp_path: Path) -> None:
    user = write_catalog(tmp_path / "mine.toml", {"nvidia-l4": {"memory_bandwidth": 1.0}})
    out = subprocess.run([sys.executable, "-m", "latpred", "select", "resnet50"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env={**os.environ, CATALOG_ENV: str(user), "PYTHONPATH": str(REPO)})
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("Error: device catalog") and "device 'nvidia-l4': memory_bandwidth" in out.stderr


# ---------------------------------------------------------------- what validation refuses
@pytest.mark.parametrize("field, value", [
    ("sm_count", 0), ("sm_count", 1001), ("sm_count", 58.5), ("sm_count", "58"),
    ("memory_bandwidth", float("nan")), ("memory_bandwidth", float("inf")), ("memory_bandwidth", 0.0),
    ("memory_bandwidth", 101e12),
    ("vector_flops", -1.0), ("vector_flops", 1e18),
    ("tensor_flops", {"fp16": 101e15}), ("tensor_flops", {"fp16": float("nan")}),
    ("tensor_flops", {"fp16": 1e14, "fp8": 2e14}), ("tensor_flops", {"bf16": 1e14}), ("tensor_flops", {"fp16": 0.0}),
    ("memory_bytes", 5 * 2**40), ("memory_bytes", 0), ("l2_bytes", 0), ("l2_bytes", 200 * 2**30),
    ("tdp_w", 0), ("tdp_w", float("inf")), ("boost_clock_hz", 0.0), ("boost_clock_hz", 1980e9),
    ("price_per_hour", -0.5), ("price_per_hour", float("nan")),
    ("provenance", "guessed"), ("name", "  "), ("source", ""),
    # too small to be a device: a unit slip (GB/s, GiB), which loaded and gave a cost of Infinity
    ("memory_bandwidth", 1.0), ("vector_flops", 1.0), ("tensor_flops", {"fp16": 1.0}), ("memory_bytes", 2),
    ("l2_bytes", 1), ("tdp_w", 0.5), ("boost_clock_hz", 1.0), ("price_per_hour", 1e308),
])
def test_an_absurd_spec_is_refused_naming_device_and_field(tmp_path: Path, field: str, value: Any) -> None:
    for device_id, fields in (("acme-x1", {**ACME, field: value}), ("nvidia-l40s", {field: value})):
        user = write_catalog(tmp_path / f"{device_id}.toml", {device_id: fields})
        with pytest.raises(ValueError) as info:
            load_catalog(user=user)
        message = str(info.value)
        assert f"device {device_id!r}: {field}" in message and str(user) in message, message
        assert message.count("device '") == 1  # only the broken entry is named


@pytest.mark.parametrize("field", [f for f in ACME if f != "price_per_hour"])
def test_a_new_device_missing_a_field_is_refused(tmp_path: Path, field: str) -> None:
    fields = {k: v for k, v in ACME.items() if k != field}
    user = write_catalog(tmp_path / "mine.toml", {"acme-x1": fields})
    with pytest.raises(ValueError, match=f"device 'acme-x1': {field}: missing"):
        load_catalog(user=user)


def test_the_h100s_blind_partitions_are_laid_over_the_catalog_as_transferred() -> None:
    """datasets/h100_partitions.catalog.toml, which the blind checks of the 40- and 104-SM
    partitions are run with, stays loadable and keeps them out of what is measured and out of the
    transfer model's fit. Every H100 partition's figures follow the rule its header states: the
    H100's datasheet with compute by (SMs/132)^0.84 (so the H200's partition of as many SMs has the
    same sheet figures), bandwidth by the soft minimum of the memory's and the SMs', and the price
    by the share of SMs."""
    from training.transfer import GPU_DATASETS

    entries = load_catalog(user=REPO / "datasets" / "h100_partitions.catalog.toml")
    whole = entries["nvidia-h100-80gb-hbm3"]
    trained_on = json.loads((DEFAULT_BUNDLE_DIR / "transfer" / "metadata.json").read_text())["transfer"]["trained_on"]
    for sms in (40, 104):
        device_id = f"nvidia-h100-80gb-hbm3-sm{sms}"
        assert entries[device_id].provenance == "transferred" and device_id not in DEVICES
        assert device_id not in trained_on and device_id not in {path.name for path in GPU_DATASETS}
    assert entries["nvidia-h100-80gb-hbm3-sm72"].provenance == "measured"

    def bandwidth_share(sms: int, p: float = 3.35) -> float:
        return float((3.35 ** -p + (0.042 * sms) ** -p) ** (-1 / p))

    for sms in (40, 72, 104):
        part = entries[f"nvidia-h100-80gb-hbm3-sm{sms}"]
        scale = (sms / 132) ** 0.84
        assert part.sm_count == sms and part.l2_bytes == whole.l2_bytes
        for precision, flops in whole.tensor_flops.items():
            assert part.tensor_flops[precision] == pytest.approx(flops * scale, rel=1e-3)
        assert part.vector_flops == pytest.approx(whole.vector_flops * scale, rel=2e-3)
        assert part.memory_bandwidth == pytest.approx(
            whole.memory_bandwidth * bandwidth_share(sms) / bandwidth_share(132), rel=1e-3)
        assert part.price_per_hour == pytest.approx(whole.price_per_hour * sms / 132, abs=0.006)
        if sms != 40:  # the H200 has partitions of 72 and 104 SMs: the same sheet figures
            h200_datasheet = entries[f"nvidia-h200-sm{sms}"].datasheet
            assert h200_datasheet is not None and part.tensor_flops == h200_datasheet.tensor_flops


def test_a_cpu_has_no_boost_clock_here(tmp_path: Path) -> None:
    """The clock sizes a GPU's L2 bandwidth for the transfer model; on a CPU it would be read as that."""
    user = write_catalog(tmp_path / "mine.toml", {"cpu-amd-epyc": {"boost_clock_hz": 3.0e9}})
    with pytest.raises(ValueError, match="device 'cpu-amd-epyc': boost_clock_hz: a CPU has none"):
        load_catalog(user=user)


def test_a_new_device_without_a_price_has_an_unknown_price(tmp_path: Path) -> None:
    user = write_catalog(tmp_path / "mine.toml", {"acme-x1": {k: v for k, v in ACME.items() if k != "price_per_hour"}})
    assert load_catalog(user=user)["acme-x1"].price_per_hour is None


def test_an_unknown_field_is_refused_as_a_likely_typo(tmp_path: Path) -> None:
    user = write_catalog(tmp_path / "mine.toml", {"nvidia-l4": {"price_per_hr": 0.5}})
    with pytest.raises(ValueError, match="device 'nvidia-l4': price_per_hr: unknown field"):
        load_catalog(user=user)


def test_every_problem_is_reported_at_once() -> None:
    raw = {k: dict(v) for k, v in read_file(SHIPPED_CATALOG).items()}
    raw["nvidia-l4"]["sm_count"] = -1
    raw["nvidia-a10"]["tensor_flops"] = {"fp16": 1e14, "int8": 2e14}
    with pytest.raises(ValueError) as info:
        validate(raw, "test")
    assert "device 'nvidia-l4': sm_count" in str(info.value)
    assert "device 'nvidia-a10': tensor_flops: unknown precision(s) 'int8'" in str(info.value)


@pytest.mark.parametrize("device_id", ["Acme-X1", "acme_x1", "acme--x1", "-acme"])
def test_an_id_a_query_could_never_reach_is_refused(tmp_path: Path, device_id: str) -> None:
    user = tmp_path / "mine.json"
    user.write_text(json.dumps({"devices": {device_id: ACME}}))
    with pytest.raises(ValueError, match=f"device {device_id!r}: id must be"):
        load_catalog(user=user)


@pytest.mark.parametrize("text, expected", [("[devices.x\nname = 1", "device catalog"),
                                            ('devices = 3', "top-level 'devices' table"),
                                            ('[devices]\nacme = 3', "device 'acme': expected a table")])
def test_a_malformed_file_is_refused_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    user = tmp_path / "mine.toml"
    user.write_text(text)
    with pytest.raises(ValueError, match=expected) as info:
        load_catalog(user=user)
    assert str(user) in str(info.value)
