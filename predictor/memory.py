"""How much GPU memory a graph needs for an inference forward: weights, activations, runtime.

Hardware selection drops the devices a model does not fit, so this answers "does it fit?" from the
graph IR alone, at any batch size and precision. Three parts, each an estimate whose reasons are
listed in ``MemoryEstimate.assumptions``:

- **weights**: what each node's layer keeps on the device (the catalogue's weight bytes for conv2d
  and linear; the tables and statistics the catalogue does not count as weights, for norms and
  embeddings), at the precision the node runs in. On the zoo's 16 models run on an H200 it
  matched PyTorch's parameters and buffers to 0.6% (Swin's relative-position tables, which only
  an add reads, are not in the IR).
- **activations**: the IR names no tensors (a node lists the shapes it writes, not who reads
  them), and what an eager forward keeps alive also depends on the Python names holding tensors
  until a ``forward`` returns, so the live set cannot be replayed. The estimate adds four
  quantities the IR does give (``ActivationParts``). Against ``torch.cuda.max_memory_allocated``
  of a forward under ``torch.inference_mode()`` (H200, torch 2.11; 16 zoo models and 12 NAS
  architectures, fp32 and fp16, batch 32) estimate / measured was 0.47-1.81, median 1.09: low
  for hand-written attention and MLP-Mixer blocks and ViT, whose ``forward`` keeps q, k, v and
  the packed projection alive through the MLP; high for ``nn.TransformerEncoder``'s fused layers
  and plain ResNets. A tensor-lifetime count on the CPU, which gave the H200's figures to 0.2 MiB
  on those 12 NAS architectures, put 36 more at 0.57-2.83 (batch 2).
- **workspace**: a fixed allowance for what the process holds beside its tensors (the CUDA
  context, the libraries' code, cuBLAS's workspaces), measured on an H200.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from predictor.catalogue import bytes_moved, weight_bytes
from predictor.compose import MODES
from predictor.graph import Graph, Node
from predictor.precision import get_precision

MiB = 1 << 20

#: GPU memory a PyTorch process holds outside its caching allocator once it has run
#: convolutions, GEMMs, attention and norms in fp32 and fp16: the CUDA context and the kernels
#: loaded into it (lazily: CUDA_MODULE_LOADING=LAZY, the default since CUDA 11.7), the cuDNN and
#: cuBLAS handles. Measured on an H200 (torch 2.11, CUDA 13.0, driver 580), NVML's used memory
#: less the allocator's reserved memory: 1310 MiB after those calls, 1330 MiB after 28 models had
#: run in the same process. A GPU with fewer SMs reserves less for the context.
CUDA_CONTEXT_BYTES = 1330 * MiB
#: cuBLAS's and cuBLASLt's workspaces, which PyTorch allocates through its caching allocator once
#: per handle and keeps: the same measurement found 33-34 MiB allocated beyond parameters,
#: buffers and the input after a warm-up forward, in every model (32 MiB for cuBLAS on Hopper).
PERSISTENT_WORKSPACE_BYTES = 34 * MiB
#: Workspaces cuDNN and cuBLASLt take for one call and give back: the peak of a forward rose up
#: to 12 MiB above its tensors' (seen at fp16 and batch 1, where activations are small).
PER_CALL_WORKSPACE_BYTES = 14 * MiB
LIBRARY_WORKSPACE_BYTES = PERSISTENT_WORKSPACE_BYTES + PER_CALL_WORKSPACE_BYTES
WORKSPACE_BYTES = CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES

#: Bytes of one element of the dtypes that do not follow the model's precision (token ids, masks).
FIXED_DTYPE_BYTES: dict[str, int] = {
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float64": 8,
}

Params = Mapping[str, int]
StateFormula = Callable[[Params, int], float]

#: Resident bytes of the layers whose catalogue ``weight_bytes`` is zero (the catalogue counts
#: weights where they shape a kernel's latency; these are state all the same), per element size:
#: batch norm's weight, bias, running mean and variance; layer and group norm's weight and bias
#: (an affine norm, PyTorch's default); an embedding's whole table, of which a call reads a few
#: rows. Every other family keeps what the catalogue's ``weight_bytes`` says (conv2d, linear).
STATE_BYTES: dict[str, StateFormula] = {
    "batch_norm": lambda p, e: 4.0 * p["c"] * e,
    "layer_norm": lambda p, e: 2.0 * p["c"] * e,
    "group_norm": lambda p, e: 2.0 * p["c"] * e,
    "embedding": lambda p, e: float(p["vocab"] * p["c"] * e),
}


@dataclass(frozen=True)
class MemoryEstimate:
    """GPU memory one inference forward of a graph needs, in bytes.

    ``weights_bytes``: parameters and batch-norm statistics at the precision asked (the fp32
    islands of a half-precision graph at fp32); ``activations_bytes``: peak live activations of
    an inference forward (no grad) at the batch; ``workspace_bytes``: the runtime's allowance
    (CUDA context, library code and workspaces); ``total_bytes``: their sum, to compare with a
    device's memory; ``assumptions``: what the estimate took for granted, in words. The caching
    allocator's slack is not counted: on the H200 it reserved 2-511 MiB more than it allocated
    at the peak, typically a tenth to a third of the activations at batch 32.
    """

    weights_bytes: int
    activations_bytes: int
    workspace_bytes: int
    total_bytes: int
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class ActivationParts:
    """The four terms of the activation estimate, in bytes at one batch and precision.

    ``working``: the largest working set of one call (what it reads and writes: the catalogue's
    bytes formula less the bytes that do not grow with the batch, its weights); ``residual``:
    the largest tensor a residual add writes (a block's input stays alive while the block runs);
    ``held``: the largest tensor any call writes, once more (a tensor a Python name keeps alive
    past its last use: a block's packed qkv through its MLP, an Inception branch until the
    concatenation); ``kv_cache``: the keys and values a decoder appends to its cache, all alive
    until the forward returns them."""

    working: float
    residual: float
    held: float
    kv_cache: float
    largest_call: str

    @property
    def total(self) -> float:
        return self.working + self.residual + self.held + self.kv_cache


def memory_estimate(graph: Graph, batch: int, precision: str, mode: str = "eager") -> MemoryEstimate:
    """GPU memory ``graph`` needs for one inference forward at ``batch`` and ``precision``, run
    in ``mode`` ('eager', or 'cudagraph' where the captured forward takes other attention
    kernels: transformers' masked math path materialises its scores).

    For hardware selection, which drops the devices a model does not fit: compare
    ``total_bytes`` with a device's memory. Refuses a batch below 1, an unknown precision or an
    unknown mode with a ValueError naming the field."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer of at least 1, got {batch!r}")
    if not isinstance(precision, str):
        raise ValueError(f"precision must be a string naming a precision, got {precision!r}")
    precision = get_precision(precision).name  # its ValueError names the precision and the choices
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    notes: list[str] = []
    weights = _weights(graph.at_precision(precision), precision, notes)
    parts = activation_parts(graph.at_precision(precision, batch), batch, precision, mode)
    notes.append(
        "activations: the IR names no tensors, so the live set is not replayed; the peak is taken "
        f"as the largest call's inputs and outputs ({parts.largest_call}: {parts.working / MiB:.1f} MiB, "
        f"an in-place op counted as out of place) + the largest residual add's output "
        f"({parts.residual / MiB:.1f} MiB) + the largest tensor any call writes, as one that a Python "
        f"name holds ({parts.held / MiB:.1f} MiB) + the decoder's KV cache ({parts.kv_cache / MiB:.1f} MiB); "
        "measured peaks were 0.55-2.1 times this on 28 zoo and NAS models (H200, inference_mode, batch 32)")
    notes.append(f"workspace: a fixed {WORKSPACE_BYTES // MiB} MiB, the CUDA context and library code "
                 f"({CUDA_CONTEXT_BYTES // MiB} MiB) and cuBLAS/cuDNN workspaces "
                 f"({LIBRARY_WORKSPACE_BYTES // MiB} MiB) measured on an H200 with torch 2.11 and CUDA 13.0; "
                 "the caching allocator's slack (a tenth to a third of the activations at batch 32 "
                 "there) is not counted")
    activations = int(math.ceil(parts.total))
    return MemoryEstimate(weights, activations, WORKSPACE_BYTES, weights + activations + WORKSPACE_BYTES,
                          tuple(notes))


def element_bytes(graph: Graph, node: Node, precision: str) -> int:
    """Bytes of one element of what ``node`` writes when the model runs in ``precision``: token
    ids and masks keep their own dtype; float tensors take the node's precision (``fp32`` for a
    half-precision graph's float32 islands)."""
    fixed = FIXED_DTYPE_BYTES.get(node.dtype)
    if fixed is not None:
        return fixed
    return get_precision(graph.precision_of(node, precision)).element_bytes


# --- weights --------------------------------------------------------------------------------


def _resident(node: Node, e: int) -> float:
    """Bytes ``node``'s layer keeps on the device (0 for layers without parameters)."""
    assert node.family is not None
    state = STATE_BYTES.get(node.family)
    return state(node.params, e) if state else weight_bytes(node.family, node.params, node.variant, e)


def _separate_bias(node: Node, following: Node | None) -> int:
    """Elements of the bias that the kernel after a GEMM without one (variant 'nobias') adds: a
    broadcast add over exactly its output (``F.linear`` on a view it cannot fold, the ONNX
    exporter's MatMul then Add). 0 where none follows."""
    if node.family != "linear" or node.variant != "nobias" or following is None:
        return 0
    if (following.family == "binary" and following.variant == "add" and following.layout == "strided"
            and following.params.get("elements") == node.params["tokens"] * node.params["n"]):
        return node.params["n"]
    return 0


def _weights(graph: Graph, precision: str, notes: list[str]) -> int:
    """Resident parameter bytes of the nodes that run at ``precision``, each at its node's
    precision. All nodes count, at every batch: a bias added by a kernel of its own exists
    whether or not that kernel runs at batch 1."""
    total = 0.0
    islands = 0
    kernels = [n for n in graph.nodes if n.kind == "kernel"]
    for node, following in zip(kernels, [*kernels[1:], None]):
        e = element_bytes(graph, node, precision)
        resident = _resident(node, e) + _separate_bias(node, following) * e
        if resident and graph.precision_of(node, precision) != precision:
            islands += 1
        total += resident
    fallbacks = sum(1 for n in graph.nodes if n.kind == "fallback")
    notes.append("weights: conv2d and linear weights and biases, batch-norm weight, bias and running "
                 "statistics, layer- and group-norm weight and bias, embedding tables; a weight that "
                 "several calls share (tied embeddings, a layer called twice) is counted per call, and "
                 "parameters that only elementwise ops read (layer scale, broadcast position tables, "
                 "RMSNorm weights) are not in the IR and are not counted")
    if islands:
        notes.append(f"weights: {islands} layer(s) run in fp32 in a {precision} model (traced so) and "
                     "are counted at 4 bytes an element")
    if fallbacks:
        notes.append(f"weights: {fallbacks} fallback node(s) have no family, so any parameters they "
                     "hold (a dilated convolution's, say) are not counted")
    return int(math.ceil(total))


# --- activations ----------------------------------------------------------------------------


def activation_parts(graph: Graph, batch: int, precision: str, mode: str = "eager") -> ActivationParts:
    """The terms of the activation estimate of ``graph`` (as it runs at ``precision`` and
    ``batch``: ``Graph.at_precision``) in ``mode``; see ``ActivationParts``."""
    working = residual = held = kv_cache = 0.0
    largest = ""
    previous: Node | None = None
    for node in graph.nodes:
        if node.kind == "free" or not graph.runs_kernel(node, precision):
            continue
        e = element_bytes(graph, node, precision)
        moved = _working_set(node, batch, e, mode)
        if moved > working:
            working, largest = moved, node.name
        held = max(held, _written(graph, node, batch, e, moved))
        if _is_residual_add(node, previous):
            residual = max(residual, node.params["elements"] * batch * e)
        if node.family == "concat" and node.layout == "strided":
            # the catalogue's strided concat: keys or values appended to a decoder's cache
            p = node.params
            kv_cache += p["inputs"] * p["c"] * p["h"] * p["w"] * batch * e
        if node.kind == "kernel":
            previous = node
    return ActivationParts(working, residual, held, kv_cache, largest)


def _working_set(node: Node, batch: int, e: int, mode: str) -> float:
    """Activation bytes one call of ``node`` reads and writes at ``batch``: the catalogue's bytes
    formula less what does not grow with the batch (its weights and statistics); a fallback's
    elements moved."""
    if node.kind == "fallback" or node.family is None:
        return float(node.elements_per_sample * batch * e)
    variant = node.variant_in(mode)
    return (bytes_moved(node.family, node.params, variant, batch, e)
            - bytes_moved(node.family, node.params, variant, 0, e))


def _written(graph: Graph, node: Node, batch: int, e: int, moved: float) -> float:
    """Bytes of the largest tensor ``node`` writes at ``batch``, from the output shapes the IR
    records (at the traced batch); half its working set where it records none (a copy)."""
    if not node.outputs:
        return moved / 2
    per_sample = max(math.prod(shape) for shape in node.outputs) / graph.batch
    return per_sample * batch * e


def _is_residual_add(node: Node, previous: Node | None) -> bool:
    """Whether ``node`` adds a residual: an elementwise add that is not the separate bias add of
    the GEMM before it."""
    if node.family != "binary" or node.variant != "add":
        return False
    return previous is None or not _separate_bias(previous, node)
