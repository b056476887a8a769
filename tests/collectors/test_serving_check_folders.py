"""The serving check's folders: where a run with a set number of torch threads goes, and what is
refused before anything is written. (Serving itself is measured on the GPU machine:
tests/collectors/test_gpu.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from click.testing import CliRunner

from collectors.serving_check import run_serving_check
from latpred import main


def test_a_run_with_set_threads_goes_to_a_folder_of_its_own_and_says_so(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    try:
        folder = run_serving_check(tmp_path, "cpu", models=[], threads=1)
    finally:
        torch.set_num_threads(before)
    assert folder.name == "serving-threads1"
    assert json.loads((folder / "meta.json").read_text())["threads"] == 1
    default = run_serving_check(tmp_path, "cpu", models=[])
    assert default.name == "serving" and default.parent == folder.parent
    assert json.loads((default / "meta.json").read_text())["threads"] == before


def test_threads_below_one_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    try:
        run_serving_check(tmp_path, "cpu", models=[], threads=0)
    except ValueError as exc:
        assert "threads must be at least 1" in str(exc)
    else:
        raise AssertionError("threads=0 was accepted")
    assert not list(tmp_path.iterdir())
    result = CliRunner().invoke(main, ["collect", "serving", "--out", str(tmp_path), "--device", "cpu",
                                       "--threads", "0"])
    assert result.exit_code == 2 and "--threads" in result.output
    assert not list(tmp_path.iterdir())


def test_a_folder_with_loads_is_not_relabelled_by_a_run_with_other_settings(tmp_path: Path) -> None:
    from collectors.batching_server import ServerSettings
    from collectors.serving_check import SETTINGS

    folder = run_serving_check(tmp_path, "cpu", models=[])
    meta = (folder / "meta.json").read_text()
    (folder / "requests-resnet101-fp16.parquet").write_bytes(b"measured before")
    other = (ServerSettings.parse("mb16-delay500us"),)
    result = CliRunner().invoke(main, ["collect", "serving", "--out", str(tmp_path), "--device", "cpu",
                                       "--models", "resnet101", "--setting", "mb16-delay500us"])
    assert result.exit_code != 0 and "other settings" in result.output
    try:
        run_serving_check(tmp_path, "cpu", models=[], settings=other)
    except ValueError as exc:
        assert "another --out" in str(exc)
    else:
        raise AssertionError("other settings were written over a folder that holds loads")
    assert (folder / "meta.json").read_text() == meta
    assert run_serving_check(tmp_path, "cpu", models=[], settings=SETTINGS) == folder  # the same run resumes


def test_a_folder_measured_before_settings_had_instances_resumes_as_one_instance(tmp_path: Path) -> None:
    from collectors.serving_check import SETTINGS

    folder = run_serving_check(tmp_path, "cpu", models=[])
    meta = json.loads((folder / "meta.json").read_text())
    assert all(s["instances"] == 1 for s in meta["settings"])
    for setting in meta["settings"]:  # as meta.json was written until settings had an instance count
        del setting["instances"]
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "requests-resnet101-fp16.parquet").write_bytes(b"measured before")
    assert run_serving_check(tmp_path, "cpu", models=[], settings=SETTINGS) == folder


def test_our_own_server_refuses_several_instances_and_names_where_to_serve_them(tmp_path: Path) -> None:
    from collectors.batching_server import ServerSettings

    result = CliRunner().invoke(main, ["collect", "serving", "--out", str(tmp_path), "--device", "cpu",
                                       "--models", "resnet101", "--setting", "mb4-nodelay-x2"])
    assert result.exit_code != 0 and "mb4-nodelay-x2" in result.output and "--server triton" in result.output
    try:
        run_serving_check(tmp_path, "cpu", models=[], settings=(ServerSettings.parse("mb4-nodelay-x2"),))
    except ValueError as exc:
        assert "one model instance" in str(exc)
    else:
        raise AssertionError("our own server accepted two instances")
    assert not list(tmp_path.iterdir())
