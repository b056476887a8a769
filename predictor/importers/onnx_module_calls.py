"""Calls that well-known modules make in PyTorch and no export shows, told by their parameters'
names.

In eval, ``nn.Dropout`` returns its input, ``torch._assert`` checks a shape in Python and
``.contiguous()`` on a contiguous tensor returns it: nothing to export, so an ONNX graph has no
node for them. Yet each is a call the host makes in an eager forward (the torch importer records
them as free nodes), and a transformer makes dozens: BERT-base 25 dropouts and 24 contiguous calls
among its 302, so its export predicted 10% under its torch trace at batch 1. Where the module is
one whose forward is known, the calls are put back after the node that reads the module's
parameter, as free nodes.

The modules are told by the names of parameters their nodes read, which both exporters keep
(``model.encoder.layer.3.attention.output.dense.bias``); each entry names the library and the
class whose forward it counts, as traced by the torch importer (transformers 5.17 with SDPA
attention, torchvision 0.26). A model that merely borrows such names gets the same calls, and the
graph says so in its assumptions. ``nn.TransformerEncoderLayer``'s dropouts depend on which path
it runs and are onnx_encoder_layer's.

Some such calls launch kernels: T5's float16 overflow guard (at that precision only), and a
decoder's DynamicCache update on its first forward (a copy of each layer's keys and values into
an empty cache, which an export folds away), put back sized by the tensor the anchoring node
writes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from predictor.importers.onnx_patterns import FusedKernel
from predictor.importers.onnx_tensors import GraphTensors


@dataclass(frozen=True)
class HiddenCall:
    """One call no export shows: a call that launches nothing (``family`` None), or a kernel
    sized by ``params`` from the tensor the anchoring node writes (its elements per sample and
    its shape), reading its input in ``layout`` (the family's default where empty), which runs
    at ``precisions`` only (at all where empty), in float32 whatever the model's precision where
    ``keeps_float32`` (``Node.keeps_float32``); or, with ``fallback``, a call no family covers
    (an indexing gather, ``new_zeros``), costed by the elements per sample it reads and writes
    as the torch importer costs it."""

    op: str
    family: str | None = None
    variant: str = ""
    params: Callable[[int, list[int]], dict[str, int]] | None = None
    precisions: tuple[str, ...] = ()
    layout: str = ""
    fallback: Callable[[int, list[int]], int] | None = None
    keeps_float32: bool = False


def free(*ops: str) -> tuple[HiddenCall, ...]:
    """Calls that launch nothing (no-ops in eval, views)."""
    return tuple(HiddenCall(op) for op in ops)


@dataclass(frozen=True)
class ModuleCalls:
    """A module's calls no export shows, after the node reading a parameter named ``parameter``."""

    #: the library and class whose forward this counts
    module: str
    #: matched against the end of an input's name
    parameter: re.Pattern[str]
    calls: tuple[HiddenCall, ...]


def as_elements(elements: int, _: list[int]) -> dict[str, int]:
    """A kernel's parameters that are the elements per sample of the tensor it is sized by."""
    return {"elements": elements}


#: T5's float16 overflow guard after each residual add (T5LayerSelfAttention, T5LayerFF):
#: ``torch.where(torch.isinf(h).any(), max - 1000, max)`` and ``h.clamp(-value, value)``, in
#: float16 only, as the torch importer records it (isinf, any, where, neg, clamp)
T5_FP16_GUARD = (
    HiddenCall("isinf", "activation", "relu", as_elements, ("fp16",)),
    HiddenCall("any", "mean", "", lambda e, _: {"rows": 1, "c": e}, ("fp16",)),
    HiddenCall("where", "activation", "relu", lambda e, _: {"elements": 1}, ("fp16",)),
    HiddenCall("neg", "activation", "relu", lambda e, _: {"elements": 1}, ("fp16",)),
    HiddenCall("clamp", "activation", "clamp", as_elements, ("fp16",)),
)


def _rows_of(elements: int, shape: list[int]) -> dict[str, int]:
    """A copy of a [.., tokens, features] tensor by ``cat`` with one input: its tokens as rows."""
    tokens = shape[-2] if len(shape) >= 2 and shape[-2] > 0 else 1
    return {"inputs": 1, "c": 1, "h": tokens, "w": max(1, elements // tokens)}


#: transformers' DynamicCache on a decoder's first forward (use_cache, the default): DynamicLayer
#: makes an empty tensor and appends the projection's keys (or values) to it, torch.cat([empty,
#: k]), one copy of the head-transposed projection: no export shows it (cat with an empty tensor
#: folds away). The torch importer records the empty tensor and a strided concat kernel.
DYNAMIC_CACHE_UPDATE = (HiddenCall("tensor"), HiddenCall("cat", "concat", "", _rows_of, layout="strided"))


def _suffix(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"(?:^|\.){pattern}$")


#: a decoder layer's first norm (Llama, Qwen2, Mistral: ``model.layers.3.input_layernorm.weight``)
DECODER_INPUT_NORM = _suffix(r"layers\.\d+\.input_layernorm\.weight")


MODULE_CALLS: tuple[ModuleCalls, ...] = (
    # BertEmbeddings (and RoBERTa's, ELECTRA's, DistilBERT's): LayerNorm, then dropout
    ModuleCalls("transformers *Embeddings", _suffix(r"embeddings\.LayerNorm\.bias"), free("dropout")),
    # BertSelfAttention (SDPA) returns attn_output.transpose(1, 2).contiguous() reshaped, made
    # contiguous again; BertSelfOutput: dense, dropout, LayerNorm(x + input)
    ModuleCalls("transformers BertSelfAttention + BertSelfOutput", _suffix(r"attention\.output\.dense\.bias"),
                free("contiguous", "contiguous", "dropout")),
    # BertOutput: dense, dropout, LayerNorm(x + input)
    ModuleCalls("transformers BertOutput", re.compile(r"(?:^|\.)(?<!attention\.)output\.dense\.bias$"),
                free("dropout")),
    # DistilBERT's MultiHeadSelfAttention (SDPA): the same two contiguous calls before out_lin
    ModuleCalls("transformers DistilBERT MultiHeadSelfAttention", _suffix(r"attention\.out_lin\.bias"),
                free("contiguous", "contiguous")),
    # DistilBERT's FFN: lin1, activation, lin2, dropout
    ModuleCalls("transformers DistilBERT FFN", _suffix(r"ffn\.lin2\.bias"), free("dropout")),
    # LlamaAttention, Qwen2Attention (SDPA): the same two contiguous calls before o_proj; their
    # linears' weights are renamed by the dynamo exporter, so the layer's first norm tells them
    ModuleCalls("transformers Llama/Qwen2 decoder layer", DECODER_INPUT_NORM, free("contiguous", "contiguous")),
    # OPTAttention (SDPA, separate q/k/v projections): the two contiguous calls; OPTDecoderLayer:
    # a dropout after the attention's out_proj and one after fc2
    ModuleCalls("transformers OPT decoder layer", _suffix(r"decoder\.layers\.\d+\.self_attn\.k_proj\.bias"),
                free("contiguous", "contiguous", "dropout")),
    ModuleCalls("transformers OPT decoder layer's fc2", _suffix(r"decoder\.layers\.\d+\.fc2\.bias"), free("dropout")),
    # OPTAttention's keys and values into the DynamicCache
    ModuleCalls("transformers DynamicCache update (OPT)", _suffix(r"decoder\.layers\.\d+\.self_attn\.[kv]_proj\.bias"),
                DYNAMIC_CACHE_UPDATE),
    # torchvision VisionTransformer: _process_input's two shape asserts, Encoder's assert, the
    # position embedding added, Encoder's dropout
    ModuleCalls("torchvision VisionTransformer + Encoder", _suffix(r"encoder\.pos_embedding"),
                free("_assert", "_assert", "_assert", "dropout")),
    # torchvision EncoderBlock: an assert before ln_1, a dropout after self_attention
    ModuleCalls("torchvision EncoderBlock", _suffix(r"encoder_layer_\d+\.self_attention\.in_proj_bias"),
                free("_assert", "dropout")),
    # T5Stack: a dropout after the embedding and one after the final norm; its first block's
    # attention (the one with the relative attention bias) tells it
    ModuleCalls("transformers T5Stack",
                _suffix(r"block\.0\.layer\.0\.SelfAttention\.relative_attention_bias\.weight"),
                free("dropout", "dropout")),
    # T5LayerSelfAttention: T5Attention's two contiguous calls, the dropout of its output, the
    # float16 guard after the residual add; T5LayerFF: the dropout after the activation and after
    # the layer, the guard. Each layer begins with its norm, whose weight tells it.
    ModuleCalls("transformers T5LayerSelfAttention", _suffix(r"block\.\d+\.layer\.0\.layer_norm\.weight"),
                free("contiguous", "contiguous", "dropout") + T5_FP16_GUARD),
    ModuleCalls("transformers T5LayerFF", _suffix(r"block\.\d+\.layer\.1\.layer_norm\.weight"),
                free("dropout", "dropout") + T5_FP16_GUARD),
    # torchvision's MLPBlock (ViT) and MLP (Swin): Linear, GELU, Dropout, Linear, Dropout
    ModuleCalls("torchvision MLPBlock", _suffix(r"(?:encoder_layer_\d+|features\.\d+\.\d+)\.mlp\.3\.bias"),
                free("dropout", "dropout")),
    # torchvision's shifted_window_attention (Swin): F.dropout of the attention and of proj's output,
    # then the block's x[:, :H, :W, :].contiguous() after the windows are reversed
    ModuleCalls("torchvision ShiftedWindowAttention", _suffix(r"features\.\d+\.\d+\.attn\.proj\.bias"),
                free("dropout", "dropout", "contiguous")),
)

MODULE_CALLS_ASSUMPTION = (
    "{count} call(s) that leave no node in an export (dropout in eval, _assert, contiguous on a contiguous tensor, "
    "each a view's host time; T5's float16 overflow guard, kernels at that precision only; a decoder's "
    "DynamicCache update, a copy of its keys and values, as a forward with use_cache makes it; a torchvision Swin "
    "block's relative position bias, whose gather (a fallback) and contiguous copy an export folds into a stored "
    "tensor, and the attention mask of a shifted block that the exporter computes once for several blocks, as "
    "PyTorch computes it in each; the casts to float32 and back of an RMS norm (Llama's, Qwen2's, T5's), kernels "
    "at half precision only, at fp32 calls that return their input; a rotary embedding folded into stored cos and "
    "sin tables, computed once per forward, and the unsqueezes of each rotation) are put back for the modules "
    "their parameters' names tell: {modules}")


@dataclass
class FoundCalls:
    """The calls of ``MODULE_CALLS`` a graph gets: after which node, for which modules."""

    #: the calls emitted after the node, or fused kernel, at each index, each with the tensor
    #: that node writes (which sizes a kernel)
    after: dict[int, list[tuple[HiddenCall, str]]] = field(default_factory=dict)
    #: how many of each module were found
    modules: Counter[str] = field(default_factory=Counter)

    def assumption(self) -> str | None:
        """The sentence ``graph.meta["assumptions"]`` gets, or None where no module was found."""
        if not self.modules:
            return None
        return MODULE_CALLS_ASSUMPTION.format(count=sum(map(len, self.after.values())), modules=", ".join(
            f"{module} x{n}" for module, n in self.modules.items()))


def output_of(t: GraphTensors, fused: dict[int, FusedKernel], key: dict[int, int], i: int) -> tuple[int, str]:
    """Node ``i``'s anchor (its fused kernel's key where it is fused) and the tensor it writes."""
    k = key.get(i, i)
    return k, fused[k].output if k in fused else str(t.nodes[i].output[0])


def cache_shown(t: GraphTensors) -> bool:
    """Whether an export returns its cache (transformers' ``present.N.key``): then it shows the
    cache's concat itself, and no DynamicCache update is put back."""
    return any("present" in o for o in t.outputs)


#: a rule that finds calls by a graph's structure rather than a parameter's name (onnx_swin,
#: onnx_decoder): it adds what it finds to ``found``
StructuralRule = Callable[[GraphTensors, dict[int, FusedKernel], dict[int, int], set[int], "FoundCalls"], None]


def module_calls(t: GraphTensors, fused: dict[int, FusedKernel], dropped: set[int],
                 rules: Sequence[StructuralRule] = ()) -> FoundCalls:
    """The calls of ``MODULE_CALLS`` to emit after each node (or fused kernel, by its key) that
    reads a matching parameter, then those each of ``rules`` finds, in that order. A node that
    makes no call (``dropped``: an alias of a shared initializer, a view of a weight) anchors
    nothing."""
    key = {i: k for k, f in fused.items() for i in f.indices}
    shown = cache_shown(t)
    modules = [e for e in MODULE_CALLS if not (shown and e.calls == DYNAMIC_CACHE_UPDATE)]
    # a parameter is static (an initializer, or an alias of one): each name is matched once
    entries = {x: [e for e in modules if e.parameter.search(x)]
               for x in {x for n in t.nodes for x in n.input if x in t.static}}
    found = FoundCalls()
    for i, n in enumerate(t.nodes):
        if i in dropped:
            continue
        written = str(n.output[0]) if n.output else ""
        for entry in {e: None for x in n.input for e in entries.get(x, ())}:
            found.after.setdefault(key.get(i, i), []).extend((call, written) for call in entry.calls)
            found.modules[entry.module] += 1
    for rule in rules:
        rule(t, fused, key, dropped, found)
    return found
