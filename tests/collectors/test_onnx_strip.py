"""strip_weights: a suite's exports keep their dims and lose their weights, but not their masks."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from collectors.onnx_export import STRIPPED_LOCATION, strip_weights


def test_weights_over_a_kib_are_stripped_and_masks_and_indices_keep_their_data(tmp_path: Path) -> None:
    causal = np.tril(np.ones((32, 32), dtype=bool))  # 1 KiB of bool: the size a 32-token mask has
    weights = {"w": np.ones((32, 32), np.float32), "small": np.ones(4, np.float32), "mask": np.tile(causal, (2, 1)),
               "positions": np.arange(256, dtype=np.int64), "quantized": np.ones((64, 64), np.int8),
               "long_mask": np.ones((257, 257), dtype=bool)}  # over the 65,536 elements the importer reads
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "small"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 32])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [32, 32])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    source = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(source))
    assert strip_weights(source, tmp_path / "out.onnx.gz") == 3  # w, the int8 (quantized) weights, long_mask
    model = onnx.load_from_string(gzip.decompress((tmp_path / "out.onnx.gz").read_bytes()))
    stored = {t.name: t for t in model.graph.initializer}
    assert stored["w"].data_location == TensorProto.EXTERNAL and not stored["w"].raw_data
    assert [(e.key, e.value) for e in stored["w"].external_data] == [("location", STRIPPED_LOCATION)]
    assert list(stored["w"].dims) == [32, 32]  # the dims stay: all the predictor reads
    assert stored["quantized"].data_location == TensorProto.EXTERNAL
    assert stored["long_mask"].data_location == TensorProto.EXTERNAL
    for kept in ("small", "mask", "positions"):
        assert np.array_equal(numpy_helper.to_array(stored[kept]), weights[kept])


def test_a_boolean_mask_in_external_data_is_written_into_the_stripped_file(tmp_path: Path) -> None:
    """The dynamo exporter saves every tensor to an external data file: a mask's data is read
    from it into the stripped file; a weight's never is."""
    weights = {"w": np.ones((32, 32), np.float32), "mask": np.tril(np.ones((64, 64), dtype=bool))}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 32])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    source = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(source), save_as_external_data=True, location="m.onnx.data",
              size_threshold=0)
    assert strip_weights(source, tmp_path / "out.onnx") == 1
    stored = {t.name: t for t in onnx.load(str(tmp_path / "out.onnx"), load_external_data=False).graph.initializer}
    assert stored["mask"].data_location == TensorProto.DEFAULT
    assert np.array_equal(numpy_helper.to_array(stored["mask"]), weights["mask"])
    assert [(e.key, e.value) for e in stored["w"].external_data] == [("location", STRIPPED_LOCATION)]
