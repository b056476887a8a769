"""Export torch modules to ONNX the way a user would, then strip the weights out of the file.

The predictor needs only an ONNX graph's dims, so the suites keep weight-stripped exports: every
initializer over 1 KiB points at an external data file that is not kept (the same file a model
over 2 GB comes with, minus the data). That keeps the files small enough to commit, and makes
every suite graph exercise the importer's rule that external data is never opened.

``torch.onnx.export`` in PyTorch 2.9 and later runs the dynamo exporter by default; it can fail
where the TorchScript ("legacy") exporter does not (data-dependent control flow in transformers
models), so each export says which exporter made it. torch and onnx are imported inside.

A zoo model is built untrained, and what initialization leaves constant (zero biases, unit norm
weights, a BatchNorm's fresh statistics) an exporter's optimizer may remove: the dynamo exporter
drops an all-zero bias (onnxscript's RemoveZeroBias), so the export of an untrained SqueezeNet
runs convolutions without bias where PyTorch runs them with one, and where the trained model a
user exports keeps it. ``as_trained`` gives those tensors varied values before every export;
timing never depends on the values.
"""

from __future__ import annotations

import gzip
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from predictor.importers.onnx_wire import BOOL, INT32, INT64, KEEP_ELEMENTS

if TYPE_CHECKING:
    from collectors.model_build import ModelSource

OPSET = 17
EXPORTERS = ("dynamo", "legacy")
#: where stripped tensors say their data lives; the file is never written beside the model.
STRIPPED_LOCATION = "stripped-weights.bin"
STRIP_ABOVE_BYTES = 1024
#: the types of initializers kept whole, over STRIP_ABOVE_BYTES too, up to the elements the importer
#: reads (predictor.importers.onnx_wire.KEEP_ELEMENTS): masks and indices (onnx.TensorProto's BOOL,
#: INT32, INT64), not a model's weights (a quantized model's are int8; its int32 biases are kept)
KEPT_TYPES = (BOOL, INT32, INT64)
#: the batch an export is traced at, symbolic in the file: at batch 1 an exporter may fold the
#: batch into constants
EXPORT_BATCH = 2


#: the spread given to a tensor initialization left at zero (a trained bias's order of size)
TRAINED_ZERO_STD = 0.02


def as_trained(module: Any, seed: int = 0) -> int:
    """Give every floating parameter and buffer of ``module`` whose elements are all equal varied
    values as a trained model's are: a zero one N(0, 0.02), any other c times U(0.5, 1.5) (so a
    running variance stays positive). A one-element tensor only where it is zero (the bias of a
    Linear(..., 1)); a 0-d one never (a scalar buffer a model reads as a constant). Returns how
    many it changed; in place, without grad. Tensors that already vary are left as they are."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    changed = 0
    with torch.no_grad():
        tensors = [*module.named_parameters(), *module.named_buffers()]
        for _, tensor in tensors:
            if not tensor.is_floating_point() or tensor.dim() == 0 or tensor.numel() == 0:
                continue
            first = tensor.reshape(-1)[0]
            if not bool((tensor == first).all()) or (tensor.numel() == 1 and float(first) != 0.0):
                continue
            if float(first) == 0.0:
                noise = torch.randn(tensor.shape, generator=generator) * TRAINED_ZERO_STD
                tensor.copy_(noise.to(tensor.dtype))
            else:
                scale = 0.5 + torch.rand(tensor.shape, generator=generator)
                tensor.copy_((tensor.float().cpu() * scale).to(tensor.dtype))
            changed += 1
    return changed


def _export(module: Any, example: Any, path: Path, exporter: str) -> None:
    """Write ``module`` exported with ``exporter`` to ``path`` with a symbolic batch dimension."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer notices
        if exporter == "legacy":
            torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=OPSET,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}})
            return
        batch = torch.export.Dim("batch", min=1, max=4096)
        program = torch.onnx.export(module, (example,), dynamo=True, opset_version=OPSET,
                                    input_names=["input"], output_names=["output"],
                                    dynamic_shapes=({0: batch},))
        if program is None:  # only when given a file to write, which the dynamo path is not
            raise RuntimeError("torch.onnx.export returned no program")
        program.save(str(path), external_data=True)


def strip_weights(source: Path, destination: Path) -> int:
    """Copy the ONNX file ``source`` to ``destination`` (gzipped where its name ends in .gz) with
    every initializer over 1 KiB turned into a reference to external data that is not written,
    and without the nodes' metadata and doc strings (stack traces). Returns the number of
    tensors stripped. A boolean or int32/int64 initializer of up to 65,536 elements (what the
    importer reads) keeps its data: it is no weight but a mask or indices the exporter folded (the
    dynamo exporter stores a decoder's causal mask so, ``le_1``, 16,384 elements at 128 tokens,
    and the key positions it is compared with), and what a mask masks decides which attention
    kernel PyTorch runs."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor

    model = onnx.load(str(source), load_external_data=False)
    stripped = 0
    for tensor in model.graph.initializer:
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if tensor.data_type in KEPT_TYPES and all(d >= 0 for d in tensor.dims) \
                and math.prod(tensor.dims) <= KEEP_ELEMENTS:
            if external:  # (the dynamo exporter writes every tensor to its external data file)
                load_external_data_for_tensor(tensor, str(source.parent))
                del tensor.external_data[:]
                tensor.data_location = onnx.TensorProto.DEFAULT
            continue
        if not external and tensor.ByteSize() <= STRIP_ABOVE_BYTES:
            continue
        for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                      "string_data"):
            tensor.ClearField(field)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", STRIPPED_LOCATION
        stripped += 1
    for node in model.graph.node:  # the dynamo exporter's stack traces: most of a stripped file
        del node.metadata_props[:]
        node.doc_string = ""
    destination.parent.mkdir(parents=True, exist_ok=True)
    data = model.SerializeToString()
    if destination.name.endswith(".gz"):  # mtime 0: the same export gives the same bytes
        data = gzip.compress(data, mtime=0)
    destination.write_bytes(data)
    return stripped


def export_stripped(module: Any, example: Any, destination: Path,
                    exporters: tuple[str, ...] = EXPORTERS) -> dict[str, Any]:
    """Export ``module(example)`` with the first of ``exporters`` that succeeds and save it,
    weights stripped, at ``destination``. Returns what happened: the exporter, seconds, tensors
    stripped, and the errors of the exporters that failed (an empty exporter if all did)."""
    errors: dict[str, str] = {}
    module = module.eval()
    for exporter in exporters:
        if exporter not in EXPORTERS:
            raise ValueError(f"unknown exporter {exporter!r}: expected one of {', '.join(EXPORTERS)}")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            try:
                _export(module, example, path, exporter)
                stripped = strip_weights(path, destination)
            except Exception as exc:  # an exporter's failure is a result to record, not a crash
                first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                errors[exporter] = f"{type(exc).__name__}: {first}"
                continue
        return {"exporter": exporter, "seconds": round(time.perf_counter() - started, 2),
                "stripped": stripped, "bytes": destination.stat().st_size, "errors": errors}
    return {"exporter": "", "seconds": None, "stripped": 0, "bytes": 0, "errors": errors}


class TextForward:
    """A transformers model called as a user exports it: token ids in, the last hidden state
    out, and no key-value cache (which neither exporter can return). A torch module, made on
    first use so that this module imports without torch."""

    def __new__(cls, model: Any) -> Any:
        import inspect

        import torch

        takes_cache = "use_cache" in inspect.signature(model.forward).parameters

        class _TextForward(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: Any) -> Any:
                extra = {"use_cache": False} if takes_cache else {}
                return self.model(input_ids=input_ids, **extra).last_hidden_state

        return _TextForward().eval()


def export_models(out: Path, models: Mapping[str, ModelSource], exporters: tuple[str, ...] = EXPORTERS,
                  say: Callable[[str], None] = lambda line: None) -> list[dict[str, Any]]:
    """Export each model with each exporter, separately, to ``out/<exporter>/<name>.onnx.gz``
    (gzipped: a suite's exports are a tenth of their size so), weights stripped, skipping files
    already there (so a run cut short resumes). Text models are called as ``TextForward``, and
    every model is exported ``as_trained``. Returns one record per export tried, also appended
    to ``out/exports.jsonl``."""
    import json

    import torch

    records = []
    out.mkdir(parents=True, exist_ok=True)
    for name, source in models.items():
        todo = [e for e in exporters if not (out / e / f"{name}.onnx.gz").exists()]
        if not todo:
            continue
        torch.manual_seed(0)
        module = source.build().eval()
        constants_given_values = as_trained(module)
        if source.kind == "text":
            module = TextForward(module)
        example = source.example_input(EXPORT_BATCH, "cpu", torch.float32)
        for exporter in todo:
            made = export_stripped(module, example, out / exporter / f"{name}.onnx.gz", (exporter,))
            record = {"model": name, **made, "as_trained_tensors": constants_given_values}
            records.append(record)
            with open(out / "exports.jsonl", "a") as log:
                log.write(json.dumps(record) + "\n")
            say(f"{name} [{exporter}]: " + (f"{record['bytes']} bytes in {record['seconds']} s"
                                            if record["exporter"] else f"failed: {record['errors']}"))
    return records
