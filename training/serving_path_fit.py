"""A server's serving path (``predictor.capacity.serving_path``) fitted from measured Triton loads.

For each model a serving folder holds Triton's own time for every batch its loads formed (plus the
instance's turnaround after it: ``serving_check.simulated_service``) and the model's CUDA graph
replayed alone before the server started (``graph-service-*.parquet``): what latpred predicts. Their
difference, per batch size formed at least ``MIN_BATCHES`` times, is the path's time for a batch of
that many one-sample requests. A straight line through a host's points (weighted by the batches behind
each) is that host's path: ``per_batch_ms + per_request_ms * requests``.

Which host served a model comes from the folder's collect logs (``boot_id`` lines, then the models
each captured): hosts differ, models on one host agree (the H100 sets: per batch 1.1-2.5 ms from
host to host, the models of one host within 0.1-0.5 ms of each other), so the path fitted across
hosts is their median, with the lowest and highest host's values as its ends.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.serving_path import PathCost, ServingPath
from training.serving_check import ServingData, measured_service, simulated_service
from training.serving_drift import models_drift
from training.serving_stalls import host_stalls, service_without_stalls

#: a batch size the loads formed fewer times than this says little about its median
MIN_BATCHES = 20
BOOT = re.compile(r"^boot_id (\S+)")
CAPTURED = re.compile(r"^(\S+): captured and replayed")


#: ``model_hosts``' value for a model that more than one host served (a setting measured again on
#: another lease): its loads mix hosts, so it belongs to no host's path
MIXED = "mixed"


def model_hosts(folder: Path) -> dict[str, str]:
    """Model -> the boot id of the host that served it, from ``collect_log*.txt``; ``MIXED`` for a
    model the logs show captured on more than one host (``serving-triton``'s resnet101, whose max
    batch 8 loads were measured again on another lease)."""
    seen: dict[str, set[str]] = {}
    for log in sorted(Path(folder).glob("collect_log*.txt")):
        boot = ""
        for line in log.read_text(errors="replace").splitlines():
            if match := BOOT.match(line):
                boot = match.group(1)
            elif (match := CAPTURED.match(line)) and boot:
                seen.setdefault(match.group(1), set()).add(boot)
    return {model: boots.pop() if len(boots) == 1 else MIXED for model, boots in seen.items()}


def replay_medians_ms(folder: Path, model: str, precision: str) -> dict[int, float]:
    """The model's CUDA-graph replay alone, median ms per batch size, as the collector timed it."""
    replays = pd.read_parquet(Path(folder) / f"graph-service-{model}-{precision}.parquet")
    return dict(measured_service(replays).medians_ms)


def path_points(data: ServingData) -> pd.DataFrame:
    """One row per (model, batch size formed at least ``MIN_BATCHES`` times in its loads): the host
    (the folder's name where no collect log names one; a model served on several hosts is left out),
    the batches, Triton's median time with turnaround (``served_ms``), the replay alone, their
    difference (``added_ms``), and the lognormal sigma of the served batches of that size: all of
    them (``sigma``) and those the host did not stall (``steady_sigma``: beside the host's pauses,
    which the simulator replays apart, ``serving_stalls``)."""
    hosts = model_hosts(data.folder)
    precision = data.meta["precision"]
    rows = []
    for model in data.models:
        if hosts.get(model) == MIXED:
            continue
        service = data.service[data.service["model"] == model]
        counts = service[service["source"] == "loads"].groupby("batch").size()
        timed = measured_service(service)
        served = simulated_service(data, model, timed)
        steady = measured_service(service_without_stalls(service, timed))
        replay = replay_medians_ms(data.folder, model, precision)
        for batch, count in counts.items():
            if count >= MIN_BATCHES and batch in replay:
                rows.append({"set": data.folder.name, "host": hosts.get(model, data.folder.name), "model": model,
                             "batch": int(batch), "batches": int(count), "served_ms": served.medians_ms[batch],
                             "replay_ms": replay[batch], "added_ms": served.medians_ms[batch] - replay[batch],
                             "sigma": served.sigmas[batch], "steady_sigma": steady.sigmas.get(batch, math.nan)})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class HostPath:
    """One host's fitted path and the points behind it."""

    host: str
    cost: PathCost
    sigma: float
    points: int


def fit_line(points: pd.DataFrame) -> PathCost:
    """``added_ms ~ per_batch_ms + per_request_ms * batch``, least squares with each point's squared
    error weighted by the batches behind it; a negative part (a host with too few sizes to tell) is
    clipped to 0, and a line that adds nothing at all is refused."""
    if points["batch"].nunique() < 2:
        raise ValueError("a path needs batches of at least two sizes to tell its per-batch from its per-request time")
    slope, intercept = np.polyfit(points["batch"], points["added_ms"], 1, w=np.sqrt(points["batches"]))
    cost = PathCost(max(float(intercept), 0.0), max(float(slope), 0.0))
    if cost.per_batch_ms == cost.per_request_ms == 0:
        raise ValueError("the served batches took no longer than the model's replay alone: no serving path to fit")
    return cost


def host_paths(points: pd.DataFrame) -> list[HostPath]:
    """Each host's path, from all its models' points together."""
    return [HostPath(str(host), fit_line(group), float(group["sigma"].median()), len(group))
            for host, group in points.groupby("host", sort=True)]


def fit_serving_path(points: pd.DataFrame, name: str, server: str, note: str = "",
                     stalls: HostStalls | None = None) -> ServingPath:
    """The path across the hosts in ``points``: the median over hosts of their per-batch and of their
    per-request times, the lowest and the highest of each as its ends (one host: its own, ends and
    all), the median of their sigmas; ``stalls``, the pauses and drift it carries (default: none)."""
    hosts = host_paths(points)
    batch = np.array([h.cost.per_batch_ms for h in hosts])
    request = np.array([h.cost.per_request_ms for h in hosts])
    return ServingPath(name=name, server=server, label="fitted",
                       cost=PathCost(float(np.median(batch)), float(np.median(request))),
                       low=PathCost(float(batch.min()), float(request.min())),
                       high=PathCost(float(batch.max()), float(request.max())),
                       sigma=float(np.median([h.sigma for h in hosts])),
                       stalls=stalls if stalls is not None else HostStalls(0.0, ()), note=note)


def host_pauses(data: ServingData, models: Sequence[str], pauses: bool = True, drift: bool = True) -> HostStalls:
    """The host's pauses while it served ``models`` (``serving_stalls.host_stalls``, loads up to 0.8:
    their rates averaged, their pause lengths pooled) and its drift (``serving_drift.models_drift``,
    the same loads), each left out where its flag says so."""
    rate = 0.0
    lengths: tuple[float, ...] = ()
    if pauses:
        found = [host_stalls(data, m, measured_service(data.service[data.service["model"] == m])).stalls
                 for m in models]
        lengths = tuple(round(p, 3) for stalls in found for p in stalls.pauses_ms)
        rate = float(np.mean([stalls.rate_per_s for stalls in found])) if lengths else 0.0
    return HostStalls(rate, lengths, models_drift(data, models)[0] if drift else None)


def measured_serving_path(data: ServingData, name: str, models: Sequence[str] | None = None,
                          pauses: bool = True, points: pd.DataFrame | None = None, drift: bool = True) -> ServingPath:
    """The path of the one host that served ``models`` (default: all of the folder's) in ``data``,
    labelled ``measured``: its line (``fit_line``) through their points; its ends the line scaled by
    the 5th and 95th percentile of the points' time over it; the median sigma of its served batches;
    with ``pauses``, the host's pauses (and the sigma of the batches they did not stall, so that the
    pauses are not counted twice); with ``drift``, the host's drift (how its batches' times move
    together, ``training/serving_drift.py``: read off the batches the pauses did not stall, so with
    ``pauses`` off its shares are of a narrower spread than the path's ``sigma``, and overstate it
    where the host paused). ``points``: the folder's ``path_points``, where the caller fits
    several paths from one folder. ValueError when the models were served on more than one host
    (each host has a path of its own) or a model is not in the folder."""
    points = path_points(data) if points is None else points
    chosen = list(models) if models else sorted(points["model"].unique())
    mixed = sorted(m for m in chosen if model_hosts(data.folder).get(m) == MIXED)
    if mixed:
        raise ValueError(f"models: {', '.join(mixed)} was served on more than one host (its collect logs say so), "
                         "and each host has a path of its own: name models served on one")
    missing = sorted(set(chosen) - set(points["model"]))
    if missing:
        raise ValueError(f"models: {', '.join(missing)} formed no batch size {MIN_BATCHES} times in {data.folder} "
                         f"(there: {', '.join(sorted(points['model'].unique())) or 'none'})")
    points = points[points["model"].isin(chosen)]
    hosts = sorted(points["host"].unique())
    if len(hosts) > 1:
        raise ValueError(f"models: served on {len(hosts)} hosts ({', '.join(hosts)}), and each host has a path of its "
                         "own: name the models of one")
    cost = fit_line(points)
    over = points["added_ms"] / (cost.per_batch_ms + cost.per_request_ms * points["batch"])
    low, high = (float(np.percentile(over, q)) for q in (5, 95))
    low, high = min(low, 1.0), max(high, 1.0)
    return ServingPath(name=name, server=str(data.meta.get("server", "")), label="measured", cost=cost,
                       low=PathCost(cost.per_batch_ms * low, cost.per_request_ms * low),
                       high=PathCost(cost.per_batch_ms * high, cost.per_request_ms * high),
                       # with the pauses apart, the spread of the batches they did not stall
                       sigma=float(points["steady_sigma" if pauses else "sigma"].median()),
                       stalls=host_pauses(data, chosen, pauses, drift),
                       note=f"measured in {data.folder.name} on host {hosts[0]} from {', '.join(chosen)}")


__all__: Sequence[str] = ["MIN_BATCHES", "MIXED", "HostPath", "fit_line", "fit_serving_path", "host_pauses",
                          "host_paths", "measured_serving_path", "model_hosts", "path_points", "replay_medians_ms"]
