"""Shared fixtures; tests marked ``gpu`` are skipped where torch sees no CUDA GPU."""

from __future__ import annotations

import pytest

#: One small valid configuration per operator family: the catalogue's formulas and checks and the
#: collectors' builders are tested on the same parameters, so a family added to one is missing
#: from neither. Grouped, strided and uneven on purpose (conv groups=2 stride 2, matmul n=5,
#: attention seq_kv != seq_q), so a formula that mixes two parameters up gives another number.
OP_PARAMS: dict[str, dict[str, int]] = {
    "conv2d": dict(c_in=4, c_out=8, h=8, w=8, kernel=3, stride=2, groups=2),
    "linear": dict(tokens=4, k=16, n=8),
    "matmul": dict(heads=2, m=4, k=8, n=5),
    "sdpa": dict(heads=2, seq_q=8, seq_kv=6, head_dim=16, causal=0),
    "batch_norm": dict(c=4, h=6, w=6),
    "layer_norm": dict(tokens=4, c=16),
    "group_norm": dict(c=8, h=4, w=4, groups=2),
    "softmax": dict(rows=4, c=16),
    "activation": dict(elements=64),
    "binary": dict(elements=64),
    "pool": dict(c=4, h=8, w=8, kernel=3, stride=2),
    "embedding": dict(vocab=50, c=8, tokens=4),
    "concat": dict(inputs=3, c=4, h=4, w=4),
    "transpose": dict(d1=4, d2=3, d3=8),
    "mean": dict(rows=4, c=16),
}


@pytest.fixture(scope="session")
def op_params() -> dict[str, dict[str, int]]:
    """``OP_PARAMS``: one small valid parameter set per operator family."""
    return OP_PARAMS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
