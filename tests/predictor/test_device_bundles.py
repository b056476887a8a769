"""predictor.device_bundles: which bundle folder predicts which device, and the error without one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from predictor import device_bundles
from predictor.bundle import DEFAULT_BUNDLE_DIR, BundleError
from predictor.devices import DEVICES


def test_a_device_with_its_own_bundle_is_predicted_by_it_the_others_by_the_transfer_bundle() -> None:
    assert device_bundles.bundle_folder("nvidia-h200") == DEFAULT_BUNDLE_DIR / "nvidia-h200"
    for device in ("nvidia-h200-sm72", "nvidia-l4", "nvidia-b200"):
        assert device_bundles.bundle_folder(device) == DEFAULT_BUNDLE_DIR / device_bundles.TRANSFER_BUNDLE


def test_without_either_the_error_names_both_folders(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no model bundle predicts nvidia-l4") as info:
        device_bundles.load_predictor("l4", tmp_path)
    assert str(tmp_path / "nvidia-l4") in str(info.value) and "transfer" in str(info.value)


def test_a_broken_own_bundle_is_never_covered_by_the_transfer_bundle(tmp_path: Path) -> None:
    """Every catalog GPU gets a predictor; a device whose own folder is there but did not load
    gets none, so its failure shows instead of a silent switch to another model. A CPU is
    never the transfer bundle's (the transfer model knows GPUs)."""
    shutil.copytree(DEFAULT_BUNDLE_DIR / "transfer", tmp_path / "transfer")
    loaded = device_bundles.load_all(tmp_path)
    assert set(loaded) == {d for d, spec in DEVICES.items() if spec.kind == "gpu"}
    assert loaded["nvidia-h200"].provenance == "measured" and loaded["nvidia-l4"].provenance == "transferred"
    only_transfer = {device_bundles.TRANSFER_BUNDLE: loaded["nvidia-l4"]}
    assert "nvidia-h200" not in device_bundles.expand_transfer(only_transfer, own=["nvidia-h200"])
    assert "nvidia-h200" in device_bundles.expand_transfer(only_transfer)
