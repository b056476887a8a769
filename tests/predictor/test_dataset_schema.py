"""The dataset row contract: a really measured row passes, corrupted copies are refused by column."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from collectors.fingerprint import read_fingerprint
from collectors.op_config import OpConfig
from collectors.op_measure import OpMeasurer
from collectors.timing import CpuTimer, RepetitionRule
from predictor.dataset_schema import COLUMNS, SCHEMA_VERSION, DatasetSchemaError, validate_rows


@pytest.fixture(scope="module")
def row() -> dict[str, Any]:
    measure = OpMeasurer(read_fingerprint("cpu"),
                         CpuTimer(RepetitionRule(min_reps=3, max_reps=5, group=1), rep_target_us=200))
    measured = measure(OpConfig.make("binary", dict(elements=64), "add", batch=2))
    assert measured["status"] == "ok", measured["error"]
    return measured


def test_measured_row_is_valid(row: dict[str, Any]) -> None:
    frame = validate_rows(pd.DataFrame([row]))
    assert len(frame) == 1
    assert set(frame.columns) == set(COLUMNS)
    assert frame.loc[0, "schema_version"] == SCHEMA_VERSION
    assert frame.loc[0, "kernel_us"] > 0 and frame.loc[0, "elements"] == 64
    assert pd.isna(frame.loc[0, "c_in"])  # parameters of other families stay empty


def test_failed_row_with_its_error_is_valid(row: dict[str, Any]) -> None:
    failed = {**row, "status": "failed", "error": "RuntimeError: out of memory",
              **{c: None for c in ("kernel_us", "dispatch_us", "p10_us", "p50_us", "p90_us", "cv")}}
    assert len(validate_rows(pd.DataFrame([row | {"config_id": "x" * 20}, failed]))) == 2


@pytest.mark.parametrize("change,column", [
    (dict(precision="fp8"), "precision"),
    (dict(kernel_us=-1.0), "kernel_us"),
    (dict(kernel_us=None), "kernel_us"),
    (dict(family="unknown_family"), "family"),
    (dict(schema_version=99), "schema_version"),
    (dict(batch=0), "batch"),
    (dict(status="failed", error=None), "error"),
    (dict(status="maybe"), "status"),
    (dict(config_id="short"), "config_id"),
], ids=["precision", "negative", "ok-without-time", "family", "version", "batch", "failed-without-error",
        "status", "config-id"])
def test_corrupt_row_is_refused_naming_the_column(row: dict[str, Any], change: dict, column: str) -> None:
    good = {**row, "config_id": "0" * 20}
    with pytest.raises(DatasetSchemaError, match=f"column '{column}'"):
        validate_rows(pd.DataFrame([good, {**row, **change}]))


def test_unknown_column_is_refused(row: dict[str, Any]) -> None:
    with pytest.raises(DatasetSchemaError, match="mystery_column"):
        validate_rows(pd.DataFrame([{**row, "mystery_column": 1}]))


def test_missing_column_is_refused(row: dict[str, Any]) -> None:
    with pytest.raises(DatasetSchemaError, match="l2_state"):
        validate_rows(pd.DataFrame([{k: v for k, v in row.items() if k != "l2_state"}]))


def test_duplicate_config_id_is_refused(row: dict[str, Any]) -> None:
    with pytest.raises(DatasetSchemaError, match="config_id"):
        validate_rows(pd.DataFrame([row, dict(row)]))
