"""ONNX uploads are imported in a child process within a time and a memory budget (issue #13).

Real child processes and real limits: a model that takes the importer about a second is stopped
at a budget of a tenth of that, a 48 MiB file does not fit in a child capped at 16 MiB, and the
next upload is served by a fresh child either way. Through the app, the refusal is a 422
``import-budget`` problem naming the ``onnx`` field and the budget.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from service_helpers import assert_problem, small_onnx

from predictor.importers.onnx_graph import graph_from_onnx
from service.app import create_app
from service.config import ServiceConfig
from service.onnx_budget import BudgetedImporter, ImportBudget, ImportBudgetError, ImportRefused

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

MIB = 1 << 20


def relu_chain(n: int) -> bytes:
    """``n`` Relus in a row: the importer's time grows with n (about 1 s at 20,000 here)."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 64])])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def with_weights(mib: int) -> bytes:
    """An Add with a ``mib`` MiB weight kept in the file."""
    size = mib * MIB // 4
    w = numpy_helper.from_array(np.zeros(size, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "heavy",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])], initializer=[w])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


@pytest.fixture
def importer(request: Any) -> Iterator[BudgetedImporter]:
    imp = BudgetedImporter(request.param)
    yield imp
    imp.close()


@pytest.mark.parametrize("importer", [ImportBudget(5, 1 << 30)], indirect=True)
def test_the_child_imports_what_the_importer_imports_in_process(importer: BudgetedImporter) -> None:
    data = small_onnx(batch="N")
    assert importer.import_graph(data, "m", 4, None).to_json() == graph_from_onnx(data, "m", 4).to_json()
    with pytest.raises(ImportRefused, match="not a valid ONNX model"):
        importer.import_graph(b"garbage", None, None, None)
    with pytest.raises(ImportRefused) as refused:
        importer.import_graph(data, None, None, {"nope": 3})
    assert refused.value.dims


@pytest.mark.parametrize("importer", [ImportBudget(0.1, 1 << 30)], indirect=True)
def test_an_import_over_the_time_budget_is_stopped_and_the_next_one_served(importer: BudgetedImporter) -> None:
    importer.import_graph(small_onnx(), None, None, None)  # the child starts outside any upload's clock
    with pytest.raises(ImportBudgetError, match=r"more than 0.1 s \(LATPRED_ONNX_IMPORT_SECONDS\)") as over:
        importer.import_graph(relu_chain(20_000), None, None, None)
    assert over.value.budget == "time"
    assert len(importer.import_graph(small_onnx(), None, None, None).nodes) > 0


@pytest.mark.parametrize("importer", [ImportBudget(30, 16 * MIB)], indirect=True)
def test_an_import_over_the_memory_budget_is_stopped_and_the_next_one_served(importer: BudgetedImporter) -> None:
    importer.import_graph(small_onnx(), None, None, None)
    with pytest.raises(ImportBudgetError, match=r"more than 16 MiB \(LATPRED_ONNX_IMPORT_MAX_BYTES\)") as over:
        importer.import_graph(with_weights(48), None, None, None)
    assert over.value.budget == "memory"
    assert len(importer.import_graph(small_onnx(), None, None, None).nodes) > 0


def test_the_service_answers_a_budget_refusal_as_a_problem_naming_onnx(registry: Any, tmp_path: Any) -> None:
    config = ServiceConfig(data_dir=tmp_path, open_writes=True, onnx_import_max_bytes=16 * MIB)
    client = create_app(config, registry=registry).test_client()
    for path in ("/v1/predict", "/v1/graphs"):
        r = client.post(path, data={"onnx": (io.BytesIO(with_weights(48)), "m.onnx")},
                        content_type="multipart/form-data")
        body = assert_problem(r, 422, "onnx")
        assert body["type"].endswith(":import-budget") and body["budget"] == "memory"
    ok = client.post("/v1/predict", data={"onnx": (io.BytesIO(small_onnx()), "m.onnx")},
                     content_type="multipart/form-data")
    assert ok.status_code == 200, ok.get_json()


def constant_of_shape_bomb(elements: int) -> bytes:
    """Issue #13's 174-byte bomb: ConstantOfShape of [elements] into an Add."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [elements])
    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["big"]),
                               helper.make_node("Add", ["big", "x"], ["y"])], "bomb",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [elements])], initializer=[shape])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def if_with_branches(nodes_each: int) -> bytes:
    """An If whose two branches hold ``nodes_each`` Relus each: nodes the top level does not show."""
    def branch(tag: str) -> Any:
        chain = [helper.make_node("Relu", [f"{tag}{i}" if i else "x"], [f"{tag}{i + 1}"]) for i in range(nodes_each)]
        return helper.make_graph(chain, tag, [], [helper.make_tensor_value_info(f"{tag}{nodes_each}",
                                                                                TensorProto.FLOAT, [1, 4])])
    graph = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=branch("a"),
                                                else_branch=branch("b"))], "iffy",
                              [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def test_onnx_bombs_through_the_app_are_answered_without_building_their_tensors(client: Any) -> None:
    """Issue #13's memory bombs: [1e8] is costed from its dims (a 400 MB tensor is never made, in
    the worker or the child), [1e12] is refused naming the node; subgraph nodes count against the
    node cap, so an If hiding 2 x 30,000 nodes is refused before any import."""
    def upload(data: bytes) -> Any:
        return client.post("/v1/predict", data={"onnx": (io.BytesIO(data), "m.onnx"), "layers": "false"},
                           content_type="multipart/form-data")

    small = upload(constant_of_shape_bomb(10**8))
    assert small.status_code == 200, small.get_json()
    assert small.get_json()["model"] == "bomb"
    huge = assert_problem(upload(constant_of_shape_bomb(10**12)), 422, "onnx")
    assert "ConstantOfShape" in huge["detail"]
    hidden = assert_problem(upload(if_with_branches(30_000)), 422, "onnx")
    assert "nodes" in hidden["detail"]
