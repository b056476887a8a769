"""``GET /v1/latency``: predictions addressed by a short URL, for spreadsheets.

Every parameter may list several comma-separated values; the grid of all combinations is
answered (rows in the order model, device, batch, precision, mode, host), so one ``IMPORTDATA``
cell fills a table. ``txt`` answers one plain number, for Excel's ``WEBSERVICE``. The ``host``
column comes last, so a sheet that reads columns by position keeps reading the same ones; it
names the host profile of eager rows and is empty for CUDA-graph rows, which no host issues.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from service.schemas.common import RequestModel

CSV_COLUMNS = ("model", "device", "batch", "precision", "mode", "total_ms", "low_ms", "high_ms", "model_version",
               "host")
ListParam = Annotated[str, Field(max_length=2048)]


class LatencyQuery(RequestModel):
    """Query parameters; each may be a comma-separated list."""

    LOCATION = "query"

    model: ListParam | None = Field(None, description="zoo graph name(s), e.g. resnet50,bert-base",
                                    json_schema_extra={"example": "resnet50,bert-base"})
    graph: ListParam | None = Field(None, description="stored graph id(s) (POST /v1/graphs)")
    device: ListParam | None = Field(None, description="device id(s) or part of a name (default: the only one)",
                                     json_schema_extra={"example": "h200"})
    batch: ListParam | None = Field(None, description="batch size(s), e.g. 1,8,32 (default: the graph's own)",
                                    json_schema_extra={"example": "1,8,32"})
    precision: ListParam | None = Field(None, description="fp32, tf32, fp16 or bf16 (default fp16)",
                                        json_schema_extra={"example": "fp16,bf16"})
    mode: ListParam | None = Field(None, description="cudagraph or eager (default cudagraph)",
                                   json_schema_extra={"example": "cudagraph"})
    host: ListParam | None = Field(None, description="host profile id(s) for eager rows (GET /v1/hosts; "
                                                   "default: the bundle's own)",
                                   json_schema_extra={"example": "h200-a1b2c3d4e5"})
    format: Literal["json", "csv", "txt"] = Field("json", description="json: a list; csv: header and rows; "
                                                                     "txt: one number (one combination only)")
