"""Branch weights for lleaves' compiled trees, from the training counts LightGBM writes.

Why: a cold graph's rows walk 300 deep trees each (127 leaves grown leaf-wise, mean depth
18-24), through code whose branches the CPU has no history for, since a forest holds some 37,000
of them, far more than its predictor remembers. A branch it has no history for is predicted to
fall through. lleaves gives LLVM no probabilities, so which child falls through is an accident of
its block order. LightGBM's model text records how many training rows reached each node
(``internal_count``, ``leaf_count``); given to LLVM as each branch's weights, they make the child
more rows took the fall-through and lay the hot paths out together. The code computes the same
sums: only its layout changes. On a cold graph's distinct rows a forest call took 0.60-0.87x as
long (activation, conv2d and binary forests, 10-60 rows a call, this workplace's Intel Xeon,
2026-12-05; ``benchmarks/results/cold_forests.txt``).

lleaves has no option for it, so ``weighted_compiles`` replaces two of its internals for as long
as it is in force: its tree scanner also reads the counts, and its decision-node generator sets
the weights. Both are lleaves 1.3.0's own code with that one addition. It is only used in the
subprocess that compiles one model (predictor.compiled_trees), and only for the lleaves versions
checked here; for any other it changes nothing, and the trees compile as lleaves lays them out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

#: the lleaves versions whose internals ``weighted_compiles`` replaces (their code was read for it)
CHECKED_LLEAVES = ("1.3.0",)
#: the tree fields LightGBM writes with each node's training rows
COUNT_FIELDS = ("internal_count", "leaf_count")
#: the weight the commoner child of a branch gets; the other's is in proportion (LLVM's weights
#: are 32-bit, and a sum of XGBoost hessians can be fractional or very large)
WEIGHT_SCALE = 1_000_000


def supported() -> bool:
    """Whether this lleaves is one whose internals ``weighted_compiles`` knows."""
    try:
        return version("lleaves") in CHECKED_LLEAVES
    except PackageNotFoundError:  # not installed: nothing to weight
        return False


def branch_weights(left: float, right: float) -> list[int]:
    """LLVM branch weights for children that ``left`` and ``right`` training rows reached: the
    commoner one ``WEIGHT_SCALE``, the other in proportion, neither below 1."""
    top = max(left, right)
    if not top > 0:
        return [1, 1]
    return [max(1, round(WEIGHT_SCALE * left / top)), max(1, round(WEIGHT_SCALE * right / top))]


def _with_counts(parse: Any) -> Any:
    """lleaves' tree parser, then each node's training rows set on it as ``count``."""

    def parse_tree(tree_struct: dict[str, Any], features: Any, class_id: int) -> Any:
        tree = parse(tree_struct, features, class_id)
        internal, leaf = (tree_struct.get(name) for name in COUNT_FIELDS)
        if internal is None or leaf is None:  # (an XGBoost model written as LightGBM text has none)
            return tree
        stack = [tree.root_node]
        while stack:
            node = stack.pop()
            if node.is_leaf:
                node.count = leaf[node.idx]
            else:
                node.count = internal[node.idx]
                stack += [node.left, node.right]
        return tree

    return parse_tree


def _weighted(codegen: Any, generate: Any) -> Any:
    """lleaves 1.3.0's numerical decision node, its branch weighted by its children's counts;
    categorical nodes (none in latpred's models) go to lleaves' own generator."""
    from llvmlite import ir

    def gen_decision_node(func: Any, node_block: Any, node: Any, use_fp64: bool) -> None:
        left_count, right_count = getattr(node.left, "count", None), getattr(node.right, "count", None)
        if node.decision_type.is_categorical or left_count is None or right_count is None:
            generate(func, node_block, node, use_fp64)
            return
        builder = ir.IRBuilder(node_block)
        comp = codegen._populate_numerical_node_block(func, builder, node, use_fp64)
        if node.left.is_leaf and node.right.is_leaf:  # both leaves: a select, no branch
            builder.ret(builder.select(comp, codegen.get_fdtype_const(node.left.value, use_fp64),
                                       codegen.get_fdtype_const(node.right.value, use_fp64)))
            return
        left_block = func.append_basic_block(name=str(node.left))
        right_block = func.append_basic_block(name=str(node.right))
        branch = builder.cbranch(comp, left_block, right_block)
        branch.set_weights(branch_weights(left_count, right_count))
        codegen.gen_node(func, left_block, node.left, use_fp64)
        codegen.gen_node(func, right_block, node.right, use_fp64)

    return gen_decision_node


@contextlib.contextmanager
def weighted_compiles() -> Iterator[bool]:
    """Within it, lleaves compiles each branch with its children's training counts as weights
    (yields True), where this lleaves is one checked (else changes nothing and yields False).
    Not thread-safe: it replaces module attributes of lleaves for its duration."""
    if not supported():
        yield False
        return
    from lleaves.compiler.ast import parser, scanner
    from lleaves.compiler.codegen import codegen

    saved_keys = dict(scanner.TREE_SCAN_KEYS)
    saved_parse, saved_generate = parser._parse_tree_to_ast, codegen._gen_decision_node
    for name in COUNT_FIELDS:
        scanner.TREE_SCAN_KEYS[name] = scanner.ScannedValue(float, is_list=True, null_ok=True)
    parser._parse_tree_to_ast = _with_counts(saved_parse)
    codegen._gen_decision_node = _weighted(codegen, saved_generate)
    try:
        yield True
    finally:
        scanner.TREE_SCAN_KEYS.clear()
        scanner.TREE_SCAN_KEYS.update(saved_keys)
        parser._parse_tree_to_ast, codegen._gen_decision_node = saved_parse, saved_generate
