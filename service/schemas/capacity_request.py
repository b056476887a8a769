"""``POST /v1/capacity``: a capacity plan asked in a JSON body, the one way to send a recorded load.

The GET's query is for spreadsheets; a trace of arrival times (``arrival_times``: up to a million
seconds) cannot ride in a URL, and a graph as JSON IR is more than one. So the POST takes what the
GET takes, as JSON values (numbers as numbers, a list of loads or objectives as a list), plus the
graph as ``GraphSource`` takes it (inline, a zoo name or a stored id) and the trace.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, Strict, WithJsonSchema

from predictor.capacity.instance_sharing import MAX_INSTANCES
from predictor.capacity.load_trace import MIN_TRACE_REQUESTS
from predictor.capacity.planner import DELAY_US_CHOICES, MAX_ARRIVAL_CV, MAX_BATCH_CHOICES, MAX_GPUS, MIN_ARRIVAL_CV
from predictor.capacity.simulator import DEFAULT_SCHEDULER, MAX_RATE_QPS, PlanFor, Scheduler
from predictor.host_profile import ID_PATTERN as HOST_ID_PATTERN
from predictor.validation import INTEGRAL_FLOAT
from predictor.variant import DEFAULT_MODE, DEFAULT_PRECISION, Mode, Precision
from service.schemas.capacity import (
    BATCH_LIMIT_DESCRIPTION,
    DEFAULT_MAX_GPUS,
    DELAY_LIMIT_DESCRIPTION,
    MAX_INSTANCES_DESCRIPTION,
    MAX_SLO_MS,
    MAX_VALUES,
    MIN_QPS,
    MIN_SLO_MS,
    SERVING_PATH_ITEM,
    SERVING_PATHS,
)
from service.schemas.predict import GraphSource
from service.schemas.select import DEVICE_ITEM, JsonNumber

#: the most arrival times one request may carry: an hour at 55 qps, ten minutes at 330 (about 3 MB of
#: JSON). A plan replays its GPU's whole share in every run, so a worker's memory and time grow with the
#: trace: a million times took 8.7 s and 440 MB more (2026-12-07, this workplace's EPYC), 100,000 2.3 s.
#: A longer trace is planned with ``latpred capacity --arrival-trace``, in the user's own process.
MAX_TRACE_TIMES = 200_000



def _one_or_list(value: Any) -> Any:
    """A bare value as a list of one: ``"qps": 100`` and ``"qps": [100]`` ask the same (and ``"qps": "100"``
    is refused as ``qps[0]``, not a number, rather than as not a list)."""
    return value if isinstance(value, list) else [value]


def numbers_or_list(low: float, high: float, exclusive_low: bool) -> Any:
    """A number in [low, high] (or above ``low``), or a list of 1 to MAX_VALUES of them: validated as
    the list (an error names ``qps[2]``, not a branch of a union), documented as either."""
    bound = {"exclusiveMinimum" if exclusive_low else "minimum": low, "maximum": high}
    item = Annotated[float, Strict(), Field(gt=low, le=high, allow_inf_nan=False) if exclusive_low
                     else Field(ge=low, le=high, allow_inf_nan=False)]
    number = {"type": "number", **bound}
    return Annotated[list[item], Field(min_length=1, max_length=MAX_VALUES),
                     BeforeValidator(_one_or_list),
                     WithJsonSchema({"anyOf": [number, {"type": "array", "items": number, "minItems": 1,
                                                        "maxItems": MAX_VALUES}]})]


Loads = numbers_or_list(MIN_QPS, MAX_RATE_QPS, exclusive_low=False)
Objectives = numbers_or_list(MIN_SLO_MS, MAX_SLO_MS, exclusive_low=False)


class CapacityRequest(GraphSource):
    """Body of ``POST /v1/capacity``: one graph, loads and objectives, and how requests arrive."""

    device: Annotated[str, Field(pattern=f"^{DEVICE_ITEM}$", max_length=100)] | None = Field(
        default=None, description="device id or part of a name (GET /v1/devices; default: the H200)")
    precision: Precision = DEFAULT_PRECISION  # type: ignore[valid-type]
    mode: Mode = DEFAULT_MODE  # type: ignore[valid-type]
    host: Annotated[str, Field(pattern=HOST_ID_PATTERN, max_length=100)] | None = Field(
        default=None, description="host profile id for an eager plan (GET /v1/hosts; default: the bundle's)")
    qps: Loads | None = Field(  # type: ignore[valid-type]
        default=None, description=f"the load(s) to serve, requests per second of one sample each (up to "
                                  f"{MAX_VALUES}); with arrival_times, the rates its shape is replayed at "
                                  "(default: the trace's own); required without")
    slo_p99_ms: Objectives = Field(  # type: ignore[valid-type]
        description=f"the p99 objective(s), ms from arrival to answer (up to {MAX_VALUES}); at most 64 (qps, "
                    "slo_p99_ms) combinations a request")
    max_gpus: Annotated[int, Strict(), Field(ge=1, le=MAX_GPUS), INTEGRAL_FLOAT] = Field(
        default=DEFAULT_MAX_GPUS, description="the most GPUs a plan may use")
    serving_path: Annotated[str, Field(pattern=f"^{SERVING_PATH_ITEM}$", max_length=100)] | None = Field(
        default=None, description=f"a shipped serving path's name ({', '.join(SERVING_PATHS)}): a server's own time "
                                  "per batch added to the GPU's, and its host's pauses and drift; default: none",
        json_schema_extra={"examples": list(SERVING_PATHS)})
    batch_limit: Annotated[int, Strict(), Field(ge=1, le=max(MAX_BATCH_CHOICES)), INTEGRAL_FLOAT] | None = Field(
        default=None, description=BATCH_LIMIT_DESCRIPTION)
    max_instances: Annotated[int, Strict(), Field(ge=1, le=MAX_INSTANCES), INTEGRAL_FLOAT] | None = Field(
        default=None, description=MAX_INSTANCES_DESCRIPTION)
    delay_limit_us: Annotated[int, Strict(), Field(ge=0, le=max(DELAY_US_CHOICES)), INTEGRAL_FLOAT] | None = Field(
        default=None, description=DELAY_LIMIT_DESCRIPTION)
    plan_for: PlanFor = Field("median", description="plan for the predicted latencies (median) or for the slow "
                                                    "end of their 90% intervals (slow_end)")
    scheduler: Scheduler = Field(DEFAULT_SCHEDULER, description="how each GPU's server forms batches: as Triton's "
                                                                "code does (triton) or by its documented rule (rule)")
    arrival_cv: JsonNumber = Field(
        default=1.0, ge=MIN_ARRIVAL_CV, le=MAX_ARRIVAL_CV, allow_inf_nan=False,
        description="coefficient of variation of the gaps between requests: 1 Poisson, 2 bursty (not with "
                    "arrival_times, which have their own)")
    arrival_times: Annotated[list[Annotated[float, Strict(), Field(allow_inf_nan=False)]],
                             Field(min_length=MIN_TRACE_REQUESTS, max_length=MAX_TRACE_TIMES)] | None = Field(
        default=None, description=f"a recorded load: its requests' arrival times in seconds (any origin, any order; "
                                  f"{MIN_TRACE_REQUESTS} to {MAX_TRACE_TIMES:,}), replayed instead of generated "
                                  "arrivals: its shape kept, its mean rate set to each qps, each GPU seeing its "
                                  "random share of the whole of it")
