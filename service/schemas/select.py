"""Request and response models of hardware selection: ``POST /v1/select`` and ``GET /v1/select``.

Both take one graph at one batch size, precision and mode, and optional constraints (a p99
objective, a minimum throughput per device, a subset of devices); both answer the devices ranked
by cost per million inferences (``predictor.selection``). The GET is for spreadsheets: a zoo name
or a stored graph's id, plain decimals, and ``format=csv`` (one row per device, in rank order) or
``format=txt`` (the chosen device's id, or ``none``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, Strict

from predictor.host_profile import ID_PATTERN as HOST_ID_PATTERN
from predictor.selection import MAX_SLO_MS, MAX_THROUGHPUT_QPS
from predictor.validation import INTEGRAL_FLOAT
from predictor.variant import DEFAULT_MODE, DEFAULT_PRECISION, MAX_BATCH, Mode, Precision
from service.schemas.capacity import (
    QPS_ITEM,
    SERVING_PATHS,
    SLO_ITEM,
    Text,
    graph_name_text,
    host_text,
    list_of,
    mode_text,
    one_of,
    precision_text,
    serving_path_text,
)
from service.schemas.common import RequestModel, ResponseModel
from service.schemas.predict import GraphSource

#: devices one request may name (the catalog holds a few dozen)
MAX_DEVICES = 64
#: a device id as the catalog writes them (predictor.device_catalog.ID_PATTERN)
DEVICE_ITEM = "[a-z0-9]+(-[a-z0-9]+)*"
#: the objective and throughput a GET takes: the capacity query's decimals (at most 1,000,000 ms and
#: 10,000,000 per second), within what predictor.selection takes
MAX_QUERY_SLO_MS = 1_000_000
MAX_QUERY_THROUGHPUT = 10_000_000
#: a JSON body's number: 8 or 8.5, never "8" or true
JsonNumber = Annotated[float, Strict()]


#: what ``serving_path`` in a selection request means
SERVING_PATH_DESCRIPTION = (f"a shipped serving path's name ({', '.join(SERVING_PATHS)}): a server's own time per "
                            "batch (PyTriton's, fitted on H100 hosts) added to every device's, so that the devices are "
                            "ranked as the served model, not the GPU alone; each sample of the batch counts as one "
                            "request, as a dynamic batcher forms it; the host's pauses and drift, which make queues, "
                            "are capacity planning's and left out; default: none")

class SelectConstraints(RequestModel):
    """What the device must do beside fitting the model (all optional)."""

    slo_p99_ms: JsonNumber | None = Field(default=None, gt=0, le=MAX_SLO_MS, allow_inf_nan=False,
                                     description="p99 of one batch's latency must be at most this (ms)")
    min_throughput_qps: JsonNumber | None = Field(default=None, gt=0, le=MAX_THROUGHPUT_QPS, allow_inf_nan=False,
                                             description="inferences a second one device must serve, batches "
                                                         "back to back")
    devices: list[Annotated[str, Field(pattern=f"^{DEVICE_ITEM}$", max_length=100)]] | None = Field(
        default=None, min_length=1, max_length=MAX_DEVICES,
        description="devices to choose among, by id or part of a name as `device` takes them (GET /v1/devices); "
                    "default: every device a bundle predicts")


class SelectRequest(GraphSource, SelectConstraints):
    """One graph (JSON IR, zoo name or stored id) at one batch size, precision and mode."""

    batch: Annotated[int, Strict(), Field(ge=1, le=MAX_BATCH), INTEGRAL_FLOAT] | None = Field(
        default=None, description="batch size (default: the graph's own)")
    precision: Precision = DEFAULT_PRECISION  # type: ignore[valid-type]
    mode: Mode = DEFAULT_MODE  # type: ignore[valid-type]
    host: Annotated[str, Field(pattern=HOST_ID_PATTERN, max_length=100)] | None = Field(
        default=None, description="host profile id for eager (GET /v1/hosts; default: the bundle's)")
    serving_path: Annotated[str, Field(max_length=100)] | None = Field(
        default=None, description=SERVING_PATH_DESCRIPTION, json_schema_extra={"examples": list(SERVING_PATHS)})


class SelectQuery(RequestModel):
    """Query parameters of ``GET /v1/select``."""

    LOCATION = "query"

    model: str = graph_name_text()
    batch: int | None = Field(default=None, ge=1, le=MAX_BATCH, description="batch size (default: the graph's own)")
    precision: str | None = precision_text()
    mode: str | None = mode_text("cudagraph or eager (default cudagraph)")
    host: str | None = host_text()
    slo_p99_ms: str | None = Text(one_of(SLO_ITEM), 40, example="5",
                                  description=f"p99 objective of one batch's latency, ms (a plain decimal up to "
                                              f"{MAX_QUERY_SLO_MS})")
    min_throughput_qps: str | None = Text(one_of(QPS_ITEM), 40, example="2000",
                                          description="inferences a second one device must serve (a plain decimal "
                                                      f"up to {MAX_QUERY_THROUGHPUT})")
    serving_path: str | None = serving_path_text(SERVING_PATH_DESCRIPTION)
    devices: str | None = Text(list_of(DEVICE_ITEM, MAX_DEVICES), 3000, example="nvidia-h200,nvidia-l4",
                               description="comma-separated device ids to choose among (default: every device a "
                                           "bundle predicts)")
    format: Literal["json", "csv", "txt"] = Field(
        "json", description="json: the selection; csv: a header and one row per device in rank order; txt: the "
                            "chosen device's id, or 'none'")


class DeviceChoiceOut(ResponseModel):
    """One device's numbers for the graph, and whether it meets the constraints."""

    rank: int = Field(description="1 for the choice; devices that meet the constraints come first")
    device: str
    name: str
    provenance: Literal["measured", "transferred"] = Field(description=(
        "'measured': predicted by models fitted on this device's runs; 'transferred': never measured, "
        "predicted from its datasheet (a wider interval)"))
    meets: bool
    reasons: list[str] = Field(description="why it does not meet the constraints (empty when it does)")
    latency_ms: float = Field(description="predicted median latency of one batch")
    low_ms: float = Field(description="lower end of the prediction's ~90% interval")
    high_ms: float = Field(description="upper end of the prediction's ~90% interval")
    p99_ms: float = Field(description="p99 of one batch's latency (the mode's run-to-run spread, or a serving "
                                      "path's where that is wider)")
    p99_low_ms: float = Field(description="the p99 at the lower end of the prediction's interval")
    p99_high_ms: float = Field(description="the p99 at the upper end of the prediction's interval")
    throughput_qps: float = Field(description="inferences a second, batches back to back")
    memory_bytes: int = Field(description="GPU memory the model needs at this batch and precision (estimated)")
    device_memory_bytes: int
    price_per_hour: float | None = Field(description="USD per GPU-hour (catalog, editable); null where unknown")
    cost_per_million: float | None = Field(description="USD per million inferences; null without a price")
    model_version: str
    host: str | None = Field(default=None, description=(
        "the host profile this device's eager prediction used, as /v1/latency names it (a CPU device predicts "
        "with its own; 'for <id>' where another profile stood in for the one asked); null for a CUDA graph"))
    warnings: list[str]


class SelectionOut(ResponseModel):
    """The devices ranked for one graph: meeting the constraints first, cheapest per inference
    first (unpriced ones after, fastest first), then the others, nearest first."""

    model: str
    batch: int
    precision: str
    mode: str
    host: str | None = Field(description="the host profile eager latencies were predicted for; null for CUDA "
                                         "graphs")
    slo_p99_ms: float | None
    min_throughput_qps: float | None
    serving_path: dict[str, Any] | None = Field(description=(
        "the serving path added to every device's batch (its stored form, name, server, label, per_batch_ms, "
        "per_request_ms, low, high, sigma, pauses, drift, note, and caution: for a path fitted on other hosts, "
        "what a plan made with it cannot promise, null for a host's own); null when the devices' time alone is ranked"))
    best: str | None = Field(description="the chosen device's id; null when none meets the constraints")
    verdict: str = Field(description="the choice in words, or that none meets the constraints and which is nearest")
    settled: bool = Field(description=(
        "whether the devices' verdicts on the constraints that the choice depends on hold at either end of their "
        "~90% intervals: the chosen device meets the constraints at the slow end of its interval, and every device "
        "that would come before it misses them at the fast end of its own; the order by cost is the medians' "
        "between measured devices, and in doubt where a transferred one could cost less at the fast end of its "
        "interval than the choice at the slow end of its own"))
    doubts: list[str] = Field(description="what the intervals leave open when the choice is not settled: each "
                                          "device and the end of its interval at which it would change the choice")
    ranked: list[DeviceChoiceOut]
    skipped: dict[str, str] = Field(description="devices that cannot run this precision, with why")
