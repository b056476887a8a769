"""Merge traces of one model taken in two dtypes into one graph whose nodes say where they run.

A model's code may branch on its dtype: T5 guards its hidden states against float16 overflow
(``isinf(x).any()``, a ``where`` and a ``clamp`` after every block: 60 calls that bfloat16 never
makes). One trace cannot show both, so the zoo traces such models in each half dtype and keeps
one graph: the nodes both traces share, and each trace's own nodes marked with the precisions
they run at (``Node.precisions``), which ``Graph.at_precision`` drops elsewhere.
"""

from __future__ import annotations

from dataclasses import replace
from difflib import SequenceMatcher

from predictor.graph import HALF_DTYPES, Graph, Node
from predictor.precision import PRECISIONS


def _signature(node: Node) -> tuple:
    """What makes two nodes of the two traces the same call (dtypes aside: half is half)."""
    dtype = "half" if node.dtype in HALF_DTYPES else node.dtype
    return (node.op, node.kind, node.family, node.variant, node.capture_variant, node.layout,
            tuple(sorted(node.params.items())), node.elements_per_sample, dtype, bool(node.launched_by))


def merge_precision_traces(base: Graph, base_precisions: list[str], other: Graph,
                           other_precisions: list[str]) -> Graph:
    """One graph of ``base`` (traced for ``base_precisions``) and ``other`` (for
    ``other_precisions``): shared nodes unmarked, the rest marked with their trace's precisions.

    The traces are aligned as sequences of calls (difflib), so a branch inserted in every block
    lines up with the calls around it. ``other``'s own nodes are renamed ``NAME@PRECISION`` so
    that names stay unique, and their ``launched_by`` follows the renaming.
    """
    if not base_precisions or not other_precisions:
        raise ValueError("each trace needs the precisions it was traced for")
    unknown = [p for p in (*base_precisions, *other_precisions) if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown precision(s) {unknown}: expected {', '.join(PRECISIONS)}")
    if set(base_precisions) & set(other_precisions):
        raise ValueError(f"the traces' precisions overlap ({sorted(set(base_precisions) & set(other_precisions))}): "
                         "a node of both would run twice there")
    a = [_signature(n) for n in base.nodes]
    b = [_signature(n) for n in other.nodes]
    tag = other_precisions[0]
    renamed: dict[str, str] = {}
    nodes: list[Node] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            for base_node, other_node in zip(base.nodes[i1:i2], other.nodes[j1:j2]):
                renamed[other_node.name] = base_node.name
                nodes.append(base_node)
            continue
        nodes.extend(replace(n, precisions=list(base_precisions)) for n in base.nodes[i1:i2])
        for n in other.nodes[j1:j2]:
            renamed[n.name] = f"{n.name}@{tag}"
            nodes.append(replace(n, name=renamed[n.name], precisions=list(other_precisions)))
    for i, n in enumerate(nodes):
        if n.precisions == list(other_precisions) and n.launched_by:
            nodes[i] = replace(n, launched_by=renamed.get(n.launched_by, n.launched_by))
    return Graph(base.name, nodes, base.batch, base.source, dict(base.meta))  # checked as it is made
