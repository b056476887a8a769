"""The graph IR: JSON round trip, the checks that refuse bad graphs, the schema, the zoo."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from predictor.catalogue import FAMILIES, PARAMETERS
from predictor.graph import IR_VERSION, NODE_KINDS, Graph, Node, json_schema
from predictor.holdout import HELD_OUT_MODELS
from predictor.zoo import load_zoo_graph, zoo_names

LINEAR = {"name": "fc", "op": "linear", "kind": "kernel", "family": "linear",
          "params": {"tokens": 4, "k": 16, "n": 8}}


def tiny_graph() -> Graph:
    """One node of each kind, with every optional field set somewhere."""
    return Graph(name="tiny", batch=3, source="hand", meta={"note": "test"}, nodes=[
        Node(name="0:conv", op="conv2d", kind="kernel", family="conv2d", layout="nhwc",
             params=dict(c_in=4, c_out=8, h=8, w=8, kernel=3, stride=1, groups=1),
             inputs=[[3, 4, 8, 8]], outputs=[[3, 8, 8, 8]], dtype="float16"),
        Node(name="1:relu", op="relu", kind="kernel", family="activation", variant="gelu",
             params={"elements": 512}),
        Node(name="2:sdpa", op="attn", kind="kernel", family="sdpa", merged=["a", "b"],
             params=dict(heads=2, seq_q=8, seq_kv=8, head_dim=16, causal=0)),
        Node(name="3:flatten", op="flatten", kind="free", outputs=[[3, 512]]),
        Node(name="4:roll", op="roll", kind="fallback", elements_per_sample=1024, precisions=["fp16"]),
    ])


def graph_json(**overrides: Any) -> dict[str, Any]:
    data = {"ir_version": IR_VERSION, "name": "g", "batch": 1, "nodes": [copy.deepcopy(LINEAR)]}
    data.update(overrides)
    return data


def test_save_and_load_give_equal_nodes(tmp_path: Path) -> None:
    graph = tiny_graph()
    path = tmp_path / "tiny.json"
    graph.save(path)
    loaded = Graph.load(path)
    assert loaded.nodes == graph.nodes
    assert (loaded.name, loaded.batch, loaded.source, loaded.meta) == ("tiny", 3, "hand", {"note": "test"})
    # the saved form carries the version, and omits empty defaults (it stays small)
    saved = json.loads(path.read_text())
    assert saved["ir_version"] == IR_VERSION
    assert "elements_per_sample" not in saved["nodes"][0]
    assert saved["nodes"][2]["params"]["causal"] == 0  # a zero inside params is kept


def test_round_trip_through_to_json_is_stable() -> None:
    graph = tiny_graph()
    again = Graph.from_json(json.loads(json.dumps(graph.to_json())))
    assert again.to_json() == graph.to_json()


@pytest.mark.parametrize("data,message", [
    ([LINEAR], "must be a JSON object"),
    ("resnet50", "must be a JSON object"),
    ({"name": "g"}, "nodes: Field required"),
    ({"name": "g", "nodes": {"0": LINEAR}}, "nodes: Input should be a valid list"),
    (graph_json(ir_version=2), "IR version 2 is not supported"),
    (graph_json(ir_version="1"), "ir_version: Input should be a valid integer"),
    (graph_json(batch=0), "batch: Input should be greater than or equal to 1"),
    (graph_json(batch=-4), "batch: Input should be greater than or equal to 1"),
    (graph_json(batch="8"), "batch: Input should be a valid integer"),
    (graph_json(batch=True), "batch: Input should be a valid integer"),
    (graph_json(batch=8.5), "batch: Input should be a valid integer"),
    (graph_json(nodes=[]), "nodes: List should have at least 1 item"),
    (graph_json(nodes=["fc"]), r"nodes\[0\]: Input should be a dictionary"),
    (graph_json(nodes=[{k: v for k, v in LINEAR.items() if k != "op"}]), r"nodes\[0\]\.op: Field required"),
    (graph_json(nodes=[{k: v for k, v in LINEAR.items() if k != "kind"}]), r"nodes\[0\]\.kind: Field required"),
    (graph_json(nodes=[{**LINEAR, "colour": "red"}]), r"nodes\[0\]\.colour: Unexpected keyword argument"),
    (graph_json(nodes=[{**LINEAR, "kind": "magic"}]),
     r"nodes\[0\]\.kind: Input should be 'kernel', 'free' or 'fallback'"),
    (graph_json(nodes=[{k: v for k, v in LINEAR.items() if k != "family"}]), "node 'fc': a kernel node needs a family"),
    (graph_json(nodes=[{**LINEAR, "family": "warp_drive"}]), r"nodes\[0\]\.family: Input should be 'conv2d'"),
    (graph_json(nodes=[{**LINEAR, "params": {"tokens": 4, "k": 16}}]), r"node 'fc': linear: missing parameter\(s\) n"),
    (graph_json(nodes=[{**LINEAR, "params": {"tokens": 4, "k": 16, "n": 0}}]), "parameter n must be positive"),
    (graph_json(nodes=[{**LINEAR, "params": {"tokens": 4, "k": 16, "n": 8, "h": 3}}]), r"unknown parameter\(s\) h"),
    (graph_json(nodes=[{**LINEAR, "params": {"tokens": 4, "k": 16, "n": 8, "warp": 3}}]),
     r"nodes\[0\]\.params\.warp\.\[key\]: Input should be 'c_in'"),
    (graph_json(nodes=[{**LINEAR, "params": {"tokens": 4, "k": 16, "n": 8.5}}]),
     r"nodes\[0\]\.params\.n: Input should be a valid integer"),
    (graph_json(nodes=[{**LINEAR, "variant": "fancy"}]), "unknown variant 'fancy'"),
    (graph_json(nodes=[LINEAR, {**LINEAR, "op": "other"}]), "node name 'fc' is used twice"),
    (graph_json(nodes=[{**LINEAR, "launched_by": "nope"}]),
     "node 'fc' is launched_by 'nope', no node of the graph: name the node whose call launches it"),
    (graph_json(nodes=[{**LINEAR, "launched_by": "fc"}]), "node 'fc' is launched_by 'fc', itself"),
    (graph_json(nodes=[{**LINEAR, "precisions": ["fp16"]}, {**LINEAR, "name": "copy", "launched_by": "fc"}]),
     "node 'copy' is launched_by 'fc', which does not run wherever it does"),
    (graph_json(nodes=[{**LINEAR, "min_batch": 2}, {**LINEAR, "name": "copy", "launched_by": "fc"}]),
     "node 'copy' is launched_by 'fc', which does not run wherever it does"),
    (graph_json(nodes=[{**LINEAR, "precisions": ["fp16", "fp16"]}]), "'precisions' lists a precision twice"),
])
def test_from_json_refuses_bad_graphs_naming_the_field(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Graph.from_json(data)


def test_a_bad_kernel_node_is_named_in_the_message() -> None:
    nodes = [LINEAR, {**LINEAR, "name": "7:conv", "family": "conv2d",
                      "layout": "nchw", "params": dict(c_in=3, c_out=8, h=8, w=8, kernel=3, stride=1, groups=2)}]
    with pytest.raises(ValueError, match=r"node '7:conv'.*groups=2"):
        Graph.from_json(graph_json(nodes=nodes))


def test_load_names_the_file_of_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"name": "g", "nodes": [')
    with pytest.raises(ValueError, match="broken.json.*not valid JSON"):
        Graph.load(path)


@pytest.mark.parametrize("node", [
    {"name": "f", "op": "roll", "kind": "fallback", "elements_per_sample": "many"},
    {"name": "f", "op": "roll", "kind": "fallback", "elements_per_sample": -5},
    {"name": "f", "op": "roll", "kind": "fallback", "elements_per_sample": 2.5},
])
def test_from_json_refuses_a_bad_fallback_size(node: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="elements_per_sample"):
        Graph.from_json(graph_json(nodes=[LINEAR, node]))


@pytest.mark.parametrize("data,field", [
    (graph_json(nodes=[{**LINEAR, "family": ["linear"]}]), "family"),
    (graph_json(meta=[1, 2]), "meta"),
])
def test_from_json_refuses_wrongly_typed_fields_with_value_error(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Graph.from_json(data)


def test_json_schema_lists_every_family_and_parameter() -> None:
    schema = json_schema()
    assert schema["properties"]["nodes"]["items"] == {"$ref": "#/$defs/Node"}
    node = schema["$defs"]["Node"]
    assert set(node["properties"]["family"]["anyOf"][0]["enum"]) == set(FAMILIES)
    assert set(node["properties"]["params"]["properties"]) == set(PARAMETERS)
    assert node["properties"]["params"]["propertyNames"]["enum"] == list(PARAMETERS)
    assert node["properties"]["kind"]["enum"] == list(NODE_KINDS)
    # the schema and the parser accept the same node fields
    assert set(node["properties"]) == set(Node.__dataclass_fields__)
    assert set(node["required"]) == {"name", "op", "kind"}
    assert schema["properties"]["ir_version"]["const"] == IR_VERSION
    json.dumps(schema)  # publishable as is


def test_zoo_ships_held_out_named_graphs() -> None:
    names = zoo_names()
    assert {"resnet50", "bert-base", "gpt2", "vit_b_16"} <= set(names)
    assert set(HELD_OUT_MODELS) <= set(names)


@pytest.mark.parametrize("name", zoo_names())
def test_every_zoo_graph_loads_and_checks(name: str) -> None:
    graph = load_zoo_graph(name)  # checked as it is read
    assert graph.name
    assert graph.batch >= 1
    kinds = {n.kind for n in graph.nodes}
    assert "kernel" in kinds and kinds <= set(NODE_KINDS)
    assert len({n.name for n in graph.nodes}) == len(graph.nodes)


def test_zoo_names_are_case_insensitive_and_unknown_names_list_the_choices() -> None:
    upper = load_zoo_graph("RESNET50")
    assert upper.nodes == load_zoo_graph("resnet50").nodes
    assert load_zoo_graph("  Bert-Base ").nodes == load_zoo_graph("bert-base").nodes
    with pytest.raises(ValueError, match="resnet51") as info:
        load_zoo_graph("resnet51")
    assert "resnet50" in str(info.value) and "gpt2" in str(info.value)


@pytest.mark.parametrize("node,message", [
    ({**LINEAR, "params": {"tokens": 4, "k": 16, "n": 10 ** 400}}, r"params\.n: Input should be less than or equal"),
    ({**LINEAR, "params": {"tokens": 4, "k": 16, "n": 1 << 41}}, r"params\.n: Input should be less than or equal"),
    ({**LINEAR, "params": {"tokens": True, "k": 16, "n": 8}}, r"params\.tokens: Input should be a valid integer"),
    ({**LINEAR, "merged": [3]}, r"merged\[0\]: Input should be a valid string"),
    ({**LINEAR, "outputs": [[2, -1]]}, r"outputs\[0\]\[1\]: Input should be greater than or equal to 0"),
    ({**LINEAR, "inputs": "4x16"}, r"inputs: Input should be a valid list"),
])
def test_sizes_are_bounded_integers_so_features_stay_finite(node: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Graph.from_json(graph_json(nodes=[node]))


def test_an_integral_float_is_the_integer_json_schema_calls_it() -> None:
    """JSON has one number type and JSON Schema's "integer" includes 8.0; "8" and true stay refused."""
    graph = Graph.from_json(graph_json(batch=8.0, nodes=[{**LINEAR, "params": {"tokens": 4.0, "k": 16, "n": 8}}]))
    assert graph.batch == 8 and type(graph.batch) is int
    assert graph.nodes[0].params["tokens"] == 4 and type(graph.nodes[0].params["tokens"]) is int
