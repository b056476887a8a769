"""Training: grouped splits, per-target fits and their metrics, and ``train()`` end to end with
a real MLflow sqlite store (tracking, registry, the champion alias) in a temporary folder."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.bundle import Bundle
from predictor.devices import resolve_device
from predictor.model_run_schema import MODEL_RUNS_FOLDER, NAS_RUNS_FOLDER
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph
from training.data import OpData, dataset_hash, load_model_runs, load_ops, shape_group, shard_paths, trained_on_files
from training.fit import FitResult, better, fit_target, test_mask as fold_mask  # pytest would collect "test_mask"
from training.tracking import CHAMPION, SCORE_METRIC, _maybe_promote, champion_version, registered_name, tracking_uri
from training.train import TrainReport, TrainSettings, train

DATASET = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h200"
SUITES = Path(__file__).resolve().parents[2] / "datasets" / "suites"
DEVICE = "nvidia-h200"


@pytest.fixture(scope="module")
def ops() -> OpData:
    return load_ops(DATASET, limit=3000)


@pytest.fixture(scope="module")
def kernel_fit(ops: OpData) -> FitResult:
    return fit_target(ops, "kernel", "lightgbm", threads=1, scale=0.1)


def test_load_ops_takes_a_sample_of_ok_rows(ops: OpData) -> None:
    assert len(ops.rows) == 3000
    assert (ops.rows["status"] == "ok").all()
    assert len(ops.features) == len(ops.groups) == 3000
    assert ops.device.device_id == DEVICE
    assert (ops.roofline_us > 0).all()
    again = load_ops(DATASET, limit=3000)
    assert again.rows["kernel_us"].equals(ops.rows["kernel_us"])  # the sample is seeded


def test_shape_group_ignores_batch_precision_and_layout(ops: OpData) -> None:
    row = ops.rows.iloc[[0]]
    other = row.copy()
    other["batch"] = int(row["batch"].iloc[0]) * 2 + 1
    other["precision"] = "bf16" if row["precision"].iloc[0] != "bf16" else "fp32"
    changed = row.copy()
    param = next(p for p in ("c_in", "tokens", "elements", "c", "rows", "heads", "d1", "inputs")
                 if p in row and pd.notna(row[p].iloc[0]))
    changed[param] = int(row[param].iloc[0]) + 1
    groups = shape_group(pd.concat([row, other, changed], ignore_index=True))
    assert groups[0] == groups[1]
    assert groups[0] != groups[2]
    assert groups[0].startswith(row["family"].iloc[0] + "|")


def test_grouped_split_never_puts_a_shape_on_both_sides(ops: OpData) -> None:
    groups = shape_group(ops.rows)
    test = fold_mask(groups)
    assert set(groups[test]).isdisjoint(set(groups[~test]))
    assert 0.1 < test.mean() < 0.3  # one fold of five
    # the split is meaningful: shapes measured several times (batches, precisions) exist
    assert groups.value_counts().max() > 1
    # deterministic and independent of row order
    shuffled = groups.sample(frac=1.0, random_state=1)
    assert np.array_equal(fold_mask(shuffled), test[shuffled.index.to_numpy()])
    # every fold is used: the five folds partition the rows
    folds = [fold_mask(groups, test_fold=k) for k in range(5)]
    assert np.array_equal(np.sum(folds, axis=0), np.ones(len(groups)))


def test_fit_target_reports_held_out_metrics(ops: OpData, kernel_fit: FitResult) -> None:
    fit = kernel_fit
    test = fold_mask(ops.groups)
    o = fit.overall
    assert (fit.target, fit.library) == ("kernel", "lightgbm")
    assert 0.0 <= o["within_10pct"] <= 1.0
    assert o["count"] == int(test.sum())
    assert 0.0 <= o["median_ape"] <= o["p90_ape"]
    assert o["mape"] > 0
    assert o["within_10pct"] > 0.05  # the model learned something on 2,400 rows
    per_family = fit.per_family
    assert set(per_family["family"]) == set(ops.rows["family"][test])
    assert per_family["count"].sum() == o["count"]
    assert per_family["within_10pct"].between(0, 1).all()


def test_intervals_exist_per_family(ops: OpData, kernel_fit: FitResult) -> None:
    intervals = kernel_fit.interval_log
    test_families = set(ops.rows["family"][fold_mask(ops.groups)])
    assert set(intervals) == test_families | {"*"}
    assert all(math.isfinite(v) and v > 0 for v in intervals.values())
    # the interval is a 90% quantile of log error: it must be wider than the median error
    assert intervals["*"] > math.log1p(kernel_fit.overall["median_ape"]) * 0.9


def test_a_sample_gets_the_host_costs_of_the_whole_dataset(ops: OpData) -> None:
    """Which sweeps' host times are learned, and the host of unprobed rows, are judged on every
    row: a sample or a family subset must not change a row's reference."""
    whole = load_ops(DATASET, families=["binary", "activation"])
    subset = load_ops(DATASET, families=["binary"], limit=500, seed=3)
    for part in (ops, subset):
        expected = pd.Series(whole.host_cost_us, index=whole.rows["config_id"])
        mine = pd.Series(part.host_cost_us, index=part.rows["config_id"])
        shared = mine.index.intersection(expected.index)
        assert len(shared) > 50
        np.testing.assert_array_equal(mine[shared].to_numpy(), expected[shared].to_numpy())


def test_dispatch_fit_and_choosing_the_better_library(ops: OpData, kernel_fit: FitResult) -> None:
    xgb = fit_target(ops, "kernel", "xgboost", threads=1, scale=0.1)
    dispatch = fit_target(ops, "dispatch", "lightgbm", threads=1, scale=0.1)
    assert dispatch.target == "dispatch" and 0.0 <= dispatch.overall["within_10pct"] <= 1.0
    # the same split for both targets; dispatch on the rows with a reference host (probed beside
    # them, or inferred from their sweep's small elementwise calls), which leaves out only the
    # sweeps whose calls ran far from their probes (training.hosts.off_probe_sweeps)
    referenced = np.isfinite(ops.host_cost_us)
    off = ~referenced
    assert referenced.any() and off.any() and ops.rows["host_profile"].isna().any()
    assert set(ops.rows.loc[off, "host_profile"]) == {"nvidia-h200-41d900e274", "nvidia-h200-accbb78d9f",
                                                     "nvidia-h200-fba830f5fc"}  # the NAS-scale sweeps
    assert dispatch.overall["count"] == int((fold_mask(ops.groups) & referenced).sum())
    assert kernel_fit.overall["count"] == int(fold_mask(ops.groups).sum())  # kernel times keep every row
    chosen = better(xgb, kernel_fit)
    other = kernel_fit if chosen is xgb else xgb
    assert (chosen.overall["within_10pct"], -chosen.overall["median_ape"]) >= (
        other.overall["within_10pct"], -other.overall["median_ape"])
    assert better(kernel_fit, kernel_fit) is kernel_fit


@dataclass
class Trained:
    first: TrainReport
    second: TrainReport
    settings: TrainSettings
    cwd: Path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    """Two full train() runs into one store (about 40 s each on two cores)."""
    root = tmp_path_factory.mktemp("train")
    cwd = root / "cwd"
    cwd.mkdir()
    # threads=1: on a small shared machine XGBoost's OpenMP threads can spin for many seconds
    # suites named absolutely: the default is relative to the checkout, and this runs elsewhere
    settings = TrainSettings(dataset=DATASET, limit=3000, scale=0.1, threads=1, suites=SUITES,
                             bundle_root=root / "bundles", store=root / "store" / "mlruns.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)  # MLflow writes artifacts relative to the working directory: keep them out of the repo
        first = train(settings)
        second = train(settings)
    yield Trained(first, second, settings, cwd)


def test_train_exports_a_bundle_that_loads_and_predicts(trained: Trained) -> None:
    bundle_dir = trained.second.bundle_dir
    assert bundle_dir == trained.settings.bundle_root / DEVICE
    bundle = Bundle.load(bundle_dir)
    meta = bundle.metadata
    assert meta["dataset_hash"] == dataset_hash(DATASET)
    assert meta["rows"] == 3000
    assert json.loads((DATASET / "fingerprint.json").read_text())["device_id"] == meta["fingerprint"]["device_id"]
    assert 0.0 <= meta["metrics"]["lomo_within_10pct"] <= 1.0
    assert set(meta["composition"]["interval_log"]) == {"eager", "cudagraph"}
    # the interval's calibration runs: the zoo's held out one model at a time, and nas-dev's (no nas-test)
    calibrated = meta["composition"]["interval_calibrated_on"]
    assert calibrated["nas_dev_runs"] > 0 and calibrated["zoo_leave_one_model_out_runs"] > 0
    assert meta["composition"]["fitted_on"]["nas_train_runs"] > 0  # nas-train's runs, both modes, fitted on
    for target in ("kernel", "dispatch"):
        assert bundle.targets[target].library == trained.second.chosen[target].library
    result = Predictor(bundle, resolve_device(DEVICE)).predict(load_zoo_graph("resnet18"), 8, "fp16")
    assert result.low_ms < result.total_ms < result.high_ms
    assert result.model_version == meta["version"]


def test_train_compares_both_libraries_and_validates_leave_one_model_out(trained: Trained) -> None:
    report = trained.first
    assert set(report.candidates["kernel"]) == {"xgboost/single", "lightgbm/single", "lightgbm/per_family"}
    assert set(report.candidates["dispatch"]) == {"xgboost/single", "lightgbm/single"}
    for target in ("kernel", "dispatch"):
        chosen = report.chosen[target]
        # the kept model is a candidate's library and structure, refitted on every row
        candidate = report.candidates[target][chosen.label]
        assert chosen.overall == candidate.overall and chosen.booster is not candidate.booster
        # the kept model is the one with the most held-out predictions within +-10%
        best = max(f.overall["within_10pct"] for f in report.candidates[target].values())
        assert chosen.overall["within_10pct"] == best
    lomo = report.composition.predictions
    assert set(lomo["mode"]) == {"eager", "cudagraph"}
    assert (lomo["predicted_ms"] > 0).all() and (lomo["measured_ms"] > 0).all()
    assert lomo["model"].nunique() > 5
    assert report.seconds > 0


def test_train_registers_a_version_per_run_with_a_champion(trained: Trained) -> None:
    from mlflow.tracking import MlflowClient

    store = trained.settings.store
    first, second = trained.first.tracking, trained.second.tracking
    assert (first["registered_model"], first["version"], first["champion"]) == (registered_name(DEVICE), 1, True)
    assert second["version"] == 2
    client = MlflowClient(tracking_uri=tracking_uri(store), registry_uri=tracking_uri(store))
    versions = client.search_model_versions(f"name='{registered_name(DEVICE)}'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    scores = {int(v.version): float(v.tags[SCORE_METRIC]) for v in versions}
    # the alias moves to the new version only if it scores at least as well
    expected = 2 if scores[2] >= scores[1] else 1
    assert champion_version(store, DEVICE) == expected
    assert second["champion"] == (expected == 2)
    run = client.get_run(second["run_id"])
    assert run.data.tags["dataset_hash"] == dataset_hash(DATASET)
    assert run.data.metrics[SCORE_METRIC] == pytest.approx(scores[2])
    assert run.data.params["limit"] == "3000"
    assert champion_version(store, "nvidia-nonexistent") is None


def test_train_keeps_artifacts_beside_the_store(trained: Trained) -> None:
    assert not (trained.cwd / "mlruns").exists(), "artifacts were written under the working directory"


def test_champion_moves_only_for_an_equal_or_better_score(trained: Trained) -> None:
    from mlflow.tracking import MlflowClient

    store = trained.settings.store
    client = MlflowClient(tracking_uri=tracking_uri(store), registry_uri=tracking_uri(store))
    source = client.get_model_version(registered_name(DEVICE), "1").source
    name = "promote-test"
    client.create_registered_model(name)
    v1 = client.create_model_version(name, source, tags={SCORE_METRIC: "0.5"}).version
    v2 = client.create_model_version(name, source, tags={SCORE_METRIC: "0.4"}).version

    def champion() -> str:
        return client.get_model_version_by_alias(name, CHAMPION).version

    assert _maybe_promote(client, name, v1, 0.5)  # no champion yet: the first one becomes it
    assert champion() == v1
    assert not _maybe_promote(client, name, v2, 0.4)  # lower: the champion stays
    assert champion() == v1
    assert _maybe_promote(client, name, v2, 0.5)  # equal: the newer one takes over
    assert champion() == v2
    client.set_registered_model_alias(name, CHAMPION, v1)
    assert _maybe_promote(client, name, v2, 0.75)  # higher
    assert champion() == v2
    assert _maybe_promote(client, name, v1, 0.1, force=True)  # --force: the served bundle is the champion
    assert champion() == v1


def test_dataset_hash_names_the_exact_shards(tmp_path: Path) -> None:
    original = dataset_hash(DATASET)
    assert len(original) == 64
    assert dataset_hash(DATASET) == original
    copy = tmp_path / "nvidia-h200"
    for path in trained_on_files(DATASET):
        (copy / path.relative_to(DATASET)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy / path.relative_to(DATASET))
    assert dataset_hash(copy) == original  # where the data lives does not matter
    # what training reads: the NAS runs (nas-train fitted on, nas-dev calibrating), the host
    # profiles and the sweep logs that pair probes, beside the operator rows and the zoo's runs
    assert {p.relative_to(DATASET).parts[0] for p in trained_on_files(DATASET)} == {
        "ops", MODEL_RUNS_FOLDER, NAS_RUNS_FOLDER, "hosts", "sweep_log.jsonl", "host_runs"}
    profile = sorted((copy / "hosts").glob("*.json"))[0]
    kept = profile.read_bytes()
    profile.write_bytes(kept.replace(b'"label"', b' "label"', 1))
    assert dataset_hash(copy) != original  # a host profile counts
    profile.write_bytes(kept)
    (copy / "README.md").write_text("not a shard")
    (copy / "archive" / "old").mkdir(parents=True)
    shutil.copy2(shard_paths(copy / MODEL_RUNS_FOLDER)[0], copy / "archive" / "old" / "part-00000.parquet")
    assert dataset_hash(copy) == original  # only live shards count: training never reads the archive
    first = shard_paths(copy / "ops")[0]
    shutil.copy2(first, copy / "ops" / "part-99999.parquet")
    duplicated = dataset_hash(copy)
    assert duplicated != original
    os.remove(copy / "ops" / "part-99999.parquet")
    shutil.copy2(first, copy / "ops" / "part-99998.parquet")
    assert dataset_hash(copy) not in (original, duplicated)  # the name counts, not just the bytes


UNIT = ["model", "batch", "precision", "mode"]


def test_model_runs_come_from_one_protocol_in_one_folder() -> None:
    runs = load_model_runs(DATASET)
    on_disk = pd.concat([pd.read_parquet(p) for p in shard_paths(DATASET / MODEL_RUNS_FOLDER)])
    assert len(runs) == len(on_disk) == runs.groupby(UNIT).ngroups  # one row per unit, nothing merged
    assert runs["run_id"].str.endswith("|interleaved-all").all()
    assert runs["mode"].value_counts().to_dict() == {"eager": 324, "cudagraph": 324}
    # the archive drops nothing: every unit measured before has its live row (the zoo's in models/,
    # the NAS suite's in nas/); rows of this protocol were archived only for want of a host profile,
    # because their models were built inside inference mode (collectors.model_build.build_model),
    # because their host was probed once per group, not also between rounds, or because they were
    # measured again with the reference forwards (predictor.host_references)
    assert runs.loc[runs["mode"] == "eager", "host_profile"].notna().all()
    nas = load_model_runs(DATASET, "nas")
    for folder in sorted(p for p in (DATASET / "archive").glob("*") if p.is_dir()):
        archived = pd.concat([pd.read_parquet(p) for p in sorted(folder.glob("part-*.parquet"))])
        live = nas if folder.name.startswith("nas-") else runs
        assert len(archived) and archived.set_index(UNIT).index.isin(live.set_index(UNIT).index).all(), folder
        if archived["run_id"].str.endswith("|interleaved-all").any():
            if folder.name.endswith("-unprobed"):
                assert "host_profile" not in archived, folder
            else:
                assert folder.name in ("nas-models-built-in-inference-mode", "nas-eager-probe-per-group",
                                       "nas-test-eager-without-reference-forwards"), folder
                assert archived.loc[archived["mode"] == "eager", "host_profile"].notna().all(), folder


def test_a_unit_measured_twice_is_refused_not_picked(tmp_path: Path) -> None:
    live = tmp_path / "nvidia-h200" / MODEL_RUNS_FOLDER
    live.mkdir(parents=True)
    for path in shard_paths(DATASET / MODEL_RUNS_FOLDER):
        shutil.copy2(path, live / path.name)
    first = pd.read_parquet(shard_paths(live)[0]).head(1)
    first.assign(run_id=first["run_id"] + "-again").to_parquet(live / "part-00099.parquet", index=False)
    with pytest.raises(ValueError, match="more than once") as exc:
        load_model_runs(live.parent)
    assert first["model"].iloc[0] in str(exc.value) and "archive" in str(exc.value)


def test_the_chosen_fit_is_refitted_on_every_row(ops: OpData, kernel_fit: FitResult) -> None:
    """The shipped model has seen the held-out fold; its reported error is still the split's."""
    from predictor.bundle import TargetModel
    from predictor.features import FEATURE_COLUMNS
    from training.fit import refit_on_all_rows

    full = refit_on_all_rows(ops, kernel_fit, threads=1, scale=0.1)
    assert (full.library, full.structure) == (kernel_fit.library, kernel_fit.structure)
    assert full.overall == kernel_fit.overall and full.interval_log == kernel_fit.interval_log
    held_out = fold_mask(ops.groups)
    x = ops.features[list(FEATURE_COLUMNS)][held_out]
    truth = np.log(ops.rows["kernel_us"].to_numpy(dtype=float)[held_out] / ops.roofline_us[held_out])

    def error(fit: FitResult) -> float:
        model = TargetModel(fit.library, fit.booster, {}, list(FEATURE_COLUMNS))
        return float(np.mean(np.abs(model.predict_log(x) - truth)))

    assert error(full) < 0.8 * error(kernel_fit)
