"""Branch weights for lleaves' code (predictor.branch_weights): each branch of a compiled tree
carries the training rows that went either way, the code is lleaves' own but for them, the code
computes what the booster computes, and lleaves is left as it was found."""

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

#: an LLVM branch-weights annotation, on a branch and as its metadata node
PROF = re.compile(r", !prof !\d+")
WEIGHTS_NODE = re.compile(r'^!(\d+) = !\{ !"branch_weights", i32 (\d+), i32 (\d+) \}$', re.MULTILINE)


def _training_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2000, 4))
    x[:, 3] = rng.integers(0, 6, 2000)  # a categorical column
    x[rng.random(x.shape) < 0.05] = np.nan
    y = np.where(x[:, 0] > 1.0, 5.0, 0.0) + np.nan_to_num(x[:, 1]) + (x[:, 3] == 2) + 0.1 * rng.normal(size=2000)
    return x, y


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small LightGBM model with numerical splits (most rows go one way at the root), NaNs,
    zeros treated as missing and a categorical column: every kind of node lleaves generates."""
    x, y = _training_rows(0)
    model = lightgbm.LGBMRegressor(n_estimators=12, num_leaves=15, n_jobs=1, verbose=-1, zero_as_missing=True)
    model.fit(x, y, categorical_feature=[3])
    path = tmp_path_factory.mktemp("weights") / "model.txt"
    model.booster_.save_model(str(path))
    return path


def _field(tree: str, name: str) -> list[float]:
    """One numeric field of a LightGBM tree's text."""
    match = re.search(rf"^{name}=(.*)$", tree, re.MULTILINE)
    assert match is not None, f"no {name} in the tree"
    return [float(v) for v in match.group(1).split()]


def _unoptimized_ir(path: Path) -> str:
    """The IR lleaves generates for ``path``, before LLVM's passes."""
    import llvmlite.ir
    from lleaves.compiler.ast import parse_to_ast
    from lleaves.compiler.codegen import gen_forest

    module = llvmlite.ir.Module(name="forest")
    gen_forest(parse_to_ast(str(path)), module, 8, "forest_root", True)
    return str(module)


def test_the_weighted_code_is_lleaves_own_but_for_the_weights(model_file: Path) -> None:
    """Stripped of its weights, the IR is byte for byte what lleaves makes: the same blocks in
    the same order, categorical fast paths, zero-as-missing checks and fused double leaves."""
    assert branch_weights.supported(), "a lleaves version whose internals were not checked: read them again"
    plain = _unoptimized_ir(model_file)
    with branch_weights.weighted_compiles() as weighted:
        ir = _unoptimized_ir(model_file)
    assert weighted and "!prof" in ir and "!prof" not in plain
    assert WEIGHTS_NODE.sub("", PROF.sub("", ir)).rstrip() == plain.rstrip()


def test_the_root_branch_is_weighted_by_its_childrens_training_rows(model_file: Path) -> None:
    with branch_weights.weighted_compiles():
        ir = _unoptimized_ir(model_file)
    text = model_file.read_text()
    tree = text[text.index("Tree=0"):text.index("Tree=1")]
    internal, leaves = _field(tree, "internal_count"), _field(tree, "leaf_count")
    left, right = (int(v) for v in (_field(tree, "left_child")[0], _field(tree, "right_child")[0]))

    def rows_at(child: int) -> float:
        return leaves[~child] if child < 0 else internal[child]

    body = ir[ir.index('@"tree_0"('):]
    first_branch = re.search(r"br i1 .*, !prof !(\d+)", body)
    assert first_branch is not None, "tree_0's root has no weighted branch"
    nodes = {m.group(1): [int(m.group(2)), int(m.group(3))] for m in WEIGHTS_NODE.finditer(ir)}
    assert nodes[first_branch.group(1)] == branch_weights.branch_weights(rows_at(left), rows_at(right))


def test_weights_keep_the_childrens_proportion_within_32_bits() -> None:
    assert branch_weights.branch_weights(300, 100) == [1_000_000, 333_333]
    assert branch_weights.branch_weights(0.25, 0.75) == [333_333, 1_000_000]  # XGBoost's fractional hessians
    assert branch_weights.branch_weights(1e15, 1.0) == [1_000_000, 1]
    assert branch_weights.branch_weights(0, 0) == [1, 1]


def test_lleaves_is_left_as_it_was_even_when_a_compile_fails(model_file: Path) -> None:
    from lleaves.compiler.ast import parser, scanner
    from lleaves.compiler.codegen import codegen

    before = (dict(scanner.TREE_SCAN_KEYS), parser._parse_tree_to_ast, codegen._gen_decision_node)
    with pytest.raises(RuntimeError, match="compile failed"), branch_weights.weighted_compiles():
        assert codegen._gen_decision_node is not before[2]
        raise RuntimeError("compile failed")
    assert (dict(scanner.TREE_SCAN_KEYS), parser._parse_tree_to_ast, codegen._gen_decision_node) == before
    assert "!prof" not in _unoptimized_ir(model_file)


def test_weighted_code_predicts_as_the_booster(model_file: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights move blocks, not sums: the compiled forest (weighted, in the small code model,
    as compile_model makes it) gives LightGBM's predictions, NaNs, zeros, categories and values on
    the root's threshold included."""
    monkeypatch.setenv(compiled_trees.CACHE_ENV, str(tmp_path / "cache"))
    booster = lightgbm.Booster(model_file=str(model_file))
    forest = compiled_trees.compiled_forests({"m": ("lightgbm", model_file)}, 4)["m"]
    info = json.loads(next((tmp_path / "cache").glob("*.json")).read_text())
    assert info["branch_weights"] and info["code_model"] == "small"
    x, _ = _training_rows(1)
    x[::7, 0] = 0.0
    root = booster.dump_model()["tree_info"][0]["tree_structure"]
    if root["decision_type"] == "<=":
        x[:2, root["split_feature"]] = root["threshold"]
    np.testing.assert_allclose(forest.predict(x), booster.predict(x, num_threads=1), rtol=1e-12, atol=0)


def test_a_model_whose_output_calls_exp_compiles_in_the_large_code_model(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A Poisson model's output is exp of its trees' sum, a library call that llvmlite's memory
    manager cannot place (it aborts): compiled in the large code model, it loads and predicts as
    its booster, where the small code model would have failed the compile."""
    monkeypatch.setenv(compiled_trees.CACHE_ENV, str(tmp_path / "cache"))
    x, y = _training_rows(2)
    model = lightgbm.LGBMRegressor(objective="poisson", n_estimators=10, num_leaves=15, n_jobs=1, verbose=-1)
    model.fit(x, np.abs(y))
    path = tmp_path / "poisson.txt"
    model.booster_.save_model(str(path))
    assert compiled_trees.objective(path.read_text()) == "poisson"
    forest = compiled_trees.compiled_forests({"m": ("lightgbm", path)}, 4)["m"]
    info = json.loads(next((tmp_path / "cache").glob("*.json")).read_text())
    assert info["code_model"] == "large"
    np.testing.assert_allclose(forest.predict(x), model.booster_.predict(x, num_threads=1), rtol=1e-12, atol=0)


def test_an_xgboost_model_written_as_lightgbm_text_carries_its_rows(tmp_path: Path) -> None:
    """XGBoost's sum of hessians is its rows under squared error: written as LightGBM's counts."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 3))
    model = xgboost.XGBRegressor(n_estimators=3, max_depth=3, n_jobs=1).fit(x, x[:, 0] * 2)
    path = tmp_path / "model.json"
    model.get_booster().save_model(str(path))
    text, _ = compiled_trees.xgboost_as_lightgbm(json.loads(path.read_text()))
    first = text[text.index("Tree=1"):text.index("Tree=2")]
    assert _field(first, "internal_count")[0] == 500 and sum(_field(first, "leaf_count")) == 500
