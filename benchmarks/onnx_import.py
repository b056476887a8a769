"""How fast an ONNX model with its weights inside is read: the wire reader against ``onnx.load``.

The model is resnet50 as a user saves it (about 100 MB): the weight-stripped export
``datasets/suites/zoo/onnx/legacy/resnet50.onnx`` with every stripped initializer filled with
seeded random values, written to a temporary file. The baseline, measured in the same run, is
``onnx.load`` of that file (it parses every weight); the old loader (``onnx.load`` then onnx's
checker on the whole model, which serializes it again) and the whole import with the wire reader
bypassed (protobuf parses the weights, everything after is today's code, which then also infers
shapes over them) and the old import (the old loader, then the copy without large weights that the
old shape inference ran on, then today's code) are measured beside it.
Rounds are interleaved, baseline first in each, and each line is the median over the rounds: this
machine's speed drifts from one second to the next. The file is in the page cache for every line.
Goal (issue #11): loading at most 30 ms on one core.

Run: taskset -c 0 .venv/bin/python benchmarks/onnx_import.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from predictor.importers import onnx_wire  # noqa: E402
from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402
from predictor.importers.onnx_load import load_model  # noqa: E402

#: the suite keeps its exports gzipped; the benchmark reads a plain .onnx written from it
SUITE_EXPORT = Path(__file__).resolve().parents[1] / "datasets/suites/zoo/onnx/legacy/resnet50.onnx.gz"


def filled_model(stripped: Path, out: Path) -> int:
    """Write ``stripped`` to ``out`` with its weights inside (seeded random raw_data); its size."""
    model = onnx.load(str(stripped), load_external_data=False)
    rng = np.random.default_rng(0)
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            del t.external_data[:]
            t.ClearField("data_location")
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
            t.raw_data = rng.standard_normal(math.prod(t.dims)).astype(dtype).tobytes()
    data = model.SerializeToString()
    out.write_bytes(data)
    return len(data)


def old_load_model(path: Path) -> Any:
    """What load_model did before the wire reader: parse everything, then check everything."""
    model = onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(model)
    return model


def full_parse_graph(path: Path) -> Any:
    """graph_from_onnx with the wire reader bypassed: protobuf parses every weight."""
    real = onnx_wire.slim_model_bytes
    onnx_wire.slim_model_bytes = lambda source: Path(source).read_bytes()  # type: ignore[arg-type]
    try:
        return graph_from_onnx(path)
    finally:
        onnx_wire.slim_model_bytes = real


def old_import(path: Path) -> Any:
    """The import as it was before the wire reader, as closely as today's code allows: the old
    loader, then a copy of the model without its large weights' data (what the old shape
    inference ran on), then today's import of that light model."""
    model = old_load_model(path)
    light = onnx.ModelProto()
    light.CopyFrom(model)
    for t in light.graph.initializer:
        if math.prod(t.dims) > onnx_wire.KEEP_ELEMENTS:
            for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                t.ClearField(field)
    return graph_from_onnx(light.SerializeToString(), name=path.stem)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50_with_weights.onnx"
        stripped = Path(tmp) / "resnet50_stripped.onnx"
        stripped.write_bytes(gzip.decompress(SUITE_EXPORT.read_bytes()))
        size = filled_model(stripped, path)
        data = path.read_bytes()
        slim = len(onnx_wire.slim_model_bytes(path))
        same = graph_from_onnx(path).to_json() == full_parse_graph(path).to_json()
        lines: list[tuple[str, Callable[[], Any]]] = [
            ("onnx.load (baseline: parses every weight)", lambda: onnx.load(str(path), load_external_data=False)),
            ("old load_model: onnx.load + checker", lambda: old_load_model(path)),
            ("load_model(path): wire read + parse + checker", lambda: load_model(path)),
            ("load_model(bytes already in memory)", lambda: load_model(data)),
            ("graph_from_onnx(path), whole import", lambda: graph_from_onnx(path)),
            ("old import: old load_model, light copy, the rest", lambda: old_import(path)),
            ("graph_from_onnx, weights parsed (no wire reader)", lambda: full_parse_graph(path)),
            (f"load_model, stripped export ({stripped.stat().st_size // 1024} KB)", lambda: load_model(stripped)),
            ("graph_from_onnx, stripped export", lambda: graph_from_onnx(stripped)),
        ]
        for _, fn in lines:  # warm: imports, the page cache, onnx's schema tables
            fn()
        samples: dict[str, list[float]] = {label: [] for label, _ in lines}
        for _ in range(args.rounds):
            for label, fn in lines:
                started = time.perf_counter()
                fn()
                samples[label].append((time.perf_counter() - started) * 1e3)
    base = statistics.median(samples[lines[0][0]])
    print(f"resnet50 with its weights inside: {size / 1e6:.1f} MB; read without its large payloads: "
          f"{slim / 1e6:.2f} MB; same graph as a full parse: {same}; {args.rounds} interleaved rounds, medians")
    print(f"{'what':<52} {'ms':>9} {'min ms':>9} {'x onnx.load':>12}")
    for label, _ in lines:
        values = samples[label]
        median = statistics.median(values)
        print(f"{label:<52} {median:>9.2f} {min(values):>9.2f} {median / base:>11.3f}x")


if __name__ == "__main__":
    main()
