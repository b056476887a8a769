"""Compiled trees (predictor.compiled_trees): the same predictions as the boosters, made from the
bundle's own files, cached on disk and compiled once; and a bundle that cannot have them says so."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from predictor import compiled_trees
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle, BundleError
from predictor.devices import resolve_device
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph, zoo_names

pytest.importorskip("lleaves")
xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")

ROOT = Path(__file__).resolve().parents[2]
FEATURES = 6


def rows(n: int, seed: int = 0) -> np.ndarray:
    """Rows of FEATURES features with NaNs, repeats and integers, as the predictor's are."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)) * rng.choice([1.0, 100.0], size=(n, FEATURES))
    x[:, 0] = rng.integers(0, 5, n)  # a code
    x[rng.random((n, FEATURES)) < 0.15] = np.nan  # parameters other families have
    return x


@pytest.fixture(scope="module")
def small_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small XGBoost and a small LightGBM regression model, saved as the bundles save them."""
    folder = tmp_path_factory.mktemp("models")
    x = rows(3000)
    y = np.nan_to_num(x[:, 1]) * 0.3 + np.sin(np.nan_to_num(x[:, 2])) + 0.1 * np.nan_to_num(x[:, 0]) + 3.0
    xgb = xgboost.XGBRegressor(n_estimators=40, max_depth=6, learning_rate=0.2, n_jobs=1).fit(x, y)
    xgb.get_booster().save_model(str(folder / "model.json"))
    lgb = lightgbm.LGBMRegressor(n_estimators=40, num_leaves=31, learning_rate=0.2, n_jobs=1, verbose=-1).fit(x, y)
    lgb.booster_.save_model(str(folder / "model.txt"))
    return {"xgboost": folder / "model.json", "lightgbm": folder / "model.txt"}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(compiled_trees.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_xgboost_compiles_to_its_own_predictions_bit_for_bit(small_models: dict[str, Path], cache: Path) -> None:
    booster = xgboost.Booster()
    booster.load_model(str(small_models["xgboost"]))
    trees = json.loads(small_models["xgboost"].read_text())["learner"]["gradient_booster"]["model"]["trees"]
    x = rows(4000, seed=1)
    # every split threshold as a value too: XGBoost's x < t must not become x <= t
    thresholds = [c for t in trees for c, left in zip(t["split_conditions"], t["left_children"]) if left != -1]
    x[: len(thresholds), 1] = np.asarray(thresholds, dtype=np.float32)
    x[: len(thresholds), 2] = np.asarray(thresholds[::-1], dtype=np.float32)
    forest = compiled_trees.compiled_forests({"m": ("xgboost", small_models["xgboost"])}, FEATURES)["m"]
    expected = booster.inplace_predict(x.astype(np.float32))
    assert np.array_equal(forest.predict(x), expected)


def test_lightgbm_compiles_to_its_own_predictions(small_models: dict[str, Path], cache: Path) -> None:
    booster = lightgbm.Booster(model_file=str(small_models["lightgbm"]))
    forest = compiled_trees.compiled_forests({"m": ("lightgbm", small_models["lightgbm"])}, FEATURES)["m"]
    x = rows(4000, seed=2)
    np.testing.assert_allclose(forest.predict(x), booster.predict(x, num_threads=1), rtol=1e-12, atol=0)


def test_a_model_is_compiled_once_then_read_from_the_cache(small_models: dict[str, Path], cache: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    models = {"m": ("lightgbm", small_models["lightgbm"])}
    first = compiled_trees.compiled_forests(models, FEATURES)["m"]
    objects = sorted(cache.glob("*.o"))
    assert len(objects) == 1 and objects[0].name.startswith(compiled_trees.hashlib.sha256(
        small_models["lightgbm"].read_bytes()).hexdigest())

    def no_compiling(pending: object) -> dict[Path, str]:
        raise AssertionError("compiled again")

    monkeypatch.setattr(compiled_trees, "_run_compiles", no_compiling)
    x = rows(50, seed=3)
    assert np.array_equal(compiled_trees.compiled_forests(models, FEATURES)["m"].predict(x), first.predict(x))
    # a damaged object is compiled again, never mapped in
    objects[0].write_bytes(objects[0].read_bytes()[:1000])
    with pytest.raises(AssertionError, match="compiled again"):
        compiled_trees.compiled_forests(models, FEATURES)


def test_two_processes_compiling_one_model_make_one_whole_file(small_models: dict[str, Path], cache: Path) -> None:
    target = cache / "m.o"
    cmd = [sys.executable, "-m", "predictor.compiled_trees", "xgboost", str(small_models["xgboost"]), str(target)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE) for _ in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0], [p.stderr.read() for p in procs if p.stderr]
    info = compiled_trees._cached(target)
    assert info is not None and info["n_features"] == FEATURES and info["dtype"] == "float32"
    assert sorted(p.name for p in cache.iterdir()) == ["m.json", "m.o", "m.o.lock"]  # no temporary left


def test_the_shipped_bundle_compiled_predicts_as_its_boosters() -> None:
    device = resolve_device("h200")
    compiled = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id), device)
    boosters = Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id)
    assert boosters.compile_trees("booster") == "booster (LATPRED_TREES=booster)"
    booster = Predictor(boosters, device)
    assert "trees: compiled (lleaves)" in repr(compiled) and "trees: booster" in repr(booster)
    for name in zoo_names()[::4]:
        graph = load_zoo_graph(name)
        for batch, precision, mode in ((1, "fp16", "eager"), (32, "fp32", "cudagraph"), (7, "bf16", "eager")):
            a = compiled.layers(graph.at_precision(precision), batch, precision, mode)
            b = booster.layers(graph.at_precision(precision), batch, precision, mode)
            np.testing.assert_allclose(a.kernel_us, b.kernel_us, rtol=1e-12, atol=0)
            if boosters.targets["dispatch"].library == "xgboost":  # rewritten as LightGBM text: bit for bit
                assert np.array_equal(a.dispatch_ratio, b.dispatch_ratio)
            else:
                np.testing.assert_allclose(a.dispatch_ratio, b.dispatch_ratio, rtol=1e-12, atol=0)


def test_without_lleaves_a_bundle_keeps_its_boosters_and_says_why(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(compiled_trees, "unavailable", lambda: "lleaves is not installed (lleaves)")
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200")
    with caplog.at_level(logging.WARNING, logger="latpred.predictor"):
        predictor = Predictor(bundle, resolve_device("h200"))
    assert predictor.trees == bundle.trees == "booster (lleaves is not installed (lleaves))"
    assert "trees: booster (lleaves is not installed" in repr(predictor)
    assert any("not compiled trees" in r.getMessage() for r in caplog.records)
    assert all(not t.compiled for t in bundle.targets.values())
    strict = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200")
    monkeypatch.setenv(compiled_trees.TREES_ENV, "compiled")
    with pytest.raises(BundleError, match="LATPRED_TREES=compiled"):
        strict.compile_trees()


def test_a_bad_tree_mode_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled_trees.TREES_ENV, "fast")
    with pytest.raises(ValueError, match="LATPRED_TREES='fast'"):
        Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200").compile_trees()


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(compiled_trees.CACHE_ENV, str(tmp_path / "here"))
    assert compiled_trees.cache_dir() == tmp_path / "here"
    monkeypatch.delenv(compiled_trees.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiled_trees.cache_dir() == tmp_path / "xdg" / "latpred" / "compiled"
    assert os.environ.get(compiled_trees.CACHE_ENV) is None
