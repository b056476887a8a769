"""The graph nodes an ONNX model becomes: the calls PyTorch would make for it, in order.

Each ONNX node becomes nothing, one node or several:

- nothing: shape arithmetic and constants (Shape, Size, Gather, Slice, Concat, Unsqueeze, Cast,
  Range, ConstantOfShape, Equal, Where... on host values), Constant and Identity, views of
  weights, and what builds an attention mask only the attention reads. PyTorch computes those in
  Python or not at all: no kernel, no dispatch.
- a ``free`` node: a view PyTorch makes with a call of its own (Reshape, Transpose, Flatten,
  Squeeze, Unsqueeze, Expand, Slice, Split, a select): host time, no kernel.
- a kernel: by family (onnx_ops), in the layout PyTorch would run it in (onnx_layouts); a Reshape
  that cannot view its input is the copy ``reshape`` makes; a batched MatMul is preceded by the
  copies ``torch.matmul`` makes of operands it cannot fold; a Conv carrying a folded BatchNorm is
  followed by that ``batch_norm`` (onnx_exporters).
- a fused kernel for what one PyTorch call leaves as several ONNX nodes (onnx_patterns).

Where the export cannot say what PyTorch runs, the choice made is returned as a sentence, for
``graph.meta["assumptions"]``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from predictor.graph import Node
from predictor.importers import onnx_strides as st
from predictor.importers.onnx_decoder import cache_updates, decoder_calls, float32_islands, gqa_repeats, shown_upcasts
from predictor.importers.onnx_encoder_layer import find_encoder_layers
from predictor.importers.onnx_exporters import FOLDED_BN_ASSUMPTION, exporter, folded_batch_norm
from predictor.importers.onnx_layouts import VIEW_OPS, TensorLayouts
from predictor.importers.onnx_load import STANDARD, node_attributes
from predictor.importers.onnx_mask_pattern import pattern
from predictor.importers.onnx_module_calls import HiddenCall, as_elements, module_calls
from predictor.importers.onnx_ops import (
    FOLDED_OPS,
    classify_node,
    conv_rule,
    copy_fields,
    elementwise_fields,
    kernel_fields,
    layout_of,
    same_integer_type,
    try_rule,
)
from predictor.importers.onnx_patterns import FusedKernel, detect_fused_kernels
from predictor.importers.onnx_swin import swin_calls
from predictor.importers.onnx_tensors import GraphTensors
from predictor.importers.onnx_wire import BOOL

#: what PyTorch runs that an export folds away, found by a graph's structure (after the calls of
#: the modules told by their parameters' names): decoders' cache updates, Swin's blocks, decoders'
#: float32 casts and rotary embedding
STRUCTURAL_CALLS = (cache_updates, swin_calls, decoder_calls)
MASK_SKIPPED = ("{count} attention call(s) take a mask that masks nothing, made when the model was traced for "
                "export: taken as transformers runs it, skipped eagerly (flash attention) and passed under "
                "CUDA-graph capture, where it sends PyTorch down its math path")
CAUSAL_MASK = ("{count} attention call(s) apply a constant causal mask: taken as is_causal=True, with no mask "
               "tensor, as transformers' decoders run it")
UNREAD_MASK = ("{count} attention call(s) take a mask built from a stored tensor whose data is not read (a "
               "weight-stripped export's, external data, or a tensor over 65,536 elements): costed as a mask "
               "PyTorch passes; were it causal (is_causal=True, as transformers' decoders run it) or one that "
               "masks nothing, they would cost less")
MHA = ("{count} attention block(s) are nn.MultiheadAttention (a packed q/k/v projection): costed as PyTorch "
       "runs it without grad: batch-first with an even head count and no float mask, its fused fast path "
       "(_native_multi_head_attention: projection, attention, output projection, no batch_first transposes); "
       "otherwise F.multi_head_attention_forward, with its copies (batch-first: its transposes and the copies "
       "they force from batch 2 on). An export cannot show whether grad was on")

#: the zeros a boolean attention mask is filled into (``F._canonical_mask``), which exports fold
CANONICAL_MASK_FILL = HiddenCall("zeros_like", "activation", "relu", as_elements)
SILU_CALLS = ("{count} x * Sigmoid(x) pair(s) are costed as one F.silu kernel each, as nn.SiLU exports; a "
              "hand-written x * torch.sigmoid(x) exports the same and runs two kernels")
MISH_CALLS = ("{count} x * Tanh(Softplus(x)) chain(s) are costed as one F.mish kernel each, as nn.Mish exports "
              "before opset 18; a hand-written x * tanh(softplus(x)) exports the same and runs three kernels")
LOG_SIGMOID_CALLS = ("{count} Log(Sigmoid(x)) pair(s) are costed as one F.logsigmoid kernel each, as "
                     "nn.LogSigmoid exports; a hand-written log(sigmoid(x)) exports the same and runs two kernels")
GQA_REPEATS = ("{count} repeat(s) of grouped keys or values (unsqueeze, expand, a reshape that copies) before an "
               "attention that takes no mask are left out: transformers' sdpa_attention_forward repeats them only "
               "when it passes a mask (or is traced, as for an export); without one, SDPA reads them as they are "
               "(enable_gqa)")


def _dtype(elem_type: int | None) -> str:
    if not elem_type:
        return ""
    from onnx import TensorProto, helper

    try:
        return str(helper.tensor_dtype_to_np_dtype(elem_type).name)
    except Exception:
        return TensorProto.DataType.Name(elem_type).lower()


def mask_verdict(t: GraphTensors, f: FusedKernel) -> str:
    """What PyTorch does with an attention call's mask: '' (there is none), 'skipped' (it masks
    nothing: transformers drops it eagerly), 'causal' (a constant causal mask: is_causal=True,
    no tensor) or 'real' (a mask PyTorch builds and passes)."""
    if f.mask is None:
        return ""
    keep = f.mask_bool
    u = t.uniform(f.mask)
    if u is not None and bool(u) == keep:
        return "skipped"
    value = t.value(f.mask)
    if value is None:  # too large to fold: a causal mask's pattern shows on a small square too
        value = pattern(t, f.mask)
    if value is not None and value.ndim >= 2 and min(value.shape[-2:]) >= 2:
        import numpy as np

        m = value.reshape(-1, *value.shape[-2:])[0]
        upper = np.triu(np.ones(m.shape, dtype=bool), k=1)
        masked = ~m.astype(bool) if keep else (m.astype(bool) if m.dtype == bool else m <= -1e4)
        if bool((masked == upper).all()):
            return "causal"
    return "real"


#: how many tensors back through its builders a mask is followed to a stored tensor without its data
_UNREAD_SEARCH_TENSORS = 64


def built_from_unread(t: GraphTensors, name: str) -> bool:
    """Whether tensor ``name`` is computed from a stored boolean tensor whose data was not read
    (onnx_wire keeps none over KEEP_ELEMENTS, nor any external data), so that its value cannot be
    known: a weight-stripped export may strip the dynamo exporter's folded causal mask (``le_1``,
    16,384 elements) with the weights. (A float one is a weight, as T5's relative position bias: a
    real bias.)"""
    todo, seen = [name], {name}
    while todo and len(seen) <= _UNREAD_SEARCH_TENSORS:
        x = todo.pop()
        if x in t.weights:
            if t.weights[x].data_type == BOOL and t.value(x) is None:
                return True
            continue
        i = t.producer.get(x)
        for y in t.nodes[i].input if i is not None else ():
            if y and y not in seen:
                seen.add(y)
                todo.append(y)
    return False


_SCATTERS = ("ScatterND", "ScatterElements")


def _as_strided(t: GraphTensors, n: Any) -> bool:
    """A Gather of a flattened activation by indices the exporter computed from shapes: how the
    dynamo exporter writes ``as_strided`` inside a decomposition (a pooling's channels-last
    output). It is no call of the model's own."""
    if n.op_type != "Gather" or len(n.input) < 2 or n.input[0] in t.static or n.input[1] not in t.static \
            or n.input[1] in t.weights or n.input[1] in t.constants or t.is_host(n.input[1]):
        return False
    src = t.producer.get(n.input[0])
    return src is not None and t.nodes[src].op_type == "Reshape" and len(t.shape(n.input[0]) or [0, 0]) == 1


#: what an exporter wraps a filled value in: its shape made, its type set
_FILL_WRAPPERS = {"Expand", "Reshape", "Cast", "Unsqueeze", "Squeeze"}


def _one_number(t: GraphTensors, name: str) -> bool:
    """Whether ``name`` is one number made into a tensor, as an exporter writes the Python value of
    ``x[a:b] = 1``: a ConstantOfShape (or a one-element Constant) through expands, reshapes and
    casts. A tensor the model makes or stores, however uniform, is not: PyTorch runs or reads it."""
    for _ in range(8):
        i = t.producer.get(name)
        if i is None:
            return False
        n = t.nodes[i]
        if n.op_type == "ConstantOfShape":
            return True
        if n.op_type == "Constant":
            return math.prod(t.shape(name) or [2]) == 1
        if n.op_type not in _FILL_WRAPPERS or not n.input:
            return False
        name = str(n.input[0])
    return False


def dropped_nodes(t: GraphTensors, fused: dict[int, FusedKernel]) -> set[int]:
    """Nodes that make no call in PyTorch: shape arithmetic on host values, constants and
    aliases, views of weights, an exporter's as_strided, the indices and the one fill value of
    an in-place write (the legacy exporter builds ``x[a:b, c:d] = 1`` as a filled tensor of the
    slice's shape: Swin's masks, five ConstantOfShape fallbacks and ten views each), and what builds
    an attention mask PyTorch never builds (one that masks nothing, or a causal one; ``mask_verdict``)."""
    unbuilt = {f.mask for f in fused.values() if f.mask and mask_verdict(t, f) in ("skipped", "causal")}
    readers = {i for f in fused.values() if f.mask in unbuilt for i in f.indices}
    builders = {b for f in fused.values() if f.mask in unbuilt for b in f.mask_builders}
    stored = set(t.weights) | set(t.constants)
    drop: set[int] = set()
    for i in range(len(t.nodes) - 1, -1, -1):
        n = t.nodes[i]
        outs = [o for o in n.output if o]
        if n.domain not in STANDARD:
            continue
        static = bool(outs) and all(o in t.static for o in outs)
        users = [u for o in outs for u in t.users(o)]
        if n.op_type in FOLDED_OPS or (outs and all(t.is_host(o) for o in outs)) or _as_strided(t, n) \
                or (n.op_type == "Cast" and same_integer_type(t, n)):
            drop.add(i)
        elif static and n.op_type in VIEW_OPS and n.input and (n.input[0] in stored or t.is_host(n.input[0])):
            drop.add(i)  # a view of a weight: PyTorch reads the parameter as it is
        elif (static or i in builders) and users and all(u >= 0 and (u in drop or u in readers or u in builders)
                                                         for u in users):
            drop.add(i)  # builds what only an attention's unbuilt mask reads
        elif static and users and all(u >= 0 and t.nodes[u].op_type in _SCATTERS and t.nodes[u].input[1] in outs
                                      for u in users):
            drop.add(i)  # the indices of an in-place write: PyTorch takes them as Python slices
        elif static and users and all(u >= 0 and t.nodes[u].op_type in _SCATTERS and t.nodes[u].input[2] in outs
                                      for u in users) and _one_number(t, outs[0]):
            drop.add(i)  # the one value an in-place write fills (x[a:b] = 1): a Python number in PyTorch
        elif users and all(u in drop and _as_strided(t, t.nodes[u]) for u in users if u >= 0) \
                and n.op_type == "Reshape" and -1 not in users:
            drop.add(i)  # the flattening an exporter's as_strided reads
        elif static and not users and not any(o in t.outputs for o in outs):
            drop.add(i)  # computes nothing anyone reads
    return drop


def _mask_fields(t: GraphTensors, lay: TensorLayouts, f: FusedKernel, params: dict[str, int]) -> tuple[str, str, str]:
    """(variant, capture variant, note) of an attention call from its mask, as PyTorch picks the
    kernel: none; one that masks nothing (eager: skipped; captured: the math path); a causal one
    (is_causal); else by the mask's type and layout (the torch importer's _sdpa_mask_variant)."""
    verdict = mask_verdict(t, f)
    if verdict in ("", "skipped"):
        return ("", "math", verdict) if verdict else ("", "", "")
    if verdict == "causal":
        params["causal"] = 1
        return "", "", "causal"
    assert f.mask is not None
    note = "unread" if f.mask in t.static and built_from_unread(t, f.mask) else ""
    o = lay.of(f.mask)
    if o is None:
        return "masked", "", note
    shape, strides = o
    if shape and shape[-1] > 1 and strides[-1] != 1:
        return "math", "", note
    if not f.mask_bool and t.types.get(f.mask) != BOOL:  # an additive (float) mask
        return "masked", "", note
    return ("bool_padding" if len(shape) == 4 and strides[-2] == 0 else "bool_full"), "", note


class Emitter:
    """Makes the graph's nodes, remembering the assumptions it made."""

    def __init__(self, t: GraphTensors, names: list[str]) -> None:
        self.t = t
        self.names = names
        self.fused = detect_fused_kernels(t)
        self.encoder_layers = find_encoder_layers(t, self.fused)
        self.absorbed = {j for f in self.fused.values() for j in f.indices}
        self.drop = dropped_nodes(t, self.fused)
        # attentions PyTorch runs without a mask: transformers repeats no grouped keys for them
        maskless = {j for f in self.fused.values() if f.hit[0] == "sdpa" and not f.parts
                    and mask_verdict(t, f) in ("", "causal") for j in f.indices}
        repeats = gqa_repeats(t, maskless)
        self.drop |= shown_upcasts(t) | repeats
        #: nodes PyTorch computes in float32 in a half-precision model (an RMS norm's arithmetic)
        self.float32 = float32_islands(t)
        self.module_calls = module_calls(t, self.fused, self.drop, STRUCTURAL_CALLS)
        #: calls no export shows, after the node (or fused kernel) at each index, with the tensor
        #: that node writes
        self.calls_after: dict[int, list[tuple[HiddenCall, str]]] = {}
        for found in (self.module_calls.after, self.encoder_layers.calls_after):
            for i, calls in found.items():
                self.calls_after.setdefault(i, []).extend(calls)
        # F._canonical_mask's zeros_like before the masked_fill_ each boolean mask's Where shows: the
        # zeros folded away, or a ConstantOfShape whose shape the batch decides (costed as this call)
        for i in sorted({j for f in self.fused.values() for j in f.mask_fills}):
            self.calls_after.setdefault(i, []).append((CANONICAL_MASK_FILL, str(t.nodes[i].output[0])))
            self.drop |= {j for x in t.nodes[i].input[1:] if (j := t.producer.get(x)) is not None
                          and t.nodes[j].op_type == "ConstantOfShape" and t.users(x) == [i]}
        attention = {f.output for f in self.fused.values() if f.hit[0] == "sdpa" and not f.parts}
        # what a fused call writes anew; nn.MultiheadAttention's slow path returns a view (batch_first:
        # its output transposed back), whose strides the export's own nodes give
        fresh = {f.output for f in self.fused.values()
                 if (f.parts and f.fast_path) or f.hit[0] in ("layer_norm", "group_norm")}
        self.lay = TensorLayouts(t, attention, fresh)
        self.made_by = exporter(t)
        self.notes: Counter[str] = Counter()
        if repeats:
            self.notes["gqa"] = sum(t.nodes[i].op_type == "Reshape" for i in repeats)

    def nodes(self) -> list[Node]:
        out: list[Node] = []
        for i in range(len(self.t.nodes)):
            if i in self.fused:
                made = self._fused(i, self.fused[i])
                upcast = not self.float32.isdisjoint(self.fused[i].indices)
            elif i not in self.absorbed and i not in self.drop:
                made = self._single(i)
                upcast = i in self.float32
            else:
                continue
            if upcast:
                made = [replace(n, keeps_float32=True) for n in made]
            out += made + [self._hidden(i, j, call, written) for j, (call, written) in
                           enumerate(self.calls_after.get(i, []))]
        seen = {n.name for n in out}
        if len(seen) == len(out):
            return out
        taken: set[str] = set()  # a node made here ("x/batch_norm") named like an ONNX node: renamed
        for k, n in enumerate(out):
            if n.name in taken:
                out[k] = replace(n, name=next(f"{n.name}#{j}" for j in range(1, len(out) + 2)
                                              if f"{n.name}#{j}" not in seen))
                seen.add(out[k].name)
            taken.add(out[k].name)
        return out

    def assumptions(self) -> list[str]:
        made = {"folded_bn": FOLDED_BN_ASSUMPTION, "skipped": MASK_SKIPPED, "causal": CAUSAL_MASK, "mha": MHA,
                "unread": UNREAD_MASK, "gqa": GQA_REPEATS, "silu": SILU_CALLS, "mish": MISH_CALLS,
                "log_sigmoid": LOG_SIGMOID_CALLS}
        said = [made[k].format(count=c, made_by=self.made_by) for k, c in self.notes.items() if k in made]
        found = (self.encoder_layers.assumption(), self.module_calls.assumption())
        return said + [sentence for sentence in found if sentence]

    def _node(self, i: int, fields: dict[str, Any], suffix: str = "", op: str | None = None,
              reads: list[str] | None = None, writes: list[str] | None = None, **extra: Any) -> Node:
        n = self.t.nodes[i]
        reads = [x for x in n.input if x and not self.t.is_host(x)] if reads is None else reads
        writes = [x for x in n.output if x] if writes is None else writes
        return Node(name=self.names[i] + suffix, op=op or n.op_type,
                    dtype=_dtype(self.t.types.get(writes[0]) if writes else None),
                    inputs=[s for s in map(self.t.shape, reads) if s is not None],
                    outputs=[s for s in map(self.t.shape, writes) if s is not None], **fields, **extra)

    def _hidden(self, i: int, j: int, call: HiddenCall, written: str) -> Node:
        """A call no export shows, after node ``i`` (onnx_module_calls, onnx_encoder_layer): a free
        node, or a kernel (or a call costed as a fallback) sized by ``written``, the tensor node
        ``i`` writes or another the rule names (a fallback of that size where the catalogue
        refuses its parameters: never dropped)."""
        suffix = f"/{call.op.lower()}{j}"
        extra: dict[str, Any] = {"precisions": list(call.precisions)} if call.precisions else {}
        if call.keeps_float32:
            extra["keeps_float32"] = True
        if call.fallback is None and (call.family is None or call.params is None):
            return self._node(i, {"kind": "free"}, suffix, call.op, reads=[], writes=[], **extra)
        shape = self.t.shape(written) or [1]
        elements = self.t.per_sample(shape)
        kernel = None if call.family is None or call.params is None else kernel_fields(
            (call.family, call.variant, call.params(elements, shape)))
        fields = kernel or {"kind": "fallback", "elements_per_sample":
                            elements if call.fallback is None else call.fallback(elements, shape)}
        if call.layout and fields.get("kind") == "kernel":
            fields = {**fields, "layout": call.layout}
        return self._node(i, fields, suffix, call.op, reads=[written], writes=[written], **extra)

    def _single(self, i: int) -> list[Node]:
        t, n = self.t, self.t.nodes[i]
        if n.op_type == "Conv" and n.domain in STANDARD and folded_batch_norm(t, n):
            hit = try_rule(conv_rule, t, n, node_attributes(n), self.lay)
            layout = layout_of(self.lay, hit, [n.input[0]], [n.output[0]])
            conv = kernel_fields(hit, layout)
            out = t.shape(n.output[0])
            bn = None if not out or len(out) != 4 else kernel_fields(
                ("batch_norm", "", dict(c=out[1], h=out[2], w=out[3])), layout)
            if conv and bn:
                self.notes["folded_bn"] += 1
                return [self._node(i, conv), self._node(i, bn, "/batch_norm", "BatchNormalization",
                                                         reads=[n.output[0]])]
        fields = classify_node(t, n, self.lay)
        made = [self._node(i, fields)]
        if n.op_type in ("Reshape", "Flatten") and i in self.lay.copies and fields["kind"] == "free":
            return self._reshape_copy(i)
        family, variant = fields.get("family"), fields.get("variant")
        if family == "layer_norm" or (family == "linear" and variant == "nobias"):
            before, _ = self._unfused_parts(i, fields["family"], [n.input[0]], n.output[0], has_bias=False)
            return before + made
        if fields.get("family") == "matmul":
            copies = self.lay.matmul_copies(n.input[0], n.input[1])
            return [self._node(i, copy_fields(t, c), f"/copy{j}", launched_by=self.names[i])
                    for j, c in enumerate(copies)] + made
        return made

    def _runs_from(self, name: str, needs: Callable[[list[int], st.Strides], bool]) -> int | None:
        """The first batch (1 or 2) at which a tensor's layout ``needs`` a kernel, or None. A
        graph is costed at any batch, and a transposed batch-1 tensor can still be viewed where a
        larger batch must be copied; strides of dims after the batch do not depend on it."""
        laid = self.lay.of(name)
        if laid is None or not laid[0]:
            return None
        shape, strides = laid
        return next((b for b in (1, 2) if needs([b, *shape[1:]], strides)), None)

    def _unfused_parts(self, i: int, family: str, reads: list[str], output: str | None,
                       has_bias: bool = True) -> tuple[list[Node], list[Node]]:
        """Kernels PyTorch runs around one call because its input is not contiguous, as the torch
        importer records them (``torch_calls.hidden_kernels`` and ``trailing_kernels``): the copy
        ``layer_norm`` makes of its input; for ``linear``, the copy that folds the input into rows
        (from the batch where no view can) and the bias add its GEMM could then not take. The call
        launches them: they cost no dispatch of their own."""
        t = self.t
        x = reads[0] if reads else None
        if x is None or (laid := self.lay.of(x)) is None or st.is_contiguous(*laid):
            return [], []
        copy, after = None, []
        if family == "layer_norm":
            copy = self._runs_from(x, lambda shape, strides: not st.is_contiguous(shape, strides))
        elif family == "linear" and len(laid[0]) >= 3 and output is not None:
            copy = self._runs_from(x, lambda shape, strides: st.view_strides(
                shape, strides, [math.prod(shape[:-1]), shape[-1]]) is None)
            bias = elementwise_fields("binary", "add", "strided", t.numel(output) or 0, t.batch)
            after = [self._node(i, bias, "/bias_add", "Add", reads=[output], writes=[output],
                                launched_by=self.names[i])] if has_bias else []
        else:
            return [], []
        before = []
        if copy is not None:
            fields = copy_fields(t, t.numel(x) or 0, blocks=self.lay.copy_blocks(x))
            if copy > 1:
                fields["min_batch"] = copy
            before = [self._node(i, fields, "/input_copy", "Copy", reads=[x], writes=[x], launched_by=self.names[i])]
        return before, after

    def _reshape_copy(self, i: int) -> list[Node]:
        """A reshape PyTorch cannot view: the copy ``reshape`` (or ``flatten``) makes, as the
        torch importer costs it: the transpose family's where its input is two blocks of dims
        swapped (TensorLayouts.copy_blocks), else a generic strided copy. (Code that calls
        ``.contiguous().view()`` instead runs that copy and a view: the export cannot tell the two
        apart, and the torch importer costs a 4-d ``contiguous`` as a transpose of dims 1 and 2.)"""
        t, n = self.t, self.t.nodes[i]
        return [self._node(i, copy_fields(t, t.numel(n.output[0]) or 0, blocks=self.lay.copy_blocks(n.input[0])))]

    def _fused(self, i: int, f: FusedKernel) -> list[Node]:
        t = self.t
        merged = [self.names[j] for j in f.indices]
        inside = {o for j in f.indices for o in t.nodes[j].output}
        reads = list(dict.fromkeys(x for j in f.indices for x in t.nodes[j].input
                                   if x and x not in inside and x not in t.static))
        if f.free:
            return [self._node(i, {"kind": "free"}, op=f.op, reads=reads, writes=[f.output], merged=merged)]
        parts = f.parts or [("", f.hit)]
        out: list[Node] = []
        if f.parts:
            self.notes["mha"] += 1
        if f.note:
            self.notes[f.note] += 1
        for suffix, hit in parts:
            family, variant, params = hit[0], hit[1], dict(hit[2])
            capture, layout = "", None
            if family == "sdpa":
                variant, capture, note = _mask_fields(t, self.lay, f, params)
                if note:
                    self.notes[note] += 1
            elif family in ("activation", "binary"):
                first = t.nodes[f.indices[0]]
                layout = self.lay.elementwise_layout([x for x in first.input if x and not t.is_scalar(x)],
                                                     first.input[0])
            extra = f.part_fields.get(suffix, {})
            layout = extra.get("layout", layout)
            before, after = self._unfused_parts(i, family, reads, f.output) if not f.parts else ([], [])
            if after:
                variant = "nobias"
            fields = kernel_fields((family, variant, params), layout)
            if fields is None:
                continue
            if capture:
                fields["capture_variant"] = capture
            if extra.get("min_batch", 1) > 1:
                fields["min_batch"] = extra["min_batch"]
            out += before
            out += [self._node(i, fields, f"/copy{j}", f.op, reads=reads, writes=[f.output], launched_by=self.names[i])
                    for j in range(f.passes - 1)]
            out.append(self._node(i, fields, f"/{suffix}" if suffix else "", f.op, reads=reads,
                                  writes=[f.output] if f.output else None, merged=merged))
            out += after
        out += [self._node(i, {"kind": "free"}, f"/view{j}", "Transpose", reads=[], writes=[])
                for j in range(f.views)]
        return out
