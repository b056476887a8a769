"""What a model runs while a CUDA stream is capturing, found by tracing it as if it were.

transformers asks ``is_tracing()`` before it skips an attention mask, and a capturing stream
counts as tracing: so a captured encoder materialises its all-ones padding mask and PyTorch runs
attention on its math path instead of flash attention (measured on the H200: 2-2.5x the kernel
time of the eager forward for distilbert and roberta). Tracing with that question answered "yes"
reproduces the captured graph's kernels exactly, without a GPU.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def capture_path_forced() -> Iterator[None]:
    """Make transformers believe a CUDA stream is capturing (its mask code asks this function).

    A no-op where transformers is not imported: other code takes the same path either way.
    """
    if "transformers" not in sys.modules:
        yield
        return
    from transformers.utils import import_utils

    original = getattr(import_utils, "is_cuda_stream_capturing", None)
    if original is None:  # an older transformers without the check: nothing to force
        yield
        return
    import_utils.is_cuda_stream_capturing = lambda: True
    try:
        yield
    finally:
        import_utils.is_cuda_stream_capturing = original
