"""The Triton check's bookkeeping: Triton's trace read back and joined to the client's requests,
its statistics turned into service times, and the service table the simulator is given. The
trace under tests/collectors/data is a real one: tritonserver 2.51 (nvidia-pytriton 0.7.0) with
``--trace-config level=TIMESTAMPS``, written in parts (``log-frequency``), 24 one-sample requests
that it ran in batches of 1, 7, 8 and 8. (Serving itself runs on the GPU machine:
benchmarks/triton_serving.sh.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from collectors.triton_client import ClientRun
from collectors.triton_serving import (
    EmptyTrace,
    Loads,
    batch_totals,
    check_alone_sizes,
    check_rates,
    load_frame,
    mean_seconds,
    read_trace,
    service_table,
)
from latpred import main

TRACE = Path(__file__).parent / "data" / "triton_trace.json"

#: the shape of tritonclient's get_inference_statistics(as_json=True) for one model (figures of a real answer)
STATISTICS = {"model_stats": [{"name": "m", "batch_stats": [
    {"batch_size": "1", "compute_input": {"count": "1", "ns": "106894"},
     "compute_infer": {"count": "1", "ns": "11408636"}, "compute_output": {"count": "1", "ns": "200927"}},
    {"batch_size": "8", "compute_input": {"count": "74", "ns": "4627517"},
     "compute_infer": {"count": "74", "ns": "627827303"}, "compute_output": {"count": "74", "ns": "19975223"}},
]}]}


def _client_run(trace: pd.DataFrame) -> tuple[ClientRun, float]:
    """The client's side of the traced requests: each sent 100 us before Triton had it."""
    ids = [f"L-{i}" for i in range(24)]
    received = trace.set_index("request_id").loc[ids, "REQUEST_START"].to_numpy() / 1e9
    finished = trace.set_index("request_id").loc[ids, "REQUEST_END"].to_numpy() / 1e9
    return ClientRun(ids, received - 1e-4, finished + 1e-4, []), float(received[0]) - 1e-3


def test_the_trace_is_read_from_all_its_parts_one_row_per_request() -> None:
    trace = read_trace(TRACE)
    assert len(trace) == 24 and trace["request_id"].is_unique
    assert set(trace["model"]) == {"m"}
    assert (trace["REQUEST_START"] <= trace["COMPUTE_START"]).all()
    assert (trace["COMPUTE_START"] < trace["COMPUTE_END"]).all()


def test_a_trace_without_timestamps_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text('[{"id": 1, "model_name": "m", "model_version": 1, "request_id": "L-0"}]')
    with pytest.raises(ValueError, match="level=TIMESTAMPS"):
        read_trace(tmp_path / "trace.json")


def test_a_trace_of_a_server_that_died_before_tracing_is_empty_not_misconfigured(tmp_path: Path) -> None:
    """The collector leaves out a setting whose server died before its trace wrote a part
    (``EmptyTrace``), and stops on a trace written without timestamps (any other ValueError)."""
    with pytest.raises(EmptyTrace, match="traced no request"):
        read_trace(tmp_path / "trace.json")  # no part at all
    (tmp_path / "trace.json").write_text("[]")
    with pytest.raises(EmptyTrace):
        read_trace(tmp_path / "trace.json")
    (tmp_path / "trace.json").write_text('[{"id": 1, "model_name": "m", "model_version": 1, "request_id": "L-0"}]')
    with pytest.raises(ValueError) as refused:
        read_trace(tmp_path / "trace.json")
    assert not isinstance(refused.value, EmptyTrace)
    (tmp_path / "trace.json.1").write_text('[{"id": 2, "model_name": "m", "req')  # cut mid-write
    with pytest.raises(ValueError) as refused:  # the whole part before it still read, and still refused
        read_trace(tmp_path / "trace.json")
    assert "level=TIMESTAMPS" in str(refused.value)


def test_requests_join_the_trace_with_the_batch_each_rode_in() -> None:
    trace = read_trace(TRACE)
    run, start_at = _client_run(trace)
    frame = load_frame(trace, run, start_at, np.arange(24) * 1e-3)
    assert sorted(frame.drop_duplicates("start_us")["batch_size"].tolist()) == [1, 7, 8, 8]
    assert (frame["sent_us"] < frame["received_us"]).all()
    assert (frame["received_us"] <= frame["start_us"]).all() and (frame["start_us"] < frame["finish_us"]).all()
    assert (frame["finish_us"] < frame["answered_us"]).all()
    assert frame["received_us"].iloc[0] == 1000  # microseconds from the load's start
    assert frame["scheduled_us"].tolist() == [1000 * i for i in range(24)]


def test_two_instances_batches_starting_within_a_microsecond_stay_two_batches() -> None:
    trace = read_trace(TRACE)
    starts = sorted(trace["COMPUTE_START"].unique())
    # the third batch (8 requests) starts 1 ns after the second (7), as another instance's might
    moved = trace["COMPUTE_START"].where(trace["COMPUTE_START"] != starts[2], starts[1] + 1)
    run, start_at = _client_run(trace)
    frame = load_frame(trace.assign(COMPUTE_START=moved), run, start_at, np.arange(24) * 1e-3)
    batches = frame.groupby("start_us")["batch_size"].agg(["size", "first"])
    assert sorted(batches["size"].tolist()) == [1, 7, 8, 8]  # four batches still, each its own size
    assert (batches["size"] == batches["first"]).all()


def test_a_request_missing_from_the_trace_is_named() -> None:
    trace = read_trace(TRACE)
    run, start_at = _client_run(trace)
    run.request_ids[3] = "L-99"
    with pytest.raises(ValueError, match="L-99"):
        load_frame(trace, run, start_at, np.zeros(24))


def test_statistics_become_seconds_per_batch_between_two_answers() -> None:
    totals = batch_totals(STATISTICS)
    assert totals[8] == (74, 4627517 + 627827303 + 19975223)
    assert mean_seconds(totals) == pytest.approx({1: 11716457 / 1e9, 8: totals[8][1] / 74 / 1e9})
    earlier = {1: (1, 11716457), 8: (70, 600_000_000)}
    assert mean_seconds(totals, earlier) == pytest.approx({8: (totals[8][1] - 600_000_000) / 4 / 1e9})
    assert mean_seconds(totals, earlier, least=5) == {}


def test_the_service_table_takes_the_loads_batches_and_the_serial_pass_where_they_are_few() -> None:
    frame = pd.DataFrame({"level": 0.3, "start_us": np.arange(12) * 100, "finish_us": np.arange(12) * 100 + 50,
                          "batch_size": [8] * 10 + [3, 3]})
    serial = pd.DataFrame({"batch": [1, 3, 8], "service_s": [1e-5, 2e-5, 3e-5]})
    table = service_table([frame], serial, least=5)
    assert sorted(table.loc[table["source"] == "loads", "batch"].unique()) == [8]
    assert (table.loc[table["source"] == "loads", "service_s"] == 50e-6).all()
    assert table.loc[table["source"] == "serial", "batch"].tolist() == [1, 3]
    assert service_table([], serial)["source"].eq("serial").all()


def test_the_cli_refuses_threads_for_triton_and_names_pytriton_where_it_is_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["collect", "serving", "--server", "triton", "--threads", "1",
                                       "--out", str(tmp_path), "--device", "cpu", "--models", "nas-3"])
    assert result.exit_code == 1 and "--threads" in result.output
    if importlib.util.find_spec("pytriton") is not None:
        pytest.skip("PyTriton is installed here: the check would serve")
    result = CliRunner().invoke(main, ["collect", "serving", "--server", "triton", "--out", str(tmp_path),
                                       "--device", "cpu", "--models", "nas-3"])
    assert result.exit_code == 1 and "nvidia-pytriton" in result.output
    assert not list(tmp_path.iterdir())


def test_loads_are_fractions_of_the_capacity_measured_unless_rates_are_given() -> None:
    assert Loads((0.3, 0.6)).rates(1000.0) == [300.0, 600.0]
    assert Loads((0.3, 0.6), (250.0, 1200.0)).rates(1000.0) == [250.0, 1200.0]  # a plan's qps, whatever was measured


@pytest.mark.parametrize("rate", [0.0, -5.0, float("nan"), float("inf"), "100", True, 2e7])
def test_a_rate_that_is_no_number_of_requests_in_range_is_refused_by_name(rate: object) -> None:
    with pytest.raises(ValueError, match="--rates: each must be a number of requests a second"):
        check_rates([100.0, rate])  # type: ignore[list-item]


def test_a_rate_given_twice_is_refused_and_numpy_numbers_pass() -> None:
    with pytest.raises(ValueError, match="--rates: a rate is given twice"):
        check_rates([500.0, 500.0])
    check_rates([np.int64(500), np.float64(250.5)])


@pytest.mark.parametrize(("args", "said"), [
    (["--rates", "500,x"], "--rates must be requests a second"),
    (["--rates", "500,-1"], "--rates: each must be a number of requests a second"),
    (["--rates", "500,500"], "--rates: a rate is given twice"),
    (["--rates", "500", "--levels", "0.3"], "--rates replaces --levels"),
    (["--rates", "500", "--server", "ours"], "only with --server triton"),
])
def test_the_cli_refuses_bad_rates_before_it_serves_or_writes(tmp_path: Path, args: list[str], said: str) -> None:
    command = ["collect", "serving", "--out", str(tmp_path), "--device", "cpu", "--models", "nas-3", *args]
    if "--server" not in args:
        command += ["--server", "triton"]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1 and said in result.output
    assert not list(tmp_path.iterdir())


def test_settings_of_several_instances_need_a_one_instance_setting_that_times_their_summed_batch() -> None:
    from collectors.batching_server import ServerSettings

    def settings(*names: str) -> list[ServerSettings]:
        return [ServerSettings.parse(n) for n in names]

    check_alone_sizes(settings("mb8-nodelay", "mb16-delay500us"))  # one instance each: nothing to check
    check_alone_sizes(settings("mb16-nodelay", "mb4-nodelay-x4", "mb8-nodelay-x2"))
    with pytest.raises(ValueError, match="mb4-nodelay-x4.*add --setting mb16-nodelay"):
        check_alone_sizes(settings("mb8-nodelay", "mb4-nodelay-x4"))
    with pytest.raises(ValueError, match="the largest: none"):
        check_alone_sizes(settings("mb4-nodelay-x2"))
