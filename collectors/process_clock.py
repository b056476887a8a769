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
