"""Does an ONNX export predict like the same model's torch trace? Every zoo export, every variant.

For every file under ``datasets/suites/zoo/onnx/<exporter>/<model>.onnx`` (torch.onnx.export of
the zoo model, opset 17, weights stripped), the graph the ONNX importer makes is predicted with
the shipped nvidia-h200 bundle at fp32 and fp16, CUDA graph and eager, batch 1, 8 and 32, and
divided by the prediction for the shipped torch trace of the same model (``load_zoo_graph``, the
baseline, predicted in the same run). Both are imported at batch 1, as the zoo traces are.

Some calls PyTorch makes leave nothing in any export: ``dropout`` in eval, ``_assert``,
``contiguous`` on a tensor that already is. Each costs a view's host time in an eager prediction.
The importer puts them back where the module that makes them is known (onnx_module_calls,
onnx_encoder_layer). The ``visible`` columns compare both graphs without any such call, to tell
what the importer gets wrong from what no export can show; the plain columns are the target.

Run: .venv/bin/python benchmarks/onnx_parity.py [--models resnet50,vit_b_16] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import shlex
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._report import publish  # noqa: E402
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle  # noqa: E402
from predictor.devices import resolve_device  # noqa: E402
from predictor.graph import Graph  # noqa: E402
from predictor.importers.onnx_graph import graph_from_onnx  # noqa: E402
from predictor.predict import Predictor  # noqa: E402
from predictor.zoo import load_zoo_graph  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "datasets" / "suites" / "zoo" / "onnx"
OUT = REPO / "benchmarks" / "results" / "onnx_parity.txt"
VARIANTS = [(p, m, b) for p in ("fp32", "fp16") for m in ("cudagraph", "eager") for b in (1, 8, 32)]
TOLERANCE = 0.03
#: free calls of a torch trace that no export shows (no-ops in eval: nothing to export)
INVISIBLE = {"dropout", "_assert", "contiguous", "_set_grad_enabled"}


@dataclass
class Row:
    exporter: str
    model: str
    nodes: tuple[int, int]
    ratios: list[float]
    visible: list[float]
    import_ms: float
    assumptions: int


def without_invisible(graph: Graph) -> Graph:
    """A graph without the no-op calls an export cannot show (the torch trace's, and those the
    ONNX importer put back)."""
    nodes = [n for n in graph.nodes if not (n.kind == "free" and n.op.lower() in INVISIBLE)]
    return Graph(graph.name, nodes, graph.batch, graph.source, graph.meta)


def total(predictor: Predictor, graph: Graph, variant: tuple[str, str, int]) -> float:
    precision, mode, batch = variant
    return predictor.predict(graph, batch, precision, mode, with_layers=False).total_ms


def score(predictor: Predictor, path: Path) -> Row:
    model = path.name.removesuffix(".onnx.gz")
    data = gzip.decompress(path.read_bytes())
    t0 = time.perf_counter()
    graph = graph_from_onnx(data, name=model, batch=1)
    import_ms = (time.perf_counter() - t0) * 1e3
    torch_trace = load_zoo_graph(model)
    seen, shown = without_invisible(torch_trace), without_invisible(graph)
    ratios, visible = [], []
    for v in VARIANTS:
        ratios.append(total(predictor, graph, v) / total(predictor, torch_trace, v))
        visible.append(total(predictor, shown, v) / total(predictor, seen, v))
    return Row(path.parent.name, model, (len(graph.nodes), len(torch_trace.nodes)), ratios, visible, import_ms,
               len(graph.meta.get("assumptions", [])))


def worst(ratios: list[float]) -> tuple[float, str]:
    i = max(range(len(ratios)), key=lambda j: abs(ratios[j] - 1))
    p, m, b = VARIANTS[i]
    return ratios[i], f"{p} {m} b{b}"


def within(ratios: list[float]) -> int:
    return sum(abs(r - 1) <= TOLERANCE for r in ratios)


def table(rows: list[Row]) -> list[str]:
    lines = [f"{'exporter':8} {'model':20} {'nodes onnx/torch':>16} {'worst':>6} {'within 3%':>9}  "
             f"{'worst variant':20} {'visible worst':>13} {'visible 3%':>10} {'import ms':>9}"]
    for r in rows:
        w, where = worst(r.ratios)
        vw, _ = worst(r.visible)
        lines.append(f"{r.exporter:8} {r.model:20} {r.nodes[0]:>7}/{r.nodes[1]:<8} {w:6.3f} "
                     f"{within(r.ratios):>4}/{len(VARIANTS):<4}  {where:20} {vw:13.3f} "
                     f"{within(r.visible):>5}/{len(VARIANTS):<4} {r.import_ms:9.0f}")
    return lines


def summary(rows: list[Row]) -> list[str]:
    lines = []
    for exporter in sorted({r.exporter for r in rows}):
        mine = [r for r in rows if r.exporter == exporter]
        n = len(mine) * len(VARIANTS)
        ok, vis = sum(within(r.ratios) for r in mine), sum(within(r.visible) for r in mine)
        whole = sum(within(r.ratios) == len(VARIANTS) for r in mine)
        whole_vis = sum(within(r.visible) == len(VARIANTS) for r in mine)
        median = statistics.median(abs(x - 1) for r in mine for x in r.ratios)
        lines.append(f"summary {exporter}: {len(mine)} models; {ok}/{n} variants within 3% ({ok / n:.0%}), "
                     f"{whole} models within 3% in all {len(VARIANTS)}; median |ratio - 1| {median:.1%}; "
                     f"against the visible trace: {vis}/{n} ({vis / n:.0%}), {whole_vis} models")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated model names (default: every export)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the table is written")
    args = parser.parse_args()
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    device = resolve_device("h200")
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / device.device_id), device)
    paths = sorted(p for p in ROOT.glob("*/*.onnx.gz") if not wanted or p.name.removesuffix(".onnx.gz") in wanted)
    rows, failed = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's reference ops on shape arithmetic (log of 0 in T5)
        for path in paths:
            try:
                rows.append(score(predictor, path))
            except ValueError as exc:
                failed.append(f"{path.parent.name} {path.name.removesuffix('.onnx.gz')}: {exc}")
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/onnx_parity.py", *sys.argv[1:]])
    header = [f"# {command}",
              f"# ONNX graph / torch trace, predicted by bundle {predictor.bundle.version} on {device.device_id}; "
              f"variants: {', '.join(f'{p} {m} b{b}' for p, m, b in VARIANTS)}",
              f"# 'visible': both graphs without {', '.join(sorted(INVISIBLE))} calls, which no export "
              "shows (the importer puts back those of modules it knows by their parameters' names)"]
    lines = header + table(rows) + [""] + summary(rows) + [f"failed: {f}" for f in failed]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
