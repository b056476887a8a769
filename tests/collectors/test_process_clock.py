"""The process clock: a command's budget counts from its process's start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from collectors.process_clock import COMMAND_STARTUP_S, command_started, process_started

ROOT = Path(__file__).resolve().parents[2]


def test_a_process_counts_from_its_own_start() -> None:
    code = ("import time; time.sleep(0.5); from collectors.process_clock import process_started; "
            "print(time.perf_counter() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout)
    assert 0.45 <= age < 10.0  # the half second slept before it asked, Python's start, 10 ms ticks


def test_this_process_started_before_now() -> None:
    assert process_started() <= time.perf_counter()


def test_a_command_inside_an_older_process_counts_from_its_first_line() -> None:
    # pytest's process is older than a command's start-up by the time this runs, or not: either way
    # the budget starts no earlier than COMMAND_STARTUP_S ago
    assert time.perf_counter() - command_started() <= COMMAND_STARTUP_S + 1.0
    code = ("import time; from collectors.process_clock import command_started, process_started; "
            "print(command_started() == process_started() or abs(command_started() - process_started()) < 0.02)")
    fresh = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert fresh.strip() == "True"  # a new process: from its own start
