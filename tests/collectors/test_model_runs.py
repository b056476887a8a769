"""Whole-model runs on the CPU: the forward timers, the interleaved protocol's rows, the zoo."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from collectors.fingerprint import read_fingerprint
from collectors.forward_timing import time_eager
from collectors.model_runs import PROTOCOL, ModelUnit, failed_row, measure_models, run_row
from collectors.op_measure import provenance
from collectors.timing import RepetitionRule
from collectors.zoo_models import ZOO, ZooModel, get_zoo_model
from predictor.dataset_schema import DatasetSchemaError
from predictor.holdout import HELD_OUT_MODELS, check_not_held_out
from predictor.model_run_schema import MODEL_RUN_SCHEMA_VERSION, validate_model_runs

CPU = torch.device("cpu")


def tiny_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


@pytest.fixture
def tiny_zoo(monkeypatch: pytest.MonkeyPatch) -> str:
    """A zoo model that builds in milliseconds without torchvision: the protocol, not the model,
    is what these tests measure."""
    monkeypatch.setitem(ZOO, "tiny-cnn", ZooModel("tiny-cnn", "vision", tiny_cnn, image_size=16))
    return "tiny-cnn"


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


def test_run_ids_name_the_unit_the_mode_and_the_protocol() -> None:
    unit = ModelUnit("resnet34", 8, "fp16")
    assert unit.config_id == "resnet34|b8|fp16"
    assert unit.run_id("eager") == "resnet34|b8|fp16|eager|interleaved-all"
    assert unit.run_id("cudagraph").endswith(f"|cudagraph|{PROTOCOL}")


def test_run_row_is_valid_and_reports_the_median() -> None:
    unit = ModelUnit("resnet34", 8, "fp16")
    row = run_row(unit, "cudagraph", read_fingerprint("cpu"), [3.0, 1.0, 2.0, 10.0, 2.5], clock_reasons=4)
    frame = validate_model_runs(pd.DataFrame([row]))
    assert frame.loc[0, "latency_ms"] == 2.5 and frame.loc[0, "repetitions"] == 5
    assert frame.loc[0, "p10_ms"] < 2.5 < frame.loc[0, "p90_ms"]
    assert frame.loc[0, "model_kind"] == "vision" and pd.isna(frame.loc[0, "profile"])
    assert bool(frame.loc[0, "throttled"])  # 4: NVML's software power cap
    assert not frame.loc[0, "allow_tf32_matmul"]


def test_measure_models_times_every_unit_in_the_rounds(tiny_zoo: str) -> None:
    between: list[int] = []
    rows = measure_models(read_fingerprint("cpu"), [tiny_zoo], (1, 4), ("fp32", "bf16"), "eager",
                          rounds=2, reps=3, seed=0, between_rounds=lambda: between.append(1))
    assert len(between) == 2  # the host is sampled after every round
    assert [(r["precision"], r["batch"]) for r in rows] == [("fp32", 1), ("fp32", 4), ("bf16", 1), ("bf16", 4)]
    frame = validate_model_runs(pd.DataFrame(rows))
    assert (frame["repetitions"] == 2 * 3).all() and (frame["latency_ms"] > 0).all()
    assert frame["run_id"].str.endswith("|eager|interleaved-all").all()
    assert frame["clock_reasons"].isna().all()  # no NVML on the CPU: nothing seen, not "no reason"


def test_measure_models_takes_models_by_source_as_well_as_by_zoo_name() -> None:
    """Any object with a kind, build() and example_input() is measured as a zoo model is, and its
    kind is the rows' model_kind (the NAS suite passes its architectures so)."""
    source = ZooModel("not-in-the-zoo", "vision", tiny_cnn, image_size=8)
    rows = measure_models(read_fingerprint("cpu"), {"mine": source}, (2,), ("fp32",), "eager", rounds=1, reps=2)
    assert [(r["model"], r["model_kind"], r["batch"], r["repetitions"]) for r in rows] == [("mine", "vision", 2, 2)]
    assert len(validate_model_runs(pd.DataFrame(rows))) == 1


def test_failed_rows_are_valid_and_carry_the_error() -> None:
    row = failed_row(ModelUnit("resnet34", 8, "fp16"), "cudagraph", read_fingerprint("cpu"), "vision",
                     "OutOfMemoryError: " + "x" * 1000)
    frame = validate_model_runs(pd.DataFrame([row]))
    assert frame.loc[0, "status"] == "failed" and pd.isna(frame.loc[0, "latency_ms"])
    assert frame.loc[0, "error"].startswith("OutOfMemoryError") and len(frame.loc[0, "error"]) == 500
    assert frame.loc[0, "run_id"] == "resnet34|b8|fp16|cudagraph|interleaved-all"


def test_measure_models_refuses_an_unknown_mode(tiny_zoo: str) -> None:
    with pytest.raises(ValueError, match="jit"):
        measure_models(read_fingerprint("cpu"), [tiny_zoo], (1,), ("fp32",), "jit")


def example_row(mode: str = "eager", **values: Any) -> dict[str, Any]:
    """A whole-model row with every column, for the schema's checks."""
    unit = ModelUnit("resnet34", 8, "fp16")
    return {
        "schema_version": MODEL_RUN_SCHEMA_VERSION, "config_id": unit.config_id,
        "run_id": unit.run_id(mode), "status": "ok", "error": None,
        **provenance(read_fingerprint("cpu")), "model": unit.model, "model_kind": "vision",
        "batch": unit.batch, "precision": unit.precision, "mode": mode,
        "allow_tf32_cudnn": True, "allow_tf32_matmul": False, "latency_ms": 3.2, "p10_ms": 3.0,
        "p90_ms": 3.5, "cv": 0.04, "repetitions": 10, "throttled": False, "clock_reasons": None,
        "profile": json.dumps([{"name": "aten::conv2d"}]), "host_profile": "nvidia-h200-0123456789",
        "timestamp": pd.Timestamp.now(tz="UTC"), **values,
    }


def test_model_run_row_is_valid() -> None:
    graph = example_row("cudagraph", profile=None, latency_ms=0.9, p10_ms=0.85, p90_ms=0.95)
    frame = validate_model_runs(pd.DataFrame([example_row(), graph]))
    assert list(frame["mode"]) == ["eager", "cudagraph"]


def test_version_1_rows_are_read_without_a_host_profile() -> None:
    old = {k: v for k, v in example_row().items() if k != "host_profile"} | {"schema_version": 1}
    frame = validate_model_runs(pd.DataFrame([old, example_row("cudagraph")]))
    assert list(frame["schema_version"]) == [MODEL_RUN_SCHEMA_VERSION] * 2
    assert pd.isna(frame.loc[0, "host_profile"]) and frame.loc[1, "host_profile"] == "nvidia-h200-0123456789"


def test_model_run_refuses_an_unknown_mode() -> None:
    with pytest.raises(DatasetSchemaError, match="column 'mode'"):
        validate_model_runs(pd.DataFrame([example_row("jit")]))


def test_model_run_refuses_ok_without_latency_and_duplicate_runs() -> None:
    with pytest.raises(DatasetSchemaError, match="^column 'latency_ms': 1 'ok' row\\(s\\) without it") as caught:
        validate_model_runs(pd.DataFrame([example_row(latency_ms=None)]))
    assert "\n" not in str(caught.value) and "schema_version" not in str(caught.value)  # one line, the one column
    for column in ("latency_ms", "p90_ms", "cv"):  # inf passed 'greater than 0', then broke ratios and plots
        with pytest.raises(DatasetSchemaError, match=f"column '{column}'.*finite"):
            validate_model_runs(pd.DataFrame([example_row(**{column: float("inf")})]))
    with pytest.raises(DatasetSchemaError, match="run_id"):
        validate_model_runs(pd.DataFrame([example_row(), example_row()]))
    failed = example_row(status="failed", error="OutOfMemoryError: ...", latency_ms=None, p10_ms=None,
                         p90_ms=None, cv=None, repetitions=None)
    assert len(validate_model_runs(pd.DataFrame([failed]))) == 1


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


class TokenMixer(nn.Module):
    """MLP-Mixer's token mixing: a linear layer over the tokens of [batch, tokens, c] transposed."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.transpose(1, 2))


def test_models_are_built_as_users_build_them_and_run_in_inference_mode() -> None:
    """Parameters made inside inference mode are inference tensors, and torch.matmul then runs a
    linear layer over a transposed input as a batched GEMM (aten::bmm) where a model built the
    usual way copies the input and runs one GEMM (aten::mm): the rows must time the latter, the
    calls the importer records. The forwards themselves run in inference mode."""
    from torch.profiler import ProfilerActivity, profile

    seen: dict[str, Any] = {}

    def build() -> nn.Module:
        seen["built_in_inference_mode"] = torch.is_inference_mode_enabled()
        model = TokenMixer()
        original = model.forward

        def forward(x: torch.Tensor) -> torch.Tensor:
            seen.setdefault("ran_in_inference_mode", torch.is_inference_mode_enabled())
            if "ops" not in seen:
                seen["ops"] = []
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    out = original(x)
                seen["ops"] = [e.name for e in prof.events() if e.name in ("aten::mm", "aten::bmm", "aten::copy_")]
                return out
            return original(x)

        model.forward = forward  # type: ignore[method-assign]
        return model

    class Source:  # a collectors.model_build.ModelSource
        kind = "mixer"

        def build(self) -> nn.Module:
            return build()

        def example_input(self, batch: int, device: Any, dtype: Any) -> torch.Tensor:
            return torch.randn(batch, 12, 12, device=device, dtype=dtype)

    measure_models(read_fingerprint("cpu"), {"mixer": Source()}, (2,), ("fp32",), "eager", rounds=1, reps=1)
    assert seen["built_in_inference_mode"] is False and seen["ran_in_inference_mode"] is True
    assert "aten::mm" in seen["ops"] and "aten::bmm" not in seen["ops"], seen["ops"]
