"""``latpred select`` over the shipped bundles: the table with the choice's certainty, and the same
answer as JSON and CSV."""

from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner

from latpred import main


def run(*args: str) -> str:
    result = CliRunner().invoke(main, ["select", "resnet50", "--batch", "8", *args])
    assert result.exit_code == 0, result.output
    return result.output


MEASURED = ("--devices", "nvidia-h200,nvidia-h200-sm104,nvidia-h200-sm72,nvidia-h200-sm40,nvidia-h100-80gb-hbm3,"
            "nvidia-h100-80gb-hbm3-sm72")


def test_an_objective_inside_the_choices_interval_is_said_to_be_within_the_predictions_error() -> None:
    free = json.loads(run(*MEASURED, "--format", "json"))
    assert free["settled"] is True and free["doubts"] == []
    assert "settled: no device's verdict on the constraints" in run(*MEASURED)
    best = free["ranked"][0]
    slo = f"{(best['p99_ms'] + best['p99_high_ms']) / 2:.6f}"
    tight = json.loads(run(*MEASURED, "--slo-p99-ms", slo, "--format", "json"))
    assert tight["best"] == best["device"] and tight["settled"] is False and tight["doubts"]
    table = run(*MEASURED, "--slo-p99-ms", slo)
    assert f"within the predictions' error: {best['device']} at the slow end of its interval: p99 " in table
    rows = list(csv.DictReader(io.StringIO(run(*MEASURED, "--slo-p99-ms", slo, "--format", "csv"))))
    assert [r["device"] for r in rows] == [c["device"] for c in tight["ranked"]]
    assert {r["settled"] for r in rows} == {"false"}
    assert all(float(r["p99_low_ms"]) < float(r["p99_ms"]) < float(r["p99_high_ms"]) for r in rows)
