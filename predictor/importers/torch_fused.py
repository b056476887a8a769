"""PyTorch's multi-head attention and transformer encoder layer, as the kernels they launch.

In eval, with gradients off (``torch.inference_mode()`` or ``no_grad``), ``nn.MultiheadAttention``
calls ``torch._native_multi_head_attention`` and ``nn.TransformerEncoderLayer`` calls
``torch._transformer_encoder_layer_fwd`` (with an even number of heads, batch_first, ReLU or
GELU, no hooks, no autocast), eagerly and under CUDA-graph capture alike. Each is one Python call
that runs a fixed sequence of ATen operators in C++; the node of each of those kernels keeps a
dispatch of its own (ViT's eager runs say so: backend selection and the ATen dispatcher run per
operator), ``merged`` naming the call. Otherwise (odd heads, say) the layer runs its Python
code, and ``nn.MultiheadAttention`` calls ``F.multi_head_attention_forward``, also one recorded
call, whose kernels are costed here too.

Two facts about the trace make this module necessary:

- The call recorder is a TorchFunctionMode, and both modules skip their fast path when
  ``torch.overrides.has_torch_function`` says a mode is active: traced as they are, they run
  (and record) the slow Python path that a measured forward never takes.
  ``measured_fast_paths`` answers their question as it is answered without the recorder.
- The fused calls choose kernels on the device they run on; the trace runs on the CPU (where
  the fast path runs too, but attention unfused). The kernel sequences here are CUDA's
  (``aten/src/ATen/native/transformers/transformer.cpp`` and ``cuda/attention.cu``), checked with
  the profiler on an H200 with PyTorch 2.11: an fp32 encoder layer with head dim 64 launched
  nine kernels (QKV GEMM, memory-efficient attention, output GEMM, add, layer norm, GEMM with a
  ReLU epilogue, GEMM, add, layer norm); in fp16 and bf16 attention was cuDNN's flash kernel
  (after a memset), the FFN's first GEMM carried a GELU epilogue; head dim 12 ran unfused.

torch is imported inside the functions: predictor must load without it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from predictor.importers.torch_calls import from_batch, linear_plan

#: the attention calls costed as parts: the fast path's fused call (batch-first) and the slow
#: path's functional form (sequence-first)
MHA_NAMES = ("_native_multi_head_attention", "multi_head_attention_forward")
ENCODER_LAYER = "_transformer_encoder_layer_fwd"

Part = tuple[str, dict[str, Any]]


@contextlib.contextmanager
def measured_fast_paths() -> Iterator[None]:
    """Within the block, ``nn.TransformerEncoderLayer``, ``nn.TransformerEncoder`` and
    ``nn.MultiheadAttention`` take the inference fast path whenever a forward without the call
    recorder would: their ``has_torch_function`` check is answered with the recorder's mode
    popped (a tensor subclass with its own ``__torch_function__`` still counts). Every other
    caller gets torch's own answer."""
    import torch
    import torch.nn.modules.activation as activation
    import torch.nn.modules.transformer as transformer
    from torch.overrides import _pop_mode_temporarily

    original = torch.overrides.has_torch_function
    askers = {transformer.TransformerEncoderLayer.forward.__code__,
              transformer.TransformerEncoder.forward.__code__,
              activation.MultiheadAttention.forward.__code__}

    def has_torch_function(args: Any) -> bool:
        if sys._getframe(1).f_code not in askers or not torch._C._len_torch_function_stack():
            return bool(original(args))
        with _pop_mode_temporarily():
            return bool(original(args))

    torch.overrides.has_torch_function = has_torch_function
    try:
        yield
    finally:
        torch.overrides.has_torch_function = original


def _kernel(family: str, variant: str = "", layout: str = "contiguous", **params: int) -> dict[str, Any]:
    return {"kind": "kernel", "family": family, "variant": variant, "layout": layout,
            "params": {k: int(v) for k, v in params.items()}}


def attention_route(head_dim: int, need_weights: bool, masked: bool, self_attention: bool) -> str:
    """Which path ``_native_multi_head_attention`` takes on CUDA: 'sdpa' (packed QKV projection,
    ``scaled_dot_product_attention``, output projection) for self-attention without a mask or
    weights and with a head dim that is a multiple of 8, else 'unfused' (GEMM, bias-and-rescale
    kernel, two batched GEMMs around a softmax, a 0213 transpose, GEMM). Seen on an H200 with
    PyTorch 2.11: head dim 64 took flash (cuDNN's in half precision) or memory-efficient attention
    (float32); head dim 12 took the unfused path in float32 and float16 alike."""
    if need_weights or masked or not self_attention or head_dim % 8:
        return "unfused"
    return "sdpa"


def _kernel_sdpa(tokens: int, kv_tokens: int, embed: int, heads: int, variant: str = "",
                 causal: int = 0) -> dict[str, Any]:
    return _kernel("sdpa", variant, heads=heads, seq_q=tokens, seq_kv=kv_tokens, head_dim=embed // heads,
                   causal=causal)


def _copy(elements: int) -> dict[str, Any]:
    """A copy of a permuted view: PyTorch's generic elementwise kernel (the activation family's
    'strided' layout costs it, as ``torch_calls`` does)."""
    return _kernel("activation", "relu", "strided", elements=elements)


def native_attention_parts(route: str, tokens: int, kv_tokens: int, embed: int, heads: int,
                           need_weights: bool, mask_elements: int = 0) -> list[Part]:
    """The kernels of ``_native_multi_head_attention`` on ``route``, per sample, in launch order.
    ``mask_elements``: the mask's elements per sample, as the call gets it (a key padding mask's
    kv_tokens; an attention mask expanded over the heads, heads x tokens x kv_tokens), which the
    unfused path copies to a boolean tensor for its masked softmax (seen on an H100 with PyTorch
    2.11, ``benchmarks/launched_kernels.py``); 0 without a mask."""
    head_dim = embed // heads
    if route == "sdpa":
        return [
            ("qkv", _kernel("linear", tokens=tokens, k=embed, n=3 * embed)),
            ("attention", _kernel_sdpa(tokens, kv_tokens, embed, heads)),
            ("out_proj", _kernel("linear", tokens=tokens, k=embed, n=embed)),
        ]
    parts: list[Part] = [
        # qkv_projection: one GEMM without the bias, which the next kernel adds while it splits
        # q, k and v into [batch, heads, tokens, head_dim] and scales q
        ("qkv_gemm", _kernel("linear", "nobias", tokens=tokens, k=embed, n=3 * embed)),
        ("qkv_bias_rescale", _kernel("activation", "relu", elements=3 * tokens * embed)),
        ("scores", _kernel("matmul", heads=heads, m=tokens, k=head_dim, n=kv_tokens)),
        *([("mask_to_bool", _copy(mask_elements))] if mask_elements else []),
        # masked_softmax: _masked_softmax with a mask, a plain softmax without one
        ("softmax", _kernel("softmax", rows=heads * tokens, c=kv_tokens)),
        ("context", _kernel("matmul", heads=heads, m=tokens, k=kv_tokens, n=head_dim)),
        # transform0213_gemm_nt_bias: [batch, heads, tokens, head] made [batch, tokens, heads, head]
        ("context_0213", _kernel("transpose", d1=heads, d2=tokens, d3=head_dim)),
        ("out_proj_gemm", _kernel("linear", tokens=tokens, k=embed, n=embed)),
    ]
    if need_weights:  # averaged over heads: a sum over dim 1, then a division in place
        parts += [("weights_sum", {"kind": "fallback", "elements_per_sample": (heads + 1) * tokens * kv_tokens}),
                  ("weights_div", _kernel("activation", "relu", elements=tokens * kv_tokens))]
    if heads < 2:  # a transpose over one head is a view: no copy runs
        parts = [p for p in parts if p[0] != "context_0213"]
    return parts


def _mask_merge(tokens: int, kv_tokens: int, heads: int) -> Part:
    """``attn_mask + key_padding_mask`` inside ``F.multi_head_attention_forward``, over [batch *
    heads, tokens, kv_tokens]."""
    return "mask_merge", _kernel("binary", "add", "strided", elements=heads * tokens * kv_tokens)


def batch_first_slow_parts(tokens: int, embed: int, heads: int, masked: bool, causal: bool,
                           merged: bool = False) -> list[Part]:
    """The kernels ``_slow_parts`` records for a batch-first ``nn.MultiheadAttention`` with packed
    projections and biases, asked for no weights (the path PyTorch takes for an odd head count or
    a float mask): for an importer that sees the module but not the call (ONNX). From batch 2 on
    the transposed input is copied and the bias added on its own; attention's output is copied
    back. ``merged``: given an attn_mask and a key padding mask, which the call adds. After the
    projection, the sequence-first parts."""
    return [("input_copy", from_batch(_copy(tokens * embed), 2)),
            ("qkv_gemm", _kernel("linear", "nobias", tokens=tokens, k=embed, n=3 * embed)),
            ("qkv_bias", from_batch(_kernel("binary", "add", "strided", elements=3 * tokens * embed), 2)),
            *sequence_first_slow_parts(tokens, tokens, embed, heads, masked, causal, merged)[1:]]


def sequence_first_slow_parts(tokens: int, kv_tokens: int, embed: int, heads: int, masked: bool,
                              causal: bool, merged: bool = False) -> list[Part]:
    """The kernels ``_slow_parts`` records for a sequence-first ``nn.MultiheadAttention`` (its
    default) with packed projections and biases, asked for no weights: the only path PyTorch has
    for it (the fast path wants batch_first). For an importer that sees the module but not the call
    (ONNX). The input is contiguous, so the projection is one GEMM with its bias; the projection is
    made contiguous as [3, tokens, batch, embed], and attention's output is copied back from batch
    2 on, before the output projection."""
    return [("qkv", _kernel("linear", tokens=tokens, k=embed, n=3 * embed)),
            ("qkv_copy", _copy(3 * tokens * embed)),
            *([_mask_merge(tokens, kv_tokens, heads)] if merged else []),
            ("attention", _kernel_sdpa(tokens, kv_tokens, embed, heads, "masked" if masked else "", int(causal))),
            ("output_copy", from_batch(_copy(tokens * embed), 2)),
            ("out_proj", _kernel("linear", tokens=tokens, k=embed, n=embed))]


def _slow_parts(args: tuple, kwargs: dict) -> list[Part]:
    """The kernels of ``F.multi_head_attention_forward`` (sequence-first [tokens, batch, embed]),
    per sample, in launch order, for packed self-attention (``nn.MultiheadAttention``'s slow path:
    odd heads, masks, training); other forms are costed as projection, attention, projection.

    A batch-first module hands it a transposed view, which ``F.linear`` cannot fold into one
    GEMM with its bias from batch 2 on: it copies the input, runs the GEMM and adds the bias in
    a kernel of its own (seen on the H200; ``torch_calls.linear_plan``). At batch 1 that view is
    contiguous and none of this runs: those kernels carry ``min_batch`` 2, and the GEMM is costed
    without its bias at every batch. The projection is then made contiguous as [3, tokens,
    batch, embed]; attention's output is permuted back, a copy from batch 2 on, before the
    output projection."""
    query, key, value = args[0], args[1], args[2]
    embed, heads = int(args[3]), int(args[4])
    tokens, kv_tokens = int(query.shape[0]), int(key.shape[0])
    in_bias = _arg(args, kwargs, 6, "in_proj_bias") is not None
    out_bias = _arg(args, kwargs, 12, "out_proj_bias") is not None
    need_weights = bool(_arg(args, kwargs, 15, "need_weights", True))
    both = [_arg(args, kwargs, 14, "key_padding_mask"), _arg(args, kwargs, 16, "attn_mask")]
    masked = any(m is not None for m in both)
    packed = (query is key and key is value and _arg(args, kwargs, 5, "in_proj_weight") is not None
              and not _arg(args, kwargs, 17, "use_separate_proj_weight", False))
    if not packed:
        return [("qkv", _kernel("linear", tokens=tokens, k=embed, n=3 * embed)),
                ("attention", _kernel_sdpa(tokens, kv_tokens, embed, heads, "masked" if masked else "")),
                ("out_proj", _kernel("linear", tokens=tokens, k=embed, n=embed))]
    # the in-projection's F.linear on [tokens, batch, embed], the batch in dim 1
    plan = linear_plan(query, _arg(args, kwargs, 5, "in_proj_weight"), _arg(args, kwargs, 6, "in_proj_bias"),
                       int(query.shape[1]), dim=1)
    parts: list[Part] = []
    if plan.copy is not None:
        parts.append(("input_copy", from_batch(_copy(tokens * embed), plan.copy)))
    fused = in_bias and plan.bias_add is None
    parts.append(("qkv_gemm" if not fused else "qkv",
                  _kernel("linear", "" if fused else "nobias", tokens=tokens, k=embed, n=3 * embed)))
    if plan.bias_add is not None:
        parts.append(("qkv_bias", from_batch(_kernel("binary", "add", "strided", elements=3 * tokens * embed),
                                              plan.bias_add)))
    parts.append(("qkv_copy", _copy(3 * tokens * embed)))
    if all(m is not None for m in both):
        parts.append(_mask_merge(tokens, kv_tokens, heads))
    head_dim = embed // heads
    if need_weights:
        parts += [("q_scale", _kernel("activation", "relu", elements=tokens * embed)),
                  ("scores", _kernel("matmul", heads=heads, m=tokens, k=head_dim, n=kv_tokens)),
                  ("softmax", _kernel("softmax", rows=heads * tokens, c=kv_tokens)),
                  ("context", _kernel("matmul", heads=heads, m=tokens, k=kv_tokens, n=head_dim))]
    else:
        causal = int(bool(_arg(args, kwargs, 24, "is_causal", False)) and not masked)
        parts.append(("attention", _kernel_sdpa(tokens, kv_tokens, embed, heads, "masked" if masked else "", causal)))
    # attention's output [batch, heads, tokens, head] permuted to [tokens, batch, heads, head] and
    # reshaped into rows: the fused kernels write it as [batch, tokens, heads, head], a view at
    # batch 1; the batched GEMMs of need_weights write [batch * heads, tokens, head], a copy
    # wherever there are several heads.
    out_from = 1 if need_weights and heads > 1 else 2
    parts += [("output_copy", from_batch(_copy(tokens * embed), out_from)),
              ("out_proj", _kernel("linear", "" if out_bias else "nobias", tokens=tokens, k=embed, n=embed))]
    if need_weights and bool(_arg(args, kwargs, 23, "average_attn_weights", True)):
        parts.append(("weights_mean", {"kind": "fallback", "elements_per_sample": (heads + 1) * tokens * kv_tokens}))
    return parts


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


def attention_block(name: str, args: tuple, kwargs: dict | None = None) -> list[Part] | None:
    """PyTorch's multi-head attention as its kernels, or None for other calls:
    ``_native_multi_head_attention`` (``nn.MultiheadAttention``'s fast path, batch-first) by
    ``attention_route``, ``multi_head_attention_forward`` (its slow path) by ``_slow_parts``."""
    import torch

    kwargs = kwargs or {}
    if name not in MHA_NAMES or not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 3:
        return None
    if name == "multi_head_attention_forward":
        return _slow_parts(args, kwargs)
    query, key = args[0], args[1]
    embed, heads = int(args[3]), int(args[4])
    need_weights = bool(_arg(args, kwargs, 10, "need_weights", True))
    mask = _arg(args, kwargs, 9, "mask")
    route = attention_route(embed // heads, need_weights, mask is not None, query is key and key is args[2])
    return native_attention_parts(route, int(query.shape[1]), int(key.shape[1]), embed, heads, need_weights,
                                  _mask_elements(mask, int(query.shape[0])))


def _mask_elements(mask: Any, batch: int) -> int:
    """Elements per sample of the mask a fused call converts to boolean (0: none, or one boolean
    already). ``merge_masks`` hands it over with the batch first: a key padding mask [batch,
    kv_tokens], or an attention mask expanded to [batch, heads, tokens, kv_tokens], which the
    conversion writes out in full."""
    import torch

    if mask is None or mask.dtype == torch.bool:
        return 0
    return max(1, mask.numel() // max(1, batch))


def encoder_layer_block(name: str, args: tuple, kwargs: dict | None = None) -> list[Part] | None:
    """``torch._transformer_encoder_layer_fwd`` as its kernels (``transformer.cpp``), or None for
    other calls: [norm1], attention, residual add in place, [norm1 after], [norm2], FFN, residual
    add in place, [norm2 after], where norm_first puts each norm before its block. The FFN's first
    GEMM is ``_addmm_activation``: cuBLASLt applies the bias and the ReLU or GELU in the GEMM's
    epilogue, so no activation kernel runs."""
    import torch

    kwargs = kwargs or {}
    if name != ENCODER_LAYER or not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 3:
        return None
    src = args[0]
    tokens, embed, heads = int(src.shape[1]), int(args[1]), int(args[2])
    norm_first = bool(_arg(args, kwargs, 8, "norm_first"))
    hidden = int(_arg(args, kwargs, 14, "ffn_weight_1").shape[0])
    mask = _arg(args, kwargs, 18, "mask")

    def norm(which: int) -> Part:
        return f"norm{which}", _kernel("layer_norm", tokens=tokens, c=embed)

    def residual(which: int) -> Part:
        return f"residual{which}", _kernel("binary", "add", elements=tokens * embed)

    route = attention_route(embed // heads, False, mask is not None, True)
    parts = native_attention_parts(route, tokens, tokens, embed, heads, False, _mask_elements(mask, int(src.shape[0])))
    attention = [(f"attn_{part}", fields) for part, fields in parts]
    ffn = [("ffn1", _kernel("linear", tokens=tokens, k=embed, n=hidden)),
           ("ffn2", _kernel("linear", tokens=tokens, k=hidden, n=embed))]
    if norm_first:
        return [norm(1), *attention, residual(1), norm(2), *ffn, residual(2)]
    return [*attention, residual(1), norm(1), *ffn, residual(2), norm(2)]


def fused_block(name: str, args: tuple, kwargs: dict | None = None) -> list[Part] | None:
    """The kernels of one fused call (attention or a whole encoder layer), as (part, node fields)
    in launch order, or None for a call that is not one."""
    return attention_block(name, args, kwargs) or encoder_layer_block(name, args, kwargs)
