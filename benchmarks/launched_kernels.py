"""Kernels PyTorch really launches for the calls the importers cost, against what each importer says.

The importers decide, call by call, how many kernels a module runs: an activation the exporter
writes out in pieces is one kernel (Mish, LogSigmoid), an in-place write is one, a view none, and
``nn.MultiheadAttention`` given a mask takes its fast path or not by the mask's dtype. This script
checks those decisions against a GPU: ``--measure`` runs each case's forward on CUDA (eval, under
``torch.inference_mode()``, as the zoo is measured) inside ``torch.profiler`` and writes the CUDA
kernels of the last of three forwards to a JSON file; without it, the script imports each case
through the torch trace and through its TorchScript ONNX export (on this machine's CPU) and prints,
beside the measured kernels, each importer's kernel and fallback nodes (a fallback is one kernel
too).

    python benchmarks/launched_kernels.py --measure $OUT/launched_kernels.json     # on the GPU machine
    .venv/bin/python benchmarks/launched_kernels.py --measured benchmarks/results/launched_kernels.json
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

if not __package__:  # run as a script: the repository root on the path, as python -m puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import publish  # noqa: E402

#: where the table is written
OUT = Path(__file__).resolve().parent / "results" / "launched_kernels.txt"
#: what a case's measured kernels showed beyond the importers' count, read off their names
NOTES = {
    "mha_float_attn_mask": "the 2 kernels more (a FillFunctor and a copy before the memory-efficient attention "
                           "kernel) are, by their place, SDPA padding a mask whose last dim (12) is no multiple of "
                           "16 for that kernel: inside the sdpa call, which the importers cost as one kernel (not "
                           "checked further)",
}

SEQ, EMBED = 12, 64


class MaskedAttention(nn.Module):
    """Batch-first nn.MultiheadAttention with an even head count, given one mask."""

    def __init__(self, keyword: str) -> None:
        super().__init__()
        self.keyword = keyword
        self.attention = nn.MultiheadAttention(EMBED, 4, batch_first=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=False, **{self.keyword: mask})[0]


class InPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y += 1
        y /= 3
        y.masked_fill_(y > 0.5, 0.0)
        return y


def _image() -> torch.Tensor:
    return torch.randn(1, 16, 32, 32)


def _tokens() -> torch.Tensor:
    return torch.randn(1, SEQ, EMBED)


#: name -> (module, example inputs at batch 1)
CASES: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "mish": lambda: (nn.Mish(), (_image(),)),
    "log_sigmoid": lambda: (nn.LogSigmoid(), (_image(),)),
    "silu": lambda: (nn.SiLU(), (_image(),)),
    "prelu": lambda: (nn.PReLU(), (_image(),)),
    "global_max_pool": lambda: (nn.AdaptiveMaxPool2d(1), (_image(),)),
    "in_place_writes": lambda: (InPlace(), (_image(),)),
    "mha_float_attn_mask": lambda: (MaskedAttention("attn_mask"),
                                    (_tokens(), torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1))),
    "mha_bool_attn_mask": lambda: (MaskedAttention("attn_mask"),
                                   (_tokens(), torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1))),
    "mha_bool_key_padding_mask": lambda: (MaskedAttention("key_padding_mask"),
                                          (_tokens(), torch.arange(SEQ).expand(1, SEQ) >= SEQ - 2)),
}


def measure(out: Path) -> None:
    """Each case's CUDA kernels, in launch order, from the last of three forwards."""
    from torch.profiler import ProfilerActivity, profile

    found: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": {}}
    for name, build in CASES.items():
        module, example = build()
        module = module.cuda().eval()
        inputs = tuple(t.cuda() for t in example)
        with torch.inference_mode():
            for _ in range(2):
                module(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                module(*inputs)
                torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        found["cases"][name] = kernels
        print(f"{name}: {len(kernels)} kernels: {kernels}")
    out.write_text(json.dumps(found, indent=1) + "\n")


def importer_kernels(name: str) -> tuple[int, int]:
    """(torch trace, ONNX export) kernel and fallback nodes of a case that run at batch 1 (not the
    copies that run from batch 2 on: ``Node.min_batch``)."""
    from predictor.importers.onnx_graph import graph_from_onnx
    from predictor.importers.torch_module import graph_from_module

    module, example = CASES[name]()
    module = module.eval()
    names = [f"in{i}" for i in range(len(example))]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buf,  # type: ignore[arg-type]  # (a file object: its stub says a path)
                          dynamo=False, opset_version=17, input_names=names)
    traced = graph_from_module(module, example, name=name)
    exported = graph_from_onnx(buf.getvalue(), name=name, batch=1)
    return _runs_at_batch_one(traced), _runs_at_batch_one(exported)


def _runs_at_batch_one(graph: Any) -> int:
    return sum(n.kind in ("kernel", "fallback") and (n.min_batch or 1) <= 1 for n in graph.nodes)


def report(measured_file: Path, out: Path) -> None:
    """The measured kernels beside each importer's, printed and written to ``out``."""
    measured = json.loads(measured_file.read_text())
    lines = [f"# .venv/bin/python benchmarks/launched_kernels.py --measured {measured_file}   (measured on "
             f"{measured['device']}, torch {measured['torch']}, by --measure; the importers on this machine's CPU, "
             f"torch {torch.__version__})",
             "# each case at batch 1, one forward in eval under inference_mode; 'torch trace' and 'ONNX' count the "
             "kernel and fallback nodes that run at batch 1",
             *(f"# {name}: {note}" for name, note in NOTES.items()),
             f"{'case':28s} {'launched':>8s} {'torch trace':>11s} {'ONNX':>5s}  kernels launched"]
    for name, kernels in measured["cases"].items():
        traced, exported = importer_kernels(name)
        short = ", ".join(k.split("<")[0].split("(")[0][:40] for k in kernels)
        lines.append(f"{name:28s} {len(kernels):8d} {traced:11d} {exported:5d}  {short}")
    publish(lines, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", type=Path, help="run the cases on CUDA and write their kernels here")
    parser.add_argument("--measured", type=Path, help="a file --measure wrote: print it beside the importers")
    parser.add_argument("--out", type=Path, default=OUT, help="where --measured writes its table")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
    elif args.measured:
        report(args.measured, args.out)
    else:
        parser.error("give --measure FILE (on a GPU) or --measured FILE")


if __name__ == "__main__":
    main()
