"""One object per kernel configuration (family, variant, layout, parameters), so that the kernel
cache's keys hash fast.

A prediction looks each node's kernel up in the cache several times (to collect a batch's new
kernels, to evaluate them, to compose), and a key that nests the parameters as a tuple is hashed
anew on every lookup: that was a twentieth of a new graph's cost. Interned, a configuration
hashes by identity, and a cache key is (configuration, batch, precision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from predictor.graph import Node

#: Configurations remembered; past it the table starts again (the kernel cache keys stay valid:
#: an object is never reused for another configuration while a key holds it).
INTERN_LIMIT = 200_000


@dataclass(frozen=True, eq=False)  # equal and hashed by identity: one object per configuration
class KernelConfig:
    """What a kernel's prediction depends on, besides batch and precision."""

    family: str
    variant: str
    layout: str
    params: dict[str, int]


_INTERNED: dict[tuple, KernelConfig] = {}


def kernel_config(node: Node, variant: str) -> KernelConfig:
    """The one object for ``node``'s kernel run as ``variant`` (a kernel node: it has a family)."""
    key = (node.family, variant, node.layout, node.params_key)
    config = _INTERNED.get(key)
    if config is None:
        if len(_INTERNED) >= INTERN_LIMIT:
            _INTERNED.clear()
        config = _INTERNED.setdefault(key, KernelConfig(node.family or "", variant, node.layout, node.params))
    return config
