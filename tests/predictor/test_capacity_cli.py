"""``latpred capacity``: predicted latency per batch, the simulated batcher and the planner, end to end
on the shipped H200 bundle (no mock: the planner simulates what the predictor predicts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from latpred import main
from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.capacity.load_trace import read_load_trace
from predictor.capacity.service_time import CPU_EAGER_SIGMA, DEFAULT_SIGMA, predicted_service_time
from predictor.devices import resolve_device
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["capacity", *args])
    return result.exit_code, result.output


def test_a_plan_that_meets_its_objective_comes_with_its_triton_block() -> None:
    code, out = run("resnet50", "--qps", "2000", "--slo-p99-ms", "20", "--format", "json")
    assert code == 0, out
    plan = json.loads(out)
    assert plan["meets"] and plan["reason"] == "" and plan["model"] == "resnet50"
    assert plan["p50_ms"] <= plan["p99_ms"] <= 20
    assert plan["gpus"] * plan["per_gpu_qps"] == pytest.approx(2000)
    assert f"max_batch_size: {plan['max_batch']}" in plan["triton_config"]
    assert f"max_queue_delay_microseconds: {plan['max_queue_delay_us']}" in plan["triton_config"]
    assert plan["p99_low_ms"] < plan["p99_ms"] < plan["p99_high_ms"]
    code, text = run("resnet50", "--qps", "2000", "--slo-p99-ms", "20")
    assert f"p99 {plan['p99_low_ms']:.3f} to {plan['p99_high_ms']:.3f} ms with every batch at either end" in text


def test_an_objective_below_batch_one_is_answered_with_why_it_falls_short() -> None:
    code, out = run("resnet50", "--qps", "100", "--slo-p99-ms", "0.5", "--max-gpus", "2")
    assert code == 0, out
    assert "does NOT meet the objective" in out and "fastest batch" in out and "dynamic_batching {" in out


@pytest.mark.parametrize("args, option", [(["--qps", "-3", "--slo-p99-ms", "20"], "--qps"),
                                          (["--qps", "100", "--slo-p99-ms", "0"], "--slo-p99-ms")])
def test_bad_loads_and_objectives_name_their_option(args: list[str], option: str) -> None:
    code, out = run("resnet50", *args)
    assert code == 2 and option in out


def test_service_time_is_the_prediction_per_batch_with_the_measured_spread() -> None:
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    graph = load_zoo_graph("resnet18")
    service = predicted_service_time(predictor, graph, "fp16", "cudagraph")
    for batch in (1, 8):
        median, sigma = service(batch)
        assert median == predictor.predict(graph, batch, "fp16", "cudagraph").total_ms
        assert sigma == DEFAULT_SIGMA["cudagraph"]
    assert predicted_service_time(predictor, graph, "fp16", "eager")(1)[1] == DEFAULT_SIGMA["eager"]
    assert service(8)[0] > service(1)[0]
    out = predictor.predict(graph, 8, "fp16", "cudagraph")
    assert service.interval_ms is not None and service.interval_ms(8) == (out.low_ms, out.high_ms)


def test_a_cpus_service_time_has_the_spread_measured_on_cpus() -> None:
    """A CPU's eager forwards vary less than a GPU host's (service_time): the plan for a CPU is
    simulated with the CPU's spread, the one the CPU serving check scored."""
    cpu = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "cpu-amd-epyc"), resolve_device("cpu-amd-epyc"))
    assert predicted_service_time(cpu, load_zoo_graph("resnet18"), "fp32", "eager")(1)[1] == CPU_EAGER_SIGMA


def test_a_plan_for_the_slow_end_says_so_and_holds_there() -> None:
    code, out = run("resnet50", "--qps", "2000", "--slo-p99-ms", "2.5", "--plan-for", "slow_end", "--format", "json")
    assert code == 0, out
    plan = json.loads(out)
    assert plan["plan_for"] == "slow_end" and plan["meets"] and plan["p99_ms"] == plan["p99_high_ms"] <= 2.5
    code, text = run("resnet50", "--qps", "2000", "--slo-p99-ms", "2.5", "--plan-for", "slow_end")
    assert code == 0, text
    assert "planned for the slow end of the latency prediction's interval, meets the objective" in text


def test_the_plan_for_choices_are_the_planners() -> None:
    """The CLI names its --plan-for choices without importing the capacity modules: they must be
    the simulator's."""
    from predictor.capacity.simulator import PLAN_FOR
    from predictor.cli import capacity

    option = next(p for p in capacity.params if p.name == "plan_for")
    assert tuple(option.type.choices) == PLAN_FOR  # type: ignore[attr-defined]


def test_an_eager_plan_names_the_host_profile_it_was_predicted_for() -> None:
    code, out = run("resnet50", "--mode", "eager", "--qps", "100", "--slo-p99-ms", "50", "--format", "json")
    assert code == 0, out
    plan = json.loads(out)
    default = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200")).host
    assert default is not None and plan["host"].startswith(f"{default.id} (") and plan["warnings"] == []
    code, text = run("resnet50", "--mode", "eager", "--qps", "100", "--slo-p99-ms", "50")
    assert f"host: {plan['host']}" in text
    code, out = run("resnet50", "--qps", "100", "--slo-p99-ms", "50", "--format", "json")
    assert json.loads(out)["host"] is None  # a CUDA graph's replay issues no call


def test_bursty_arrivals_are_planned_said_and_never_look_easier() -> None:
    """--arrival-cv 3 at resnet50's 2,000 qps and p99 5 ms takes 2 GPUs where Poisson takes 1: the
    plan records it, says it in its text, and is the planner's own for that cv."""
    code, out = run("resnet50", "--qps", "2000", "--slo-p99-ms", "5", "--format", "json")
    assert code == 0, out
    poisson = json.loads(out)
    code, out = run("resnet50", "--qps", "2000", "--slo-p99-ms", "5", "--arrival-cv", "3", "--format", "json")
    assert code == 0, out
    bursty = json.loads(out)
    assert (poisson["arrival_cv"], bursty["arrival_cv"]) == (1.0, 3.0) and poisson["meets"] and bursty["meets"]
    assert bursty["gpus"] > poisson["gpus"] or (
        bursty["gpus"] == poisson["gpus"] and bursty["p99_ms"] > poisson["p99_ms"])
    from predictor.capacity.planner import plan

    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    expected = plan(predicted_service_time(predictor, load_zoo_graph("resnet50"), "fp16", "cudagraph"), 2000, 5,
                    arrival_cv=3)
    assert (bursty["gpus"], bursty["max_batch"], bursty["p99_ms"]) == (expected.gpus, expected.max_batch,
                                                                       expected.p99_ms)
    code, text = run("resnet50", "--qps", "2000", "--slo-p99-ms", "5", "--arrival-cv", "3")
    assert code == 0 and "at 2000 qps with gaps between requests of cv 3 (1 is Poisson): meets" in text, text
    code, text = run("resnet50", "--qps", "2000", "--slo-p99-ms", "5")
    assert code == 0 and "gaps between requests" not in text, text


@pytest.mark.parametrize("value", ["0", "-1", "nan", "11", "abc"])
def test_a_bad_arrival_cv_names_its_option(value: str) -> None:
    code, out = run("resnet50", "--qps", "2000", "--slo-p99-ms", "5", "--arrival-cv", value)
    assert code == 2 and "--arrival-cv" in out, out


def write_spiky_trace(path: Path) -> None:
    """20 s of a log (epoch seconds to the millisecond, a CSV): 1,500 qps and one second at 6,000."""
    rng = np.random.default_rng(4)
    base = np.cumsum(rng.exponential(1 / 1_500, 40_000))
    spike = 12 + np.cumsum(rng.exponential(1 / 4_500, 6_000))
    times = np.sort(np.concatenate([base[base < 20], spike[spike < 13]]))
    path.write_text("request,arrival_s\n" + "".join(f"r{i},{1.7e9 + t:.3f}\n" for i, t in enumerate(times)))


def test_a_recorded_load_is_replayed_at_its_own_rate_or_the_qps_asked(tmp_path: Path) -> None:
    """--arrival-trace: the plan replays the log's shape (its own rate without --qps), names it, and is
    the planner's own plan for that trace; a spike the mean rate hides costs a GPU more, or queues."""
    log = tmp_path / "prod.csv"
    write_spiky_trace(log)
    code, out = run("resnet50", "--slo-p99-ms", "5", "--arrival-trace", str(log), "--format", "json")
    assert code == 0, out
    replayed = json.loads(out)
    trace = read_load_trace(log)
    assert replayed["qps"] == pytest.approx(trace.rate_qps) and replayed["arrival_trace"] == trace.describe()
    assert replayed["arrival_cv"] == pytest.approx(trace.gap_cv, abs=1e-4) and replayed["meets"]
    from predictor.capacity.planner import plan

    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    service = predicted_service_time(predictor, load_zoo_graph("resnet50"), "fp16", "cudagraph")
    expected = plan(service, trace.rate_qps, 5, arrival_trace=trace)
    assert (replayed["gpus"], replayed["max_batch"], replayed["p99_ms"]) == (
        expected.gpus, expected.max_batch, expected.p99_ms)
    poisson = plan(service, trace.rate_qps, 5)
    assert replayed["gpus"] > poisson.gpus or (replayed["gpus"] == poisson.gpus
                                               and replayed["p99_ms"] > 1.3 * poisson.p99_ms), (replayed, poisson)
    code, text = run("resnet50", "--qps", "6000", "--slo-p99-ms", "5", "--arrival-trace", str(log))
    assert code == 0 and f"at 6000 qps replaying prod.csv: {trace.requests:,} requests over 20 s" in text, text


@pytest.mark.parametrize("args, option, words", [
    ([], "--qps", "give the load to serve"),
    (["--arrival-trace", "{missing}"], "--arrival-trace", "No such file"),
    (["--arrival-trace", "{bad}"], "--arrival-trace", "line 3: 'soon' is not an arrival time"),
    (["--arrival-trace", "{log}", "--arrival-cv", "2"], "--arrival-trace", "not both"),
])
def test_a_trace_that_cannot_be_planned_names_its_option(tmp_path: Path, args: list[str], option: str,
                                                          words: str) -> None:
    log, bad = tmp_path / "prod.csv", tmp_path / "bad.txt"
    write_spiky_trace(log)
    bad.write_text("0.1\n0.2\nsoon\n")
    paths = {"missing": tmp_path / "none.csv", "bad": bad, "log": log}
    code, out = run("resnet50", "--slo-p99-ms", "5", *[a.format(**paths) for a in args])
    assert code == 2 and option in out and words in " ".join(out.split()), out


def test_limits_on_max_batch_and_queue_delay_are_the_planners_choices_up_to_them() -> None:
    code, out = run("resnet50", "--qps", "5000", "--slo-p99-ms", "10", "--batch-limit", "12", "--delay-limit-us", "0",
                    "--format", "json")
    assert code == 0, out
    limited = json.loads(out)
    assert limited["max_batch"] <= 12 and limited["max_queue_delay_us"] == 0 and limited["meets"]
    from predictor.capacity.planner import plan

    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    service = predicted_service_time(predictor, load_zoo_graph("resnet50"), "fp16", "cudagraph")
    # under a batch limit the plan weighs 1, 2 and 4 model instances per GPU too
    expected = plan(service, 5000, 10, max_batch_choices=(1, 2, 4, 8, 12), delay_us_choices=(0,),
                    instance_choices=(1, 2, 4))
    assert (limited["gpus"], limited["max_batch"], limited["instances"], limited["p99_ms"]) == (
        expected.gpus, expected.max_batch, expected.instances, expected.p99_ms)
    code, out = run("resnet50", "--qps", "5000", "--slo-p99-ms", "10", "--batch-limit", "1", "--max-instances", "1",
                    "--format", "json")
    alone = json.loads(out)
    assert code == 0 and alone["instances"] == 1 and "instance_group" not in alone["triton_config"], out
    code, out = run("resnet50", "--qps", "5000", "--slo-p99-ms", "10", "--batch-limit", "1")
    shared = plan(service, 5000, 10, max_batch_choices=(1,), instance_choices=(1, 2, 4))
    assert code == 0 and shared.instances > 1 and shared.gpus < alone["gpus"], out
    assert f"{shared.instances} model instances per GPU" in out and "instance_group" in out, out
    for option, value in (("--batch-limit", "0"), ("--batch-limit", "256"), ("--delay-limit-us", "-5"),
                          ("--max-instances", "0"), ("--max-instances", "5")):
        code, out = run("resnet50", "--qps", "100", "--slo-p99-ms", "10", option, value)
        assert code == 2 and option in out, out
