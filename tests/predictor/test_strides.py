"""The stride arithmetic both importers cost copies and elementwise kernels by (onnx_strides)."""

from __future__ import annotations

from predictor.importers.onnx_strides import contiguous, transposed_blocks, uncoalesced_blocks


def test_a_transposed_tensor_is_two_blocks_swapped_one_element_apart() -> None:
    # [4, 400, 384] laid out [4, 384, 400] (a ViT patch stream after flatten(2).transpose(1, 2))
    assert transposed_blocks((4, 400, 384), (153600, 1, 400), contiguous((4, 400, 384))) == (384, 400, 1)
    # NCHW viewed as NHWC (ConvNeXt's permute before its norm): the channels against the pixels
    assert uncoalesced_blocks((2, 14, 14, 96), (18816, 14, 1, 196), contiguous((2, 14, 14, 96))) == (96, 196, 1)


def test_heads_swapped_above_their_head_dim_are_coalesced() -> None:
    """[b, heads, t, 64] seen as [b, t, heads, 64]: a block swap, but 64 elements stay together
    on both sides, which the 'strided' elementwise layout was measured on."""
    shape, strides = (2, 100, 8, 64), (51200, 64, 6400, 1)
    assert transposed_blocks(shape, strides, contiguous(shape)) == (8, 100, 64)
    assert uncoalesced_blocks(shape, strides, contiguous(shape)) is None


def test_no_swap_when_nothing_moves_the_batch_moves_or_three_blocks_move() -> None:
    shape = (2, 3, 4, 5)
    assert transposed_blocks(shape, contiguous(shape), contiguous(shape)) is None
    # sequence-first [t, b, c] made batch-first: the batch is not outermost on one side
    assert transposed_blocks((4, 2, 8), (8, 32, 1), contiguous((4, 2, 8))) is None
    # [b, 3, 4, 5] laid out [b, 5, 3, 4] is the 5 swapped with the (3, 4) block; laid out
    # [b, 3, 5, 4] it is a swap of 4 and 5 inside each of the 3: no two blocks of the whole
    assert transposed_blocks(shape, (60, 4, 1, 12), contiguous(shape)) == (5, 3 * 4, 1)
    assert transposed_blocks(shape, (60, 20, 1, 4), contiguous(shape)) is None
    # a slice is not dense: no block swap describes its copy
    assert transposed_blocks((2, 4, 8), (96, 24, 1), contiguous((2, 4, 8))) is None


def test_a_batch_of_one_and_size_one_dims_are_left_out_of_the_orders() -> None:
    # the same transposed [b, 400, 384] stream at a batch of 1, and with a size-1 dim inside
    assert uncoalesced_blocks((1, 400, 384), (153600, 1, 400), contiguous((1, 400, 384))) == (384, 400, 1)
    assert uncoalesced_blocks((2, 400, 1, 384), (153600, 1, 1, 400), contiguous((2, 400, 1, 384))) == (384, 400, 1)
    # a broadcast (stride-0) operand is not dense: never a swap
    assert transposed_blocks((2, 400, 384), (0, 1, 400), contiguous((2, 400, 384))) is None
