"""Branch weights for lleaves' code (predictor.branch_weights): each branch of a compiled tree
carries the training rows that went either way, the code computes what it computed without them,
and lleaves is left as it was found."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from predictor import branch_weights, compiled_trees

pytest.importorskip("lleaves")
lightgbm = pytest.importorskip("lightgbm")
xgboost = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small LightGBM model whose text carries internal_count and leaf_count, as every
    LightGBM model file does."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 4))
    y = np.where(x[:, 0] > 1.0, 5.0, 0.0) + x[:, 1] + 0.1 * rng.normal(size=2000)  # most rows go one way at the root
    model = lightgbm.LGBMRegressor(n_estimators=12, num_leaves=15, n_jobs=1, verbose=-1).fit(x, y)
    path = tmp_path_factory.mktemp("weights") / "model.txt"
    model.booster_.save_model(str(path))
    return path


def _field(tree: str, name: str) -> list[int]:
    """One integer field of a LightGBM tree's text."""
    match = re.search(rf"^{name}=(.*)$", tree, re.MULTILINE)
    assert match is not None, f"no {name} in the tree"
    return [int(v) for v in match.group(1).split()]


def _unoptimized_ir(path: Path) -> str:
    """The IR lleaves generates for ``path``, before LLVM's passes."""
    import llvmlite.ir
    from lleaves.compiler.ast import parse_to_ast
    from lleaves.compiler.codegen import gen_forest

    module = llvmlite.ir.Module(name="forest")
    gen_forest(parse_to_ast(str(path)), module, 8, "forest_root", True)
    return str(module)


def test_each_branch_is_weighted_by_the_training_rows_that_took_it(model_file: Path) -> None:
    assert branch_weights.supported(), "a lleaves version whose internals were not checked: read them again"
    with branch_weights.weighted_compiles() as weighted:
        ir = _unoptimized_ir(model_file)
    assert weighted
    text = model_file.read_text()
    first_tree = text[text.index("Tree=0"):text.index("Tree=1")]
    internal = _field(first_tree, "internal_count")
    leaves = _field(first_tree, "leaf_count")
    left = _field(first_tree, "left_child")
    right = _field(first_tree, "right_child")

    def rows_at(child: int) -> int:
        return leaves[~child] if child < 0 else internal[child]

    weights = [tuple(int(w) for w in m) for m in re.findall(r'!"branch_weights", i32 (\d+), i32 (\d+)', ir)]
    # the root branches unless both its children are leaves (a select, not a branch)
    assert (rows_at(left[0]), rows_at(right[0])) in weights
    assert len(weights) >= len(internal) - 1


def test_lleaves_is_left_as_it_was(model_file: Path) -> None:
    from lleaves.compiler.ast import parser, scanner
    from lleaves.compiler.codegen import codegen

    before = (dict(scanner.TREE_SCAN_KEYS), parser._parse_tree_to_ast, codegen._gen_decision_node)
    with branch_weights.weighted_compiles():
        assert codegen._gen_decision_node is not before[2]
    assert (dict(scanner.TREE_SCAN_KEYS), parser._parse_tree_to_ast, codegen._gen_decision_node) == before
    assert "branch_weights" not in _unoptimized_ir(model_file)


def test_weighted_code_predicts_as_the_booster(model_file: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights move blocks, not sums: the compiled forest (weighted, as compile_model makes
    it) gives LightGBM's predictions, NaNs and values on the thresholds included."""
    monkeypatch.setenv(compiled_trees.CACHE_ENV, str(tmp_path / "cache"))
    booster = lightgbm.Booster(model_file=str(model_file))
    forest = compiled_trees.compiled_forests({"m": ("lightgbm", model_file)}, 4)["m"]
    info = next((tmp_path / "cache").glob("*.json"))
    assert '"branch_weights": true' in info.read_text()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 4))
    root = booster.dump_model()["tree_info"][0]["tree_structure"]
    x[:2, root["split_feature"]] = root["threshold"]  # a value on the root's threshold goes left
    x[rng.random(x.shape) < 0.1] = np.nan
    np.testing.assert_allclose(forest.predict(x), booster.predict(x, num_threads=1), rtol=1e-12, atol=0)


def test_an_xgboost_model_written_as_lightgbm_text_carries_its_rows(tmp_path: Path) -> None:
    """XGBoost's sum of hessians is its rows under squared error: written as LightGBM's counts."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 3))
    model = xgboost.XGBRegressor(n_estimators=3, max_depth=3, n_jobs=1).fit(x, x[:, 0] * 2)
    path = tmp_path / "model.json"
    model.get_booster().save_model(str(path))
    text, _ = compiled_trees.xgboost_as_lightgbm(json.loads(path.read_text()))
    first = text[text.index("Tree=1"):text.index("Tree=2")]
    internal = _field(first, "internal_count")
    leaves = _field(first, "leaf_count")
    assert internal[0] == 500 and sum(leaves) == 500
