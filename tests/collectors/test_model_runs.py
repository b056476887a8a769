"""Whole-model runs on the CPU: eager timing, the profiler breakdown, the row contract, the zoo."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from collectors.fingerprint import read_fingerprint
from collectors.model_runs import ModelUnit, model_units, profile_forward, time_eager
from collectors.op_measure import provenance
from collectors.timing import RepetitionRule
from collectors.zoo import ZOO, get_zoo_model
from predictor.dataset_schema import DatasetSchemaError
from predictor.holdout import HELD_OUT_MODELS, check_not_held_out
from predictor.model_run_schema import MODEL_RUN_SCHEMA_VERSION, validate_model_runs

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def forward() -> Any:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))
    model.eval()
    x = torch.randn(2, 3, 8, 8)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    return run


def test_time_eager_returns_positive_samples(forward: Any) -> None:
    rule = RepetitionRule(target_cv=0.0, min_reps=3, max_reps=6, group=3, time_cap_s=30)
    samples = time_eager(forward, CPU, rule)
    assert len(samples) == 6
    assert all(s > 0 for s in samples)
    assert max(samples) < 1000  # milliseconds: a tiny model is nowhere near a second


def test_profile_forward_lists_top_level_ops_in_order(forward: Any) -> None:
    ops = profile_forward(forward, CPU)
    names = [op["name"] for op in ops]
    assert names.index("aten::conv2d") < names.index("aten::relu") < names.index("aten::linear")
    assert ops[0]["start_us"] == 0
    starts = [op["start_us"] for op in ops]
    assert starts == sorted(starts)
    conv = ops[names.index("aten::conv2d")]
    assert conv["shapes"][0] == [2, 3, 8, 8] and conv["shapes"][1] == [4, 3, 3, 3]
    linear = ops[names.index("aten::linear")]
    assert linear["shapes"][0] == [2, 256]
    assert all(op["cpu_us"] >= 0 for op in ops)
    # only top-level ops: the convolution's internals are folded into it
    assert "aten::_convolution" not in names and "aten::addmm" not in names
    json.dumps(ops)  # stored as JSON in the eager row


def run_row(mode: str = "eager", **values: Any) -> dict[str, Any]:
    """A row as ModelMeasurer._row builds it."""
    unit = ModelUnit("resnet34", 8, "fp16")
    return {
        "schema_version": MODEL_RUN_SCHEMA_VERSION, "config_id": unit.config_id,
        "run_id": f"{unit.config_id}|{mode}", "status": "ok", "error": None,
        **provenance(read_fingerprint("cpu")), "model": unit.model, "model_kind": "vision",
        "batch": unit.batch, "precision": unit.precision, "mode": mode,
        "allow_tf32_cudnn": True, "allow_tf32_matmul": False, "latency_ms": 3.2, "p10_ms": 3.0,
        "p90_ms": 3.5, "cv": 0.04, "repetitions": 10, "throttled": False, "clock_reasons": None,
        "profile": json.dumps([{"name": "aten::conv2d"}]), "timestamp": pd.Timestamp.now(tz="UTC"),
        **values,
    }


def test_model_run_row_is_valid() -> None:
    graph = run_row("cudagraph", profile=None, latency_ms=0.9, p10_ms=0.85, p90_ms=0.95)
    frame = validate_model_runs(pd.DataFrame([run_row(), graph]))
    assert list(frame["mode"]) == ["eager", "cudagraph"]


def test_model_run_refuses_an_unknown_mode() -> None:
    with pytest.raises(DatasetSchemaError, match="column 'mode'"):
        validate_model_runs(pd.DataFrame([run_row("jit")]))


def test_model_run_refuses_ok_without_latency_and_duplicate_runs() -> None:
    with pytest.raises(DatasetSchemaError, match="latency_ms"):
        validate_model_runs(pd.DataFrame([run_row(latency_ms=None)]))
    with pytest.raises(DatasetSchemaError, match="run_id"):
        validate_model_runs(pd.DataFrame([run_row(), run_row()]))
    failed = run_row(status="failed", error="OutOfMemoryError: ...", latency_ms=None, p10_ms=None,
                     p90_ms=None, cv=None, repetitions=None)
    assert len(validate_model_runs(pd.DataFrame([failed]))) == 1


def test_model_units_order_and_ids() -> None:
    units = model_units(["alexnet", "opt-125m"], (1, 8, 32), ("fp32", "fp16"))
    ids = [u.config_id for u in units]
    assert len(ids) == len(set(ids)) == 12
    assert ids[:4] == ["alexnet|b1|fp32", "alexnet|b8|fp32", "alexnet|b32|fp32", "alexnet|b1|fp16"]
    assert ids[-1] == "opt-125m|b32|fp16"
    # one model at a time, one precision at a time within it
    assert [u.model for u in units] == ["alexnet"] * 6 + ["opt-125m"] * 6
    assert [u.precision for u in units[:6]] == ["fp32"] * 3 + ["fp16"] * 3


@pytest.mark.parametrize("name", ["bert-base", "BERT_base", "resnet18", "vit_b_16"])
def test_held_out_models_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="held out"):
        check_not_held_out(name)


def test_zoo_models_are_not_held_out() -> None:
    check_not_held_out("resnet34")  # a zoo model passes
    held = {m.replace("_", "-") for m in HELD_OUT_MODELS}
    assert not held & {m.lower().replace("_", "-") for m in ZOO}
    assert len(ZOO) >= 20
    assert {z.kind for z in ZOO.values()} == {"vision", "text"}


def test_zoo_lookup_lists_the_zoo() -> None:
    assert get_zoo_model("alexnet").kind == "vision"
    with pytest.raises(ValueError) as exc:
        get_zoo_model("resnet18")
    assert "resnet18" in str(exc.value) and "resnet34" in str(exc.value)


def test_zoo_text_input_is_token_ids() -> None:
    ids = get_zoo_model("opt-125m").example_input(2, CPU, torch.float16)
    assert ids.shape == (2, 128) and ids.dtype == torch.int64
    assert int(ids.max()) < get_zoo_model("opt-125m").vocab
    image = get_zoo_model("inception_v3").example_input(1, CPU, torch.float32)
    assert image.shape == (1, 3, 299, 299)
