"""Planning with a server's own time: the host's pauses through the planner, its grid and its load
curve (``stalls=``), and ``latpred capacity --serving-path`` end to end on the shipped H200 bundle
(no mock: the planner simulates what the predictor predicts, around the shipped serving path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from latpred import main
from predictor.capacity.grid import plan_grid
from predictor.capacity.host_stalls import HostStalls
from predictor.capacity.load_curve import capacity_qps, load_curve
from predictor.capacity.planner import plan
from predictor.capacity.runs import Runs, Search
from predictor.capacity.service_time import predicted_service_time
from predictor.capacity.serving_path import stored_serving_path
from predictor.capacity.simulator import BatchingConfig, LatencyModel
from predictor.cli import load_predictor
from predictor.zoo import load_zoo_graph
from tests.predictor.planning_helpers import batch_friendly, quick, without_costs

#: a host that stops for 5 or 15 ms about twice a second: what one measured H100 host did, milder
PAUSES = HostStalls(2.0, (5.0, 15.0))


def test_a_host_that_pauses_gets_a_higher_p99_or_more_gpus_for_the_same_load() -> None:
    calm, paused = quick(2_000, 10.0), quick(2_000, 10.0, stalls=PAUSES)
    assert calm.meets and paused.meets
    assert paused.gpus > calm.gpus or (paused.gpus == calm.gpus and paused.p99_ms > calm.p99_ms)
    # on the very setting the calm plan chose, the pauses alone raise the p99
    runs = Runs(batch_friendly, 5_000, 0, stalls=PAUSES)
    plain = Runs(batch_friendly, 5_000, 0)
    setting = (calm.max_batch, calm.max_queue_delay_us, calm.instances)
    assert Search(runs, 2_000, 10.0, None).simulate(setting, calm.gpus).p99_ms > \
        Search(plain, 2_000, 10.0, None).simulate(setting, calm.gpus).p99_ms == calm.p99_ms


def test_no_pauses_leave_every_plan_as_it_was() -> None:
    """None is the default, and a host that never pauses (rate 0, as the shipped path has) plans
    exactly as no host at all: same settings, same numbers, same simulations."""
    for qps, slo_ms in ((2_000, 10.0), (5_000, 4.0), (100, 0.5)):
        assert quick(qps, slo_ms, stalls=None) == quick(qps, slo_ms) == quick(qps, slo_ms, stalls=HostStalls(0.0, ()))


def test_runs_kept_for_one_host_are_not_shared_with_another() -> None:
    runs = Runs(batch_friendly, 5_000, 0)
    with pytest.raises(ValueError, match="runs: .*stalls"):
        quick(2_000, 10.0, runs=runs, stalls=PAUSES)
    paused_runs = Runs(batch_friendly, 5_000, 0, stalls=PAUSES)
    assert without_costs(quick(2_000, 10.0, runs=paused_runs, stalls=PAUSES)) == \
        without_costs(quick(2_000, 10.0, stalls=PAUSES))
    with pytest.raises(ValueError, match="stalls"):
        quick(2_000, 10.0, stalls=(2.0, (5.0,)))


def test_a_grid_plans_each_cell_for_the_hosts_pauses() -> None:
    latency = LatencyModel(lambda b: batch_friendly(b)[0], 0.02)
    grid = plan_grid(latency, [1_000, 3_000], [8.0], stalls=PAUSES)
    alone = [plan(latency, qps, 8.0, stalls=PAUSES) for qps in (1_000, 3_000)]
    assert [without_costs(p) for p in grid] == [without_costs(p) for p in alone]
    calm = plan_grid(latency, [1_000, 3_000], [8.0])
    assert [without_costs(p) for p in calm] == [without_costs(plan(latency, q, 8.0)) for q in (1_000, 3_000)]
    assert all((p.gpus, p.p99_ms) > (c.gpus, c.p99_ms) for p, c in zip(grid, calm))


def test_the_load_curve_of_a_paused_host_passes_through_its_plan() -> None:
    latency = LatencyModel(lambda b: batch_friendly(b)[0], 0.02)
    chosen = plan(latency, 2_000, 10.0, stalls=PAUSES)
    config = BatchingConfig(max_batch=chosen.max_batch, max_queue_delay_us=chosen.max_queue_delay_us)
    (point,) = load_curve(latency, config, [chosen.per_gpu_qps], stalls=PAUSES)
    assert point.p99_ms == pytest.approx(chosen.p99_ms, rel=1e-12)
    (calm,) = load_curve(latency, config, [chosen.per_gpu_qps])
    assert calm.p99_ms < point.p99_ms
    # a host paused a share of the time serves that much less
    assert capacity_qps(latency, config, PAUSES) == pytest.approx(
        capacity_qps(latency, config) * (1 - PAUSES.paused_share))
    assert capacity_qps(latency, config, HostStalls(0.0, ())) == capacity_qps(latency, config)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["capacity", *args])
    return result.exit_code, result.output


RESNET50 = ("resnet50", "--qps", "2000", "--slo-p99-ms", "10", "--device", "h200")


def test_the_cli_plans_for_the_server_when_a_serving_path_is_named() -> None:
    code, out = run(*RESNET50, "--format", "json")
    assert code == 0, out
    gpu_only = json.loads(out)
    code, out = run(*RESNET50, "--serving-path", "pytriton-h100", "--format", "json")
    assert code == 0, out
    served = json.loads(out)
    assert gpu_only["serving_path"] is None
    path = stored_serving_path("pytriton-h100")
    assert served["serving_path"] == path.answer_dict()
    assert gpu_only["meets"] and served["meets"]
    # the server's 2 ms or so a batch: more GPUs, or a higher p99 on as many
    assert served["gpus"] > gpu_only["gpus"] or (
        served["gpus"] == gpu_only["gpus"] and served["p99_ms"] > gpu_only["p99_ms"])
    # the same plan in process: the prediction with the path around it, its host's drift in every run
    predicted = predicted_service_time(load_predictor("h200", None), load_zoo_graph("resnet50"), "fp16", "cudagraph")
    assert path.stalls.drift is not None and not path.stalls.steady  # the shipped path carries the hosts' drift
    expected = plan(path.around(predicted), 2000, 10, stalls=path.stalls)
    assert (served["gpus"], served["max_batch"], served["max_queue_delay_us"]) == (
        expected.gpus, expected.max_batch, expected.max_queue_delay_us)
    assert served["p99_ms"] == pytest.approx(expected.p99_ms, rel=1e-12)
    assert (served["p99_low_ms"], served["p99_high_ms"]) == pytest.approx(
        (expected.p99_low_ms, expected.p99_high_ms), rel=1e-12)


def test_the_text_says_what_the_plan_covers() -> None:
    code, plain = run(*RESNET50)
    assert code == 0, plain
    assert plain.count("no serving path: a server's own time per batch is not included; see --serving-path") == 1
    code, text = run(*RESNET50, "--serving-path", "pytriton-h100")
    assert code == 0, text
    path = stored_serving_path("pytriton-h100")
    assert "no serving path" not in text
    assert f"serving path pytriton-h100 ({path.label}" in text
    assert f"{path.cost.per_batch_ms:.3f} ms a batch + {path.cost.per_request_ms:.3f} ms a request" in text
    assert f"range {path.low.per_batch_ms:.3f} + {path.low.per_request_ms:.3f} to {path.high.per_batch_ms:.3f}" in text
    # a path fitted on other hosts says a plan holds only for a host like theirs, and how to fit one's own
    assert path.label == "fitted" and "fitted on other hosts" in text
    assert "latpred serving-path FOLDER --models empty --out mine.json" in text


def test_a_slow_end_plan_takes_the_slow_end_of_the_prediction_and_of_the_path() -> None:
    code, out = run(*RESNET50, "--serving-path", "pytriton-h100", "--plan-for", "slow_end", "--format", "json")
    assert code == 0, out
    slow = json.loads(out)
    assert slow["p99_ms"] == slow["p99_high_ms"]
    path = stored_serving_path("pytriton-h100")
    predicted = predicted_service_time(load_predictor("h200", None), load_zoo_graph("resnet50"), "fp16", "cudagraph")
    expected = plan(path.around(predicted).for_plan("slow_end"), 2000, 10, stalls=path.stalls)
    assert (slow["gpus"], slow["max_batch"]) == (expected.gpus, expected.max_batch)
    assert slow["p99_ms"] == pytest.approx(expected.p99_ms, rel=1e-12)


@pytest.mark.parametrize("spec, said", [("nope", "pytriton-h100"), ("missing-file.json", "missing-file.json")])
def test_a_bad_serving_path_is_a_usage_error_naming_the_option(spec: str, said: str) -> None:
    code, out = run(*RESNET50, "--serving-path", spec)
    assert code == 2 and "--serving-path" in out and said in out, out


def test_a_bad_serving_path_file_names_the_field_at_fault(tmp_path: Path) -> None:
    data = stored_serving_path("pytriton-h100").to_dict()
    data["per_batch_ms"] = -1.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, out = run(*RESNET50, "--serving-path", str(bad))
    assert code == 2 and "--serving-path" in out and "per_batch_ms" in out, out


def test_a_serving_path_file_with_host_pauses_is_planned_with_them(tmp_path: Path) -> None:
    """A path measured on the serving host (a JSON file) works as a shipped one, and its pauses are
    replayed: the same costs with pauses give a higher p99 or more GPUs than without."""
    data = stored_serving_path("pytriton-h100").to_dict()
    data.update(name="my-host", label="measured")
    calm, paused = tmp_path / "calm.json", tmp_path / "paused.json"
    calm.write_text(json.dumps(data))
    paused.write_text(json.dumps({**data, "pauses": {"rate_per_s": 2.0, "pauses_ms": [5.0, 15.0]}}))
    results = []
    for file in (calm, paused):
        code, out = run(*RESNET50, "--serving-path", str(file), "--format", "json")
        assert code == 0, out
        results.append(json.loads(out))
    assert results[0]["serving_path"]["name"] == "my-host"
    assert results[1]["serving_path"]["pauses"] == {"rate_per_s": 2.0, "pauses_ms": [5.0, 15.0]}
    assert (results[1]["gpus"], results[1]["p99_ms"]) > (results[0]["gpus"], results[0]["p99_ms"])
    code, text = run(*RESNET50, "--serving-path", str(paused))
    assert code == 0 and "host pauses 2 times a second" in text, text


def test_the_plot_draws_the_served_latency(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    code, out = run(*RESNET50, "--serving-path", "pytriton-h100", "--plot", str(png))
    assert code == 0, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
