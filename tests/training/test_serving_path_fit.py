"""Serving paths fitted from the committed Triton sets (H100, PyTriton): one host's, and across hosts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from latpred import main as latpred_cli
from predictor.capacity.serving_path import ServingPath
from training.serving_check import load_serving
from training.serving_path_fit import (
    MIXED,
    fit_serving_path,
    host_paths,
    measured_serving_path,
    model_hosts,
    path_points,
)

H100 = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h100-80gb-hbm3"
TWO_HOSTS = H100 / "serving-triton-blind"  # convnext_small, vit_b_32, distilbert-base on one; swin_s, ... on another


def test_the_collect_logs_say_which_host_served_each_model() -> None:
    hosts = model_hosts(TWO_HOSTS)
    assert hosts["convnext_small"] == hosts["vit_b_32"] != hosts["swin_s"] == hosts["opt-125m"]


def test_a_hosts_path_predicts_a_model_it_was_not_fitted_on() -> None:
    """What ``latpred serving-path`` promises: a path measured on the host with some models gives
    another model's served batch times from its replay alone (within 10% on this host)."""
    points = path_points(load_serving(TWO_HOSTS))
    one_host = points[points["host"] == model_hosts(TWO_HOSTS)["swin_s"]]
    path = fit_serving_path(one_host[one_host["model"] != "opt-125m"], "x", "triton")
    held = one_host[one_host["model"] == "opt-125m"]
    estimate = held["replay_ms"] + [path.added_ms(int(b)) for b in held["batch"]]
    assert ((estimate / held["served_ms"] - 1).abs() <= 0.1).all()
    assert 1.5 < path.cost.per_batch_ms < 4 and 0.1 < path.cost.per_request_ms < 0.5


def test_hosts_differ_and_the_path_across_them_spans_them() -> None:
    points = path_points(load_serving(TWO_HOSTS))
    hosts = host_paths(points)
    assert len(hosts) == 2
    assert abs(hosts[0].cost.per_batch_ms - hosts[1].cost.per_batch_ms) > 0.5
    across = fit_serving_path(points, "x", "triton")
    assert across.label == "fitted"
    assert across.low.per_batch_ms == min(h.cost.per_batch_ms for h in hosts)
    assert across.high.per_batch_ms == max(h.cost.per_batch_ms for h in hosts)


def test_a_measured_path_is_refused_across_hosts_and_for_a_model_not_there() -> None:
    data = load_serving(TWO_HOSTS)
    with pytest.raises(ValueError, match="models: served on 2 hosts"):
        measured_serving_path(data, "x")
    with pytest.raises(ValueError, match="models: resnet50 formed no batch size"):
        measured_serving_path(data, "x", ["resnet50"])
    path = measured_serving_path(data, "x", ["swin_s", "opt-125m"])
    assert path.label == "measured" and path.low.per_batch_ms <= path.cost.per_batch_ms <= path.high.per_batch_ms


def test_the_cli_writes_a_path_that_reads_back_and_names_what_it_refuses(tmp_path: Path) -> None:
    out = tmp_path / "path.json"
    runner = CliRunner()
    result = runner.invoke(latpred_cli, ["serving-path", str(H100 / "serving-triton-blind3"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    path = ServingPath.from_dict(json.loads(out.read_text()))
    assert path.name == "serving-triton-blind3" and "ms a batch" in result.output
    assert path.stalls.drift is not None and path.stalls.drift.persistent_share > 0.3  # the host's drift, by default
    steady = runner.invoke(latpred_cli, ["serving-path", str(H100 / "serving-triton-blind3"), "--no-drift",
                                         "--out", str(out)])
    assert steady.exit_code == 0 and "drift none" in steady.output
    assert ServingPath.from_dict(json.loads(out.read_text())).stalls.drift is None
    refused = runner.invoke(latpred_cli, ["serving-path", str(TWO_HOSTS), "--out", str(out)])
    assert refused.exit_code != 0 and "served on 2 hosts" in refused.output


def test_a_model_served_on_two_hosts_belongs_to_neither_hosts_path() -> None:
    """``serving-triton``'s resnet101 had its max batch 8 loads measured again on another lease."""
    first = H100 / "serving-triton"
    assert model_hosts(first)["resnet101"] == MIXED
    assert "resnet101" not in set(path_points(load_serving(first))["model"])
    with pytest.raises(ValueError, match="models: resnet101 was served on more than one host"):
        measured_serving_path(load_serving(first), "x", ["resnet101"])


def test_the_empty_models_path_gives_the_served_time_of_the_models_its_host_served_beside_it() -> None:
    """The blind check of ``latpred collect serving --models empty``: the path measured with a model
    that runs nothing, plus each loaded model's replay, within 10% of Triton's batch times for the
    two models the H100 host served steadily (vgg11_bn ran 0.85-0.94x: see the README)."""
    data = load_serving(H100 / "serving-triton-blind5")
    path = measured_serving_path(data, "empty-path", ["empty"])
    points = path_points(data)
    for model in ("mobilenet_v3_small", "resnext101_32x8d"):
        served = points[points["model"] == model]
        estimate = served["replay_ms"] + [path.added_ms(int(b)) for b in served["batch"]]
        assert ((estimate / served["served_ms"] - 1).abs() <= 0.1).all(), model
