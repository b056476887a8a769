"""The operator families latpred measures and predicts, with their cost formulas.

FLOPs count multiply and add as two operations. Bytes are the floor: each input read once,
each output written once, weights included. Elementwise "FLOPs" weights (a GELU costs more
than a ReLU) are rough by design: they only need to rank, since the models learn the rest.
"""

from __future__ import annotations

from predictor.catalogue.family import OpFamily, Params, register

# Relative arithmetic per element of each activation (erf and exp based ones cost more).
ACTIVATION_FLOPS: dict[str, int] = {
    "relu": 1,
    "gelu": 8,
    "silu": 5,
    "sigmoid": 4,
    "tanh": 5,
    "hardswish": 4,
    "hardsigmoid": 3,
    "clamp": 2,
}


def conv_out(size: int, kernel: int, stride: int, padding: int | None = None) -> int:
    """Output size of a convolution or pooling; ``padding`` defaults to 'same'-style ``kernel // 2``."""
    pad = kernel // 2 if padding is None else padding
    return (size + 2 * pad - kernel) // stride + 1


#: conv2d variants without padding (ViT/Swin/ConvNeXt patch embeddings, Inception's and AlexNet's
#: reducing convolutions); the others pad kernel // 2.
CONV_VALID = ("valid", "valid_nobias")
#: conv2d variants with a 1 x kernel ('row') or kernel x 1 ('col') window, padded kernel // 2
#: along the long side only and without bias: Inception's factorised 1x7/7x1 and 1x3/3x1 layers.
CONV_ROW, CONV_COL = "row_nobias", "col_nobias"
CONV_NO_BIAS = ("nobias", "valid_nobias", CONV_ROW, CONV_COL)


def conv_padding(kernel: int, variant: str) -> int:
    """The padding a conv2d variant uses along its kernel's long side."""
    return 0 if variant in CONV_VALID else kernel // 2


def conv_window(p: Params, variant: str) -> tuple[int, int]:
    """(height, width) of a conv2d variant's kernel window (branches, not a table: a cold
    graph's every new convolution asks five times)."""
    k = p["kernel"]
    if variant == CONV_ROW:
        return 1, k
    if variant == CONV_COL:
        return k, 1
    return k, k


def conv_out_hw(p: Params, variant: str) -> tuple[int, int]:
    """(height, width) a conv2d configuration writes: ``conv_out`` along each side with that
    side's padding (``conv_padding``; ``conv_shape`` writes the arithmetic out once for both)."""
    return conv_shape(p, variant)[:2]


def conv_shape(p: Params, variant: str) -> tuple[int, int, int, int]:
    """(output height, output width, window height, window width) of a conv2d configuration, in
    one pass: its FLOPs, bytes and tiles all need them, and a cold graph's every new convolution
    asks for all three (``conv_costs``)."""
    kh, kw = conv_window(p, variant)
    stride = p["stride"]
    if variant in CONV_VALID:
        return (p["h"] - kh) // stride + 1, (p["w"] - kw) // stride + 1, kh, kw
    return (p["h"] + 2 * (kh // 2) - kh) // stride + 1, (p["w"] + 2 * (kw // 2) - kw) // stride + 1, kh, kw


def conv_costs(p: Params, v: str, b: int, e: int,
               shape: tuple[int, int, int, int] | None = None) -> tuple[float, float, float]:
    """(FLOPs, bytes moved, weight bytes) of one conv2d call at once, from one ``conv_shape``
    (given, or computed here): the family's three formulas, which share it."""
    ho, wo, kh, kw = shape or conv_shape(p, v)
    c_out, per_group_in = p["c_out"], p["c_in"] // p["groups"]
    weights = _conv_weights(p, v, e, (kh, kw))
    moved = float(e * (b * p["c_in"] * p["h"] * p["w"] + b * c_out * ho * wo)) + weights
    return 2.0 * b * c_out * ho * wo * per_group_in * kh * kw, moved, weights


def _conv_flops(p: Params, v: str, b: int) -> float:
    return conv_costs(p, v, b, 1)[0]


def _conv_weights(p: Params, v: str, e: int, window: tuple[int, int] | None = None) -> float:
    kh, kw = window or conv_window(p, v)
    return float(e * (p["c_out"] * (p["c_in"] // p["groups"]) * kh * kw + (0 if v in CONV_NO_BIAS else p["c_out"])))


def _conv_bytes(p: Params, v: str, b: int, e: int) -> float:
    return conv_costs(p, v, b, e)[1]


def _linear_weights(p: Params, v: str, e: int) -> float:
    return float(e * (p["k"] * p["n"] + (0 if v == "nobias" else p["n"])))


def _conv_validate(p: Params, v: str) -> str | None:
    if p["c_in"] % p["groups"] or p["c_out"] % p["groups"]:
        return f"groups={p['groups']} must divide c_in={p['c_in']} and c_out={p['c_out']}"
    kh, kw = conv_window(p, v)
    if kh > p["h"] + 2 * conv_padding(kh, v) or kw > p["w"] + 2 * conv_padding(kw, v):
        return "kernel larger than the padded input"
    return None


register(OpFamily(
    name="conv2d",
    params=("c_in", "c_out", "h", "w", "kernel", "stride", "groups"),
    flops=_conv_flops,
    bytes_moved=_conv_bytes,
    weight_bytes=_conv_weights,
    variants=("", "nobias") + CONV_VALID + (CONV_ROW, CONV_COL),
    layouts=("nchw", "nhwc"),
    validate=_conv_validate,
    description="2-d convolution (dense, grouped and depthwise); variant '' has a square kernel, "
                "pads kernel//2 and has a bias (nn.Conv2d's default), 'nobias' has none (convolutions "
                "followed by a norm); 'valid' and 'valid_nobias' are the same without padding "
                "(patch embeddings, Inception's and AlexNet's reducing convolutions); 'row_nobias' "
                "and 'col_nobias' have a 1 x kernel and a kernel x 1 window padded kernel//2 along "
                "it, no bias (Inception's factorised convolutions)",
))

register(OpFamily(
    name="linear",
    params=("tokens", "k", "n"),
    variants=("", "nobias"),
    flops=lambda p, v, b: 2.0 * b * p["tokens"] * p["k"] * p["n"],
    bytes_moved=lambda p, v, b, e: float(e * b * p["tokens"] * (p["k"] + p["n"])) + _linear_weights(p, v, e),
    weight_bytes=_linear_weights,
    description="x[batch, tokens, k] @ W[k, n] + bias; 'nobias' has none (LLaMA's, Qwen2's and "
                "T5's projections): cuBLAS picks other kernels without the bias epilogue",
))

register(OpFamily(
    name="matmul",
    params=("heads", "m", "k", "n"),
    flops=lambda p, v, b: 2.0 * b * p["heads"] * p["m"] * p["k"] * p["n"],
    bytes_moved=lambda p, v, b, e: float(
        e * b * p["heads"] * (p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"])
    ),
    description="batched matmul of two activations: [batch, heads, m, k] @ [batch, heads, k, n]",
))


def _sdpa_mask_bytes(p: Params, v: str, b: int, e: int) -> float:
    """Bytes of the explicit mask a variant reads (a bool padding mask is one row per sample)."""
    if v == "masked":
        return float(e * b * p["seq_q"] * p["seq_kv"])
    if v == "bool_full":
        return float(b * p["seq_q"] * p["seq_kv"])
    if v == "bool_padding":
        return float(b * p["seq_kv"])
    if v == "math":  # fp32 scores written, softmaxed in place and read back, per head
        return float(4 * 3 * b * p["heads"] * p["seq_q"] * p["seq_kv"])
    return 0.0


def _sdpa_flops(p: Params, _v: str, b: int) -> float:
    full = 4.0 * b * p["heads"] * p["seq_q"] * p["seq_kv"] * p["head_dim"]
    return full / 2 if p["causal"] else full


register(OpFamily(
    name="sdpa",
    params=("heads", "seq_q", "seq_kv", "head_dim", "causal"),
    flops=_sdpa_flops,
    bytes_moved=lambda p, v, b, e: float(
        e * b * p["heads"] * p["head_dim"] * (2 * p["seq_q"] + 2 * p["seq_kv"])
        + _sdpa_mask_bytes(p, v, b, e)
    ),
    variants=("", "masked", "bool_padding", "bool_full", "math"),
    validate=lambda p, v: None if p["causal"] in (0, 1) else "causal must be 0 or 1",
    description="scaled-dot-product attention (PyTorch's fused kernels), q/k/v [batch, heads, seq, "
                "head_dim]; 'masked' passes an explicit additive mask [batch, 1, seq_q, seq_kv] "
                "(causal or not), which rules out the flash kernel; 'bool_padding' and 'bool_full' pass "
                "the boolean masks transformers materialises while a CUDA graph is captured: a padding "
                "mask [batch, 1, 1, seq_kv] expanded over the queries and a full [batch, 1, seq_q, "
                "seq_kv] mask (causal or not); 'math' passes a mask whose last dim is not contiguous, as "
                "transformers 5's encoders do under capture, so PyTorch runs its math path (fp32 scores, "
                "separate GEMMs and a safe softmax)",
))

register(OpFamily(
    name="batch_norm",
    params=("c", "h", "w"),
    flops=lambda p, v, b: 2.0 * b * p["c"] * p["h"] * p["w"],
    bytes_moved=lambda p, v, b, e: float(e * 2 * b * p["c"] * p["h"] * p["w"] + 4 * 4 * p["c"]),
    layouts=("nchw", "nhwc"),
    description="inference batch norm over [batch, c, h, w]",
))

register(OpFamily(
    name="layer_norm",
    params=("tokens", "c"),
    flops=lambda p, v, b: 5.0 * b * p["tokens"] * p["c"],
    bytes_moved=lambda p, v, b, e: float(e * (2 * b * p["tokens"] * p["c"] + 2 * p["c"])),
    description="layer norm over the last dim of [batch, tokens, c]",
))

register(OpFamily(
    name="group_norm",
    params=("c", "h", "w", "groups"),
    flops=lambda p, v, b: 5.0 * b * p["c"] * p["h"] * p["w"],
    bytes_moved=lambda p, v, b, e: float(e * (2 * b * p["c"] * p["h"] * p["w"] + 2 * p["c"])),
    validate=lambda p, v: None if p["c"] % p["groups"] == 0 else f"groups={p['groups']} must divide c={p['c']}",
    description="group norm over [batch, c, h, w]",
))

register(OpFamily(
    name="softmax",
    params=("rows", "c"),
    flops=lambda p, v, b: 5.0 * b * p["rows"] * p["c"],
    bytes_moved=lambda p, v, b, e: float(e * 2 * b * p["rows"] * p["c"]),
    description="softmax over the last dim of [batch, rows, c]",
))

#: Elementwise layouts. PyTorch's vectorized elementwise kernel needs every operand contiguous
#: and of the output's shape; a permuted view, a slice or a broadcast operand sends the call to
#: the generic kernel, which computes each operand's offset and runs 2-3x slower per byte
#: (measured in Swin's and LLaMA's profiles on the H200).
ELEMENTWISE_LAYOUTS = ("contiguous", "strided")

register(OpFamily(
    name="activation",
    params=("elements",),
    variants=tuple(ACTIVATION_FLOPS),
    layouts=ELEMENTWISE_LAYOUTS,
    flops=lambda p, v, b: float(ACTIVATION_FLOPS[v] * b * p["elements"]),
    bytes_moved=lambda p, v, b, e: float(e * 2 * b * p["elements"]),
    description="pointwise activation, out of place; layout 'strided' reads a view PyTorch "
                "cannot vectorize over, the query of a packed [batch, rows, 3, heads, head] "
                "projection seen as [batch, heads, rows, head] (also the cost of copying such a "
                "view: the copies before a matmul, cat of slices, roll)",
))

register(OpFamily(
    name="binary",
    params=("elements",),
    variants=("add", "mul"),
    layouts=ELEMENTWISE_LAYOUTS,
    flops=lambda p, v, b: float(b * p["elements"]),
    bytes_moved=lambda p, v, b, e: float(e * 3 * b * p["elements"]),
    description="elementwise add or mul of two same-shape tensors; layout 'strided' broadcasts "
                "the second over the batch (a bias, a position table, rotary cos/sin)",
))


def _pool_out(p: Params, variant: str) -> tuple[int, int]:
    if variant == "adaptive_avg":
        return 1, 1
    return conv_out(p["h"], p["kernel"], p["stride"]), conv_out(p["w"], p["kernel"], p["stride"])


def _pool_flops(p: Params, v: str, b: int) -> float:
    if v == "adaptive_avg":
        return float(b * p["c"] * p["h"] * p["w"])
    ho, wo = _pool_out(p, v)
    return float(b * p["c"] * ho * wo * p["kernel"] ** 2)


def _pool_bytes(p: Params, v: str, b: int, e: int) -> float:
    ho, wo = _pool_out(p, v)
    return float(e * b * p["c"] * (p["h"] * p["w"] + ho * wo))


register(OpFamily(
    name="pool",
    params=("c", "h", "w", "kernel", "stride"),
    variants=("max", "avg", "adaptive_avg"),
    flops=_pool_flops,
    bytes_moved=_pool_bytes,
    layouts=("nchw", "nhwc"),
    validate=lambda p, v: (None if p["kernel"] <= min(p["h"], p["w"]) + 2 * (p["kernel"] // 2)
                           else "kernel larger than the padded input"),
    description="2-d pooling with padding kernel//2; adaptive_avg is global average pooling (kernel, stride ignored)",
))

register(OpFamily(
    name="embedding",
    params=("vocab", "c", "tokens"),
    flops=lambda p, v, b: 0.0,
    bytes_moved=lambda p, v, b, e: float(2 * e * b * p["tokens"] * p["c"] + 8 * b * p["tokens"]),
    description="embedding lookup of [batch, tokens] int64 ids in a [vocab, c] table",
))

register(OpFamily(
    name="concat",
    params=("inputs", "c", "h", "w"),
    flops=lambda p, v, b: 0.0,
    bytes_moved=lambda p, v, b, e: float(2 * e * b * p["inputs"] * p["c"] * p["h"] * p["w"]),
    layouts=("nchw", "nhwc", "strided"),
    description="concatenation of `inputs` tensors [batch, c, h, w] along channels; layout "
                "'strided' joins permuted views of [batch, h, c, w] tensors (a decoder's keys and "
                "values [batch, heads, seq, head] seen from [batch, seq, heads, head] and appended "
                "to its cache), which PyTorch's batched cat kernel reads element by element",
))

register(OpFamily(
    name="transpose",
    params=("d1", "d2", "d3"),
    variants=("", "add"),
    flops=lambda p, v, b: float(b * p["d1"] * p["d2"] * p["d3"]) if v == "add" else 0.0,
    bytes_moved=lambda p, v, b, e: float((3 if v == "add" else 2) * e * b * p["d1"] * p["d2"] * p["d3"]),
    # With d1 or d2 of 1 the transpose is already contiguous and launches no kernel at all.
    validate=lambda p, v: None if p["d1"] > 1 and p["d2"] > 1 else "d1 and d2 must exceed 1 (else no copy runs)",
    description="[batch, d1, d2, d3] -> [batch, d2, d1, d3] made contiguous (a real copy: also a copy of any "
                "view whose dims are two blocks swapped above a short common run, "
                "onnx_strides.uncoalesced_blocks); variant 'add': x.transpose(1, 2) + y, y contiguous, "
                "the output laid out as x (a residual stream added to a branch laid out the other way)",
))

register(OpFamily(
    name="mean",
    params=("rows", "c"),
    flops=lambda p, v, b: float(b * p["rows"] * p["c"]),
    bytes_moved=lambda p, v, b, e: float(e * b * p["rows"] * (p["c"] + 1)),
    description="mean over the last dim of [batch, rows, c]",
))
