"""The NAS suite's files: what the validation suites ``nas-dev`` and ``nas-test`` predict.

Made on any machine with torch and onnx (CPU only), from the seeds alone:

- ``archs.jsonl``: one line per architecture: seed, name (``nas-<seed>``), space, split, spec,
  estimated FLOPs per sample and the torch graph's path.
- ``torch/nas-<seed>.json``: the torch importer's graph, traced at batch 1 in float32 under
  ``torch.inference_mode()``, as the measurement runs (fused fast paths included). None of the
  spaces branches on its dtype, so one trace serves every precision.
- ``onnx/<exporter>/nas-<seed>.onnx``: ``torch.onnx.export`` of the module at batch 2 (batch
  symbolic), weights stripped, by each exporter that works here (``collectors.onnx_export``, the
  same step as the zoo's: ``latpred collect onnx --nas-seeds``), with ``onnx/exports.jsonl``
  saying which exporter made what and why one failed.
- ``suite.json``: the seeds, the generator's spec hash, torch's and onnx's versions.

Rows measured for these architectures live in ``datasets/<device>/nas/`` (``latpred collect nas``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.nas_space import (
    arch_spec,
    build,
    example_input,
    format_seeds,
    model_name,
    spec_flops,
    spec_hash,
    split,
)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def arch_record(seed: int) -> dict[str, Any]:
    """The line of ``archs.jsonl`` that depends on the seed alone (no file made yet)."""
    spec = arch_spec(seed)
    name = model_name(seed)
    return {"seed": seed, "name": name, "space": spec["space"], "split": split(seed), "spec": spec,
            "flops_per_sample": round(spec_flops(spec)), "torch_graph": f"torch/{name}.json"}


def trace_arch(seed: int) -> Any:
    """The torch importer's graph of architecture ``seed``, traced as the measurement runs it."""
    import torch

    from predictor.importers.torch_module import graph_from_module

    spec = arch_spec(seed)
    torch.manual_seed(seed)
    module = build(spec).eval()
    graph = graph_from_module(module, example_input(spec, 1, "cpu", torch.float32), model_name(seed),
                              source=f"nas:{spec['space']}")
    graph.meta.update({"nas_seed": seed, "space": spec["space"], "split": split(seed), "traced_dtype": "float32"})
    return graph


def write_suite(out: Path, seeds: list[int], exporters: tuple[str, ...] = ("dynamo", "legacy"),
                say: Callable[[str], None] = lambda line: None) -> list[dict[str, Any]]:
    """Write the suite of ``seeds`` under ``out`` (graphs made again each time; the same seeds,
    torch and onnx give the same files; ONNX files already there are kept). Returns the
    ``archs.jsonl`` records."""
    import onnx
    import torch

    from collectors.nas_space import NasModel
    from collectors.onnx_export import EXPORT_BATCH, export_models

    out = Path(out)
    (out / "torch").mkdir(parents=True, exist_ok=True)
    records = []
    for seed in seeds:
        record = arch_record(seed)
        graph = trace_arch(seed)
        graph.save(out / record["torch_graph"])
        record["torch_nodes"] = len(graph.nodes)
        records.append(record)
        say(f"{record['name']} ({record['space']}, {record['split']}): {len(graph.nodes)} nodes")
    export_models(out / "onnx", {model_name(s): NasModel(s) for s in seeds}, exporters, say)
    _write_atomic(out / "archs.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    _write_atomic(out / "suite.json", json.dumps({
        "seeds": format_seeds(seeds), "spec_hash": spec_hash(seeds), "torch": torch.__version__,
        "onnx": onnx.__version__, "onnx_export_batch": EXPORT_BATCH, "torch_trace_batch": 1,
        "made_by": "latpred collect nas-suite"}, indent=1) + "\n")
    return records


def read_suite(directory: Path) -> list[dict[str, Any]]:
    """The ``archs.jsonl`` records of a suite folder."""
    with open(Path(directory) / "archs.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]
