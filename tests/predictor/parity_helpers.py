"""Helpers of the ONNX importer's tests: ONNX exported inside a test, and the comparison of an
ONNX graph's predictions with the torch trace's of the same model (parity)."""

from __future__ import annotations

import gzip
import io
import warnings
from pathlib import Path
from typing import Any

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.devices import resolve_device
from predictor.graph import Graph
from predictor.predict import Predictor

#: the zoo's committed exports: <exporter>/<model>.onnx.gz (benchmarks/export_zoo_onnx.sh)
ZOO_ONNX = Path(__file__).resolve().parents[2] / "datasets" / "suites" / "zoo" / "onnx"
#: (precision, mode, batch) of every parity comparison, as benchmarks/onnx_parity.py
VARIANTS = [(p, m, b) for p in ("fp32", "fp16") for m in ("cudagraph", "eager") for b in (1, 8, 32)]


def torchscript_export(module: Any, *example: Any, dynamic_batch: bool = False) -> bytes:
    """ONNX bytes of ``module`` in eval from torch's TorchScript exporter (``dynamo=False``: the
    dynamo exporter needs onnxscript, which is not installed here), opset 17 as the zoo's exports;
    inputs named in0, in1, ...; dim 0 of each symbolic ("batch") when ``dynamic_batch``."""
    names = [f"in{i}" for i in range(len(example))]
    return export_named(module, example, names, {n: {0: "batch"} for n in names} if dynamic_batch else None)


def export_named(module: Any, example: tuple[Any, ...], names: list[str],
                 dynamic_axes: dict[str, dict[int, str]] | None) -> bytes:
    """ONNX bytes of ``module`` in eval from the TorchScript exporter, opset 17, its inputs named
    ``names`` with the symbolic dims ``dynamic_axes`` gives (a mask shared by the batch keeps its
    size: its axes are not named)."""
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), example, buf, dynamo=False, opset_version=17, input_names=names,
                          dynamic_axes=dynamic_axes)
    return buf.getvalue()


def zoo_export(exporter: str, model: str) -> Graph:
    """The graph the ONNX importer makes of a zoo model's committed export, at batch 1 as the zoo's
    torch traces are."""
    from predictor.importers.onnx_graph import graph_from_onnx

    return graph_from_onnx(gzip.decompress((ZOO_ONNX / exporter / f"{model}.onnx.gz").read_bytes()), batch=1)


def h200_predictor() -> Predictor:
    """The shipped H200 bundle's predictor."""
    device = resolve_device("h200")
    return Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id), device)


def variants_off(predictor: Predictor, onnx_graph: Graph, torch_graph: Graph,
                 tolerance: float = 0.03) -> dict[str, float]:
    """The variants where the ONNX graph's prediction is off the torch trace's by more than
    ``tolerance``, each with the ratio of the two."""
    off = {}
    for precision, mode, batch in VARIANTS:
        ratio = (predictor.predict(onnx_graph, batch, precision, mode, with_layers=False).total_ms
                 / predictor.predict(torch_graph, batch, precision, mode, with_layers=False).total_ms)
        if abs(ratio - 1) > tolerance:
            off[f"{precision} {mode} b{batch}"] = round(ratio, 4)
    return off
