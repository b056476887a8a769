"""ONNX made inside the tests: one export helper for the importer's tests."""

from __future__ import annotations

import io
import warnings
from typing import Any


def torchscript_export(module: Any, *example: Any, dynamic_batch: bool = False) -> bytes:
    """ONNX bytes of ``module`` in eval from torch's TorchScript exporter (``dynamo=False``: the
    dynamo exporter needs onnxscript, which is not installed here), opset 17 as the zoo's exports;
    inputs named in0, in1, ...; dim 0 of each symbolic ("batch") when ``dynamic_batch``."""
    import torch

    names = [f"in{i}" for i in range(len(example))]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), example, buf, dynamo=False, opset_version=17, input_names=names,
                          dynamic_axes={n: {0: "batch"} for n in names} if dynamic_batch else None)
    return buf.getvalue()
