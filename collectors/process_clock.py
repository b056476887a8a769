"""When this process started, on the ``time.perf_counter()`` clock: a command's budget that a
user times from the shell (issue #12's 15 s for ``latpred host probe``) counts Python's own
start and the imports before the command's first line too."""

from __future__ import annotations

import os
import time


def process_started() -> float:
    """The ``time.perf_counter()`` value at which this process started: its start time in
    /proc/self/stat (clock ticks since boot) against /proc/uptime, on Linux, to 10 ms; where
    /proc cannot say, now."""
    try:
        with open("/proc/self/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces and ')'
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        age_s = uptime_s - int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return time.perf_counter()
    return time.perf_counter() - min(max(age_s, 0.0), 365 * 86400.0)


#: a process older than this when a command starts is not the command's own (a test's CliRunner,
#: a long-lived caller): its budget then counts from the command's first line
COMMAND_STARTUP_S = 60.0


def command_started() -> float:
    """Where a command's budget counts from: its process's start, unless that is more than
    COMMAND_STARTUP_S ago (the command runs inside an older process), then now."""
    now = time.perf_counter()
    started = process_started()
    return started if now - started <= COMMAND_STARTUP_S else now
