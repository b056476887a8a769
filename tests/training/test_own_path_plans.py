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


#: the tree libraries and the queueing library the GPU machine lacks: the plan step must not need them
BLOCKED = ("xgboost", "lightgbm", "lleaves", "simpy", "flask", "mlflow")


def run_script(*args: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """own_path_plans.py in a fresh interpreter, with ``blocked`` packages made unimportable (as on
    the GPU machine: ``sys.modules[name] = None`` refuses their import)."""
    prelude = "".join(f"sys.modules[{name!r}] = None; " for name in blocked)
    code = (f"import runpy, sys; {prelude}sys.argv = [{str(SCRIPT)!r}, *sys.argv[1:]]; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)


def test_the_plan_step_fits_the_hosts_own_path_and_plans_with_it(tmp_path: Path) -> None:
    device = "nvidia-h100-80gb-hbm3"
    root = tmp_path / "root"
    shutil.copytree(EMPTY_SERVED, root / "empty")
    latencies = tmp_path / "latencies.json"
    made = run_script("latencies", "--device", device, "--models", "mnasnet0_5", "--fractions", "0.3",
                      "--out", str(latencies))
    assert made.returncode == 0, made.stderr
    again = run_script("latencies", "--device", device, "--out", str(latencies))
    assert again.returncode != 0 and "exists" in again.stderr  # committed latencies stay as they are
    other = tmp_path / "other.json"  # another device's, named first as the device call names them
    other.write_text(json.dumps(json.loads(latencies.read_text()) | {"device": "nvidia-h200"}))
    planned = run_script("plan", "--latencies", f"{other},{latencies}", "--root", str(root), blocked=BLOCKED)
    assert planned.returncode == 0, planned.stderr  # without the trees, bundles or SimPy the GPU machine lacks
    own = ServingPath.from_dict(json.loads((root / "own_path.json").read_text()))
    assert own == host_path(root, device) and own.label == "measured"
    [plan] = read_plans(root / "plans.json")
    assert (plan.model, plan.device, plan.serving_path, plan.fraction) == ("mnasnet0_5", device, OWN_PATH, 0.3)
    assert json.loads((root / "plans.json").read_text())["own_path_loads"] == [
        "mb16-delay500us at 0.3", "mb16-delay500us at 0.6", "mb8-nodelay at 0.3", "mb8-nodelay at 0.6"]
    predicted = predicted_service_time(load_predictor(device), load_zoo_graph("mnasnet0_5"), PRECISION, MODE)
    assert [plan] == plans_for({"mnasnet0_5": predicted}, device, [0.3], own)
    twice = run_script("plan", "--latencies", str(latencies), "--root", str(root))
    assert twice.returncode != 0 and "exists" in twice.stderr  # one call's plans are never made over


@pytest.mark.parametrize(("change", "message"), [
    ({"device": "nvidia-h200"}, "0 of"),
    ({"version": 2}, "version 2"),
    ({"mode": "eager"}, "fp16 eager"),
])
def test_the_plan_step_refuses_latencies_that_are_not_this_devices_or_this_scripts(
        tmp_path: Path, change: dict[str, object], message: str) -> None:
    root = tmp_path / "root"
    shutil.copytree(EMPTY_SERVED, root / "empty")
    latencies = tmp_path / "latencies.json"
    latencies.write_text(json.dumps({"version": 1, "made": "-", "device": "nvidia-h100-80gb-hbm3", "bundle": "-",
                                     "precision": PRECISION, "mode": MODE, "fractions": [0.3], "models": {}} | change))
    refused = run_script("plan", "--latencies", str(latencies), "--root", str(root))
    assert refused.returncode != 0 and message in refused.stderr
    assert not (root / "plans.json").exists()


def test_the_plan_step_refuses_an_empty_model_that_was_not_served(tmp_path: Path) -> None:
    root = tmp_path / "root"
    folder = root / "empty" / "nvidia-h100-80gb-hbm3" / "serving-triton"
    folder.mkdir(parents=True)  # what a server that crashed before any load ended leaves: meta.json alone
    shutil.copy(EMPTY_SERVED / "nvidia-h100-80gb-hbm3" / "serving-triton" / "meta.json", folder)
    refused = run_script("plan", "--latencies", str(ROOT / "benchmarks/results/own_path_latencies_h100.json"),
                         "--root", str(root))
    assert refused.returncode != 0 and "cannot be read" in refused.stderr and not (root / "plans.json").exists()


def test_the_score_reads_the_path_the_plans_were_made_with(tmp_path: Path) -> None:
    folder = ROOT / "datasets" / "nvidia-h100-80gb-hbm3" / "serving-plans-3"
    scored = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_check.py"), "score",
                             "--plans", str(folder / "plans.json"), "--folder", str(folder),
                             "--out", str(tmp_path / "scored.txt")], capture_output=True, text=True, cwd=ROOT)
    assert scored.returncode == 0, scored.stderr
    assert "own_path.json: 1.834 ms a batch + 0.294 ms a request" in scored.stdout
    assert "NOTE" not in scored.stdout  # the same path fitted again, the same bundle
    assert "with the serving host's own path: within" not in scored.stdout  # no column repeating the plan
