"""Attention in an export: ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``.

Both exporters write ``F.scaled_dot_product_attention`` out as ``q * sqrt(scale)`` and
``k^T * sqrt(scale)``, MatMul, [mask Add or Where], Softmax, [a NaN guard: IsNaN, Where],
MatMul with v; the dynamo exporter transposes k with Reshape -> Transpose -> Reshape. Scaling q
*and* k is what tells the call from attention written by hand (scores or q scaled once), which
PyTorch runs as the separate matmul, softmax and elementwise kernels it is written as, and is
left to them here too. A call at ``scale=1.0`` (transformers' OPT and others scale q in their own
code and pass 1.0) has no Muls left in a dynamo export, whose optimizer drops a product with 1:
there the Reshape -> Transpose -> Reshape of k tells the call (a hand-written ``k.transpose``
exports as one Transpose; only code that reshapes k to 3-d, transposes and reshapes back by
hand, unscaled, would pass for it).

``nn.MultiheadAttention`` is one call in PyTorch. An export records its slow path, which an
exporter's trace forces: the batch_first transposes of ``MultiheadAttention.forward``, then
``F.multi_head_attention_forward`` with the packed projection split by Reshape -> Unsqueeze ->
Transpose -> Squeeze -> Gather (``_in_projection_packed``), views around the attention and after
the output projection. In eval without gradients, PyTorch runs a batch-first one as its fast
path instead, ``torch._native_multi_head_attention``, with no transposes: the kernels of that
call (``torch_fused.native_attention_parts``, the torch importer's) replace the whole block, the
transposes included. A sequence-first one (the module's default) runs the functional form, the
torch importer's ``_slow_parts``: the projection, its copy into [3, tokens, batch, embed],
attention, the copy of its output back from batch 2 on, and the output projection.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from predictor.importers.onnx_load import node_attributes
from predictor.importers.onnx_ops import FAMILY_RULES, Hit, ModelRefused, softmax_rule
from predictor.importers.onnx_patterns import FusedKernel, other, producer, scalar_operand
from predictor.importers.onnx_tensors import GraphTensors
from predictor.importers.onnx_wire import BOOL
from predictor.importers.torch_fused import (
    attention_route,
    batch_first_slow_parts,
    native_attention_parts,
    sequence_first_slow_parts,
)

#: Ops between a packed projection and the attention inside nn.MultiheadAttention.
_MHA_VIEWS = ("Reshape", "Unsqueeze", "Transpose", "Squeeze", "Gather", "Slice", "Split", "Flatten")


def _after_softmax(t: GraphTensors, sm: int) -> tuple[list[int], str] | None:
    """The nodes between Softmax and the MatMul with v (a NaN guard, Dropout, Identity), and the
    tensor that MatMul reads."""
    taken: list[int] = []
    cur = t.nodes[sm].output[0]
    for _ in range(3):
        users = t.users(cur)
        ops = sorted(t.nodes[u].op_type for u in users if u >= 0)
        if len(users) == 1 and users[0] >= 0 and t.nodes[users[0]].op_type in ("Dropout", "Identity"):
            taken.append(users[0])
            cur = t.nodes[users[0]].output[0]
        elif ops == ["IsNaN", "Where"] and len(users) == 2:  # where(isnan(p), 0, p)
            isnan = next(u for u in users if t.nodes[u].op_type == "IsNaN")
            where = next(u for u in users if t.nodes[u].op_type == "Where")
            if t.nodes[where].input[0] != t.nodes[isnan].output[0] or len(t.users(t.nodes[isnan].output[0])) != 1:
                return None
            taken += [isnan, where]
            cur = t.nodes[where].output[0]
        else:
            break
    return taken, cur


def _scores_operand(t: GraphTensors, add: Any) -> str:
    """Which input of a mask Add carries the attention scores (the other is the mask)."""
    def scores(x: str) -> bool:
        i = t.producer.get(x)
        return x not in t.static and i is not None and t.nodes[i].op_type in ("MatMul", "Mul", "Div", "Where")

    a, b = add.input
    if scores(a) != scores(b):
        return str(a if scores(a) else b)
    return str(b if t.shape(b) == t.shape(add.output[0]) != t.shape(a) else a)


def _swap_last(s: list[int] | None) -> list[int] | None:
    return None if s is None or len(s) < 2 else s[:-2] + [s[-1], s[-2]]


def _k_transpose(t: GraphTensors, k: str) -> tuple[list[int], int, str] | None:
    """The attention's own transpose of k: its nodes, whether the exporter merged a user
    transpose into it (1: one view call of the user's is hidden there), and the k it reads. A
    Transpose swapping the last two dims (perhaps composed with the user's transpose(1, 2)), or
    the dynamo exporter's Reshape -> Transpose -> Reshape."""
    i = producer(t, k, ("Transpose", "Reshape"))
    if i is None:
        return None
    n = t.nodes[i]
    if n.op_type == "Transpose":
        perm = list(node_attributes(n).get("perm", []))
        rank = len(perm)
        if rank < 2 or perm[-1] == rank - 1:
            return None
        pure = perm == list(range(rank - 2)) + [rank - 1, rank - 2]
        return [i], 0 if pure else 1, str(n.input[0])
    tr = producer(t, n.input[0], ("Transpose",))
    if tr is None:
        return None
    r1 = producer(t, t.nodes[tr].input[0], ("Reshape",))
    perm = list(node_attributes(t.nodes[tr]).get("perm", []))
    if r1 is None or len(perm) < 2 or perm[-2:] != [len(perm) - 1, len(perm) - 2]:
        return None
    src = str(t.nodes[r1].input[0])
    if t.shape(src) is None or t.shape(src) != _swap_last(t.shape(k)):
        return None
    return [r1, tr, i], 0, src


def _mask(t: GraphTensors, cur: str) -> tuple[list[int], str, str | None, bool, list[int]]:
    """Walk up from the scores Softmax reads through the mask (an Add, or a Where): the nodes,
    the scores before it, the mask tensor, whether it is boolean (True keeps) and where a
    boolean mask was made additive."""
    taken: list[int] = []
    i = producer(t, cur, ("Add", "Where"))
    if i is None:
        return taken, cur, None, False, []
    n = t.nodes[i]
    if n.op_type == "Add" and len(n.input) == 2:
        scores = _scores_operand(t, n)
        mask = other(n, scores)
        b = t.producer.get(mask or "")
        if b is not None and t.nodes[b].op_type == "Where" and all(t.is_scalar(x) for x in t.nodes[b].input[1:]):
            # a boolean mask made additive inside the call (where(mask, 0, -inf)): the call took the boolean
            keeps = (t.scalar(t.nodes[b].input[1]) or 0.0) > -1e4
            return [i], scores, str(t.nodes[b].input[0]), keeps, [b]
        return [i], scores, mask, False, []
    if n.op_type == "Where" and len(n.input) == 3:
        cond, a, b2 = n.input
        scores = str(b2 if t.is_scalar(a) else a)
        return [i], scores, str(cond), scores == a, []
    return taken, cur, None, False, []


def find_sdpa(t: GraphTensors, softmax: int) -> FusedKernel | None:
    """F.scaled_dot_product_attention as one sdpa node (see the module's docstring)."""
    sm = t.nodes[softmax]
    if softmax_rule(t, sm, node_attributes(sm)) is None:
        return None  # attention normalises over the keys: the last axis
    after = _after_softmax(t, softmax)
    if after is None:
        return None
    guard, probs = after
    users = t.users(probs)
    if len(users) != 1 or users[0] < 0 or t.nodes[users[0]].op_type != "MatMul" \
            or t.nodes[users[0]].input[0] != probs:
        return None
    pv = users[0]
    taken = [softmax, pv, *guard]
    masked, cur, mask, mask_bool, builders = _mask(t, sm.input[0])
    taken += masked
    qk = producer(t, cur, ("MatMul",))
    if qk is None:
        return None
    taken.append(qk)
    q, k = t.nodes[qk].input
    if q in t.static or k in t.static:
        return None  # a product with weights, not attention
    scales, views, torchlib_k = 0, 0, False
    for side in (0, 1):
        x = str(t.nodes[qk].input[side])
        i = producer(t, x, ("Mul", "Div"))
        if i is not None and scalar_operand(t, t.nodes[i]):
            taken.append(i)
            scales += 1
            x = scalar_operand(t, t.nodes[i]) or ""
        if side == 0:
            q = x
            continue
        found = _k_transpose(t, x)
        if found is None:
            return None
        nodes, views, k = found
        torchlib_k = len(nodes) == 3
        taken += nodes
    if scales != 2 and not (scales == 0 and torchlib_k):
        # q and k each scaled: the exporters' writing of the call, not a hand-written one; or, at
        # scale 1 (whose Muls the dynamo exporter's optimizer drops), k transposed as only the
        # dynamo exporter writes the call (a hand-written k.transpose is one Transpose)
        return None
    qs, ss, vs = t.shape(q), t.shape(t.nodes[qk].output[0]), t.shape(t.nodes[pv].input[1])
    if qs is None or ss is None or vs is None or min(len(qs), len(ss), len(vs)) < 3:
        return None
    params = dict(heads=t.per_sample(qs[:-2]), seq_q=qs[-2], seq_kv=ss[-1], head_dim=qs[-1], causal=0)
    return FusedKernel(sorted(set(taken)), "Attention", ("sdpa", "", params), mask=mask, mask_bool=mask_bool,
                       views=views, output=str(t.nodes[pv].output[0]), mask_builders=builders)


def _through_views(t: GraphTensors, name: str, limit: int = 8) -> tuple[list[int], str]:
    """Walk up from ``name`` through view nodes; the nodes passed and the tensor reached."""
    taken: list[int] = []
    for _ in range(limit):
        i = t.producer.get(name)
        if i is None or t.nodes[i].op_type not in _MHA_VIEWS:
            break
        taken.append(i)
        name = str(t.nodes[i].input[0])
    return taken, name


def _linear(t: GraphTensors, fused: dict[int, FusedKernel], i: int | None) -> tuple[list[int], Hit] | None:
    """The linear projection at node ``i``: a fused MatMul+Add, or a Gemm or MatMul by a 2-d weight."""
    if i is None:
        return None
    for f in fused.values():
        if i in f.indices and f.hit[0] == "linear" and not f.parts:
            return f.indices, f.hit
    n = t.nodes[i]
    if n.op_type in ("Gemm", "MatMul"):
        hit = FAMILY_RULES[n.op_type](t, n, node_attributes(n), None)  # type: ignore[arg-type]
        if hit is not None and hit[0] == "linear":
            return [i], hit
    return None


def find_packed_mha(t: GraphTensors, attention: FusedKernel, fused: dict[int, FusedKernel]) -> FusedKernel | None:
    """nn.MultiheadAttention around a found sdpa: q, k and v sliced by views from one packed
    projection (three times the model width, split by _in_projection_packed's Unsqueeze ->
    Transpose -> Squeeze -> Gather), the attention's output reshaped into one output projection."""
    qk = next(i for i in attention.indices if t.nodes[i].op_type == "MatMul"
              and t.nodes[i].output[0] != attention.output)
    pv = t.producer[attention.output]
    k_side = [i for i in attention.indices if t.nodes[i].op_type in ("Transpose", "Reshape")]
    if not k_side:
        return None
    starts = [str(t.nodes[qk].input[0]), str(t.nodes[pv].input[1]), str(t.nodes[min(k_side)].input[0])]
    views: list[int] = []
    packed: set[str] = set()
    for s in starts:
        i = t.producer.get(s)
        if i is not None and i in attention.indices:  # q's scale
            s = scalar_operand(t, t.nodes[i]) or s
        passed, reached = _through_views(t, s)
        views += passed
        packed.add(reached)
    ops = {t.nodes[i].op_type for i in views}
    if len(packed) != 1 or not {"Unsqueeze", "Transpose", "Squeeze", "Gather"} <= ops:
        return None
    proj = _linear(t, fused, t.producer.get(packed.pop()))
    if proj is None or proj[1][2]["n"] % 3:
        return None
    after: list[int] = []
    cur = attention.output
    for _ in range(4):  # views from the attention's output to the output projection
        j = t.only_consumer(cur)
        if j is None or t.nodes[j].op_type not in ("Transpose", "Reshape"):
            break
        after.append(j)
        cur = str(t.nodes[j].output[0])
    out = _linear(t, fused, t.only_consumer(cur))
    if out is None:
        return None
    end = str(t.nodes[max(out[0])].output[0])
    tail = t.only_consumer(end)
    if tail is not None and t.nodes[tail].op_type == "Reshape":  # attn_output.view(tgt_len, bsz, embed)
        after.append(tail)
        end = str(t.nodes[tail].output[0])
    indices = set(attention.indices) | set(views) | set(proj[0]) | set(after) | set(out[0])
    into = _batch_first_transpose(t, t.nodes[min(proj[0])].input[0], before=True)
    back = _batch_first_transpose(t, end, before=False)
    params = attention.hit[2]
    heads, tokens, kv_tokens = params["heads"], params["seq_q"], params["seq_kv"]
    embed = heads * params["head_dim"]
    masked, causal = attention.mask is not None, bool(params.get("causal", 0))
    view_calls, fast_path = 0, False
    mask_views, mask_given = _mask_views(t, attention.mask)
    indices |= set(mask_views)  # inside the call, whichever path runs it: no call of their own
    merge = _mask_merge(t, mask_given)  # an attn_mask and a key padding mask, added
    if merge is not None:
        indices |= set(merge.views)
    in_layer = reads_in_proj_bias(t, proj[0])
    fills = _canonical_masks(t, mask_given, _scope(t.nodes[min(proj[0])].name), in_layer) if masked else None
    # an nn.TransformerEncoderLayer's fast path takes a float mask; nn.MultiheadAttention's refuses one
    float_mask = masked and fills is None and not in_layer
    if into is None or back is None:  # sequence-first: F.multi_head_attention_forward, its only path
        _check_sequence_first_batch(t, heads, embed, proj[1][2]["n"] // 3)
        made = sequence_first_slow_parts(tokens, kv_tokens, embed, heads, masked, causal, merged=merge is not None)
    else:  # batch-first: the fast path, without the transposes
        indices |= {into, back}
        end = str(t.nodes[back].output[0])
        if heads % 2 or float_mask:  # refused by the fast path: F.multi_head_attention_forward
            made = batch_first_slow_parts(tokens, embed, heads, masked, causal, merged=merge is not None)
            view_calls = 2  # MultiheadAttention.forward's batch_first transposes, which this path runs
        else:
            route = attention_route(params["head_dim"], False, masked, True)
            # expanded over the heads here (a merge of two masks is the attn_mask's shape)
            padding = merge is None and "Expand" in {t.nodes[i].op_type for i in mask_views}
            # the mask the call converts to boolean: a key padding mask as given, an attn_mask
            # expanded over the batch and heads by merge_masks (torch_fused._mask_elements)
            mask_elements = 0 if not masked else kv_tokens if padding else heads * tokens * kv_tokens
            made = native_attention_parts(route, tokens, kv_tokens, embed, heads, False, mask_elements)
            fast_path = True
            if merge is not None:  # merge_masks' view and expand of each mask; its add is the export's
                view_calls = 4
            elif masked and not padding:
                # merge_masks' view and expand of a 2-d attn_mask, its view of a 3-d one (a key
                # padding mask it passes as it is)
                view_calls = {2: 2, 3: 1}.get(len(t.shape(mask_given or "") or []), 0)
    if merge is not None and not fast_path:
        indices.add(merge.add)  # the slow path adds the masks itself
    parts = [(name, _as_hit(fields)) for name, fields in made]
    part_fields: dict[str, dict[str, Any]] = {name: {k: fields[k] for k in ("layout", "min_batch") if k in fields}
                                              for name, fields in made}
    return FusedKernel(sorted(indices), "MultiheadAttention", attention.hit, parts=parts, part_fields=part_fields,
                       views=view_calls, fast_path=fast_path, mask=attention.mask,
                       mask_bool=attention.mask_bool, output=end, mask_builders=attention.mask_builders,
                       mask_fills=fills or [])


#: Ops ``F.multi_head_attention_forward`` reshapes a mask with before it adds it to the scores.
_MASK_VIEWS = ("Unsqueeze", "Reshape", "Expand", "Squeeze", "Identity")


def _mask_views(t: GraphTensors, mask: str | None) -> tuple[list[int], str | None]:
    """The views ``F.multi_head_attention_forward`` puts a mask through inside the call (unsqueeze
    of a 2-d mask; view, expand and reshape of a key padding mask), each read only by the next,
    and the tensor they start from: the mask the module was given, or the float mask
    ``F._canonical_mask`` made of a boolean one."""
    taken: list[int] = []
    cur = mask
    while cur is not None and (i := producer(t, cur, _MASK_VIEWS)) is not None and len(taken) < 8:
        taken.append(i)
        cur = str(t.nodes[i].input[0])
    return taken, cur


class MaskMerge(NamedTuple):
    """An attn_mask and a key padding mask added before the scores: the Add, the views of each
    mask before it, and the tensor each mask starts from (``_mask_views``)."""

    add: int
    views: list[int]
    sources: list[str | None]


def _mask_merge(t: GraphTensors, source: str | None) -> MaskMerge | None:
    """Where an attention was given an attn_mask and a key padding mask: the Add that
    ``F.multi_head_attention_forward`` merges them with (None where it was given one mask)."""
    i = t.producer.get(source or "")
    if i is None or t.nodes[i].op_type != "Add" or len(t.nodes[i].input) != 2:
        return None
    walks = [_mask_views(t, str(x)) for x in t.nodes[i].input]
    return MaskMerge(i, [j for views, _ in walks for j in views], [given for _, given in walks])


def _scope(node_name: str) -> str:
    """The module scope the TorchScript exporter names a node with ('/enc/layers.0/self_attn/'
    of '/enc/layers.0/self_attn/MatMul'); '' for a name without one (the dynamo exporter's)."""
    return node_name.rsplit("/", 1)[0] + "/" if node_name.startswith("/") else ""


def reads_in_proj_bias(t: GraphTensors, indices: Iterable[int]) -> bool:
    """Whether the nodes read an ``nn.TransformerEncoderLayer``'s ``self_attn.in_proj_bias``: its
    attention, told by its parameter's name (onnx_encoder_layer)."""
    return any(str(x).endswith("self_attn.in_proj_bias") for i in indices for x in t.nodes[i].input)


def _canonical_masks(t: GraphTensors, source: str | None, scope: str, in_layer: bool) -> list[int] | None:
    """The Where nodes ``F._canonical_mask`` made a boolean mask additive with, where every mask
    the attention adds was given boolean; None where one was given as floats. The call runs
    ``zeros_like(mask, dtype).masked_fill_(mask, -inf)``: two kernels, of which the export shows
    the Where (on a boolean condition) and folds the zeros. PyTorch's fast path refuses a float
    mask given to nn.MultiheadAttention ("floating-point masks are not supported for fast path")
    and runs ``F.multi_head_attention_forward``. Two masks (an attn_mask and a key padding mask)
    meet in an Add, each followed back on its own. A float mask a model builds from a boolean one
    itself (``zeros(...).masked_fill(pad, -inf)``) exports alike: told apart by its node's scope,
    which for ``F._canonical_mask`` is the attention module's own, or, inside a transformer layer
    (``in_layer``), the layer's or its encoder's, which canonicalise the mask first (an export
    whose names carry no scope is taken as canonical)."""
    merge = _mask_merge(t, source)
    if merge is not None:
        found: list[int] = []
        for given in merge.sources:
            part = _canonical_masks(t, given, scope, in_layer)
            if part is None:
                return None
            found += part
        return found
    i = t.producer.get(source or "")
    if i is None:
        return None
    n = t.nodes[i]
    if n.op_type != "Where" or t.types.get(str(n.input[0])) != BOOL:
        return None
    where = _scope(n.name)
    if scope and where != scope and not (in_layer and scope.startswith(where)):
        return None
    return [i]


def _check_sequence_first_batch(t: GraphTensors, heads: int, embed: int, width: int) -> None:
    """Refuse a sequence-first nn.MultiheadAttention ([sequence, batch, embed]) whose batch axis is
    not the one the import took for the batch: its heads per sample then come out as a share of
    the batch's (``heads`` against the module's ``width`` // head size), and every other parameter
    per sample a share of the sequence. The batch is axis 0 unless a symbolic dim names it
    (onnx_dims.BATCH_NAMES)."""
    if embed != width:
        raise ModelRefused(f"the model is sequence-first (nn.MultiheadAttention's default: [sequence, batch, "
                           f"embed]) but axis 0 was taken for its batch ({t.batch}): its attention would have "
                           f"{heads} head(s) per sample of {width} wide. Export it with its batch axis named, "
                           "dynamic_axes={'x': {0: 'seq', 1: 'batch'}} (a dim named 'batch' is the batch at any "
                           "axis), and set the sequence with --dim seq=N")


def _batch_first_transpose(t: GraphTensors, name: str, before: bool) -> int | None:
    """MultiheadAttention.forward's transpose of a batch-first tensor to sequence-first (reading
    ``name`` into the projection when ``before``) or back (of the block's output)."""
    i = t.producer.get(name) if before else t.only_consumer(name)
    if i is None or t.nodes[i].op_type != "Transpose" or list(node_attributes(t.nodes[i]).get("perm", [])) != [1, 0, 2]:
        return None
    if before and len(t.users(name)) != 1:
        return None
    return i


def _as_hit(fields: dict[str, Any]) -> Hit:
    return fields["family"], fields.get("variant", ""), dict(fields["params"])
