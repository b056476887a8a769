"""``latpred serve`` is a lazily loaded subcommand: ``latpred --help`` imports neither flask nor torch."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from latpred import COMMANDS, main


def test_serve_is_registered_and_documents_its_options() -> None:
    assert COMMANDS["serve"][0] == "service"
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "--host" in result.output and "--port" in result.output


def test_help_does_not_import_flask_or_torch() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom latpred import main\n"
            "r = CliRunner().invoke(main, ['--help'])\n"
            "print(r.exit_code, 'serve' in r.output, 'flask' in sys.modules, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "True", "False", "False"], out.stderr


def test_a_bad_setting_is_a_clean_error(monkeypatch: object) -> None:
    result = CliRunner().invoke(main, ["serve"], env={"LATPRED_MAX_NODES": "many"})
    assert result.exit_code != 0 and "LATPRED_MAX_NODES" in result.output


def test_the_service_imports_without_torch() -> None:
    code = "import sys, service.app, service.wsgi\nprint('torch' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr
