"""Hardware selection: which device should serve this model, ranked by what an inference costs.

For one graph at a batch size, precision and execution mode, every candidate device's latency is
predicted (by its own bundle, or by the transfer bundle from its datasheet: ``provenance``), and
from it:

- **p99** of one batch's latency: the predicted median with the run-to-run spread of the mode
  (``capacity.service_time.run_spread``: lognormal 0.01 for CUDA graphs, 0.15 eager on a GPU,
  0.10 on a CPU), at the 99th percentile. Back-to-back batches on an idle device; queueing under
  load is capacity planning's question (``predictor.capacity``), not this one.
- **throughput**: batch / median latency, one model instance running batches back to back.
- **memory**: weights, peak activations and the runtime's allowance (``predictor.memory``) against
  the device's memory.
- **cost per million inferences**: the device's price per hour over the inferences it serves in an
  hour (``price / (throughput * 3600) * 1e6``), where the catalog knows a price.

With a serving path (``predictor.capacity.serving_path``: a server's own time per batch, such as
PyTriton's 1.1-2.6 ms a batch and 0.15-0.32 ms a request on ten H100 hosts), every device's batch takes
the path's time too, as capacity planning adds it: its latency, interval ends, p99 (with a spread of
at least the path's) and throughput are the server's, not the GPU's alone. The path is the server's on
its host, the same whichever device it drives, so a fixed cost per batch narrows the lead a faster
device has and a cheaper one often wins. Each sample of the batch is one request, as a dynamic
batcher forms it (the path's per-request part is charged ``batch`` times: a client sending the
batch as one request pays less). The path's range is added to each device's interval on its own,
so the doubts below treat a range the devices share as if each had its own: more doubts, at large
batches most. The host's pauses and drift, which make queues, are capacity planning's: one batch's
p99 here leaves them out.

Constraints (all optional): a p99 objective, a minimum throughput per device, and that the model
fits in memory (always checked). Devices that meet every constraint come first, cheapest per
inference first (by latency where a price is missing: such devices follow the priced ones, fastest
first); then those that do not, nearest first, each with the reasons. When none meets them the
answer says so and names the nearest: "you cannot have that" is an answer, not an error.

Whether the predictions' error could change which devices meet the constraints
(``Selection.doubts``, ``settled``): each device is also judged at both ends of its latency's ~90%
interval (its p99 and throughput there). A choice is settled when the chosen device meets the
constraints at the slow end of its interval and every device that would come before it if it met
them (cheaper per inference, or for an unpriced choice faster) misses them even at the fast end of
its own; an answer that none meets them, when none would meet them at the fast end. Each doubt
names the device, the end and what it meets or misses there.

The order by cost among devices that meet the constraints is the medians' where both devices were
measured: cost follows latency, and counting overlapping cost intervals between measured devices as
doubts flagged choices that were right all the same. Where either was transferred (predicted from
its datasheet), a device that could cost less per inference at the fast end of its interval than
the choice at the slow end of its own is a doubt: the H100 SXM, predicted from its datasheet before
it was measured, came out 1.14x too slow, and 36 of the 42 settled choices that were wrong with it
held out were the order by cost (``benchmarks/selection_accuracy.py``, which also says how often
settled and unsettled choices are right on the measured devices). So a selection without
constraints is settled by construction among measured devices only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from predictor.capacity.service_time import run_spread
from predictor.capacity.serving_path import ServingPath
from predictor.graph import Graph
from predictor.host_profile import HostProfile
from predictor.memory import WORKSPACE_BYTES, memory_estimate
from predictor.predict import TRANSFERRED, Predictor
from predictor.variant import check_variant

#: the standard normal's 99th percentile: a lognormal's p99 is its median times exp(Z99 * sigma)
Z99 = 2.3263478740408408
#: an objective or throughput beyond these is a unit mistake (a week; a billion inferences a second)
MAX_SLO_MS = 6.048e8
MAX_THROUGHPUT_QPS = 1e9


class NothingToRun(ValueError):
    """The graph launches nothing (every node free), so no device is faster or cheaper than another."""


@dataclass(frozen=True)
class Constraints:
    """What a user asks of the device beside fitting the model: both optional."""

    slo_p99_ms: float | None = None
    min_throughput_qps: float | None = None

    def __post_init__(self) -> None:
        for name, value, high in (("slo_p99_ms", self.slo_p99_ms, MAX_SLO_MS),
                                  ("min_throughput_qps", self.min_throughput_qps, MAX_THROUGHPUT_QPS)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name}: must be a finite number, not {value!r}")
            if not 0 < value <= high:
                raise ValueError(f"{name}: must be positive and at most {high:g}, not {value!r}")


@dataclass(frozen=True)
class DeviceChoice:
    """One device's numbers for the graph, and whether it meets the constraints (why not, if not)."""

    device: str
    name: str
    provenance: str  # 'measured' or 'transferred' (predicted from the datasheet)
    latency_ms: float  # predicted median of one batch
    low_ms: float  # the prediction's ~90% interval
    high_ms: float
    p99_ms: float  # of one batch, with the mode's run-to-run spread (or a serving path's, where wider)
    p99_low_ms: float  # the same at the low and at the high end of the prediction's interval
    p99_high_ms: float
    throughput_qps: float  # inferences (samples) a second, batches back to back
    memory_bytes: int  # what the model needs at this batch and precision
    device_memory_bytes: int
    price_per_hour: float | None
    cost_per_million: float | None  # USD per million inferences; None without a price
    meets: bool
    reasons: tuple[str, ...] = ()
    model_version: str = ""
    warnings: tuple[str, ...] = ()
    #: the host profile an eager prediction used, as the prediction names it (None for a CUDA graph)
    host: str | None = None


@dataclass(frozen=True)
class Selection:
    """Devices ranked for a graph (see the module docstring for the order), and the inputs."""

    model: str
    batch: int
    precision: str
    mode: str
    constraints: Constraints
    ranked: list[DeviceChoice] = field(default_factory=list)
    #: devices no prediction could be made for (a precision the hardware lacks), with why
    skipped: dict[str, str] = field(default_factory=dict)
    host: str | None = None
    #: the server's own time per batch added to every device's (None: the devices' time alone)
    serving_path: ServingPath | None = None

    @property
    def best(self) -> DeviceChoice | None:
        """The top device that meets every constraint, or None."""
        return self.ranked[0] if self.ranked and self.ranked[0].meets else None

    @property
    def doubts(self) -> tuple[str, ...]:
        """What the predictions' intervals leave open about which devices meet the constraints
        (module docstring): empty when the choice is settled."""
        said: list[str] = []
        best = self.best
        missed = [] if best is None else _shortfalls_at(best, "high", self.batch, self.constraints)
        if best is not None and missed:
            said.append(f"{best.device} at the slow end of its interval: {'; '.join(missed)}")
        for c in self.ranked:
            if c.meets or _shortfalls_at(c, "low", self.batch, self.constraints):
                continue
            if best is None or rank_key(replace(c, meets=True), self.constraints) < rank_key(best, self.constraints):
                said.append(f"{c.device} meets them at the fast end of its interval (p99 {c.p99_low_ms:.3g} ms, "
                            f"{self.batch / c.low_ms * 1e3:.4g}/s)")
        if best is not None:
            said += _cost_doubts(best, self.ranked)
        return tuple(said)

    @property
    def settled(self) -> bool:
        """Whether each device's verdict on the constraints holds at either end of its interval,
        and, where a device was transferred, its order by cost, so far as the choice depends on
        them (module docstring)."""
        return not self.doubts

    @property
    def verdict(self) -> str:
        """One sentence: the choice, or that none meets the constraints and which comes nearest."""
        if self.best is not None:
            return f"{self.best.name} ({self.best.device})"
        if not self.ranked:
            return "no device could be predicted"
        near = self.ranked[0]
        return f"none meets the constraints; nearest: {near.name} ({near.device}): {'; '.join(near.reasons)}"


def _cost_doubts(best: DeviceChoice, ranked: Sequence[DeviceChoice]) -> list[str]:
    """Each device meeting the constraints that could cost less per inference at the fast end of its
    interval than ``best`` at the slow end of its own, where either was transferred (module docstring)."""
    if best.cost_per_million is None:
        return []
    slowest = _cost_at(best, "high")
    said = []
    for c in ranked:
        if (c is best or not c.meets or c.cost_per_million is None
                or TRANSFERRED not in (c.provenance, best.provenance) or _cost_at(c, "low") >= slowest):
            continue
        datasheet = [d.device for d in (c, best) if d.provenance == TRANSFERRED]
        said.append(f"{c.device} could cost less per inference ({_cost_at(c, 'low'):.3g} USD per million at the "
                    f"fast end of its interval, {best.device} {slowest:.3g} at the slow end of its own), and "
                    f"{' and '.join(datasheet)} {'is' if len(datasheet) == 1 else 'are'} predicted from a datasheet")
    return said


def _cost_at(c: DeviceChoice, end: Literal["low", "high"]) -> float:
    """``c``'s cost per million inferences at one end of its latency's interval (cost follows latency)."""
    assert c.cost_per_million is not None
    return c.cost_per_million * (c.low_ms if end == "low" else c.high_ms) / c.latency_ms


def _shortfalls(memory_bytes: int, device_memory_bytes: int, p99_ms: float, throughput_qps: float,
                constraints: Constraints) -> list[str]:
    """Each constraint a device misses with these numbers, in words (empty: it meets them all)."""
    reasons = []
    if memory_bytes > device_memory_bytes:
        reasons.append(f"needs {memory_bytes / 2**30:.1f} GiB, has {device_memory_bytes / 2**30:.0f} GiB")
    if constraints.slo_p99_ms is not None and p99_ms > constraints.slo_p99_ms:
        reasons.append(f"p99 {p99_ms:.3g} ms is over the objective of {constraints.slo_p99_ms:g} ms")
    if constraints.min_throughput_qps is not None and throughput_qps < constraints.min_throughput_qps:
        reasons.append(f"serves {throughput_qps:.4g}/s, under the {constraints.min_throughput_qps:g}/s asked")
    return reasons


def _shortfalls_at(c: DeviceChoice, end: Literal["low", "high"], batch: int, constraints: Constraints) -> list[str]:
    """``_shortfalls`` of ``c`` with its latency at the ``end`` of its interval."""
    ms, p99 = (c.low_ms, c.p99_low_ms) if end == "low" else (c.high_ms, c.p99_high_ms)
    return _shortfalls(c.memory_bytes, c.device_memory_bytes, p99, batch / ms * 1e3, constraints)


def _choice(predictor: Predictor, graph: Graph, batch: int, precision: str, mode: str,
            host: HostProfile | None, constraints: Constraints, memory_bytes: int,
            path: ServingPath | None = None) -> DeviceChoice:
    spec = predictor.device
    out = predictor.predict(graph, batch, precision, mode, with_layers=False, host=host)
    if not out.total_ms > 0:
        raise NothingToRun(f"{graph.name!r} runs nothing on {spec.name} ({out.total_ms} ms): with no latency to "
                           "compare, there is no device to choose")
    latency, low, high, spread = out.total_ms, out.low_ms, out.high_ms, run_spread(spec.kind, mode)
    if path is not None:  # the server's own time on every batch, as ServingPath.around adds it for a plan
        latency += path.added_ms(batch)
        low += path.added_ms(batch, "low")
        high += path.added_ms(batch, "high")
        spread = max(spread, path.sigma)
    tail = math.exp(Z99 * spread)
    p99 = latency * tail
    throughput = batch / latency * 1e3
    cost = None if spec.price_per_hour is None else spec.price_per_hour / (throughput * 3600) * 1e6
    if spec.kind == "cpu":  # no CUDA context or GPU libraries' workspaces: the weights and activations
        memory_bytes -= WORKSPACE_BYTES
    reasons = _shortfalls(memory_bytes, spec.memory_bytes, p99, throughput, constraints)
    return DeviceChoice(spec.device_id, spec.name, predictor.provenance, latency, low, high,
                        p99, low * tail, high * tail, throughput, memory_bytes, spec.memory_bytes,
                        spec.price_per_hour, cost, not reasons, tuple(reasons), out.model_version, tuple(out.warnings),
                        out.host)


def _shortfall(c: DeviceChoice, constraints: Constraints) -> float:
    """How far a device is from meeting the constraints: the largest ratio by which it misses one."""
    misses = [c.memory_bytes / c.device_memory_bytes]
    if constraints.slo_p99_ms is not None:
        misses.append(c.p99_ms / constraints.slo_p99_ms)
    if constraints.min_throughput_qps is not None:
        misses.append(constraints.min_throughput_qps / c.throughput_qps)
    return max(misses)


def rank_key(c: DeviceChoice, constraints: Constraints) -> tuple[float, ...]:
    """Meeting devices first, by cost per inference (unpriced ones after, by latency); the others
    after, nearest first. Ties go to the lower latency, then the id, so the order is total."""
    if c.meets:
        if c.cost_per_million is not None:
            return (0.0, 0.0, c.cost_per_million, c.latency_ms)
        return (0.0, 1.0, c.latency_ms, c.latency_ms)
    return (1.0, _shortfall(c, constraints), c.latency_ms, 0.0)


def select(graph: Graph, predictors: Mapping[str, Predictor] | Sequence[Predictor], batch: int, precision: str,
           mode: str, constraints: Constraints = Constraints(), host: HostProfile | None = None,
           serving_path: ServingPath | None = None) -> Selection:
    """Every device of ``predictors`` ranked for ``graph`` at ``batch``, ``precision`` and ``mode``
    under ``constraints`` (an eager forward issued by ``host``, default each bundle's), each batch
    served through ``serving_path`` where one is given (its time added to every device's). A device
    that cannot run the precision (no bf16 tensor cores on a T4) is listed in ``skipped``; a graph
    that runs nothing is refused (``NothingToRun``)."""
    check_variant(batch, precision, mode)
    memory = memory_estimate(graph, batch, precision).total_bytes
    choices, skipped = [], {}
    items = predictors.values() if isinstance(predictors, Mapping) else predictors
    for predictor in items:
        try:
            choices.append(_choice(predictor, graph, batch, precision, mode, host, constraints, memory,
                                   serving_path))
        except NothingToRun:
            raise
        except ValueError as exc:  # a precision the device lacks: the others can still be ranked
            skipped[predictor.device.device_id] = str(exc)
    choices.sort(key=lambda c: (rank_key(c, constraints), c.device))
    # the GPUs' host first (a CPU device's own bundle names the profile of its CPU alone, in each choice)
    hosts = sorted((p for p in items if p.host is not None), key=lambda p: p.device.kind != "gpu")
    eager_host = host or (hosts[0].host if hosts else None)
    return Selection(graph.name, batch, precision, mode, constraints, choices, skipped,
                     eager_host.id if mode == "eager" and eager_host is not None else None, serving_path)
