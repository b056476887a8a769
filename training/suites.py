"""The validation suites: which measured runs each scores, and the graph each importer makes.

Three suites, so that a figure can't come from the data it was tuned on:

- ``zoo``: the measured zoo (``<dataset>/models``), scored leave-one-model-out: the composition
  constants that predict a model are fitted without it. The per-layer models did see its layer
  shapes: a development figure for the per-layer models, an honest one for composition.
- ``nas-dev`` and ``nas-test``: random architectures of our NAS generator (``collectors.nas_space``),
  measured on the same GPU in interleaved rounds (``<dataset>/nas``) and split by seed. Neither
  enters a fit; the shipped bundle predicts them as it would any user's graph. ``nas-dev`` may be
  tuned on (its runs calibrate the interval); ``nas-test`` is only scored: no constant, feature or
  model choice is made from it.
  A third set of seeds, ``nas-train`` (``datasets/suites/nas-train``), is not a suite: training
  fits the composition constants on its runs beside the zoo's (``nas_train_runs``), and
  ``nas-dev``'s runs join the zoo's leave-one-model-out errors that the 90% interval is
  calibrated on (``nas_dev_arrays``).

Each suite is scored through every importer: the torch trace (``torch``) and each ONNX export of
the same module (``onnx-<exporter>``: ``torch.onnx.export``'s default dynamo exporter, and the
TorchScript one). An importer that has no graph for a model (its export failed) is reported as
missing, never silently dropped from the count.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from predictor.graph import Graph
from predictor.model_run_schema import MODEL_RUNS_FOLDER, NAS_RUNS_FOLDER
from predictor.predict import Predictor
from training.composition import RunArrays, run_arrays
from training.data import load_model_runs
from training.datasets_dir import SUITES_DIR
from training.hosts import reference_profiles

SUITES = ("zoo", "nas-dev", "nas-test")
DEFAULT_SUITES_DIR = SUITES_DIR


@dataclass
class Suite:
    """A suite's measured runs and, per importer, the graph of each model it could import."""

    name: str
    runs: pd.DataFrame
    graphs: dict[str, dict[str, Graph]]  # importer -> model -> graph
    missing: dict[str, list[str]] = field(default_factory=dict)  # importer -> models without a graph
    leave_one_out: bool = False  # zoo: fit composition constants without the model predicted
    #: zoo: what else every leave-one-out fit includes, as training's does (``nas_train_runs``)
    fit_extra: tuple[dict[str, Graph], pd.DataFrame] | None = None


def _onnx_graphs(folder: Path, models: list[str]) -> tuple[dict[str, dict[str, Graph]], dict[str, list[str]]]:
    """``onnx-<exporter>`` graphs from ``folder/<exporter>/<model>.onnx.gz`` (weights stripped,
    gzipped: the suites' exports are a tenth of their size so)."""
    from predictor.importers.onnx_graph import graph_from_onnx

    graphs: dict[str, dict[str, Graph]] = {}
    missing: dict[str, list[str]] = {}
    for exporter_dir in sorted(p for p in folder.glob("*") if p.is_dir()):
        importer = f"onnx-{exporter_dir.name}"
        graphs[importer], missing[importer] = {}, []
        for model in models:
            path = exporter_dir / f"{model}.onnx.gz"
            if path.is_file():
                graphs[importer][model] = graph_from_onnx(gzip.decompress(path.read_bytes()), name=model)
            else:
                missing[importer].append(model)
    return graphs, missing


def _runs_for(runs: pd.DataFrame, models: list[str] | None, where: str = "this suite") -> pd.DataFrame:
    if models is None:
        return runs
    unknown = sorted(set(models) - set(runs["model"]))
    if unknown:
        raise ValueError(f"no measured runs of {', '.join(unknown)} in {where}")
    return runs[runs["model"].isin(models)].reset_index(drop=True)


def load_runs_suite(dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR, models: list[str] | None = None,
                    name: str = "zoo") -> Suite:
    """A dataset's zoo runs (``<dataset>/models``, as ``latpred collect models`` writes them on any
    machine) with the zoo's shipped torch traces and its ONNX exports, predicted as they are (no
    leave-one-out)."""
    from training.train import zoo_graphs

    runs = _runs_for(load_model_runs(dataset), models, str(Path(dataset) / MODEL_RUNS_FOLDER))
    names = sorted(runs["model"].unique())
    torch_graphs = zoo_graphs(names)
    graphs, missing = _onnx_graphs(suites_dir / "zoo" / "onnx", names)
    missing["torch"] = [m for m in names if m not in torch_graphs]
    return Suite(name, runs, {"torch": torch_graphs, **graphs}, missing)


def load_zoo_suite(dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR, models: list[str] | None = None) -> Suite:
    """The zoo's runs with its shipped torch traces and its ONNX exports, scored leave-one-model-out
    with training's other runs in every fit."""
    return replace(load_runs_suite(dataset, suites_dir, models), leave_one_out=True,
                   fit_extra=nas_train_runs(dataset, suites_dir))


def nas_archs(suites_dir: Path = DEFAULT_SUITES_DIR) -> pd.DataFrame:
    """The NAS suite's architectures: seed, name, space, split (and how each was exported)."""
    path = suites_dir / "nas" / "archs.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no NAS suite here (make it with `latpred collect nas-suite`)")
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def load_nas_runs(dataset: Path) -> pd.DataFrame:
    """The ok NAS runs of a device's dataset (``<dataset>/nas``), one per unit."""
    return load_model_runs(dataset, NAS_RUNS_FOLDER)


def has_nas_runs(dataset: Path) -> bool:
    """Whether a device's dataset measured any NAS architecture (``<dataset>/nas``)."""
    return any((Path(dataset) / NAS_RUNS_FOLDER).glob("part-*.parquet"))


def _nas_split(split: str, dataset: Path, suites_dir: Path,
               models: list[str] | None = None) -> tuple[pd.DataFrame, dict[str, Graph]]:
    """One split's measured runs and the torch traces of its architectures that have one."""
    archs = nas_archs(suites_dir)
    in_split = set(archs.loc[archs["split"] == split, "name"])
    runs = load_nas_runs(dataset)
    runs = _runs_for(runs[runs["model"].isin(in_split)].reset_index(drop=True), models)
    torch_dir = suites_dir / "nas" / "torch"
    return runs, {m: Graph.load(torch_dir / f"{m}.json") for m in sorted(runs["model"].unique())
                  if (torch_dir / f"{m}.json").is_file()}


def load_nas_suite(split: str, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR,
                   models: list[str] | None = None) -> Suite:
    """One split of the NAS suite: its measured runs, torch traces and ONNX exports."""
    runs, torch_graphs = _nas_split(split, dataset, suites_dir, models)
    names = sorted(runs["model"].unique())
    graphs, missing = _onnx_graphs(suites_dir / "nas" / "onnx", names)
    missing["torch"] = [m for m in names if m not in torch_graphs]
    return Suite(split, runs, {"torch": torch_graphs, **graphs}, missing)


def require_nas_suites(dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> None:
    """Refuse, naming what is missing, a dataset with NAS runs whose suites are not in
    ``suites_dir``: training would otherwise fit composition on the zoo alone and calibrate the
    interval without nas-dev, and say nothing (``nas_train_runs`` and ``nas_dev_arrays`` give
    nothing where a suite is missing, as for a dataset that measured none)."""
    if not has_nas_runs(dataset):
        return
    missing = [str(f) for f in (suites_dir / "nas-train" / "archs.jsonl", suites_dir / "nas" / "archs.jsonl")
               if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{dataset} holds NAS runs, but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: "
            "training fits composition on nas-train's runs and calibrates the interval on nas-dev's; run from "
            "the checkout, or name the suites folder (--suites)")


def nas_train_arrays(predictor: Predictor, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> list[RunArrays]:
    """``nas_train_runs`` predicted layer by layer, each eager run with the host profile
    probed beside it: the runs composition fits on beside the zoo's."""
    return run_arrays(predictor, *nas_train_runs(dataset, suites_dir), reference_profiles(dataset))


def nas_dev_arrays(predictor: Predictor, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> list[RunArrays]:
    """``nas-dev``'s runs through the torch trace, predicted layer by layer (eager runs with their
    own host profiles): held out of every fit, so their errors are an honest sample of a graph
    from outside, which the interval is calibrated on beside the zoo's leave-one-model-out ones
    (``training.composition.leave_one_model_out``). ``nas-test`` is never read here. Nothing
    (empty) where the suite or its runs are missing."""
    if not has_nas_runs(dataset) or not (suites_dir / "nas" / "archs.jsonl").is_file():
        return []
    # the torch traces only: no ONNX is parsed (training needs no onnx package, and 144 exports take seconds)
    runs, graphs = _nas_split("nas-dev", dataset, suites_dir)
    untraced = sorted(set(runs["model"]) - set(graphs))
    if untraced:  # every calibration run counts: none is dropped for want of its trace
        raise FileNotFoundError(f"{suites_dir / 'nas' / 'torch'}: no torch trace of {', '.join(untraced)}")
    return run_arrays(predictor, graphs, runs, reference_profiles(dataset))


def nas_train_runs(dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR) -> tuple[dict[str, Graph], pd.DataFrame]:
    """The NAS training architectures' torch graphs and runs (``nas-train``: seeds of their own,
    never in nas-dev or nas-test), which composition fits on beside the zoo: the zoo alone holds
    few graphs of small kernels, and constants fitted on it predicted NAS candidates up to 1.14x
    (nas-dev). Their eager runs join since they were measured with the host sampled between
    rounds (2026-12-02): each is composed with its own host's profile, so no host's speed is
    fitted in (nas-dev eager 48% -> 53% within +-10%, the zoo's 80% -> 82% leave-one-model-out).
    Nothing (empty) where the suite or its runs are missing."""
    folder = suites_dir / "nas-train"
    if not (folder / "archs.jsonl").is_file() or not has_nas_runs(dataset):
        return {}, pd.DataFrame()
    names = [json.loads(line)["name"] for line in (folder / "archs.jsonl").read_text().splitlines() if line.strip()]
    runs = load_nas_runs(dataset)
    runs = runs[runs["model"].isin(names)].reset_index(drop=True)
    graphs = {m: Graph.load(folder / "torch" / f"{m}.json") for m in sorted(runs["model"].unique())}
    return graphs, runs


def load_suite(name: str, dataset: Path, suites_dir: Path = DEFAULT_SUITES_DIR,
               models: list[str] | None = None) -> Suite:
    """A suite by name (``zoo``, ``nas-dev`` or ``nas-test``), optionally only some models."""
    if name == "zoo":
        return load_zoo_suite(dataset, suites_dir, models)
    if name in ("nas-dev", "nas-test"):
        return load_nas_suite(name, dataset, suites_dir, models)
    raise ValueError(f"unknown suite {name!r}: expected one of {', '.join(SUITES)}")

