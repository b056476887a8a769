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
- **the whole of it**: the trace is replayed pass after pass (each pass's requests sent to this GPU
  afresh at random) until the plan's request count at least is measured and the last pass is whole
  (a short trace split over many GPUs takes many passes), and the tenth of the run that warms the
  simulated server up (left out of its statistics) is the share's own end placed before its start,
  so every request of the trace is counted, its peak included wherever it falls. A trace of a
  million requests therefore costs a million simulated requests per run on one GPU: a plan does
  not start a run past its budget of simulated requests (``planner.DEFAULT_BUDGET``), and says so.

A trace file holds one arrival time in seconds per line (any origin: seconds since the log began,
or epoch seconds), or is a CSV whose header names an ``arrival_s`` column; blank lines and lines
starting with ``#`` are skipped, and the times are sorted (a log written by several threads is
seldom in order). A byte-order mark (Excel's "CSV UTF-8") is skipped too.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from predictor.capacity.simulator import MAX_RATE_QPS, MAX_REQUESTS, WARMUP_FRACTION, is_finite_number, is_int

#: Fewer arrivals than this say little about bursts: an ``arrival_cv`` says as much, and honestly.
MIN_TRACE_REQUESTS = 100
#: More than this, and one GPU's run of the whole trace with its warm-up is past the simulator's most.
MAX_TRACE_REQUESTS = 9_000_000
#: A trace slower than this (one request in over 16 minutes, as ``GET /v1/capacity``'s smallest qps) is
#: surely in other units than seconds.
MIN_TRACE_RATE_QPS = 0.001
#: The column a CSV trace's arrival times are read from.
TRACE_COLUMN = "arrival_s"
#: Bytes of a trace file read at most: 9 million times of 20 characters.
MAX_TRACE_FILE_BYTES = 180 * 2**20


@dataclass(frozen=True, eq=False)  # equal and hashed by identity: the plans of one Runs share one trace
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
        if len(times) > MAX_TRACE_REQUESTS:
            raise ValueError(f"arrival_times: {len(times):,} arrivals is more than {MAX_TRACE_REQUESTS:,} (a run "
                             f"replays one GPU's share of it whole, with a tenth more to warm up; at most "
                             f"{MAX_REQUESTS:,})")
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
        (times in seconds, how many of the first of them warm the server up).

        The trace is replayed pass after pass (a mean gap between passes), each request of each pass
        sent to this GPU with probability 1 / ``gpus``, until at least ``requests`` were sent here and
        the pass the last of them fell in is whole; before them, a warm-up of the share's own end. The
        requests sent here are drawn as geometric gaps between their indices (pass x trace + request),
        so the cost is the share's, whatever ``gpus``: a 100-request trace over 100,000 GPUs draws
        20,000 numbers, not two billion."""
        if not is_finite_number(qps) or not 0 < qps <= MAX_RATE_QPS * gpus:
            raise ValueError(f"qps: must be a positive number of requests per second, not {qps!r}")
        if not is_int(gpus) or gpus < 1:
            raise ValueError(f"gpus: must be a positive integer, not {gpus!r}")
        if not is_int(requests) or requests < 1:
            raise ValueError(f"requests: must be a positive integer, not {requests!r}")
        n = self.requests
        scale = self.rate_qps / qps  # stretched (> 1) or squeezed so that its mean rate is qps
        period = (self.span_s + self.mean_gap_s) * scale  # one pass, then a mean gap before the next
        if gpus == 1:
            index = np.arange(math.ceil(requests / n) * n, dtype=np.int64)
        else:
            index = _thinned_passes(n, gpus, requests, np.random.default_rng(np.random.SeedSequence([seed, gpus])))
        passes = int(index[-1]) // n + 1
        measured = self.times_s[index % n] * scale + (index // n) * period
        warm = min(math.ceil(len(measured) * WARMUP_FRACTION / (1 - WARMUP_FRACTION)), len(measured) - 1)
        if len(measured) + warm > MAX_REQUESTS:
            raise ValueError(f"arrival_trace: one GPU's share of {self.name} is {len(measured):,} requests, more than "
                             f"a run of {MAX_REQUESTS:,} with its warm-up: give a shorter trace")
        before = measured[len(measured) - warm:] - passes * period  # the share's end, just before its start
        times = np.concatenate([before, measured])
        return times - times[0], warm


def _thinned_passes(n: int, gpus: int, requests: int, rng: np.random.Generator) -> np.ndarray:
    """The indices (pass x n + request) that one of ``gpus`` GPUs gets of a trace of ``n`` replayed
    pass after pass, each request to it with probability 1 / ``gpus``: at least ``requests`` of them,
    up to the end of the pass the last of those is in. Geometric gaps between the indices, drawn in
    chunks of about what is still wanted."""
    chunks: list[np.ndarray] = []
    last, kept, end = -1, 0, -1
    while end < 0 or last < end:
        wanted = requests - kept if end < 0 else math.ceil((end - last) / gpus)
        gaps = rng.geometric(1.0 / gpus, max(wanted + 4 * math.isqrt(max(wanted, 1)), 16))
        chunk = last + np.cumsum(gaps, dtype=np.int64)
        chunks.append(chunk)
        last, kept = int(chunk[-1]), kept + len(chunk)
        if end < 0 and kept >= requests:
            nth = int(np.concatenate(chunks)[requests - 1])
            end = (nth // n + 1) * n - 1  # the last index of that pass
    index = np.concatenate(chunks)
    return index[index <= end]


def parse_load_trace(text: str, name: str) -> LoadTrace:
    """A trace from a file's text (the module docstring's format), or ValueError naming the line."""
    lines = [(number, line.strip()) for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1)]
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
            raise ValueError(f"{path}: {size:,} bytes is more than a trace of {MAX_TRACE_REQUESTS:,} arrival times")
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: is not text (one arrival time in seconds per line, or a CSV)") from None
    return parse_load_trace(text, path.name)


def trace_from_times(times: Sequence[float], name: str = "arrival_times") -> LoadTrace:
    """A trace from a list of arrival times in seconds (a request's ``arrival_times``, numbers by its
    schema); ``LoadTrace`` names the first one that is not finite."""
    try:
        values = np.asarray(times, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("arrival_times: must be a list of numbers of seconds") from None
    return LoadTrace(values, name)


def checked_trace(arrival_trace: object, arrival_cv: float) -> LoadTrace | None:
    """``arrival_trace`` as the plans, grids and load curves take it (a LoadTrace or None), or ValueError
    naming it, or naming ``arrival_cv`` when both are given: a trace has its own gaps."""
    if arrival_trace is None:
        return None
    if not isinstance(arrival_trace, LoadTrace):
        raise ValueError(f"arrival_trace: must be a LoadTrace or None, not {type(arrival_trace).__name__}")
    if arrival_cv != 1:
        raise ValueError("arrival_cv: give arrival_cv or arrival_trace, not both (a trace has its own gaps)")
    return arrival_trace


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _cell(line: str, column: int) -> str:
    cells = next(csv.reader(io.StringIO(line)))
    return cells[column].strip() if column < len(cells) else ""


__all__: Sequence[str] = ["MAX_TRACE_REQUESTS", "MIN_TRACE_REQUESTS", "TRACE_COLUMN", "LoadTrace", "checked_trace",
                          "parse_load_trace", "read_load_trace", "trace_from_times"]
