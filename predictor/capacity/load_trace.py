"""A recorded load: the times a service's requests arrived, replayed by capacity plans.

One number (``arrival_cv``) says how bursty traffic is on average; a log says it as it was: a spike
on the hour, a ramp, a quiet night, requests logged to the same millisecond. A plan made from a
trace (``latpred capacity --arrival-trace FILE``, ``POST /v1/capacity`` with ``arrival_times``)
replays it on each GPU:

- **its shape kept, its level set**: the trace's times are stretched or squeezed so that its mean
  rate is the qps asked (by default its own, ``rate_qps``): "how many GPUs if this traffic doubles"
  is the question capacity planners bring;
- **each GPU its random share**: every request goes to one of G GPUs at random, as the planner
  models its balancer, so one GPU's arrivals are the trace thinned to one request in G (seeded);
- **the whole of it**: the share is replayed end to end as many times as it takes to simulate the
  plan's request count at least (a short trace split over many GPUs), and the tenth of the run that
  warms the simulated server up (left out of its statistics) is the share's own end placed before
  its start, so every request of the trace is counted, its peak included wherever it falls. A
  trace of a million requests therefore costs a million simulated requests per run on one GPU:
  plans are bounded by their budget of simulated requests (``planner.DEFAULT_BUDGET``), and say so.

A trace file holds one arrival time in seconds per line (any origin: seconds since the log began,
or epoch seconds), or is a CSV whose header names an ``arrival_s`` column; blank lines and lines
starting with ``#`` are skipped, and the times are sorted (a log written by several threads is
seldom in order).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from predictor.capacity.simulator import MAX_RATE_QPS, MAX_REQUESTS, is_finite_number, is_int

#: Fewer arrivals than this say little about bursts: an ``arrival_cv`` says as much, and honestly.
MIN_TRACE_REQUESTS = 100
#: A trace slower than this (one request in over 16 minutes, as ``GET /v1/capacity``'s smallest qps) is
#: surely in other units than seconds.
MIN_TRACE_RATE_QPS = 0.001
#: The column a CSV trace's arrival times are read from.
TRACE_COLUMN = "arrival_s"
#: Bytes of a trace file read at most: 10 million times of 20 characters.
MAX_TRACE_FILE_BYTES = 200 * 2**20
#: Of a run over a trace, the share that warms the simulated server up (``simulate``'s default).
WARMUP_SHARE = 0.1


@dataclass(frozen=True)
class LoadTrace:
    """Arrival times in seconds from the first (sorted, ``times_s[0] == 0``), and where they came from."""

    times_s: np.ndarray = field(repr=False)
    name: str = "trace"

    def __post_init__(self) -> None:
        times = np.asarray(self.times_s, dtype=float)
        if times.ndim != 1:
            raise ValueError("arrival_times: must be a flat list of seconds")
        if len(times) < MIN_TRACE_REQUESTS:
            raise ValueError(f"arrival_times: {len(times)} arrivals say little about bursts; give at least "
                             f"{MIN_TRACE_REQUESTS} (or arrival_cv instead)")
        if len(times) > MAX_REQUESTS:
            raise ValueError(f"arrival_times: {len(times):,} arrivals is more than {MAX_REQUESTS:,}")
        if not np.all(np.isfinite(times)):
            first = int(np.argmax(~np.isfinite(times)))
            raise ValueError(f"arrival_times: [{first}] is {times[first]!r}, not a finite number of seconds")
        times = np.sort(times)
        with np.errstate(over="ignore"):
            times = times - times[0]
        if times[-1] <= 0:
            raise ValueError("arrival_times: every request arrives at the same instant; a trace must span some time")
        rate = (len(times) - 1) / times[-1] if np.isfinite(times[-1]) else 0.0
        if not MIN_TRACE_RATE_QPS <= rate <= MAX_RATE_QPS:
            raise ValueError(f"arrival_times: {len(times):,} requests over {times[-1]:g} s is {rate:g} requests per "
                             f"second, outside [{MIN_TRACE_RATE_QPS:g}, {MAX_RATE_QPS:g}]: are the times in seconds?")
        times.setflags(write=False)
        object.__setattr__(self, "times_s", times)

    @property
    def requests(self) -> int:
        return len(self.times_s)

    @property
    def span_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return float(self.times_s[-1])

    @property
    def mean_gap_s(self) -> float:
        return self.span_s / (self.requests - 1)

    @property
    def rate_qps(self) -> float:
        """The trace's mean rate: one request per mean gap (what it is replayed at unless a qps is asked)."""
        return 1.0 / self.mean_gap_s

    @property
    def gap_cv(self) -> float:
        """The coefficient of variation of the gaps between its requests (1 for Poisson traffic)."""
        gaps = np.diff(self.times_s)
        return float(gaps.std() / gaps.mean())

    def describe(self) -> str:
        """One line for a plan: the trace's name, size, span, rate and burstiness."""
        return (f"{self.name}: {self.requests:,} requests over {self.span_s:.4g} s ({self.rate_qps:.4g} qps; "
                f"gaps' cv {self.gap_cv:.3g})")

    def gpu_share(self, qps: float, gpus: int, seed: int, requests: int) -> tuple[np.ndarray, int]:
        """One GPU's arrivals when the trace, at ``qps`` on the whole, is split at random over ``gpus``:
        (times in seconds, how many of the first of them warm the server up). At least ``requests``
        are measured, every request of the share in as many whole passes as that takes, after a
        warm-up of the last pass's end replayed before the first."""
        if not is_finite_number(qps) or not 0 < qps <= MAX_RATE_QPS * gpus:
            raise ValueError(f"qps: must be a positive number of requests per second, not {qps!r}")
        if not is_int(gpus) or gpus < 1:
            raise ValueError(f"gpus: must be a positive integer, not {gpus!r}")
        scale = self.rate_qps / qps  # stretched (> 1) or squeezed so that its mean rate is qps
        period = (self.span_s + self.mean_gap_s) * scale  # one pass, then a mean gap before the next
        passes = max(1, math.ceil(requests * gpus / self.requests))
        if passes * self.requests > MAX_REQUESTS * gpus:
            raise ValueError(f"requests: {requests:,} a GPU over {gpus} GPUs replays a {self.requests:,}-request "
                             f"trace {passes:,} times, more than {MAX_REQUESTS:,} simulated requests")
        one = self.times_s * scale
        rng = np.random.default_rng(np.random.SeedSequence([seed, gpus]))
        measured = np.concatenate([one[rng.random(len(one)) * gpus < 1] + k * period for k in range(passes)]) \
            if gpus > 1 else np.concatenate([one + k * period for k in range(passes)])
        if len(measured) < 2:
            raise ValueError(f"gpus: a {self.requests:,}-request trace split over {gpus} GPUs leaves one GPU "
                             f"{len(measured)} of them")
        warm = math.ceil(len(measured) * WARMUP_SHARE / (1 - WARMUP_SHARE))
        warm = min(warm, len(measured) - 1)
        before = measured[-warm:] - passes * period  # the end of the last pass, just before the first
        times = np.concatenate([before, measured])
        return times - times[0], warm


def parse_load_trace(text: str, name: str) -> LoadTrace:
    """A trace from a file's text (the module docstring's format), or ValueError naming the line."""
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1)]
    lines = [(number, line) for number, line in lines if line and not line.startswith("#")]
    if not lines:
        raise ValueError(f"{name}: holds no arrival times")
    column: int | None = None
    first_number, first = lines[0]
    if not _is_number(first.split(",")[0]):
        header = next(csv.reader(io.StringIO(first)))
        names = [h.strip() for h in header]
        if TRACE_COLUMN not in names:
            raise ValueError(f"{name} line {first_number}: a header must name an '{TRACE_COLUMN}' column "
                             f"(arrival times in seconds); it names {', '.join(names)}")
        column = names.index(TRACE_COLUMN)
        lines = lines[1:]
    times = []
    for number, line in lines:
        cell = line if column is None and "," not in line else _cell(line, column or 0)
        try:
            times.append(float(cell))
        except ValueError:
            raise ValueError(f"{name} line {number}: {cell[:40]!r} is not an arrival time in seconds") from None
    try:
        return LoadTrace(np.asarray(times, dtype=float), name)
    except ValueError as exc:
        raise ValueError(f"{name}: {str(exc).removeprefix('arrival_times: ')}") from None


def read_load_trace(path: Path) -> LoadTrace:
    """The trace in ``path`` (the module docstring's format), or ValueError naming the file and line."""
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_FILE_BYTES:
            raise ValueError(f"{path}: {size:,} bytes is more than a trace of {MAX_REQUESTS:,} arrival times")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: is not text (one arrival time in seconds per line, or a CSV)") from None
    return parse_load_trace(text, path.name)


def trace_from_times(times: Sequence[float], name: str = "arrival_times") -> LoadTrace:
    """A trace from a list of arrival times in seconds (a request's ``arrival_times``)."""
    if not all(is_finite_number(t) for t in times):
        bad = next(i for i, t in enumerate(times) if not is_finite_number(t))
        raise ValueError(f"arrival_times: [{bad}] is {times[bad]!r}, not a number of seconds")
    return LoadTrace(np.asarray(times, dtype=float), name)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _cell(line: str, column: int) -> str:
    cells = next(csv.reader(io.StringIO(line)))
    return cells[column].strip() if column < len(cells) else ""


__all__: Sequence[str] = ["MIN_TRACE_REQUESTS", "TRACE_COLUMN", "LoadTrace", "parse_load_trace", "read_load_trace",
                          "trace_from_times"]
