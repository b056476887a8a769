"""Run a list of configurations through a measuring function, resumably.

Rows are buffered and flushed as shards every ``flush_every`` rows or ``flush_seconds``.
Ctrl-C, SIGTERM and a time budget flush what was measured and stop cleanly; a SIGKILL or crash
loses only the unflushed buffer, which the next run measures again (ids on disk are skipped),
so no row is lost or duplicated. A configuration that raises is the measuring function's to
record as a failed row: the sweep itself never stops for one configuration. ``measure`` returns
the configuration's row. (Whole-model runs are not swept one unit at a time: they are timed in
interleaved rounds, ``collectors.model_runs``.)
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tqdm import tqdm

from collectors.shards import ShardStore


class Identified(Protocol):
    @property
    def config_id(self) -> str: ...


@dataclass(frozen=True)
class SweepReport:
    """What one run of a sweep did."""

    planned: int
    already_done: int
    measured: int
    failed: int
    seconds: float
    stopped: str  # "complete", "budget", "interrupted"

    @property
    def per_second(self) -> float:
        return self.measured / self.seconds if self.seconds > 0 else 0.0


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_sweep(
    configs: Sequence[Identified],
    store: ShardStore,
    measure: Callable[[Any], dict],
    *,
    flush_every: int = 1000,
    flush_seconds: float = 30.0,
    budget_s: float | None = None,
    progress: bool | None = None,
    description: str = "sweep",
) -> SweepReport:
    """Measure every configuration whose id is not yet in ``store``; see the module docstring."""
    done = store.completed_ids()
    todo = [c for c in configs if c.config_id not in done]
    buffer: list[dict] = []
    measured = failed = 0
    stopped = "complete"
    started = last_flush = time.perf_counter()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    disable = (not sys.stderr.isatty()) if progress is None else not progress
    bar = tqdm(total=len(todo), desc=description, unit="cfg", disable=disable, mininterval=1.0)
    try:
        for cfg in todo:
            if budget_s is not None and time.perf_counter() - started > budget_s:
                stopped = "budget"
                break
            row = measure(cfg)
            buffer.append(row)
            measured += 1
            failed += row.get("status") == "failed"
            bar.update(1)
            if len(buffer) >= flush_every or time.perf_counter() - last_flush > flush_seconds:
                # Hand the rows over before writing: an interrupt landing after the shard is
                # renamed into place must not make the ``finally`` below write them again.
                pending, buffer = buffer, []
                try:
                    store.write(pending)
                except BaseException:
                    buffer = pending + buffer  # the ``finally`` below writes what is not on disk
                    raise
                last_flush = time.perf_counter()
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, previous)
        bar.close()
        if buffer:
            # An interrupt can land after a shard was renamed into place but before its rows
            # left the buffer: write only what is not on disk yet.
            on_disk = store.completed_ids()
            remaining = [row for row in buffer if row.get(store.key) not in on_disk]
            if remaining:
                store.write(remaining)
    return SweepReport(len(configs), len(done), measured, failed, time.perf_counter() - started, stopped)
