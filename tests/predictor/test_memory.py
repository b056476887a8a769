"""predictor.memory against the real thing: PyTorch's own count of a module's parameters and
buffers, and the tensors a forward really keeps alive (counted on the CPU, and on a GPU by the
caching allocator where there is one); the refusals; every zoo graph."""

from __future__ import annotations

import copy
import functools
import weakref
from typing import Any

import pytest

from predictor.graph import Graph
from predictor.memory import (
    PER_CALL_WORKSPACE_BYTES,
    WORKSPACE_BYTES,
    MiB,
    activation_parts,
    memory_estimate,
)
from predictor.zoo import load_zoo_graph, zoo_names

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from collectors import nas_space  # noqa: E402
from predictor.importers.torch_module import graph_from_module  # noqa: E402

#: One architecture of each NAS space, chosen among those that trace in well under a second.
NAS_SEEDS = {"mbconv": 6, "transformer": 7, "resnet": 2, "convnext": 9, "attention": 10, "mixer": 11}


# --- modules --------------------------------------------------------------------------------


class ConvNet(nn.Module):
    """A stem with a bias, a residual block of two convolutions without, batch norms, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                   nn.ReLU(inplace=True), nn.Conv2d(16, 16, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x: Any) -> Any:
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Encoder(nn.Module):
    """Token embedding, ``nn.TransformerEncoder`` (its fused inference fast path), a norm, a head."""

    def __init__(self, vocab: int = 500, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: Any) -> Any:
        return self.head(self.norm(self.encoder(self.embed(ids))))


class CachingDecoder(nn.Module):
    """Causal blocks with separate q, k and v projections that append their keys and values to a
    cache, as transformers' decoders do (``torch.cat`` of [batch, heads, tokens, head] views onto
    an empty cache), and return it: every layer's cache is alive at the end of the forward."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 6) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
                                            for _ in range(4))

    def forward(self, x: Any) -> Any:
        b, t, d = x.shape
        caches = []
        for q_proj, k_proj, v_proj, out in zip(self.q, self.k, self.v, self.out):
            q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (q_proj, k_proj, v_proj))
            empty = x.new_empty(b, self.heads, 0, d // self.heads)
            k, v = torch.cat([empty, k], dim=2), torch.cat([empty, v], dim=2)
            caches.append((k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + out(a.transpose(1, 2).reshape(b, t, d))
        return x, caches


def _nas(space: str) -> tuple[Any, Any]:
    spec = nas_space.arch_spec(NAS_SEEDS[space])
    return nas_space.build(spec).eval(), lambda batch: nas_space.example_input(spec, batch)


def _modules() -> dict[str, tuple[Any, Any]]:
    """name -> (module in eval, batch -> example input)."""
    torch.manual_seed(0)
    made = {space: _nas(space) for space in NAS_SEEDS}
    made["convnet"] = (ConvNet().eval(), lambda batch: torch.randn(batch, 3, 32, 32))
    made["encoder"] = (Encoder().eval(), lambda batch: torch.randint(0, 500, (batch, 32)))
    made["decoder"] = (CachingDecoder().eval(), lambda batch: torch.randn(batch, 128, 64))
    return made


MODULES = _modules()


def _state_bytes(module: Any) -> int:
    """What the module keeps on the device: parameters and floating-point buffers (batch norm's
    running statistics; its int64 ``num_batches_tracked`` counter is not a weight)."""
    return (sum(p.numel() * p.element_size() for p in module.parameters())
            + sum(b.numel() * b.element_size() for b in module.buffers() if b.is_floating_point()))


# --- weights --------------------------------------------------------------------------------


@functools.cache
def traced(name: str) -> Graph:
    """The graph of ``MODULES[name]``, traced once at batch 1 (estimates rescale it)."""
    module, example = MODULES[name]
    return graph_from_module(module, example(1), name)


@pytest.mark.parametrize("name", ["convnet", "encoder", "decoder", "resnet", "mbconv", "transformer", "mixer"])
def test_weights_are_the_modules_parameters_and_statistics(name: str) -> None:
    """Exact where every parameter belongs to a layer the IR names (conv, linear, norms,
    embedding, an attention's packed projections), at fp32 and at fp16 (``module.half()``)."""
    module, _ = MODULES[name]
    assert memory_estimate(traced(name), 1, "fp32").weights_bytes == _state_bytes(module)
    half = copy.deepcopy(module).half()
    assert memory_estimate(traced(name), 1, "fp16").weights_bytes == _state_bytes(half)


@pytest.mark.parametrize("name", ["convnet", "encoder", "transformer"])
def test_weights_of_a_half_precision_trace(name: str) -> None:
    """A module traced after ``.half()`` (the nodes' dtype float16) gives the same weights."""
    module, example = MODULES[name]
    half = copy.deepcopy(module).half()
    x = example(1)
    graph = graph_from_module(half, x.half() if x.is_floating_point() else x, name)
    assert memory_estimate(graph, 1, "fp16").weights_bytes == _state_bytes(half)
    assert memory_estimate(graph, 1, "fp32").weights_bytes == _state_bytes(module)


@pytest.mark.parametrize("name", ["convnext", "attention"])
def test_weights_within_a_percent_where_elementwise_ops_read_parameters(name: str) -> None:
    """ConvNeXt's layer scale and a patch net's position table are read by a mul and an add the
    IR records without their operands, so their parameters (dim, and tokens x dim, against
    layers of dim^2 each) are missing: under 1% of the model, never more than it has."""
    module, _ = MODULES[name]
    estimate = memory_estimate(traced(name), 1, "fp32").weights_bytes
    assert 0.99 * _state_bytes(module) <= estimate < _state_bytes(module)


def test_a_bias_added_by_its_own_kernel_is_counted() -> None:
    """MLP-Mixer's token mixing runs ``F.linear`` on a transposed view, which it cannot fold
    into one GEMM with the bias: the GEMM runs without it (variant 'nobias') and a broadcast add
    launched by the same call follows. The bias is counted (the exact match above needs it)."""
    graph = traced("mixer")
    pairs = zip(graph.nodes, graph.nodes[1:])
    assert any(a.family == "linear" and a.variant == "nobias" and b.launched_by == a.name
               and b.family == "binary" for a, b in pairs)
    module, _ = MODULES["mixer"]
    biases = sum(block.token_fc1.bias.numel() for block in module.blocks) * 4
    assert biases and memory_estimate(graph, 1, "fp32").weights_bytes == _state_bytes(module)


# --- activations ----------------------------------------------------------------------------


class LiveTensorBytes(TorchDispatchMode):
    """The most bytes that tensors made by a forward's operators hold at once, each storage
    counted once however many views share it, freed when its last tensor is (CPython frees a
    tensor when its last reference goes, so a finalizer marks the moment). Parameters, buffers
    and the input are not counted here. On an H200 this count at batch 1 matched
    ``torch.cuda.max_memory_allocated`` less what was allocated before the forward, to 0.2 MiB,
    for NAS architectures of every space: the same tensors live and die on either device."""

    def __init__(self, foreign: set[int]) -> None:
        super().__init__()
        self.foreign = foreign
        self.owners: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.seen: set[int] = set()
        self.live = self.peak = 0

    def _release(self, key: int, ident: int) -> None:
        self.seen.discard(ident)  # ids are reused once an object dies
        self.owners[key] -= 1
        if not self.owners[key]:
            self.live -= self.sizes.pop(key)
            del self.owners[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or id(t) in self.seen:
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if not key or key in self.foreign:
                continue
            if key not in self.owners:
                self.owners[key], self.sizes[key] = 0, storage.nbytes()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            self.owners[key] += 1
            self.seen.add(id(t))
            weakref.finalize(t, self._release, key, id(t))
        return out


def measured_activations(module: Any, x: Any) -> int:
    """Peak bytes of live activations of ``module(x)`` under ``torch.inference_mode()``: what the
    forward's operators make, plus the input (alive all along, as the caller holds it)."""
    foreign = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers(), x]}
    with torch.inference_mode():
        live = LiveTensorBytes(foreign)
        with live:
            out = module(x)
        del out
    return live.peak + x.untyped_storage().nbytes()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_activations_are_within_the_measured_spread(name: str) -> None:
    """The IR cannot replay the live set (see predictor.memory): on the H200 the estimate was
    0.47-1.81 times the measured peak, on the CPU count of more NAS architectures up to 2.83
    (fused encoder layers, whose insides it cannot see). These modules land in 0.6-2.0 (a hand-
    written attention block lowest, the fused encoder highest); 0.5-2.5 fails a forgotten term,
    the batch left out of one, or an element size off by two."""
    module, example = MODULES[name]
    x = example(4)
    estimate = memory_estimate(traced(name), 4, "fp32").activations_bytes
    measured = measured_activations(module, x)
    assert 0.5 * measured <= estimate <= 2.5 * measured, (estimate / MiB, measured / MiB)


def test_activations_grow_with_the_batch_as_the_measured_peak_does() -> None:
    module, example = MODULES["resnet"]
    graph = traced("resnet")
    ratio = memory_estimate(graph, 8, "fp32").activations_bytes / memory_estimate(graph, 2, "fp32").activations_bytes
    measured = measured_activations(module, example(8)) / measured_activations(module, example(2))
    assert ratio == pytest.approx(4, rel=0.01)
    assert ratio == pytest.approx(measured, rel=0.05)


def test_a_decoders_cache_is_counted_whole() -> None:
    """Every layer's keys and values stay alive until the forward returns them: the estimate
    holds them all (6 layers x 2 x [4, 4, 128, 16] floats, 3 MiB), and without them it would
    fall far short of the measured peak."""
    module, example = MODULES["decoder"]
    parts = activation_parts(traced("decoder"), 4, "fp32")
    measured = measured_activations(module, example(4))
    assert parts.kv_cache == 6 * 2 * 4 * 128 * 64 * 4
    assert parts.total - parts.kv_cache < 0.5 * measured <= 0.5 * 2.5 * parts.total


def test_half_precision_halves_float_activations() -> None:
    graph = traced("convnet")
    fp32, fp16 = (memory_estimate(graph, 16, p).activations_bytes for p in ("fp32", "fp16"))
    assert fp16 == pytest.approx(fp32 / 2, rel=0.001)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_activations_against_the_caching_allocator(name: str, precision: str) -> None:
    """On a GPU: the peak the caching allocator reports for a forward under inference mode,
    less what was allocated before it (weights, the input, cuBLAS's workspaces after a warm-up
    forward), plus the input, lands in the spread seen on the H200 (0.47-1.81 at batch 32), with
    the per-call workspaces of cuDNN and cuBLASLt, which that peak includes and the estimate
    puts under workspace; the weights are what the module holds on the device, to 1%."""
    module, example = MODULES[name]
    graph = traced(name)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    model = module.to("cuda", dtype)
    try:
        x = example(32).to("cuda")
        x = x.to(dtype) if x.is_floating_point() else x
        with torch.inference_mode():
            model(x)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            model(x)
            torch.cuda.synchronize()
            measured = torch.cuda.max_memory_allocated() - before + x.numel() * x.element_size()
        estimate = memory_estimate(graph, 32, precision)
        assert 0.5 * measured <= estimate.activations_bytes + PER_CALL_WORKSPACE_BYTES
        assert estimate.activations_bytes <= 2.5 * measured
        assert estimate.weights_bytes <= _state_bytes(model) <= 1.01 * estimate.weights_bytes
    finally:
        module.to("cpu", torch.float32)


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [0, -1, 1.5, True, "2", None])
def test_a_bad_batch_is_refused_by_name(batch: Any) -> None:
    with pytest.raises(ValueError, match="batch"):
        memory_estimate(load_zoo_graph("resnet18"), batch, "fp16")


@pytest.mark.parametrize("precision", ["fp8", "", "float16", None, 16])
def test_an_unknown_precision_is_refused_by_name(precision: Any) -> None:
    with pytest.raises(ValueError, match="precision"):
        memory_estimate(load_zoo_graph("resnet18"), 1, precision)


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="mode"):
        memory_estimate(load_zoo_graph("resnet18"), 1, "fp16", mode="graph")


# --- the zoo --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", zoo_names())
def test_every_zoo_graph_grows_with_the_batch_and_halves_its_weights_in_fp16(name: str) -> None:
    graph = load_zoo_graph(name)
    one, many = memory_estimate(graph, 1, "fp16"), memory_estimate(graph, 32, "fp16")
    assert 0 < one.weights_bytes and 0 < one.activations_bytes < many.activations_bytes
    assert one.total_bytes == one.weights_bytes + one.activations_bytes + WORKSPACE_BYTES
    assert one.total_bytes < many.total_bytes and many.weights_bytes == one.weights_bytes
    assert many.activations_bytes == pytest.approx(32 * one.activations_bytes, rel=0.05)
    fp32 = memory_estimate(graph, 1, "fp32")
    # exactly half unless a layer with weights runs in fp32 in a half-precision model
    assert 0.5 <= one.weights_bytes / fp32.weights_bytes <= 0.55
    assert one.assumptions and all(isinstance(a, str) and a for a in one.assumptions)


@pytest.mark.parametrize("name,parameters", [("resnet50", 25.6e6), ("bert-base", 110e6), ("gpt2", 124e6)])
def test_known_parameter_counts(name: str, parameters: float) -> None:
    """Published counts (torchvision's resnet50 25.6M; BERT-base about 110M; GPT-2 small 124M):
    fp32 weights over 4 bytes, within 2% (resnet50's batch-norm statistics add 0.2%)."""
    weights = memory_estimate(load_zoo_graph(name), 1, "fp32").weights_bytes
    assert weights / 4 == pytest.approx(parameters, rel=0.02)


def test_cudagraph_mode_counts_the_scores_of_the_captured_attention() -> None:
    """BERT captured into a CUDA graph takes the masked math path, which writes fp32 scores per
    head: more memory than the flash kernel the eager forward runs."""
    graph = load_zoo_graph("bert-base")
    eager, captured = (memory_estimate(graph, 32, "fp16", mode=m).activations_bytes for m in ("eager", "cudagraph"))
    assert captured > eager
