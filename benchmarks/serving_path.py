"""The serving path through PyTriton, fitted from the measured Triton sets and scored on sets it never saw.

Reads every Triton serving folder given (default: ``datasets/nvidia-h100-80gb-hbm3/serving-triton*``),
finds each host's path (``training/serving_path_fit.py``: Triton's time per batch with turnaround,
less the model's CUDA graph replayed alone), and prints:

1. each host's path (per batch, per request, the spread of its served batches);
2. leaving each set out: the path fitted on the other sets' hosts, written to
   ``results/serving_paths/without-<set>.json`` (what ``simulator_vs_server.py --serving-path`` takes, with
   the drift of the other sets' hosts, ``training/serving_drift.py``), and
   the set's served batch times against (a) the bundle's prediction alone, as ``latpred capacity`` planned
   before, (b) the prediction plus that path, (c) the replay the collector timed plus that path (the
   path's own error, without the prediction's): the share of (model, batch size) within +-10%, the
   median and the range of predicted / served, and how many fall inside the path's range;
3. for each set that served the empty model (Triton serving a model that runs nothing): that
   model's path on its host (``results/serving_paths/<set>-empty.json``) against the models served
   beside it, from their replays and from the bundle's predictions;
4. with ``--write``: the path fitted on every host, as the shipped ``pytriton-h100``
   (``predictor/capacity/serving_paths/``).

Run: .venv/bin/python benchmarks/serving_path.py [--write] [FOLDER ...] (seconds). Saved: results/serving_path.txt.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.capacity.host_stalls import HostStalls  # noqa: E402
from predictor.capacity.serving_path import EMPTY_MODEL, STORED_DIR  # noqa: E402
from training.serving_check import (  # noqa: E402
    TARGET,
    ServingData,
    bundle_predictor,
    load_serving,
    predicted_service,
)
from training.serving_drift import drift_scores, fit_drift, lag_correlation  # noqa: E402
from training.serving_path_fit import (  # noqa: E402
    fit_serving_path,
    host_paths,
    measured_serving_path,
    model_hosts,
    path_points,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FOLDERS = sorted((ROOT / "datasets" / "nvidia-h100-80gb-hbm3").glob("serving-triton*"))
RESULTS = Path(__file__).resolve().parent / "results"
SHIPPED_NAME = "pytriton-h100"


def server_of(folders: Sequence[Path]) -> str:
    """The server the folders name (they must agree: one path is one server's)."""
    servers = {json.loads((f / "meta.json").read_text())["server"] for f in folders}
    if len(servers) != 1:
        raise SystemExit(f"the folders were served by different servers: {sorted(servers)}")
    return servers.pop()


def predictions(sets: Sequence[ServingData], points: pd.DataFrame) -> pd.DataFrame:
    """The bundle's prediction (ms) for each point's (model, batch), in the mode the device serves in,
    with its 90% interval: columns predicted_ms, low_ms, high_ms."""
    out = pd.DataFrame(np.nan, index=points.index, columns=["predicted_ms", "low_ms", "high_ms"])
    for data in sets:
        predictor = bundle_predictor(data.meta["fingerprint"]["device_id"])
        here = points["set"] == data.folder.name
        for model, group in points[here & (points["model"] != EMPTY_MODEL)].groupby("model"):
            batches = [int(b) for b in group["batch"]]
            latency = predicted_service(predictor, str(model), data.meta["precision"], sorted(batches))
            assert latency.interval_ms is not None  # a prediction has its interval
            out.loc[group.index] = [(latency(b)[0], *latency.interval_ms(b)) for b in batches]
    return out


def pooled_drift(scores: dict[str, list[tuple[np.ndarray, np.ndarray]]], leave_out: str = "") -> HostStalls:
    """The drift of the hosts of every set but ``leave_out``, fitted on their batches' scores pooled,
    as a path's ``stalls`` (no pauses: they differ from host to host, 0 to 1.8 a second)."""
    pooled = [score for name, set_scores in scores.items() if name != leave_out for score in set_scores]
    return HostStalls(0.0, (), fit_drift(lag_correlation(pooled)))


def scored(ratio: pd.Series, inside: pd.Series | None = None) -> str:
    """Share within +-TARGET, median and range of a column of predicted / measured."""
    text = (f"{(abs(ratio - 1) <= TARGET).mean():5.0%} {ratio.median():5.2f} {ratio.min():5.2f}-"
            f"{ratio.max():4.2f}")
    return text + (f" {inside.mean():6.0%}" if inside is not None else "")


def empty_model_lines(sets: Sequence[ServingData], points: pd.DataFrame) -> list[str]:
    """For each folder where the empty model was served: its path (``latpred serving-path --models
    empty``) against the models its host served beside it, from their replays and from the bundle's
    predictions; the path itself goes to ``results/serving_paths/<set>-empty.json``."""
    lines: list[str] = []
    for data in sets:
        folder = data.folder
        if EMPTY_MODEL not in data.models:
            continue
        path = measured_serving_path(data, f"{folder.name}-empty", [EMPTY_MODEL])
        (RESULTS / "serving_paths" / f"{folder.name}-empty.json").write_text(json.dumps(path.to_dict(), indent=1))
        host = model_hosts(folder).get(EMPTY_MODEL, folder.name)
        here = (points["set"] == folder.name) & (points["host"] == host)
        beside = points[here & (points["model"] != EMPTY_MODEL)]
        if not lines:
            lines += ["", "== the empty model's path (Triton serving a model that runs nothing, measured on the "
                      "host: results/serving_paths/<set>-empty.json) against the models that host served beside it",
                      f"{'set':<22} {'path (batch, request ms)':>25} {'model':<20} {'pts':>4} | "
                      f"{'replay + path':>23} | {'prediction + path':>23} {'inside':>6}"]
        for model, test in beside.groupby("model"):
            served = test["served_ms"]
            added = np.array([path.added_ms(int(b)) for b in test["batch"]])
            low = test["low_ms"] + [path.added_ms(int(b), "low") for b in test["batch"]]
            high = test["high_ms"] + [path.added_ms(int(b), "high") for b in test["batch"]]
            inside = (low <= served) & (served <= high)
            lines.append(f"{folder.name:<22} {path.cost.per_batch_ms:12.3f} {path.cost.per_request_ms:12.3f} "
                         f"{str(model):<20} {len(test):4d} | {scored((test['replay_ms'] + added) / served)} | "
                         f"{scored((test['predicted_ms'] + added) / served, inside)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, default=DEFAULT_FOLDERS)
    parser.add_argument("--write", action="store_true", help=f"write the path of every host as {SHIPPED_NAME}")
    parser.add_argument("--out", type=Path, default=RESULTS / "serving_path.txt")
    args = parser.parse_args()
    folders = [Path(f) for f in args.folders]
    server = server_of(folders)
    sets = [load_serving(f) for f in folders]
    points = pd.concat([path_points(data) for data in sets], ignore_index=True)
    points = points.join(predictions(sets, points))
    # each set's batches scored for the hosts' drift (training/serving_drift.py), pooled where a path spans sets
    scores = {data.folder.name: drift_scores(data, data.models) for data in sets}
    out = [f"# .venv/bin/python benchmarks/serving_path.py {' '.join(sys.argv[1:])}".rstrip()
           + f"   ({datetime.date.today().isoformat()})",
           f"# {server}; {len(points)} (model, batch size) points formed at least 20 times in the loads, "
           f"{points['model'].nunique()} models, {points['host'].nunique()} hosts, {len(folders)} sets",
           "# added = Triton's median time for the batch (COMPUTE_START to COMPUTE_END, and the instance's turnaround "
           "after it) - the model's CUDA graph replayed alone, timed by the collector before the server started",
           "", "== each host's path: added ~ per_batch + per_request * batch (least squares, weighted by batches)",
           f"{'host':<10} {'set':<22} {'models':<44} {'points':>6} {'per batch ms':>12} {'per request ms':>14} "
           f"{'sigma':>6}"]
    for host in host_paths(points):
        mine = points[points["host"] == host.host]
        out.append(f"{host.host[:8]:<10} {','.join(sorted(mine['set'].unique())):<22} "
                   f"{','.join(sorted(mine['model'].unique()))[:44]:<44} {host.points:6d} "
                   f"{host.cost.per_batch_ms:12.3f} {host.cost.per_request_ms:14.3f} {host.sigma:6.3f}")
    out += ["", "== each set left out: its served batch times against the path fitted on the other sets' hosts "
            "(results/serving_paths/without-<set>.json)",
            "   columns per estimate: within +-10% of (model, batch) points, median and range of estimate / served; "
            "inside: the served time within the estimate's range (the prediction's 90% interval plus the path's ends)",
            f"{'set':<22} {'pts':>4} {'path fitted (batch, request ms)':>31} | {'prediction alone':>23} | "
            f"{'prediction + path':>23} {'inside':>6} | {'replay + path':>23}"]
    totals: dict[str, list[pd.Series]] = {"alone": [], "pred": [], "replay": [], "inside": []}
    (RESULTS / "serving_paths").mkdir(parents=True, exist_ok=True)
    for folder in folders:
        held = points["set"] == folder.name
        path = fit_serving_path(points[~held], f"without-{folder.name}", server,
                                note=f"fitted by benchmarks/serving_path.py on every set but {folder.name}",
                                stalls=pooled_drift(scores, leave_out=folder.name))
        (RESULTS / "serving_paths" / f"without-{folder.name}.json").write_text(json.dumps(path.to_dict(), indent=1))
        test = points[held & (points["model"] != EMPTY_MODEL)]  # the empty model has no prediction
        alone = test["predicted_ms"] / test["served_ms"]
        with_path = (test["predicted_ms"] + [path.added_ms(int(b)) for b in test["batch"]]) / test["served_ms"]
        replay = (test["replay_ms"] + [path.added_ms(int(b)) for b in test["batch"]]) / test["served_ms"]
        low = test["low_ms"] + [path.added_ms(int(b), "low") for b in test["batch"]]
        high = test["high_ms"] + [path.added_ms(int(b), "high") for b in test["batch"]]
        inside = (low <= test["served_ms"]) & (test["served_ms"] <= high)
        for key, series in (("alone", alone), ("pred", with_path), ("replay", replay), ("inside", inside)):
            totals[key].append(series)
        out.append(f"{folder.name:<22} {len(test):4d} {path.cost.per_batch_ms:15.3f} "
                   f"{path.cost.per_request_ms:15.3f} | {scored(alone)} | {scored(with_path, inside)} | "
                   f"{scored(replay)}")
    every = {k: pd.concat(v) for k, v in totals.items()}
    out.append(f"{'all, each left out':<22} {len(every['pred']):4d} {'':>31} | {scored(every['alone'])} | "
               f"{scored(every['pred'], every['inside'])} | {scored(every['replay'])}")
    out += empty_model_lines(sets, points)
    if args.write:
        shipped = fit_serving_path(points, SHIPPED_NAME, server, note=(
            f"fitted by benchmarks/serving_path.py --write on {points['host'].nunique()} H100 hosts "
            f"({', '.join(f.name for f in folders)}): the median over hosts of the per-batch and of the "
            "per-request time, the lowest and highest of each as its ends; no host pauses (hosts paused 0 to "
            "1.8 times a second); the hosts' drift fitted on their batches pooled"), stalls=pooled_drift(scores))
        target = STORED_DIR / f"{SHIPPED_NAME}.json"
        target.write_text(json.dumps(shipped.to_dict(), indent=1) + "\n")
        out += ["", f"== written: {target.relative_to(ROOT)}: per batch {shipped.cost.per_batch_ms:.3f} ms "
                f"({shipped.low.per_batch_ms:.3f}-{shipped.high.per_batch_ms:.3f}), per request "
                f"{shipped.cost.per_request_ms:.3f} ms ({shipped.low.per_request_ms:.3f}-"
                f"{shipped.high.per_request_ms:.3f}), sigma {shipped.sigma:.3f}, drift "
                + (shipped.stalls.drift.in_words() if shipped.stalls.drift is not None else "none")]
    publish(out, args.out)


if __name__ == "__main__":
    main()
