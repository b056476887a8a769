"""Hardware selection scored against measurements: is the device chosen within 5% of the truly best?

Issue #14's target: on the measured devices, the top choice is within 5% of the truly best one in at
least 90% of (model, objective) cases. The measured devices share the zoo's CUDA-graph runs at fp16
and batch 1, 8 and 32 (the H200, the H100 and green-context partitions of both), so each (model, batch) is a
case at each of several p99 objectives: none, and 1.1, 1.5, 2 and 3 times the fastest device's
measured p99 (an objective every case can meet, and one that leaves a choice).

The truth of a case: among the devices whose *measured* p99 meets the objective, the one with the
lowest measured cost per inference (price per hour x measured latency / batch). The choice:
``predictor.selection.select``'s top device, from predictions alone. A case is right when the
chosen device really meets the objective and its measured cost is at most 5% above the best's.
Each case also records whether the selection called its choice settled (``Selection.settled``),
so that how often a settled choice is right can be reported apart.
The p99 of a measurement is its median with the same run-to-run spread the prediction assumes
(``selection.Z99``, ``DEFAULT_SIGMA``): the choice is scored on latency and cost, not on a spread
neither side measured per case.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.capacity.service_time import DEFAULT_SIGMA
from predictor.devices import DEVICES
from predictor.graph import Graph
from predictor.predict import Predictor
from predictor.selection import Z99, Constraints, Selection, select
from predictor.zoo import load_zoo_graph
from training.data import load_model_runs

#: objectives as multiples of the fastest device's measured p99 (None: no objective)
OBJECTIVE_FACTORS: tuple[float | None, ...] = (None, 1.1, 1.5, 2.0, 3.0)
#: a choice is right when its measured cost is at most this much above the best's
TOLERANCE = 0.05
PRECISION, MODE = "fp16", "cudagraph"


def measured_units(datasets: Sequence[Path]) -> pd.DataFrame:
    """(device, model, batch, latency_ms) of every CUDA-graph fp16 zoo run that every dataset has."""
    frames = []
    for dataset in datasets:
        runs = load_model_runs(dataset)
        runs = runs[(runs["mode"] == MODE) & (runs["precision"] == PRECISION)]
        frames.append(runs.assign(device=runs["device_id"])[["device", "model", "batch", "latency_ms"]])
    units = pd.concat(frames, ignore_index=True)
    counts = units.groupby(["model", "batch"])["device"].nunique()
    shared = counts[counts == len(datasets)].index
    return units.set_index(["model", "batch"]).loc[shared].reset_index()


@dataclass(frozen=True)
class Case:
    model: str
    batch: int
    factor: float | None
    slo_p99_ms: float | None
    best: str  # the measured best device
    chosen: str | None  # the predicted choice
    chosen_meets: bool  # by measurement
    cost_ratio: float  # measured cost of the choice / the best's (inf where the choice misses the objective)
    settled: bool  # the selection called its choice settled (Selection.settled)

    @property
    def right(self) -> bool:
        return self.chosen is not None and self.chosen_meets and self.cost_ratio <= 1 + TOLERANCE


def _price(device: str) -> float:
    price = DEVICES[device].price_per_hour
    if price is None:
        raise ValueError(f"{device} has no price in the catalog: selection cannot be scored by cost on it")
    return price


@dataclass(frozen=True)
class Truth:
    """One (model, batch, objective) as measured: which devices meet the objective, what each
    costs per inference, and the cheapest of those that meet it."""

    model: str
    batch: int
    factor: float | None
    slo_p99_ms: float | None
    graph: Graph
    devices: tuple[str, ...]
    meets: frozenset[str]
    cost: Mapping[str, float]
    best: str

    def case(self, selection: Selection) -> Case:
        """``selection`` (made from predictions alone) judged against the measurements."""
        chosen = selection.best.device if selection.best else None
        ok = chosen is not None and chosen in self.meets
        ratio = self.cost[chosen] / self.cost[self.best] if ok and chosen is not None else math.inf
        return Case(self.model, self.batch, self.factor, self.slo_p99_ms, self.best, chosen, ok, ratio,
                    selection.settled)


def truths(units: pd.DataFrame, factors: Sequence[float | None] = OBJECTIVE_FACTORS) -> Iterator[Truth]:
    """Every (model, batch, objective) of ``units`` as measured (see the module docstring)."""
    spread = math.exp(Z99 * DEFAULT_SIGMA[MODE])
    key: Any  # (model, batch): pandas-stubs types a group key as any hashable
    for key, unit in units.groupby(["model", "batch"]):
        model, batch = str(key[0]), int(key[1])
        measured = {str(d): float(ms) for d, ms in zip(unit["device"], unit["latency_ms"])}
        cost = {d: _price(d) * ms / batch for d, ms in measured.items()}
        graph = load_zoo_graph(model)
        fastest = min(measured.values()) * spread
        for factor in factors:
            slo = None if factor is None else fastest * factor
            meets = frozenset(d for d, ms in measured.items() if slo is None or ms * spread <= slo)
            yield Truth(model, batch, factor, slo, graph, tuple(measured), meets, cost,
                        min(meets, key=lambda d: cost[d]))


def score(units: pd.DataFrame, predictors: Mapping[str, Predictor],
          factors: Sequence[float | None] = OBJECTIVE_FACTORS) -> list[Case]:
    """Every (model, batch, objective) of ``units`` scored (see the module docstring)."""
    return [t.case(select(t.graph, [predictors[d] for d in t.devices], t.batch, PRECISION, MODE,
                          Constraints(slo_p99_ms=t.slo_p99_ms)))
            for t in truths(units, factors)]


def summary(cases: Sequence[Case]) -> pd.DataFrame:
    """Share of right choices per objective and overall, with the worst cost ratio of a choice that met it."""
    frame = pd.DataFrame([{**vars(c), "right": c.right, "objective": "none" if c.factor is None else f"{c.factor}x"}
                          for c in cases])
    rows = []
    for objective, part in [*frame.groupby("objective", sort=False), ("all", frame)]:
        met = part[part["chosen_meets"]]
        settled = part[part["settled"]]
        unsettled = part[~part["settled"]]
        rows.append({"objective": objective, "cases": len(part), "right": float(part["right"].mean()),
                     "settled": len(settled),
                     "right if settled": float(settled["right"].mean()) if len(settled) else math.nan,
                     "right if not": float(unsettled["right"].mean()) if len(unsettled) else math.nan,
                     "chosen misses objective": int((~part["chosen_meets"]).sum()),
                     "median cost ratio": float(met["cost_ratio"].median()) if len(met) else math.nan,
                     "worst cost ratio": float(met["cost_ratio"].max()) if len(met) else math.nan})
    return pd.DataFrame(rows)
