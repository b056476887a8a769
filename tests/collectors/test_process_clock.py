"""The process clock: a command's budget counts from its process's start."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from collectors.process_clock import process_started

ROOT = Path(__file__).resolve().parents[2]


def test_a_process_counts_from_its_own_start() -> None:
    code = ("import time; time.sleep(0.5); from collectors.process_clock import process_started; "
            "print(time.perf_counter() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout)
    assert 0.45 <= age < 10.0  # the half second slept before it asked, Python's start, 10 ms ticks


def test_this_process_started_before_now() -> None:
    assert process_started() <= time.perf_counter()
