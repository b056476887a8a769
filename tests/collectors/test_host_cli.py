"""``latpred host probe`` and ``latpred predict --host`` through the real CLI and the shipped bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from latpred import main
from predictor.bundle import DEFAULT_BUNDLE_DIR
from predictor.host_profile import parse_profile

BUNDLE_META = DEFAULT_BUNDLE_DIR / "nvidia-h200" / "metadata.json"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def user_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "hosts"
    monkeypatch.setenv("LATPRED_HOSTS_DIR", str(folder))
    return folder


def eager_ms(*args: str) -> tuple[float, str]:
    result = run("predict", "resnet18", "--batch", "1", "--mode", "eager", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.splitlines()[0])
    return data["total_ms"], data["host"]


def test_a_saved_cpu_estimate_is_found_by_id_and_slows_the_forward_it_should(user_hosts: Path) -> None:
    result = run("host", "probe", "--cpu-only", "--save", "--note", "this CI box")
    assert result.exit_code == 0, result.output
    profile = parse_profile(json.loads(result.stdout))
    assert profile.label == "estimated" and profile.note == "this CI box"
    assert (user_hosts / f"{profile.id}.json").is_file()
    default_ms, default_host = eager_ms()
    ms, host = eager_ms("--host", profile.id)
    assert profile.id in host and "estimated" in host and default_host != host
    default = parse_profile(json.loads(BUNDLE_META.read_text())["host_profile"])
    faster = profile.costs_us["elementwise"] < default.costs_us["elementwise"]
    assert (ms < default_ms) == faster  # a slower host predicts a slower eager forward, and back


def test_a_profile_file_and_a_bundle_id_are_hosts(tmp_path: Path) -> None:
    meta = json.loads(BUNDLE_META.read_text())
    known = [i for i in meta["host_profiles"] if i != meta["host_profile"]["id"]]
    slow = dict(meta["host_profile"], id="test-slow", costs_us={k: 3 * v for k, v in
                                                                 meta["host_profile"]["costs_us"].items()})
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    base, _ = eager_ms()
    assert eager_ms("--host", str(path))[0] > base
    assert known and eager_ms("--host", known[0])[1].startswith(known[0])


@pytest.mark.parametrize(("spec", "says"), [("no-such-host", "no host profile 'no-such-host'"),
                                            ("missing.json", "not a readable JSON host profile")])
def test_an_unknown_host_is_a_usage_error_naming_the_option(spec: str, says: str) -> None:
    result = run("predict", "resnet18", "--mode", "eager", "--host", spec)
    assert result.exit_code == 2 and "--host" in result.output and says in result.output


def test_an_invalid_profile_file_names_its_field(tmp_path: Path) -> None:
    meta = json.loads(BUNDLE_META.read_text())
    bad = dict(meta["host_profile"], costs_us={k: v for k, v in meta["host_profile"]["costs_us"].items()
                                               if k != "conv"})
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    result = run("predict", "resnet18", "--mode", "eager", "--host", str(path))
    assert result.exit_code == 2 and "costs_us" in result.output and "conv" in result.output


def test_probe_writes_a_measured_profile_on_this_cpu(tmp_path: Path) -> None:
    out = tmp_path / "me.json"
    result = run("host", "probe", "--device", "cpu", "--out", str(out))
    assert result.exit_code == 0, result.output
    profile = parse_profile(json.loads(out.read_text()))
    assert profile.label == "measured" and profile.gpu is None and profile.probe_seconds is not None
    assert "probed without a GPU" in result.output and "estimated from its CPU score" in result.output


def test_no_references_is_refused_with_a_cpu_only_estimate() -> None:
    result = run("host", "probe", "--cpu-only", "--no-references")
    assert result.exit_code == 2 and "--no-references is for a measured probe" in result.output


def test_a_budget_is_for_a_measured_probe_and_at_least_a_second() -> None:
    result = run("host", "probe", "--cpu-only", "--budget-s", "30")
    assert result.exit_code == 2 and "--budget-s is for a measured probe" in result.output
    result = run("host", "probe", "--device", "cpu", "--budget-s", "0.5")
    assert result.exit_code == 2 and "--budget-s" in result.output and "0.5" in result.output


def test_a_profile_that_cannot_be_written_or_stored_is_said_and_printed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """--out in a folder that does not exist is refused before the probe (a GPU's takes 15 s);
    a store that cannot be written (LATPRED_HOSTS_DIR a file) keeps the profile on stdout."""
    result = run("host", "probe", "--cpu-only", "--out", str(tmp_path / "no-such-folder" / "p.json"))
    assert result.exit_code == 2 and "is not a folder" in result.output, result.output
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LATPRED_HOSTS_DIR", str(tmp_path / "a-file"))
    result = run("host", "probe", "--cpu-only", "--save")
    assert result.exit_code == 1 and "--save: the profile could not be stored" in result.output, result.output
    assert parse_profile(json.loads(result.stdout[:result.stdout.index("\n}") + 2])).label == "estimated"
