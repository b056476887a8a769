"""Recognise torch calls as catalogue operators: the torch importer's vocabulary.

``recognize`` maps one top-level torch call (name, arguments, output) onto a catalogue family
with per-sample parameters; ``classify`` also decides what the calls it cannot map are: views
and shape arithmetic (free: no kernel), elementwise ops costed like a family (their node keeps
its own op name), or fallback kernels estimated from their bytes. torch is imported inside the
functions: predictor must load without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from predictor.importers.onnx_strides import contiguous as contiguous_strides, transpose_fields, uncoalesced_blocks

ACTIVATION_NAMES = {
    "relu": "relu", "relu_": "relu", "gelu": "gelu", "silu": "silu", "silu_": "silu",
    "sigmoid": "sigmoid", "tanh": "tanh", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid",
    "hardtanh": "clamp", "relu6": "clamp", "clamp": "clamp", "clamp_": "clamp",
}
BINARY_NAMES = {"add": "add", "__add__": "add", "__iadd__": "add", "add_": "add", "__radd__": "add",
                "mul": "mul", "__mul__": "mul", "__imul__": "mul", "mul_": "mul", "__rmul__": "mul"}


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


def _same_both_ways(value: Any) -> int | None:
    """A window's size, stride or dilation (or an adaptive pool's output size) given as one int or
    per dimension: the one value where every dimension has it, else None (a (1, 2) stride does half
    the work of 1: costing it as its first would be silently wrong)."""
    try:
        values = [int(v) for v in value] if isinstance(value, (tuple, list)) else [int(value)]
    except TypeError:  # (an adaptive pool's None: that dimension kept as it is)
        return None
    return values[0] if values and all(v == values[0] for v in values) else None


def _per_sample(shape: Any, batch: int) -> int:
    """Elements per sample: all elements over the batch, wherever the batch sits (models fold
    it into other dimensions: OPT's [B*T, C], Swin's windows in dim 0)."""
    return max(1, math.prod(shape) // batch)


def _rows(shape: Any, batch: int, trailing: int = 1) -> int:
    """Rows per sample of a tensor whose last ``trailing`` dims form one row."""
    return max(1, math.prod(shape[:-trailing]) // batch) if len(shape) > trailing else 1


def _square(padding: Any) -> int | None:
    """One padding for both dims, or None where height and width are padded differently."""
    if isinstance(padding, int):
        return padding
    values = list(padding)
    return int(values[0]) if values and all(v == values[0] for v in values) else None


def _sdpa_mask_variant(mask: Any) -> str:
    """The sdpa variant an explicit ``attn_mask`` selects (see the catalogue's sdpa family)."""
    import torch

    if mask is None:
        return ""
    if mask.size(-1) > 1 and mask.stride(-1) != 1:
        return "math"  # no fused kernel takes a mask whose last dim is strided
    if mask.dtype != torch.bool:
        return "masked"
    # a [batch, 1, 1, kv] padding mask expanded over the queries (stride 0).
    return "bool_padding" if mask.dim() == 4 and mask.stride(-2) == 0 else "bool_full"


def _conv(args: tuple, kwargs: dict, s: Any) -> tuple[str, str, dict[str, int]] | None:
    """A conv2d call as (conv2d, variant, params), or None where the catalogue has no variant
    for its window, padding or dilation."""
    w = _arg(args, kwargs, 1, "weight")
    kh, kw = int(w.shape[2]), int(w.shape[3])
    kernel = max(kh, kw)
    padding = _arg(args, kwargs, 4, "padding", 0)
    dilation = _same_both_ways(_arg(args, kwargs, 5, "dilation", 1))
    stride = _same_both_ways(_arg(args, kwargs, 3, "stride", 1))
    bias = _arg(args, kwargs, 2, "bias") is not None
    if dilation != 1 or stride is None:  # the catalogue's windows are undilated, strided alike both ways
        return None
    params = dict(c_in=s[1], c_out=w.shape[0], h=s[2], w=s[3], kernel=kernel, stride=stride,
                  groups=int(_arg(args, kwargs, 6, "groups", 1)))
    if kh != kw:  # Inception's factorised 1xk and kx1 windows, padded along the long side only
        want = [0, kernel // 2] if kh == 1 else [kernel // 2, 0]
        pads = want if padding == "same" else [padding] * 2 if isinstance(padding, int) else list(padding)
        if bias or min(kh, kw) != 1 or pads != want:
            return None
        return "conv2d", "row_nobias" if kh == 1 else "col_nobias", params
    pad = {"same": kernel // 2, "valid": 0}.get(padding) if isinstance(padding, str) else _square(padding)
    if pad is None or pad > kernel // 2:
        return None  # not expressible in the catalogue (uneven padding)
    # Padding between 0 and kernel // 2 (AlexNet's 11x11 pads 2) is costed as unpadded:
    # the output differs by a row or two of a large map.
    valid = pad < kernel // 2
    variant = {(False, True): "", (False, False): "nobias", (True, True): "valid",
               (True, False): "valid_nobias"}[(valid, bias)]
    return "conv2d", variant, params


def _concat(tensors: Any, dim: int) -> tuple[str, str, dict[str, int]] | None:
    """torch.cat as the concat family: 4-d tensors joined along channels, or 4-d permuted views
    (a decoder's keys and values appended to its cache); other cats are costed as copies."""
    import torch

    parts = [t for t in tensors if isinstance(t, torch.Tensor) and t.numel()] if tensors else []
    if not parts or not all(p.dim() == 4 for p in parts):
        return None
    if dim in (1, -3):
        c = round(sum(p.shape[1] for p in parts) / len(parts))
        return "concat", "", dict(inputs=len(parts), c=c, h=parts[0].shape[2], w=parts[0].shape[3])
    permuted = all(_dense(p) for p in parts) and any(not p.is_contiguous() for p in parts)
    if permuted and len({tuple(p.shape) for p in parts}) == 1:
        s = parts[0].shape
        return "concat", "", dict(inputs=len(parts), c=s[1], h=s[2], w=s[3])
    return None


#: Calls that reduce a tensor with PyTorch's reduce kernel, costed by the mean family.
REDUCTIONS = {"mean", "sum", "any", "all", "amax", "amin", "prod"}


def recognize(name: str, args: tuple, kwargs: dict, out: Any,
              batch: int = 1) -> tuple[str, str, dict[str, int]] | None:
    """Map one torch call onto (family, variant, per-sample params), or None if not costed here.
    ``batch`` is the batch size the model was traced at."""
    import torch

    if name == "cat":
        return _concat(_arg(args, kwargs, 0, "tensors", ()), _arg(args, kwargs, 1, "dim", 0))
    t = [a for a in args if isinstance(a, torch.Tensor)]
    x = t[0] if t else None
    if x is None:
        return None
    s = x.shape
    if name == "conv2d" and x.dim() == 4:
        return _conv(args, kwargs, s)
    if name == "addmm" and len(t) >= 3 and t[1].dim() == 2 and t[2].dim() == 2:
        # bias + x @ W with x flattened to 2-d (GPT-2's Conv1D): the rows include the batch.
        return "linear", "", dict(tokens=_rows(t[1].shape, batch), k=t[1].shape[1], n=t[2].shape[1])
    if name == "linear":
        w = _arg(args, kwargs, 1, "weight")
        plan = linear_plan(x, w, _arg(args, kwargs, 2, "bias"), batch)
        return "linear", "" if plan.bias_add is None and plan.has_bias else "nobias", dict(
            tokens=_rows(s, batch), k=s[-1], n=w.shape[0])
    if name in ("matmul", "__matmul__", "bmm") and len(t) >= 2:
        a, b = t[0], t[1]
        if b.dim() == 2:
            return "linear", "nobias", dict(tokens=_rows(a.shape, batch), k=a.shape[-1], n=b.shape[-1])
        if a.dim() >= 3:
            return "matmul", "", dict(heads=_rows(a.shape, batch, 2), m=a.shape[-2],
                                      k=a.shape[-1], n=b.shape[-1])
    if name == "scaled_dot_product_attention" and x.dim() == 4:
        k = t[1]
        causal = int(bool(_arg(args, kwargs, 5, "is_causal", False)))
        return "sdpa", _sdpa_mask_variant(_arg(args, kwargs, 3, "attn_mask")), dict(
            heads=_rows(s, batch, 2), seq_q=s[2], seq_kv=k.shape[2], head_dim=s[3], causal=causal)
    if name == "batch_norm" and x.dim() == 4:
        return "batch_norm", "", dict(c=s[1], h=s[2], w=s[3])
    if name == "layer_norm":
        return "layer_norm", "", dict(tokens=_rows(s, batch), c=s[-1])
    if name == "group_norm" and x.dim() == 4:
        return "group_norm", "", dict(c=s[1], h=s[2], w=s[3], groups=int(_arg(args, kwargs, 1, "num_groups")))
    if name == "softmax" and _arg(args, kwargs, 1, "dim", -1) in (-1, x.dim() - 1):
        return "softmax", "", dict(rows=_rows(s, batch), c=s[-1])
    if name in ACTIVATION_NAMES:
        return "activation", ACTIVATION_NAMES[name], dict(elements=_per_sample(s, batch))
    if name in BINARY_NAMES and len(t) >= 2 and isinstance(out, torch.Tensor):
        return "binary", BINARY_NAMES[name], dict(elements=_per_sample(out.shape, batch))
    if name in ("max_pool2d", "avg_pool2d") and x.dim() == 4:
        kernel = _same_both_ways(_arg(args, kwargs, 1, "kernel_size"))
        stride_arg = _arg(args, kwargs, 2, "stride", None)
        stride = _same_both_ways(stride_arg) if stride_arg else kernel
        dilated = name == "max_pool2d" and _same_both_ways(_arg(args, kwargs, 4, "dilation", 1)) != 1
        if kernel is None or stride is None or dilated:  # the family's windows are square, undilated
            return None
        return "pool", name[:3], dict(c=s[1], h=s[2], w=s[3], kernel=kernel, stride=stride)
    if name == "adaptive_avg_pool2d" and x.dim() == 4 \
            and _same_both_ways(_arg(args, kwargs, 1, "output_size")) == 1:
        return "pool", "adaptive_avg", dict(c=s[1], h=s[2], w=s[3], kernel=1, stride=1)
    if name == "adaptive_max_pool2d" and x.dim() == 4 and s[2] == s[3] \
            and _same_both_ways(_arg(args, kwargs, 1, "output_size")) == 1:
        # a max over the whole plane: the window the exporters write it as (onnx_ops._global_max)
        return "pool", "max", dict(c=s[1], h=s[2], w=s[3], kernel=s[2], stride=s[2])
    if name == "embedding":
        w = _arg(args, kwargs, 1, "weight")
        return "embedding", "", dict(vocab=w.shape[0], c=w.shape[1], tokens=_per_sample(s, batch))
    if name == "contiguous" and x.dim() == 4 and not x.is_contiguous():
        return "transpose", "", dict(d1=s[2], d2=s[1], d3=s[3])
    if (name in REDUCTIONS or name in ("max", "min")) and len(t) == 1 and isinstance(out, torch.Tensor) \
            and _arg(args, kwargs, 1, "dim") is None and x.numel() > 1:
        # A reduction of the whole tensor to one value (T5's fp16 guard `isinf(x).any()`):
        # PyTorch's reduce kernel, costed as the mean of one row per sample.
        return "mean", "", dict(rows=1, c=max(1, x.numel() // batch))
    if name in REDUCTIONS and isinstance(out, torch.Tensor) and x.dim() >= 2:
        dim = _arg(args, kwargs, 1, "dim")
        dims = {int(d) % x.dim() for d in (dim if isinstance(dim, (list, tuple)) else (dim,)) if d is not None}
        if dims and 0 not in dims:
            # Over the last dim, or the spatial dims of a map: the reduce kernel's inner reduction.
            # Over others (a transformer's mean over its tokens, dim 1 of [batch, tokens, c]) it
            # reduces along a strided dim, reading and writing the same bytes: costed as the mean
            # of the kept elements' rows over the reduced ones.
            c = math.prod(s[d] for d in dims)
            return "mean", "", dict(rows=max(1, x.numel() // (batch * c)), c=c)
    return None


def call_recorder(on_call: Callable[[str, tuple, dict, Any], None]) -> Any:
    """A TorchFunctionMode that reports every top-level torch call (inner calls run with the
    mode popped, so a module's own internals are not seen twice)."""
    from torch.overrides import TorchFunctionMode

    class CallRecorder(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                               kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            on_call(getattr(func, "__name__", str(func)), args, kwargs, out)
            return out

    return CallRecorder()




#: Elementwise calls without a family of their own, costed like the nearest family.
UNARY_ELEMENTWISE = {
    "neg", "__neg__", "exp", "log", "sqrt", "rsqrt", "pow", "__pow__", "abs", "sin", "cos", "erf",
    "reciprocal", "__truediv__", "__rtruediv__", "div", "__sub__", "__rsub__", "sub", "__mul__",
    "__rmul__", "mul", "__add__", "__radd__", "add", "float", "half", "bfloat16", "to", "type",
    "masked_fill", "clone", "softplus", "leaky_relu", "elu", "mish", "relu6", "hardtanh", "prelu",
    "selu", "celu", "log_sigmoid", "dropout", "where", "maximum", "minimum", "clamp_min",
    "__and__", "__or__", "eq", "ne", "lt", "gt", "__lt__", "__gt__", "__eq__", "__ne__", "logical_not",
    "__invert__", "type_as", "expand_as", "repeat", "tril", "triu", "copy_", "fill_", "zero_", "isinf", "isnan",
    "isfinite", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
    "bitwise_not", "floor", "ceil", "round", "sign", "min", "max", "full_like", "zeros_like",
    "ones_like",
}


#: In-place calls that change only what a tensor says of itself (its shape, strides or grad): no kernel.
IN_PLACE_METADATA = {
    "requires_grad_", "detach_", "share_memory_", "squeeze_", "unsqueeze_", "t_",
    "transpose_", "swapaxes_", "swapdims_", "as_strided_", "resize_", "resize_as_", "set_", "rename_",
}
#: In-place writes of a few elements at indices (a KV cache's ``index_copy_``, ``x[i] = v``'s
#: ``index_put_``): left without a kernel of their own, as the ONNX importer leaves the ScatterND an
#: export writes for them (onnx_ops.VIEW_OPS); costed over the whole destination they were a
#: cache's size for a one-token write.
IN_PLACE_INDEXED = {
    "index_copy_", "index_put_", "index_add_", "index_fill_", "index_reduce_", "scatter_", "scatter_add_",
    "scatter_reduce_", "masked_scatter_", "put_",
}
#: Python's in-place operators on tensors (``x /= 2``; ``x += y`` of two tensors is binary's add).
IN_PLACE_OPERATORS = {
    "__iadd__", "__imul__", "__isub__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__",
    "__ixor__", "__ilshift__", "__irshift__",
}
#: Where functional activations without a family of their own take ``inplace`` positionally
#: (``nn.LeakyReLU(inplace=True)`` calls ``F.leaky_relu(x, 0.01, True)``); those with a family
#: (relu, silu, hardtanh, ...) are recognised before the question arises, and a dropout in eval
#: returns its input whatever the flag.
INPLACE_ARGUMENT = {"leaky_relu": 2, "elu": 2, "selu": 1, "celu": 2, "mish": 1, "rrelu": 4, "threshold": 3}


def writes_in_place(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether a call writes its result into its first argument with a kernel of its own
    (``masked_fill_``, ``copy_``, ``x /= 2``, ``F.leaky_relu(x, 0.1, inplace=True)``): its output
    shares its input's storage, so the view rule would have taken it for a view and dropped its
    kernel (``F._canonical_mask``'s ``masked_fill_``, run for every boolean attention mask, was)."""
    if name in IN_PLACE_OPERATORS:
        return True
    if name in INPLACE_ARGUMENT:
        at = INPLACE_ARGUMENT[name]
        return kwargs.get("inplace") is True or (len(args) > at and args[at] is True)
    return (name.endswith("_") and not name.startswith("_") and name not in IN_PLACE_METADATA
            and name not in IN_PLACE_INDEXED)


#: Calls that copy their inputs into a new tensor in one kernel: the cats the concat family does
#: not cover (other dims, slices), constant pad.
COPY_CALLS = {"cat", "concat", "pad"}
#: Calls whose copy, where they make one (their output is not a view), changes the layout: a
#: generic copy kernel. Reshape, flatten and a 3-d ``contiguous`` copy into row-major order
#: (``_copy``: the transpose family's where the input is two blocks of dims swapped); roll runs
#: strided passes, one per rolled dim; a 4-d ``contiguous`` is recognised as the transpose family.
RELAYOUT_CALLS = {"roll", "reshape", "flatten", "contiguous"}


def tensors_in(value: Any) -> list[Any]:
    """The tensors in a call's argument or result, nested lists and tuples flattened in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def _layout(layouts: tuple[str, ...], args: tuple, out: Any) -> str:
    """The catalogue layout a recognised call runs in, among its family's ``layouts``."""
    import torch

    tensors = [t for t in tensors_in(list(args)) if t.numel()]
    if "nchw" not in layouts:
        if "strided" not in layouts:
            return "contiguous"
        return elementwise_layout(tensors, out if isinstance(out, torch.Tensor) else None)
    if _channels_last(args):
        return "nhwc"
    if "strided" in layouts and any(not t.is_contiguous() for t in tensors):
        return "strided"  # permuted views (concat's keys and values)
    return "nchw"


def _channels_last(args: tuple) -> bool:
    import torch

    first = next(iter(tensors_in(list(args))), None)
    return bool(first is not None and first.dim() == 4 and not first.is_contiguous()
                and first.is_contiguous(memory_format=torch.channels_last))


def _storage(t: Any) -> int:
    return t.untyped_storage().data_ptr()


def _dense(t: Any) -> bool:
    """Whether ``t`` covers its memory without gaps or overlaps, in any dim order (a contiguous
    tensor or a permutation of one): elementwise kernels then run vectorized over it."""
    dims = sorted((st, n) for st, n in zip(t.stride(), t.shape) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def elementwise_layout(ins: list[Any], out: Any) -> str:
    """'strided' where PyTorch cannot run its vectorized elementwise kernel: an operand that is
    broadcast to the output's shape, not dense (a slice, q of a packed qkv), or laid out unlike
    the others; else 'contiguous' (see the catalogue's elementwise layouts)."""
    tensors = [t for t in ins if t.numel() > 1]
    if not tensors or not all(_dense(t) for t in tensors):
        return "strided" if tensors else "contiguous"
    shape = tuple(out.shape) if out is not None else tuple(tensors[0].shape)
    if any(tuple(t.shape) != shape for t in tensors):
        return "strided"
    return "contiguous" if len({t.stride() for t in tensors}) == 1 else "strided"


def _elementwise(family: str, variant: str, layout: str, elements: int, batch: int) -> dict[str, Any]:
    """Node fields of an elementwise kernel costed by ``family`` over ``elements`` in all."""
    return {"kind": "kernel", "family": family, "variant": variant, "layout": layout,
            "params": {"elements": max(1, elements // batch)}}


def _strided_copy(t: Any, batch: int) -> dict[str, Any]:
    """A copy kernel of a strided view: PyTorch's generic elementwise kernel, as costed by the
    activation family's 'strided' layout (the operand copies of a batched matmul and a roll's
    further passes, which the ONNX importer costs so too)."""
    return _elementwise("activation", "relu", "strided", t.numel(), batch)


def _copy(t: Any, batch: int) -> dict[str, Any]:
    """A copy kernel of a strided view into row-major order: PyTorch's generic elementwise
    kernel. A dense view whose dims are two blocks swapped above a short run (a transposed
    [batch, tokens, c], a permuted NCHW map) is costed by the transpose family
    (onnx_strides.uncoalesced_blocks); any other as ``_strided_copy``."""
    if t.dim() >= 2 and t.shape[0] == batch:
        blocks = uncoalesced_blocks(tuple(t.shape), tuple(t.stride()), contiguous_strides(tuple(t.shape)))
        if blocks is not None:
            return transpose_fields(blocks)
    return _strided_copy(t, batch)


def _transposed_add(ins: list[Any], out: Any, batch: int) -> dict[str, Any] | None:
    """An elementwise op of two full-size operands, one laid out as the output and one with two
    blocks of dims swapped (a residual stream [batch, c, tokens] in memory plus a branch's
    [batch, tokens, c]): the transpose family's 'add', or None where no operand is so. A
    module's parameter or buffer, or a view of one (a position table, a slice of it), is
    broadcast over the batch, even where a batch of 1 gives it the output's shape (the ONNX
    importer's initializers); ``traced_module_state`` names their storages during a trace."""
    import torch

    if not isinstance(out, torch.Tensor) or out.dim() < 2 or out.shape[0] != batch:
        return None
    shape = tuple(out.shape)
    state = MODULE_STORAGES.get()
    for t in ins:
        if tuple(t.shape) == shape and not isinstance(t, torch.nn.Parameter) and _storage(t) not in state:
            blocks = uncoalesced_blocks(shape, tuple(out.stride()), tuple(t.stride()))
            if blocks is not None:
                return transpose_fields(blocks, "add")
    return None


#: the storages of the traced module's parameters and buffers (``traced_module_state``)
MODULE_STORAGES: ContextVar[frozenset[int]] = ContextVar("module_storages", default=frozenset())


@contextmanager
def traced_module_state(model: Any) -> Iterator[None]:
    """While a module is traced, the storages of its parameters and buffers: what no batch ever
    enlarges (``_transposed_add``)."""
    token = MODULE_STORAGES.set(frozenset(_storage(t) for t in (*model.parameters(), *model.buffers())))
    try:
        yield
    finally:
        MODULE_STORAGES.reset(token)


def _matmul_copies(a: Any, b: Any, batch: int) -> list[dict[str, Any]]:
    """torch.matmul of batched operands expands them to one batch shape and reshapes each to
    [batches, rows, cols]; an operand that cannot be viewed so (q and k of a packed qkv, after
    ``permute``), or whose matrices are strided in both dims, is copied first (Swin's window
    attention: two copies then the GEMM, per its profile on the H200)."""
    import torch

    batch_shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    copies = []
    for t in (a, b):
        rows, cols = t.shape[-2], t.shape[-1]
        expanded = t.expand(*batch_shape, rows, cols)
        folded = expanded.reshape(-1, rows, cols)
        stride = folded.stride()
        viewed = folded.numel() == 0 or _storage(folded) == _storage(t)
        gemm_ready = (stride[2] == 1 and stride[1] >= max(1, cols)) or (stride[1] == 1 and stride[2] >= max(1, rows))
        if not (viewed and gemm_ready):
            copies.append(_strided_copy(expanded, batch))
    return copies


def _contiguous(shape: list[int], strides: list[int]) -> bool:
    """``Tensor.is_contiguous`` for a shape and strides: dims of size 1 have any stride."""
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def _merges(shape: list[int], strides: list[int]) -> bool:
    """Whether these dims merge into one by a view (``reshape``): dims of size 1 have any stride."""
    kept = [(n, st) for n, st in zip(shape, strides) if n != 1]
    return all(st == st_next * n_next for (_, st), (n_next, st_next) in zip(kept, kept[1:]))


def _gemm_copies(shape: list[int], strides: list[int], fold: bool) -> bool:
    """Whether ``torch.matmul`` of this [..., m, k] tensor by a matrix copies it: folded
    (``should_fold``) into rows for one GEMM, it copies unless ``reshape(-1, k)`` is a view whose
    rows or columns are unit-strided; not folded, the batched GEMM reads each matrix transposed
    or not, copying only where the batch dims do not merge or neither matrix stride is 1."""
    if fold:
        rows = [(n, st) for n, st in zip(shape[:-1], strides[:-1]) if n != 1]
        row_stride = rows[-1][1] if rows else 1
        return not _merges(shape[:-1], strides[:-1]) or (1 not in (strides[-1], row_stride) and shape[-1] != 1)
    return not _merges(shape[:-2], strides[:-2]) or 1 not in (strides[-1], strides[-2])


def _batch_dim(t: Any, batch: int) -> int | None:
    """The dim that holds the batch: the first of size ``batch`` (dim 0 in batch-first code)."""
    return next((d for d, n in enumerate(t.shape) if n == batch), None)


def runs_from(t: Any, batch: int, copies: Callable[[list[int], list[int]], bool],
              dim: int | None = None) -> int | None:
    """The smallest batch at which PyTorch copies ``t``, when ``copies(shape, strides)`` says it
    does: 1 (every batch), 2, or None (never). A graph traced at batch 1 must say what runs at
    larger batches too: a tensor whose batch dim is not its outermost in memory (a batch-first
    tensor transposed to sequence-first, a transposed [batch, tokens, c]) is contiguous at batch
    1, where that dim has any stride, and copied from batch 2 on. ``dim`` is the batch dim where
    known (else ``_batch_dim``). A tensor that is a permutation of dense memory keeps its dims'
    order in memory at every batch; another (a slice) keeps its traced strides."""
    shape, strides = list(t.shape), list(t.stride())
    dim = _batch_dim(t, batch) if dim is None else dim
    if dim is None:
        return 1 if copies(shape, strides) else None
    at = []
    for b in (1, 2):
        resized = [b if d == dim else n for d, n in enumerate(shape)]
        at.append(copies(resized, _dense_strides(resized, strides) if _dense(t) else strides))
    return 1 if at[0] else 2 if at[1] else None


def _dense_strides(shape: list[int], strides: list[int]) -> list[int]:
    """The strides of dense memory of ``shape`` with its dims in the memory order ``strides``
    give (innermost first by stride; a size-1 dim, whose stride may equal its outer neighbour's,
    counts as the inner one): a permuted tensor's strides at another batch size."""
    order = sorted(range(len(shape)), key=lambda d: (strides[d], shape[d] != 1, -d))
    out, step = [0] * len(shape), 1
    for d in order:
        out[d] = step
        step *= shape[d]
    return out


class LinearPlan(NamedTuple):
    """What ``at::linear`` runs for one call, as the batches each extra kernel runs from (None:
    never): ``copy``, the input made contiguous before the GEMM, and ``bias_add``, the bias
    added by a kernel of its own after a GEMM without it."""

    has_bias: bool
    copy: int | None
    bias_add: int | None


def linear_plan(x: Any, weight: Any, bias: Any, batch: int, dim: int | None = None) -> LinearPlan:
    """How ``F.linear`` runs on input ``x`` (aten/src/ATen/native/Linear.cpp). A 2-d input, or a
    contiguous one with a bias, is one GEMM with the bias in it (addmm, on a view of the rows).
    Otherwise it is ``matmul(x, weight.t())`` and then ``add_(bias)``: matmul folds the input into
    rows when the weight requires grad (a module's parameter, in inference too) or the rows are
    already a view (``should_fold`` in LinearAlgebra.cpp), copying it where they are not (MLP-Mixer's
    token mixing on ``x.transpose(1, 2)``: from batch 2 on; a batch-first input to
    sequence-first attention likewise); else a batched GEMM reads it as it is. Seen with the
    profiler on the CPU and on an H200 (PyTorch 2.11): clone and copy, then mm, then add_."""
    has_bias = bias is not None
    if x.dim() < 3:
        return LinearPlan(has_bias, None, None)
    grad = bool(getattr(weight, "requires_grad", False))

    def unfused(shape: list[int], strides: list[int]) -> bool:
        return not (has_bias and _contiguous(shape, strides))

    def copies(shape: list[int], strides: list[int]) -> bool:
        fold = grad or all(st == st_next * n_next for st, (n_next, st_next)
                           in zip(strides[:-2], zip(shape[1:-1], strides[1:-1])))
        return unfused(shape, strides) and _gemm_copies(shape, strides, fold)

    return LinearPlan(has_bias, runs_from(x, batch, copies, dim),
                      runs_from(x, batch, unfused, dim) if has_bias else None)


def from_batch(fields: dict[str, Any], min_batch: int) -> dict[str, Any]:
    """Node fields of a kernel that runs from batch ``min_batch`` on."""
    return {**fields, "min_batch": min_batch} if min_batch > 1 else fields


def _rolled_dims(args: tuple, kwargs: dict) -> int:
    shifts = _arg(args, kwargs, 1, "shifts", 0)
    return len(shifts) if isinstance(shifts, (list, tuple)) else 1


def hidden_kernels(name: str, args: tuple, kwargs: dict, batch: int = 1) -> list[dict[str, Any]]:
    """Kernels a call launches before the one its node costs: the operand copies of a batched
    matmul, the input copy of a linear layer or matmul by a matrix that cannot fold its input
    into rows (``linear_plan``), the copy layer norm makes of an input that is not contiguous
    (``native_layer_norm`` calls ``expect_contiguous``: ConvNeXt's norms over permuted maps), and
    the further passes of a roll over several dims (one kernel per rolled dim). A copy that
    runs only from batch 2 on says so (``min_batch``)."""
    import torch

    t = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ("matmul", "__matmul__") and len(t) >= 2 and t[0].dim() >= 3 and t[1].dim() >= 3:
        return _matmul_copies(t[0], t[1], batch)
    if name in ("matmul", "__matmul__", "linear") and len(t) >= 2 and t[0].dim() >= 3 and t[1].dim() == 2:
        if name == "linear":
            plan = linear_plan(t[0], t[1], _arg(args, kwargs, 2, "bias"), batch)
        else:
            plan = linear_plan(t[0], t[1], None, batch)
        return [] if plan.copy is None else [from_batch(_copy(t[0], batch), plan.copy)]
    if name == "layer_norm" and t:
        copy = runs_from(t[0], batch, lambda shape, strides: not _contiguous(shape, strides))
        return [] if copy is None else [from_batch(_copy(t[0], batch), copy)]
    if name == "roll" and t:
        return [_strided_copy(t[0], batch) for _ in range(_rolled_dims(args, kwargs) - 1)]
    return []


def trailing_kernels(name: str, args: tuple, kwargs: dict, out: Any, batch: int = 1) -> list[dict[str, Any]]:
    """Kernels a call launches after the one its node costs: the bias add of a linear layer
    whose GEMM could not take its bias (``linear_plan``), over the output and broadcast."""
    import torch

    if name != "linear" or not isinstance(out, torch.Tensor):
        return []
    x = _arg(args, kwargs, 0, "input")
    plan = linear_plan(x, _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias"), batch)
    if plan.bias_add is None:
        return []
    return [from_batch(_elementwise("binary", "add", "strided", out.numel(), batch), plan.bias_add)]


def classify(name: str, args: tuple, kwargs: dict, out: Any, batch: int = 1) -> dict[str, Any] | None:
    """How to cost one call: a dict of Node fields, or None for calls that are not operators
    (attribute reads such as ``.shape``) and so are left out of the graph. ``batch`` is the
    batch size the model was traced at."""
    if name in ("__get__", "__set__", "size", "dim", "numel", "__len__", "is_contiguous",
                "is_floating_point", "__bool__", "item", "tolist", "__index__", "__format__"):
        return None
    hit = recognize(name, args, kwargs, out, batch)
    if hit is not None and hit[0] == "binary":
        transposed = _transposed_add([a for a in tensors_in(list(args)) if a.numel() > 1], out, batch)
        if transposed is not None:
            return transposed
    if hit is not None:
        family, variant, params = hit
        from predictor.catalogue import get_family

        layout = _layout(get_family(family).layouts, args, out)
        try:
            get_family(family).check(params, variant, layout)
            return {"kind": "kernel", "family": family, "variant": variant, "layout": layout,
                    "params": {k: int(v) for k, v in params.items()}}
        except ValueError:
            pass  # a shape the catalogue cannot express is costed as a fallback below
    outs = tensors_in(out)
    ins = tensors_in(list(args) + list(kwargs.values()))
    if not outs:
        return {"kind": "free"}
    in_place = writes_in_place(name, args, kwargs)  # its output is its input's, yet a kernel wrote it
    in_storages = {_storage(t) for t in ins if t.numel()}
    if not in_place and all(t.numel() == 0 or _storage(t) in in_storages for t in outs):
        return {"kind": "free"}  # a view (or the input itself): no kernel runs
    out_elements = sum(t.numel() for t in outs)
    if (name in UNARY_ELEMENTWISE or in_place) and len(outs) == 1:
        big_inputs = [t for t in ins if t.numel() == out_elements]
        layout = elementwise_layout(ins, outs[0])
        if len(big_inputs) >= 2 and name != "copy_":  # (a copy reads its source alone)
            return _transposed_add(big_inputs, outs[0], batch) or _elementwise("binary", "add", layout,
                                                                                out_elements, batch)
        return _elementwise("activation", "relu", layout, out_elements, batch)
    if (name in COPY_CALLS or name in RELAYOUT_CALLS) and len(outs) == 1:
        # One pass that reads each input element once and writes the output: a copy kernel,
        # vectorized over dense inputs (cat of whole tensors, constant pad) and generic over
        # strided ones (cat of slices or of transposed keys) and where the layout changes.
        dense = name in COPY_CALLS and all(_dense(t) for t in ins if t.numel() > 1)
        if name in ("reshape", "flatten", "contiguous") and ins and ins[0].numel() == out_elements:
            return _copy(ins[0], batch)  # as the ONNX importer's reshape copy (a roll has no such node there)
        return _elementwise("activation", "relu", "contiguous" if dense else "strided", out_elements, batch)
    moved = out_elements + sum(t.numel() for t in ins)
    return {"kind": "fallback", "elements_per_sample": max(1, moved // batch)}
