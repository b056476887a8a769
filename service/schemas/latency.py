"""``GET /v1/latency``: predictions addressed by a short URL, for spreadsheets.

Every parameter may list several comma-separated values; the grid of all combinations is
answered (rows in the order model, device, batch, precision, mode, host), so one ``IMPORTDATA``
cell fills a table. ``txt`` answers one plain number, for Excel's ``WEBSERVICE``. The ``host``
column comes last, so a sheet that reads columns by position keeps reading the same ones; it
names the host profile of eager rows and is empty for CUDA-graph rows, which no host issues.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from predictor.compose import MODES
from predictor.host_profile import ID_PATTERN as HOST_ID_PATTERN
from predictor.precision import PRECISIONS
from service.schemas.common import RequestModel

CSV_COLUMNS = ("model", "device", "batch", "precision", "mode", "total_ms", "low_ms", "high_ms", "model_version",
               "host", "provenance")


def any_case(word: str) -> str:
    """A regex matching ``word`` in any letter case (ECMA-262 patterns have no case flag)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _list_of(item: str) -> str:
    """Comma-separated items, spaces allowed around each: what ``api.latency``'s split takes."""
    return f"^ *{item} *(, *{item} *)*$"


#: 1..MAX_BATCH (65,536) in digits, leading zeros allowed as int() allows them
BATCH_ITEM = "0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-6])"
NAME_ITEM = "[A-Za-z0-9][A-Za-z0-9._-]*"


def ListParam(item: str, max_length: int, **extra: Any) -> Any:  # noqa: N802 (reads as a type)
    """A comma-separated query parameter. The pattern is documented, not enforced by the model:
    the view checks each item (``api.latency``) and says what is wrong with it, which a pattern
    mismatch could not; both take the same strings. The lengths keep every URL the document
    allows (each parameter at its longest, percent-encoded) under gunicorn's request-line limit
    (``gunicorn_conf.limit_request_line``), so the server, not its HTTP parser, answers it."""
    return Field(None, max_length=max_length, json_schema_extra={"pattern": _list_of(item), **extra})


class LatencyQuery(RequestModel):
    """Query parameters; each may be a comma-separated list."""

    LOCATION = "query"

    model: str | None = ListParam(NAME_ITEM, 300, example="resnet50,bert-base",
                                  description="zoo graph name(s), e.g. resnet50,bert-base")
    graph: str | None = ListParam("[0-9a-f]{64}", 700, description="stored graph id(s) (POST /v1/graphs)")
    device: str | None = ListParam("[A-Za-z0-9][A-Za-z0-9 ._-]*", 100, example="h200",
                                   description="device id(s) or part of a name (default: the only one)")
    batch: str | None = ListParam(BATCH_ITEM, 200, example="1,8,32",
                                  description="batch size(s), e.g. 1,8,32 (default: the graph's own)")
    precision: str | None = ListParam(f"({'|'.join(any_case(p) for p in PRECISIONS)})", 60, example="fp16,bf16",
                                      description="fp32, tf32, fp16 or bf16 (default fp16)")
    mode: str | None = ListParam(f"({'|'.join(any_case(m) for m in MODES)})", 60, example="cudagraph",
                                 description="cudagraph or eager (default cudagraph)")
    host: str | None = ListParam(HOST_ID_PATTERN.strip("^$"), 300, example="h200-a1b2c3d4e5",
                                 description="host profile id(s) for eager rows (GET /v1/hosts; default: the "
                                             "bundle's own)")
    format: Literal["json", "csv", "txt"] = Field(
        "json", description="json: a list; csv: header and rows; txt: one number (total_ms; for a grid, one "
                            "per line in the csv's row order)")
