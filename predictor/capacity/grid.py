"""Plans for every (load, objective) of a spreadsheet's grid, within one budget for the whole grid.

A capacity sheet asks for a table: several loads by several p99 objectives (``GET /v1/capacity``
with comma-separated ``qps`` and ``slo_p99_ms``). The cells share one latency model, so they share
its runs (``runs.Runs``): the objectives of one load ask about the same settings on the same GPU
counts, and a run simulated for one cell answers the others. The grid as a whole gets a budget of
simulated requests, so that one request cannot ask for many plans' worth of work; each cell still
gets a plan's own budget (``planner.DEFAULT_BUDGET``) at most, so that a cell answers what it would
answer alone. A cell that would have needed more than the grid had left is not answered with a
plan stopped short (whose numbers would then depend on the cells before it): the grid is refused
with :class:`GridOverBudget`, and the caller asks for fewer cells at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.load_trace import LoadTrace
from predictor.capacity.planner import (
    DEFAULT_BUDGET,
    DELAY_US_CHOICES,
    MAX_BATCH_CHOICES,
    REQUESTS,
    SEED,
    Plan,
    checked_arrival_cv,
    plan,
)
from predictor.capacity.runs import Runs
from predictor.capacity.simulator import DEFAULT_SCHEDULER, LatencyFn, LatencyModel, Scheduler


class GridOverBudget(Exception):
    """The grid needs more simulated requests than its budget: ``planned`` of ``cells`` cells were
    planned with ``simulated`` requests before the one that did not fit."""

    def __init__(self, planned: int, cells: int, simulated: int, budget: int) -> None:
        super().__init__(f"this grid's plans had simulated {simulated:,} requests when (qps, slo_p99_ms) "
                         f"combination {planned + 1} of {cells} needed more than the {budget:,} one grid may "
                         "simulate: ask for fewer combinations at a time")
        self.planned, self.cells, self.simulated, self.budget = planned, cells, simulated, budget


def plan_grid(latency: LatencyModel | LatencyFn, qps: Sequence[float], slo_p99_ms: Sequence[float], *,
              max_gpus: int = 64, budget: int = DEFAULT_BUDGET, scheduler: Scheduler = DEFAULT_SCHEDULER,
              stalls: HostStalls | None = None, arrival_cv: float = 1.0,
              arrival_trace: LoadTrace | None = None, max_batch_choices: Sequence[int] = MAX_BATCH_CHOICES,
              delay_us_choices: Sequence[int] = DELAY_US_CHOICES, instance_choices: Sequence[int] = (1,)) -> list[Plan]:
    """A plan for each (qps, objective), loads first (``itertools.product`` order), with the
    planner's defaults; each plan is the one ``plan`` gives the cell alone, or
    :class:`GridOverBudget` is raised once the grid's ``budget`` of simulated requests cannot
    cover the next cell's search (its requests are then spent: at most ``budget``, one run, and the
    runs of that cell's p99 range where the latency model has an interval: two, one at the slow end).
    ``stalls``: the serving host's pauses and drift, as ``plan`` takes them, the same for every cell;
    ``arrival_cv``: how bursty every cell's load is, as ``plan`` takes it (1, Poisson); ``arrival_trace``,
    a recorded load whose shape every cell replays at its qps, as ``plan`` takes it; the choices of
    maximum batch and queue delay every cell weighs, as ``plan`` takes them (``limited_choices``), and the
    instances per GPU (``weighed_instances``)."""
    runs = Runs(latency, REQUESTS, SEED, scheduler=scheduler, stalls=stalls, arrival_cv=checked_arrival_cv(arrival_cv),
                trace=arrival_trace)
    plans: list[Plan] = []
    cells = list(itertools.product(qps, slo_p99_ms))
    simulated = 0
    for load, objective in cells:
        left = budget - simulated
        cell_budget = min(DEFAULT_BUDGET, left)
        if cell_budget < REQUESTS:
            raise GridOverBudget(len(plans), len(cells), simulated, budget)
        result = plan(latency, load, objective, max_gpus=max_gpus, budget=cell_budget, runs=runs,
                      scheduler=scheduler, stalls=stalls, arrival_cv=arrival_cv, arrival_trace=arrival_trace,
                      max_batch_choices=max_batch_choices, delay_us_choices=delay_us_choices,
                      instance_choices=instance_choices)
        simulated += result.simulated_requests
        if result.budget_spent and cell_budget < DEFAULT_BUDGET:  # the grid's budget stopped it, not its own
            raise GridOverBudget(len(plans), len(cells), simulated, budget)
        plans.append(result)
    return plans


__all__: Sequence[str] = ["GridOverBudget", "plan_grid"]
