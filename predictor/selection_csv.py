"""One selection as CSV: the columns and cells that ``GET /v1/select?format=csv`` and
``latpred select --format csv`` both write.

Why one place: a capacity planner builds a sheet on one of them and feeds it the other's output
(a CLI export today, the service's URL tomorrow); two writers had drifted apart in their columns,
their order and their decimals. Text cells are escaped as every CSV latpred writes
(``spreadsheet_cells``); numbers are written bare with four decimals.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from predictor.selection import DeviceChoice, Selection
from predictor.spreadsheet_cells import SpreadsheetWriter, Writable, fixed

#: the columns, in order: a row per device in rank order. New columns go at the end, so that a sheet
#: that reads cells by position keeps working.
CSV_COLUMNS = ("rank", "device", "name", "provenance", "meets", "reasons", "latency_ms", "low_ms", "high_ms", "p99_ms",
               "throughput_qps", "memory_gib", "device_memory_gib", "price_per_hour", "cost_per_million",
               "model", "batch", "precision", "mode", "host", "model_version", "p99_low_ms", "p99_high_ms", "settled",
               "serving_path")


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _cells(s: Selection, rank: int, c: DeviceChoice) -> dict[str, Any]:
    return {
        "rank": rank, "device": c.device, "name": c.name, "provenance": c.provenance, "meets": _flag(c.meets),
        "reasons": "; ".join(c.reasons), "latency_ms": fixed(c.latency_ms), "low_ms": fixed(c.low_ms),
        "high_ms": fixed(c.high_ms), "p99_ms": fixed(c.p99_ms), "throughput_qps": fixed(c.throughput_qps),
        "memory_gib": fixed(c.memory_bytes / 2**30), "device_memory_gib": fixed(c.device_memory_bytes / 2**30),
        "price_per_hour": "" if c.price_per_hour is None else fixed(c.price_per_hour),
        "cost_per_million": "" if c.cost_per_million is None else fixed(c.cost_per_million),
        "model": s.model, "batch": s.batch, "precision": s.precision, "mode": s.mode, "host": s.host or "",
        "model_version": c.model_version, "p99_low_ms": fixed(c.p99_low_ms), "p99_high_ms": fixed(c.p99_high_ms),
        "settled": _flag(s.settled), "serving_path": s.serving_path.name if s.serving_path is not None else "",
    }


def selection_rows(s: Selection) -> Iterator[list[Any]]:
    """The header, then one row per ranked device (devices skipped have no row)."""
    yield list(CSV_COLUMNS)
    for rank, choice in enumerate(s.ranked, 1):
        cells = _cells(s, rank, choice)
        yield [cells[column] for column in CSV_COLUMNS]


def write_selection_csv(s: Selection, stream: Writable, lineterminator: str = "\r\n") -> None:
    """The selection as CSV on ``stream`` (RFC 4180's CRLF by default; a terminal takes '\\n')."""
    writer = SpreadsheetWriter(stream, lineterminator=lineterminator)
    for row in selection_rows(s):
        writer.writerow(row)
