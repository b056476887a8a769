"""``GET /v1/capacity``: a capacity plan (GPUs and Triton dynamic batching) addressed by a short URL.

``qps`` and ``slo_p99_ms`` may each list several comma-separated values; the grid of their
combinations is answered (rows in the order qps, then objective), so one ``IMPORTDATA`` cell
fills a table of loads by objectives. The model, device, precision, mode and host take one value
each: a grid over those would multiply plans, each seconds of simulation, past what one request
may cost. Numbers are plain decimals (``2500``, ``7.5``), which is what a sheet's ``&`` of a number
writes; their patterns hold the bounds the planner takes, so the document rejects what the view
would refuse. ``serving_path`` names one of the shipped serving paths (never a file: a request
does not get to name what the server reads), and its pattern lists them.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field

from predictor.capacity.instance_sharing import MAX_INSTANCES
from predictor.capacity.planner import DELAY_US_CHOICES, MAX_ARRIVAL_CV, MAX_BATCH_CHOICES, MAX_GPUS, MIN_ARRIVAL_CV
from predictor.capacity.serving_path import stored_serving_paths
from predictor.capacity.simulator import DEFAULT_SCHEDULER, PlanFor, Scheduler
from predictor.compose import MODES
from predictor.host_profile import ID_PATTERN as HOST_ID_PATTERN
from predictor.precision import PRECISIONS
from service.schemas.common import RequestModel, ResponseModel
from service.schemas.latency import NAME_ITEM, any_case

#: values one list may hold, and combinations one grid may have
MAX_VALUES = 16
MAX_COMBINATIONS = 64
#: the smallest load and objective taken: below them the numbers underflow (a gap of 1e300 s)
MIN_QPS = 0.001
MIN_SLO_MS = 0.001
#: an objective above this (about 17 minutes) is a unit mistake, not an inference service
MAX_SLO_MS = 1_000_000
#: the default of ``max_gpus``, as ``latpred capacity`` has it
DEFAULT_MAX_GPUS = 64

_FRACTION = r"(\.[0-9]+)?"
#: 0.001 to 10,000,000 requests per second (the simulator's MAX_RATE_QPS) as a plain decimal
QPS_ITEM = rf"(0*[1-9][0-9]{{0,6}}{_FRACTION}|0*\.(0{{0,2}}[1-9])[0-9]*|0*10000000(\.0+)?)"
#: 0.001 to 1,000,000 ms as a plain decimal
SLO_ITEM = rf"(0*[1-9][0-9]{{0,5}}{_FRACTION}|0*\.(0{{0,2}}[1-9])[0-9]*|0*1000000(\.0+)?)"

#: what ``format=txt`` can answer, one value per combination (booleans as 1 and 0)
TxtValue = Literal["gpus", "max_batch", "max_queue_delay_us", "p50_ms", "p99_ms", "throughput_qps", "utilisation",
                   "meets", "p99_low_ms", "p99_high_ms", "instances_per_gpu"]
TXT_VALUES: tuple[str, ...] = get_args(TxtValue)
CSV_COLUMNS = ("model", "device", "precision", "mode", "qps", "slo_p99_ms", "gpus", "instances_per_gpu", "max_batch",
               "max_queue_delay_us", "p50_ms", "p99_ms", "throughput_qps", "utilisation", "meets", "reason",
               "triton_config", "model_version", "host", "p99_low_ms", "p99_high_ms", "plan_for", "scheduler",
               "serving_path", "arrival_cv")  # new columns go last: sheets read them by position
#: what the limits on the planner's choices mean (``planner.limited_choices``), in the GET and the POST alike
BATCH_LIMIT_DESCRIPTION = ("the largest max_batch_size the deployment allows (a model exported for batches up to it): "
                           f"plans weigh {', '.join(map(str, MAX_BATCH_CHOICES))} up to it, and it; default: all. "
                           "With a limit, plans also weigh up to max_instances model instances per GPU (default 4), "
                           "which under a small limit can serve more")
MAX_INSTANCES_DESCRIPTION = ("the most model instances per GPU a plan weighs (1, 2, 4, and it; at most "
                             f"{MAX_INSTANCES}), sharing the GPU as measured on an H100 (a batch beside others runs as "
                             "their summed batch, 10-21% slower); default: 4 where batch_limit is given, else 1 (one "
                             "instance at k times the batch served at least as much as k instances, measured)")
DELAY_LIMIT_DESCRIPTION = ("the longest max_queue_delay_microseconds the service allows: plans weigh "
                           f"{', '.join(map(str, DELAY_US_CHOICES))} us up to it, and it (0: no delay); default: all")
#: the shipped serving paths a request may name (``predictor/capacity/serving_paths``)
SERVING_PATHS: tuple[str, ...] = tuple(sorted(stored_serving_paths()))
#: one of them, as a pattern (only '.' needs escaping in them: names are letters, digits, '-', '_' and '.')
SERVING_PATH_ITEM = f"({'|'.join(name.replace('.', chr(92) + '.') for name in SERVING_PATHS)})"


def one_of(item: str) -> str:
    """One value, spaces allowed around it (as around each of ``/v1/latency``'s)."""
    return f"^ *{item} *$"


def list_of(item: str, most: int = MAX_VALUES) -> str:
    """Up to ``most`` comma-separated values, spaces allowed around each."""
    return f"^ *{item} *(, *{item} *){{0,{most - 1}}}$"


def Text(pattern: str, max_length: int, required: bool = False, **extra: Any) -> Any:  # noqa: N802 (reads as a type)
    """A text parameter whose pattern is documented but checked by the view (``api.capacity``),
    which says what is wrong with a value where a pattern mismatch could not; both take the same
    strings. The lengths keep every URL the document allows under gunicorn's request-line limit."""
    return Field(... if required else None, max_length=max_length, json_schema_extra={"pattern": pattern, **extra})


def graph_name_text() -> Any:
    """A spreadsheet GET's ``model``: a zoo name or a stored graph's id (``/v1/capacity``, ``/v1/select``)."""
    return Text(one_of(NAME_ITEM), 200, required=True, example="resnet50",
                description="a zoo graph name (GET /v1/models) or a stored graph's id (POST /v1/graphs)")


def precision_text() -> Any:
    """One precision, in any letter case (a sheet is typed by hand)."""
    return Text(one_of(f"({'|'.join(any_case(p) for p in PRECISIONS)})"), 30, example="fp16",
                description="fp32, tf32, fp16 or bf16 (default fp16)")


def mode_text(description: str) -> Any:
    """One execution mode, in any letter case."""
    return Text(one_of(f"({'|'.join(any_case(m) for m in MODES)})"), 30, example="cudagraph", description=description)


def host_text() -> Any:
    """One host profile id, for eager."""
    return Text(one_of(HOST_ID_PATTERN.strip("^$")), 100, example="h200-a1b2c3d4e5",
                description="host profile id for eager (GET /v1/hosts; default: the bundle's own)")


def serving_path_text(description: str | None = None) -> Any:
    """One shipped serving path's name: the pattern is the names themselves (``SERVING_PATH_ITEM``);
    ``description``, what the endpoint does with it (default: capacity planning's)."""
    return Text(one_of(SERVING_PATH_ITEM), 100, example=SERVING_PATHS[0] if SERVING_PATHS else None,
                description=description or (
                    "a server's own time per batch to add to the GPU's, and its host's pauses and drift: one of the "
                    f"shipped serving paths ({', '.join(SERVING_PATHS)}; default: none, the GPU's time alone, which "
                    "a server such as Triton exceeds by milliseconds a batch)"))


class CapacityQuery(RequestModel):
    """Query parameters of ``GET /v1/capacity``."""

    LOCATION = "query"

    model: str = graph_name_text()
    device: str | None = Text(one_of("[A-Za-z0-9][A-Za-z0-9 ._-]*"), 100, example="h200",
                              description="device id or part of a name (default: the only one)")
    precision: str | None = precision_text()
    mode: str | None = mode_text("cudagraph or eager (default cudagraph): how each GPU runs the model")
    host: str | None = host_text()
    qps: str = Text(list_of(QPS_ITEM), 400, required=True, example="500,2000,8000",
                    description=f"the load(s) to serve, requests per second of one sample each: up to "
                                f"{MAX_VALUES} plain decimals from {MIN_QPS:g} to 10000000")
    slo_p99_ms: str = Text(list_of(SLO_ITEM), 400, required=True, example="10,25",
                           description=f"the p99 latency objective(s), ms from arrival to answer (queueing "
                                       f"included): up to {MAX_VALUES} plain decimals from {MIN_SLO_MS:g} to "
                                       f"{MAX_SLO_MS}; at most {MAX_COMBINATIONS} (qps, slo_p99_ms) "
                                       "combinations a request")
    max_gpus: int = Field(DEFAULT_MAX_GPUS, ge=1, le=MAX_GPUS,
                          description="the most GPUs a plan may use")
    serving_path: str | None = serving_path_text()
    batch_limit: int | None = Field(None, ge=1, le=max(MAX_BATCH_CHOICES), description=BATCH_LIMIT_DESCRIPTION)
    max_instances: int | None = Field(None, ge=1, le=MAX_INSTANCES, description=MAX_INSTANCES_DESCRIPTION)
    delay_limit_us: int | None = Field(None, ge=0, le=max(DELAY_US_CHOICES), description=DELAY_LIMIT_DESCRIPTION)
    plan_for: PlanFor = Field(
        "median", description="plan for the predicted latencies (median), or for the slow end of their 90% "
                              "intervals (slow_end: a plan that holds if the model runs as slowly as its prediction "
                              "allows)")
    scheduler: Scheduler = Field(
        DEFAULT_SCHEDULER, description="how each GPU's server forms batches in the simulation: as Triton's code does "
                              "(triton: a batch sent after its queue delay waits, frozen, behind the running one), or "
                              "by Triton's documented rule (rule: a batch forms when the instance frees); they differ "
                              "only with a queue delay")
    arrival_cv: float = Field(
        1.0, ge=MIN_ARRIVAL_CV, le=MAX_ARRIVAL_CV, allow_inf_nan=False,
        description="coefficient of variation of the gaps between requests (their standard deviation over their "
                    "mean): 1 is Poisson, 2 bursty traffic; each GPU sees its random share of the load (gamma "
                    f"gaps, calmer on each of many GPUs than on the whole); from {MIN_ARRIVAL_CV:g} to "
                    f"{MAX_ARRIVAL_CV:g}")
    format: Literal["json", "csv", "txt"] = Field(
        "json", description="json: a list of plans; csv: a header and one row per combination; txt: one number "
                            "per combination (`value`), one per line in the csv's row order")
    value: TxtValue = Field(
        "gpus", description="the number `format=txt` answers (meets: 1 or 0)")


class CapacityPlan(ResponseModel):
    """One (qps, objective) combination's plan: the fewest GPUs, the model instances on each, and the
    dynamic-batching settings whose simulated p99 meets the objective; or, when none does
    (`meets` false), the lowest p99 found on `max_gpus` GPUs and why it falls short."""

    model: str
    device: str
    precision: str
    mode: str
    qps: float = Field(description="the load asked for, requests per second")
    slo_p99_ms: float = Field(description="the p99 objective asked for, ms")
    gpus: int = Field(description="GPUs to deploy, each serving qps / gpus")
    instances_per_gpu: int = Field(ge=1, le=MAX_INSTANCES, description=(
        "model instances per GPU (Triton's instance_group count, written in triton_config when above 1)"))
    instance_sharing: str | None = Field(default=None, description=(
        "for more than one instance per GPU, where the slowdown of batches sharing a GPU the plan simulated was "
        "measured (its GPU, mode and models) and what a check against a real server found; null for one"))
    max_batch: int = Field(description="Triton's max_batch_size")
    max_queue_delay_us: int = Field(description="Triton's dynamic_batching max_queue_delay_microseconds")
    per_gpu_qps: float
    p50_ms: float = Field(description="simulated median latency, ms")
    p99_ms: float = Field(description="simulated p99 latency, ms")
    plan_for: PlanFor = Field(description=(
        "what the plan was made for: the predicted latencies, or the slow end of their intervals"))
    scheduler: Scheduler = Field(description="how the simulated server formed batches: triton (its code) or rule")
    arrival_cv: float = Field(description="the coefficient of variation of the gaps between requests the plan was "
                                          "made for (1: Poisson); for a trace, its own as measured, which a log "
                                          "rounded to the second or millisecond can put outside what a request "
                                          "may give")
    arrival_trace: str | None = Field(default=None, description=(
        "the recorded load the plan replayed (POST /v1/capacity's arrival_times: its size, span, own rate and gaps' "
        "coefficient of variation); null for generated arrivals"))
    p99_low_ms: float | None = Field(description=(
        "the plan's p99 with every batch at the low end of its latency prediction's 90% interval, ms"))
    p99_high_ms: float | None = Field(description=(
        "the plan's p99 with every batch at the high end of its latency prediction's 90% interval, ms: what "
        "it may reach if the model runs as slowly as the interval allows"))
    throughput_qps: float = Field(description="simulated requests served per second, all GPUs together")
    utilisation: float = Field(description="share of the time each GPU is busy")
    mean_batch_size: float
    meets: bool = Field(description="whether the plan meets the objective")
    reason: str = Field(description="why not, when it does not (or that the search stopped at its budget); "
                                    "empty otherwise")
    triton_config: str = Field(description="the config.pbtxt lines: max_batch_size, the dynamic_batching block and, "
                                           "for more than one instance per GPU, the instance_group")
    model_version: str = Field(description="the version of the bundle that predicted the latency per batch")
    host: str | None = Field(description=(
        "the host profile an eager plan's latencies were predicted for, as /v1/latency names it (id, label, CPU; "
        "'for <id>' where another profile stood in for the one asked: an estimate, with a warning); null for a "
        "CUDA graph"))
    warnings: list[str] = Field(default_factory=list, description=(
        "what the latency predictions warn of (the host profile used, an estimated or unsteady host, a "
        "transferred device, operators without a model)"))
    serving_path: dict[str, Any] | None = Field(description=(
        "the serving path added to each batch's predicted time (its stored form, name, server, label, per_batch_ms, "
        "per_request_ms, low, high, sigma, pauses, drift, note, and caution: for a path fitted on other hosts, "
        "what a plan made with it cannot promise, null for a host's own); null when the plan covers the GPU's time "
        "alone"))
    candidates_evaluated: int = Field(description="settings on a GPU count the search asked about")
    simulated_requests: int = Field(description="requests this plan simulated (runs shared with an earlier "
                                                "combination of the grid are not counted again)")
