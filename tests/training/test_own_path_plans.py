"""benchmarks/own_path_plans.py: plans made on the serving host from committed latencies and the
host's own path are the plans the predictor itself would make there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.own_path_plans import latency_table, table_latency
from benchmarks.plan_check import MODE, OWN_PATH, PRECISION, host_path, plans_for, read_plans
from predictor.capacity.service_time import predicted_service_time
from predictor.capacity.serving_path import ServingPath, stored_serving_path
from predictor.capacity.simulator import LatencyModel
from predictor.device_bundles import load_predictor
from predictor.zoo import load_zoo_graph

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "own_path_plans.py"
#: an H100 host's empty model served by Triton (the second plan set's lease)
EMPTY_SERVED = ROOT / "datasets" / "nvidia-h100-80gb-hbm3" / "serving-plans-2" / "empty"


def test_a_latency_table_reads_back_the_same_model_and_refuses_a_batch_past_it() -> None:
    model = LatencyModel(lambda b: 1.0 + 0.25 * b, 0.05, interval_ms=lambda b: (0.9 + 0.2 * b, 1.2 + 0.3 * b))
    back = table_latency(json.loads(json.dumps(latency_table(model))))
    assert back.sigma == model.sigma
    assert all(back.median_ms(b) == model.median_ms(b) for b in range(1, 33))
    assert back.interval_ms is not None and model.interval_ms is not None
    assert all(back.interval_ms(b) == model.interval_ms(b) for b in range(1, 33))
    with pytest.raises(ValueError, match="batch 33"):
        back.median_ms(33)


def test_plans_from_the_table_are_the_predictors_own() -> None:
    predictor = load_predictor("nvidia-h200")
    predicted = predicted_service_time(predictor, load_zoo_graph("mnasnet0_5"), PRECISION, MODE)
    path = stored_serving_path("pytriton-h100")
    direct = plans_for({"mnasnet0_5": predicted}, "nvidia-h200", [0.3], path)
    tabled = plans_for({"mnasnet0_5": table_latency(latency_table(predicted))}, "nvidia-h200", [0.3], path)
    assert direct and tabled == direct


def test_the_plan_step_fits_the_hosts_own_path_and_plans_with_it(tmp_path: Path) -> None:
    device = "nvidia-h100-80gb-hbm3"
    root = tmp_path / "root"
    shutil.copytree(EMPTY_SERVED, root / "empty")
    latencies = tmp_path / "latencies.json"
    made = subprocess.run([sys.executable, str(SCRIPT), "latencies", "--device", device, "--models", "mnasnet0_5",
                           "--fractions", "0.3", "--out", str(latencies)], capture_output=True, text=True, cwd=ROOT)
    assert made.returncode == 0, made.stderr
    again = subprocess.run([sys.executable, str(SCRIPT), "latencies", "--device", device, "--out", str(latencies)],
                           capture_output=True, text=True, cwd=ROOT)
    assert again.returncode != 0 and "exists" in again.stderr  # committed latencies stay as they are
    planned = subprocess.run([sys.executable, str(SCRIPT), "plan", "--latencies", str(latencies), "--root", str(root)],
                             capture_output=True, text=True, cwd=ROOT)
    assert planned.returncode == 0, planned.stderr
    own = ServingPath.from_dict(json.loads((root / "own_path.json").read_text()))
    assert own == host_path(root, device) and own.label == "measured"
    [plan] = read_plans(root / "plans.json")
    assert (plan.model, plan.device, plan.serving_path, plan.fraction) == ("mnasnet0_5", device, OWN_PATH, 0.3)
    predicted = predicted_service_time(load_predictor(device), load_zoo_graph("mnasnet0_5"), PRECISION, MODE)
    assert [plan] == plans_for({"mnasnet0_5": predicted}, device, [0.3], own)
    # latencies of another device are not used for this one
    other = json.loads(latencies.read_text()) | {"device": "nvidia-h200"}
    latencies.write_text(json.dumps(other))
    refused = subprocess.run([sys.executable, str(SCRIPT), "plan", "--latencies", str(latencies), "--root",
                              str(root)], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode != 0 and f"latencies for {device}" in refused.stderr
