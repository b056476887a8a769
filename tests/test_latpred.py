"""The ``latpred`` root: it assembles each package's click group and imports a package only to run
one of its commands, so an install without an extra still lists and runs the rest."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import latpred
from latpred import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]
PACKAGE_CLIS = ("collectors.cli", "predictor.cli", "training.cli", "service.cli")
HEAVY = ("torch", "flask", "xgboost", "lightgbm", "mlflow")


def python(code: str, **env: str) -> list[str]:
    """Run ``code`` in a fresh interpreter at the repository root; its stdout, line by line."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_help_lists_every_command_and_imports_no_package() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom latpred import main\n"
            "r = CliRunner().invoke(main, ['--help'])\nprint(r.exit_code)\n"
            f"print(sorted(m for m in {PACKAGE_CLIS + HEAVY!r} if m in sys.modules))\nprint(r.output)")
    code_out = python(code)
    assert code_out[:2] == ["0", "[]"]
    listed = "\n".join(code_out[2:])
    for name in COMMANDS:
        assert f"  {name} " in listed


@pytest.mark.parametrize("package", sorted({package for package, _ in COMMANDS.values()}))
def test_each_package_group_holds_exactly_the_commands_routed_to_it(package: str) -> None:
    group = importlib.import_module(f"{package}.cli").commands
    assert isinstance(group, click.Group)
    routed = {name for name, (owner, _) in COMMANDS.items() if owner == package}
    assert set(group.commands) == routed
    for name in routed:  # the root's listing says what the command's own help says
        first_paragraph = " ".join((group.commands[name].help or "").split("\n\n")[0].split())
        assert COMMANDS[name][1] == first_paragraph


def test_running_a_command_imports_only_its_package() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom latpred import main\n"
            "r = CliRunner().invoke(main, ['devices'])\nprint(r.exit_code)\n"
            f"print(sorted(m for m in {PACKAGE_CLIS + ('torch', 'flask', 'mlflow')!r} if m in sys.modules))")
    assert python(code) == ["0", "['predictor.cli']"]


def test_a_package_that_cannot_load_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "training.cli", None)  # as if its import failed
    result = CliRunner().invoke(main, ["train", "--help"])
    assert result.exit_code == 1
    assert "'latpred train' needs a part of latpred that is not installed here" in result.output
    assert "latpred[train]" in result.output and "Traceback" not in result.output


def test_a_dependency_missing_at_run_time_names_the_extra() -> None:
    code = ("import sys\nsys.modules['flask'] = None\nfrom click.testing import CliRunner\n"
            "from latpred import main\nr = CliRunner().invoke(main, ['serve'])\n"
            "print(r.exit_code)\nprint(r.output)")
    out = python(code)
    assert out[0] == "1"
    assert "this command needs flask, which is not installed" in out[1] and "latpred[serve]" in out[1]


def test_python_m_latpred_runs_from_a_checkout() -> None:
    """The GPU machine runs ``PYTHONPATH=$PWD python -m latpred`` without installing latpred."""
    out = subprocess.run([sys.executable, "-m", "latpred", "devices"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("nvidia-h200\t") for line in out.stdout.splitlines())
    assert Path(latpred.__file__).resolve() == REPO / "latpred.py"
