"""What transformers' RMS-norm models run in PyTorch that a float32 export shows otherwise.

Llama's, Qwen2's and Mistral's decoders (transformers 5.17, SDPA attention) and T5 keep some of
their arithmetic in float32 whatever the model's dtype, by casts no float32 export can show:

- ``LlamaRMSNorm`` (and Qwen2's, Mistral's): ``x.to(torch.float32)``, pow, mean, rsqrt, mul,
  ``.to(input_dtype)``, times the weight. Both casts are calls at every precision: a kernel
  each at half precision, at fp32 a call that returns its input (a view's host time), as the
  torch importer records them. ``T5LayerNorm`` makes the first the same way (the legacy exporter
  writes it as a float-to-float Cast, the dynamo exporter drops it) and the second only when its
  weight is half (``if self.weight.dtype in [float16, bfloat16]``): at half precision only.
- The rotary embedding (``LlamaRotaryEmbedding.forward``, under ``torch.no_grad``), once per
  forward: the positions (arange, add, unsqueeze), the frequencies cast to float32, their outer
  product with the positions (a matmul), cat, cos, sin, both scaled, both cast back. It
  depends on shapes only, so an export folds it into two stored tables, cos and sin, that every
  rotation reads; each layer's ``apply_rotary_pos_emb`` unsqueezes the two (one view each).
- ``sdpa_attention_forward`` repeats grouped keys and values (``repeat_kv``: unsqueeze, expand,
  a reshape that copies) only when it passes a mask, or while it is traced (the key an fx Proxy,
  as in a dynamo export); with none, as PyTorch runs a causal decoder, SDPA takes
  ``enable_gqa=True`` and reads them as they are. The repeat an export shows before an attention
  that takes no mask (onnx_emit's mask verdict: none, or causal) is dropped.

- On a first forward (``use_cache``), each layer appends its keys and values to an empty
  ``DynamicCache``: one copy each, which no export shows (``cache_updates``; OPT's, whose
  projections keep their names, are onnx_module_calls' ``MODULE_CALLS``).

The modules are told by their norms' weights, which both exporters keep
(``model.layers.3.input_layernorm.weight``, ``model.norm.weight``,
``encoder.block.0.layer.1.layer_norm.weight``), read by the norm's last Mul (weight times the
normalised input, ``x * rsqrt(...)``); the rotary tables by the rotation they feed
(``x * cos + cat(-x2, x1) * sin``). What the model computes in float32 at half precision (the
norm's pow, mean, add, rsqrt and mul, ``float32_islands``; the upcasts; the rotary tables'
arithmetic) is marked ``keeps_float32``, and costed at fp32 as the torch trace of a
half-precision model costs it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from predictor.graph import HALF_PRECISIONS
from predictor.importers.onnx_module_calls import (
    DECODER_INPUT_NORM,
    DYNAMIC_CACHE_UPDATE,
    FoundCalls,
    HiddenCall,
    as_elements,
    cache_shown,
    free,
    output_of,
)
from predictor.importers.onnx_patterns import FusedKernel, other
from predictor.importers.onnx_tensors import GraphTensors
from predictor.importers.onnx_wire import FLOAT

#: the precisions at which a cast to the dtype the model already has returns its input
FULL_PRECISIONS = ("fp32", "tf32")

#: a transformers decoder's RMS norms: each layer's two and the stack's last
DECODER_NORM = re.compile(r"(?:^|\.)(?:layers\.\d+\.(?:input|post_attention)_layernorm|(?:^|model\.)norm)\.weight$")
#: T5's layer norms (T5LayerNorm): each layer's and each stack's last
T5_NORM = re.compile(r"(?:^|\.)(?:block\.\d+\.layer\.\d+\.layer_norm|final_layer_norm)\.weight$")


def cast(op: str, params: Callable[[int, list[int]], dict[str, int]] = as_elements,
         to_float32: bool = False) -> tuple[HiddenCall, ...]:
    """A cast to float32 (``to_float32``: a kernel writing float32, costed so as the torch trace
    costs it) or back that a float32 export cannot show: a kernel at half precision, a call
    returning its input (free) at fp32 and tf32."""
    return (HiddenCall(op, "activation", "relu", params, HALF_PRECISIONS, keeps_float32=to_float32),
            HiddenCall(op, precisions=FULL_PRECISIONS))


def in_float32(*calls: HiddenCall) -> tuple[HiddenCall, ...]:
    """``calls`` as PyTorch runs them on float32 tensors in a half-precision model."""
    return tuple(replace(c, keeps_float32=True) for c in calls)


#: LlamaRMSNorm's two casts, sized by the norm's output
RMS_NORM_CASTS = cast("to", to_float32=True) + cast("to")
#: T5LayerNorm's: the upcast (shown by the legacy exporter as a float-to-float Cast, dropped
#: here), and the cast back to the weight's dtype, made at half precision only
T5_NORM_CASTS = cast("to", to_float32=True) + (HiddenCall("to", "activation", "relu", as_elements, HALF_PRECISIONS),)


def _seq(shape: list[int]) -> int:
    return max(1, shape[-2]) if len(shape) >= 2 else 1


def _dim(shape: list[int]) -> int:
    return max(2, shape[-1]) if shape else 2


#: LlamaRotaryEmbedding.forward as the torch importer records it, sized by the cos table
#: [.., tokens, head_dim]: the positions, then inv_freq[None, :, None].float().expand().to(),
#: position_ids[:, None, :].float(), their product, cat, cos and sin scaled, cast back
ROTARY_EMBEDDING = (
    HiddenCall("arange", fallback=lambda _, s: _seq(s)),
    HiddenCall("add", "activation", "relu", lambda _, s: {"elements": _seq(s)}),
    *free("unsqueeze", "_set_grad_enabled", "__getitem__", "expand"),
    *cast("to", lambda _, s: {"elements": _dim(s) // 2}, to_float32=True),
    *free("__getitem__"),
    *cast("float", lambda _, s: {"elements": _seq(s)}, to_float32=True),
    *in_float32(HiddenCall("matmul", "matmul", "", lambda _, s: {"heads": 1, "m": _dim(s) // 2, "k": 1,
                                                                  "n": _seq(s)})),
    *free("transpose"),
    *in_float32(*(HiddenCall(op, "activation", "relu", lambda _, s: {"elements": _seq(s) * _dim(s)})
                  for op in ("cat", "cos", "mul", "sin", "mul"))),
    *cast("to", lambda _, s: {"elements": _seq(s) * _dim(s)}),
    *cast("to", lambda _, s: {"elements": _seq(s) * _dim(s)}),
    *free("_set_grad_enabled"),
)
#: apply_rotary_pos_emb's cos.unsqueeze and sin.unsqueeze, once for q and k: one per rotation
#: (transformers rotates both)
ROTATION_VIEWS = free("unsqueeze")

DECODER_CACHE = "transformers DynamicCache update (Llama/Qwen2)"


def cache_updates(t: GraphTensors, fused: dict[int, FusedKernel], key: dict[int, int], dropped: set[int],
                  found: FoundCalls) -> None:
    """``DYNAMIC_CACHE_UPDATE`` after the key and value projections of each decoder layer told by
    its input norm's weight: the second and third of the three linear layers reading the norm's
    output (q, k, v, in the order transformers writes them). Their weights cannot tell them: the
    dynamo exporter renames them; and with grouped key/value heads (Llama-300m's 4 of 16, Qwen2's
    2 of 14) the copies are the k and v projections' size, not the layer's width. None where the
    export returns its cache (``cache_shown``)."""
    if cache_shown(t):
        return
    for i, n in enumerate(t.nodes):
        if i in dropped or not any(DECODER_INPUT_NORM.search(x) for x in n.input if x in t.static):
            continue
        _, normed = output_of(t, fused, key, i)
        linears = sorted({u for u in t.users(normed) if u >= 0 and t.nodes[u].op_type in ("MatMul", "Gemm")
                          and len(t.nodes[u].input) > 1 and t.nodes[u].input[1] in t.static})
        if len(linears) != 3:
            continue
        for u in linears[1:]:
            anchor, written = output_of(t, fused, key, u)
            found.after.setdefault(anchor, []).extend((call, written) for call in DYNAMIC_CACHE_UPDATE)
            found.modules[DECODER_CACHE] += 1


RMS_NORM = "transformers LlamaRMSNorm/Qwen2RMSNorm casts"
T5_NORM_MODULE = "transformers T5LayerNorm casts"
ROTARY = "transformers rotary embedding (folded into stored cos/sin tables)"
ROTATION = "transformers apply_rotary_pos_emb"


def _norm_parts(t: GraphTensors, i: int, weight: str) -> tuple[str, int] | None:
    """(the input ``x`` an RMS norm normalises, the node ``x * rsqrt(...)``) where node ``i`` is
    the norm's last (weight * (x * rsqrt(...))), in float32; else None."""
    n = t.nodes[i]
    if n.op_type != "Mul" or t.types.get(str(n.output[0])) != FLOAT:
        return None
    scaled = other(n, weight)
    j = None if scaled is None else t.producer.get(scaled)
    if j is None or t.nodes[j].op_type != "Mul":
        return None
    for x in t.nodes[j].input:
        k = t.producer.get(x)
        if k is not None and t.nodes[k].op_type in ("Reciprocal", "Div", "rsqrt"):
            y = next((str(y) for y in t.nodes[j].input if y != x), None)
            return None if y is None else (y, j)
    return None


def _normalised(t: GraphTensors, i: int, weight: str) -> str | None:
    """The input ``x`` an RMS norm's last node ``i`` normalises (``_norm_parts``), or None."""
    parts = _norm_parts(t, i, weight)
    return None if parts is None else parts[0]


#: an RMS norm's nodes from its input to x * rsqrt(...) (pow, mean, add, sqrt, reciprocal, mul),
#: at most: a walk that finds more has left the norm
NORM_ARITHMETIC_NODES = 8


def float32_islands(t: GraphTensors) -> set[int]:
    """The nodes of each RMS norm (Llama's, Qwen2's, T5's, told by its weight's name) that PyTorch
    computes in float32 in a half-precision model, as its torch trace shows them: from the norm's
    input, cast up, to ``x * rsqrt(mean(x^2) + eps)`` (pow, mean, add, sqrt and reciprocal, mul).
    Not the weight's Mul after the cast back, which runs at the model's dtype. A walk that reads
    anything but the norm's input, stored values and its own nodes' outputs has left the norm:
    none of it is marked."""
    islands: set[int] = set()
    for i, n in enumerate(t.nodes):
        weight = next((x for x in n.input if x in t.weights and (DECODER_NORM.search(x) or T5_NORM.search(x))), None)
        parts = None if weight is None else _norm_parts(t, i, weight)
        if parts is None:
            continue
        x, j = parts
        island, todo = {j}, [j]
        while todo and len(island) <= NORM_ARITHMETIC_NODES:
            for name in t.nodes[todo.pop()].input:
                k = None if not name or name == x or name in t.static else t.producer.get(name)
                if k is not None and k not in island:
                    island.add(k)
                    todo.append(k)
        inside = {str(o) for k in island for o in t.nodes[k].output}
        closed = all(not name or name == x or name in t.static or name in inside
                     for k in island for name in t.nodes[k].input)
        if closed and len(island) <= NORM_ARITHMETIC_NODES:
            islands |= island
    return islands


def shown_upcasts(t: GraphTensors) -> set[int]:
    """The float-to-float Casts a T5 norm's input goes through (``x.to(torch.float32)``, as the
    legacy exporter writes it): a kernel at half precision only, which ``decoder_calls`` puts
    back as such; the emitter drops the Cast."""
    casts: set[int] = set()
    for i, n in enumerate(t.nodes):
        weight = next((x for x in n.input if x in t.weights and T5_NORM.search(x)), None)
        x = None if weight is None else _normalised(t, i, weight)
        j = None if x is None else t.producer.get(x)
        if j is not None and t.nodes[j].op_type == "Cast" and t.types.get(t.nodes[j].input[0]) == FLOAT:
            casts.add(j)
    return casts


def _rotation(t: GraphTensors, add: int) -> tuple[str, str, int] | None:
    """(cos, sin, the node x * cos) of a rotation ``x * cos + rotate_half(x) * sin`` at Add node
    ``add`` whose tables are stored, or None."""
    n = t.nodes[add]
    if n.op_type != "Add" or len(n.input) != 2:
        return None
    muls = [t.producer.get(x) for x in n.input]
    if any(m is None or t.nodes[m].op_type != "Mul" for m in muls):
        return None
    found: dict[str, tuple[str, int]] = {}
    for m in muls:
        assert m is not None
        table = next((x for x in t.nodes[m].input if x in t.static and not t.is_host(x)), None)
        x = None if table is None else other(t.nodes[m], table)
        p = None if x is None else t.producer.get(x)
        half = "sin" if p is not None and t.nodes[p].op_type == "Concat" and any(
            (q := t.producer.get(y)) is not None and t.nodes[q].op_type == "Neg" for y in t.nodes[p].input) else "cos"
        if table is not None:
            found[half] = (table, m)
    if set(found) != {"cos", "sin"} or len(t.shape(found["cos"][0]) or []) < 2:
        return None
    return found["cos"][0], found["sin"][0], found["cos"][1]


def decoder_calls(t: GraphTensors, fused: dict[int, FusedKernel], key: dict[int, int], dropped: set[int],
                  found: FoundCalls) -> None:
    """The casts of each RMS norm told by its weight's name, after its last node; the rotary
    embedding's calls once per shape of stored tables (the dynamo exporter folds each layer's
    ``cos.unsqueeze(1)`` into tables of its own), before the first rotation that reads them;
    and a rotation's view after each (module docstring)."""
    tables: set[tuple[int, ...]] = set()
    for i, n in enumerate(t.nodes):
        if i in dropped:
            continue
        for weight in (x for x in n.input if x in t.weights):
            calls, module = ((RMS_NORM_CASTS, RMS_NORM) if DECODER_NORM.search(weight) else
                             (T5_NORM_CASTS, T5_NORM_MODULE) if T5_NORM.search(weight) else ((), ""))
            if calls and _normalised(t, i, weight) is not None:
                anchor, written = output_of(t, fused, key, i)
                found.after.setdefault(anchor, []).extend((c, written) for c in calls)
                found.modules[module] += 1
        rotation = _rotation(t, i) if n.op_type == "Add" else None
        if rotation is None:
            continue
        cos, _, first = rotation
        shape = tuple(t.shape(cos) or ())
        if shape not in tables:  # the exporter folds each layer's unsqueezed tables apart
            tables.add(shape)
            found.after.setdefault(key.get(first, first), []).extend((c, cos) for c in ROTARY_EMBEDDING)
            found.modules[ROTARY] += 1
        found.after.setdefault(key.get(i, i), []).extend((c, cos) for c in ROTATION_VIEWS)
        found.modules[ROTATION] += 1


def gqa_repeats(t: GraphTensors, maskless: set[int]) -> set[int]:
    """The nodes of each ``repeat_kv`` (Unsqueeze, Expand, Reshape) whose result only an
    attention that takes no mask reads (``maskless``: the indices of such attentions' nodes),
    in a graph with a transformers decoder's layers (told by their input norms' weights)."""
    if not any(DECODER_INPUT_NORM.search(x) for x in t.weights):
        return set()
    drop: set[int] = set()
    for r, n in enumerate(t.nodes):
        if n.op_type != "Reshape" or not n.output:
            continue
        users = t.users(str(n.output[0]))
        e = t.producer.get(n.input[0])
        u = None if e is None or t.nodes[e].op_type != "Expand" else t.producer.get(t.nodes[e].input[0])
        if not users or not all(x in maskless for x in users) or u is None or t.nodes[u].op_type != "Unsqueeze":
            continue
        assert e is not None
        src, out = t.shape(t.nodes[u].input[0]), t.shape(str(n.output[0]))
        if src is None or out is None or len(src) != 4 or len(out) != 4 or out[1] % max(1, src[1]) \
                or src[0] != out[0] or src[2:] != out[2:]:
            continue
        if len(t.users(str(t.nodes[u].output[0]))) == 1 and len(t.users(str(t.nodes[e].output[0]))) == 1:
            drop |= {u, e, r}
    return drop
