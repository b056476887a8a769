"""A serving run stopped from outside keeps what it measured and resumes with what it lacks: SIGTERM
turned into an exception (``collectors.stop_signal``), our own server's run stopped for real in a
process of its own, as ``timeout`` stops it (the whole process group signalled), then resumed; and
the bookkeeping a resumed Triton run does (its service table over two runs' loads), on real frames.
(Triton itself runs on the GPU machine only: benchmarks/triton_serving.sh.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.batching_server import ServerSettings
from collectors.fingerprint import read_fingerprint
from collectors.serving_check import (
    UNMEASURED,
    ModelToServe,
    models_to_serve,
    record_unmeasured,
    unmeasured_loads,
    write_meta,
    write_model,
    write_requests,
)
from collectors.stop_signal import StopRequested, stop_exit_code, stop_in, stop_on_sigterm
from collectors.triton_serving import resumed_service, service_table

ROOT = Path(__file__).resolve().parents[2]
A, B = ServerSettings("mb2-nodelay", 2), ServerSettings("mb4-nodelay", 4)
X2 = ServerSettings("mb2-nodelay-x2", 2, instances=2)


def _sigterm_here() -> None:
    """SIGTERM to this process, and time for its handler to run (it runs between bytecodes)."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)


def test_sigterm_is_a_stop_no_except_exception_takes_and_the_handler_before_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    taken_as_failure = False
    with pytest.raises(StopRequested) as stopped:
        with stop_on_sigterm():
            try:
                _sigterm_here()
            except Exception:  # what lets a collector carry on past a dead server
                taken_as_failure = True
    assert not taken_as_failure
    assert stopped.value.signum == signal.SIGTERM and str(stopped.value) == "stopped by SIGTERM"
    assert stop_exit_code(stopped.value) == 143 and stop_exit_code(KeyboardInterrupt()) == 130
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_sigterm_while_the_first_is_handled_is_ignored() -> None:
    wrote = False
    with pytest.raises(StopRequested):
        with stop_on_sigterm():
            try:
                _sigterm_here()
            except StopRequested:
                _sigterm_here()  # the measurements being written: not cut short
                wrote = True
                raise
    assert wrote


def test_off_the_main_thread_sigterm_is_left_as_it_was() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def worker() -> None:
        with stop_on_sigterm():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [before] and signal.getsignal(signal.SIGTERM) is before


def test_a_stop_is_found_behind_a_failure_it_caused() -> None:
    """A server's shutdown that fails while a stop passes through it still ends the run as a stop."""
    try:
        try:
            raise StopRequested()
        except StopRequested:
            raise RuntimeError("the server would not stop") from None
    except RuntimeError as exc:
        assert isinstance(stop_in(exc), StopRequested)
    assert stop_in(RuntimeError("alone")) is None
    assert isinstance(stop_in(KeyboardInterrupt()), KeyboardInterrupt)


LOAD_SAID = re.compile(r"^  (\S+) at (\d\.\d\d) x ")


def _serve(out: Path, models: str, stop_after_first_load: bool, stop: signal.Signals = signal.SIGTERM,
           stop_in_setting: str | None = None) -> tuple[int, list[str]]:
    """``latpred collect serving`` on the CPU with the empty model (a load of 30,000 requests takes
    about half a second): two settings, three levels. Its own session, as under ``timeout``: the stop
    (``stop``, after the first load reported, of ``stop_in_setting`` where given) signals the whole
    group, the load client among it."""
    command = [sys.executable, "-m", "latpred", "collect", "serving", "--device", "cpu", "--out", str(out),
               "--models", models, "--levels", "0.3,0.6,0.9", "--seconds", "0.5",
               "--setting", A.name, "--setting", B.name]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            said = LOAD_SAID.match(line)
            if stop_after_first_load and said and stop_in_setting in (None, said[1]):
                os.killpg(process.pid, stop)
                stop_after_first_load = False
        return process.wait(timeout=60), lines
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_our_servers_run_stopped_by_sigterm_keeps_its_loads_says_what_it_lacks_and_resumes(tmp_path: Path) -> None:
    code, said = _serve(tmp_path, "empty,nas-3", stop_after_first_load=True)
    text = "\n".join(said)
    assert code == 143, text
    folder = tmp_path / read_fingerprint("cpu").device_id / "serving"
    reported = {(m[1], float(m[2])) for line in said if (m := LOAD_SAID.match(line))}
    rows = pd.read_parquet(folder / "requests-empty-fp16.parquet")
    on_disk = set(rows.groupby(["setting", "level"]).groups)
    assert reported and reported <= on_disk, text  # every load the log reported is on disk
    assert not list(folder.glob("*nas-3*")), "a model after the stop was served"
    assert "stopped by SIGTERM" in text and "nas-3 not served" in text
    unmeasured = json.loads((folder / "meta.json").read_text())[UNMEASURED]["empty"]
    assert unmeasured[B.name] == [0.3, 0.6, 0.9]  # the stop came in the first setting
    assert f"not measured: {A.name} at" in text or A.name not in unmeasured
    assert f"{B.name} at 0.3, 0.6, 0.9" in text
    service = pd.read_parquet(folder / "service-empty-fp16.parquet")

    code, said = _serve(tmp_path, "empty", stop_after_first_load=False)
    text = "\n".join(said)
    assert code == 0, text
    assert "empty: partial on disk" in text and f"serving {B.name}" in text
    assert not any(line.startswith(f"  {A.name} at") for line in said)  # the setting on disk is not served again
    resumed = pd.read_parquet(folder / "requests-empty-fp16.parquet")
    pd.testing.assert_frame_equal(resumed.iloc[:len(rows)], rows)  # appended to, as it was
    assert set(resumed.loc[resumed["setting"] == B.name, "level"]) == {0.3, 0.6, 0.9}
    assert len(pd.read_parquet(folder / "service-empty-fp16.parquet")) == 2 * len(service)  # both runs' timings
    meta = json.loads((folder / "meta.json").read_text())
    assert (meta.get(UNMEASURED, {}).get("empty", {}).keys()) <= {A.name}  # only the setting cut part way


def test_a_kill_no_handler_sees_loses_at_most_the_setting_in_progress(tmp_path: Path) -> None:
    # SIGKILL (timeout -k, a lease's end) once the second setting's first load is reported: the first
    # setting was written when it ended
    code, said = _serve(tmp_path, "empty", stop_after_first_load=True, stop=signal.SIGKILL, stop_in_setting=B.name)
    text = "\n".join(said)
    assert code == -signal.SIGKILL, text
    folder = tmp_path / read_fingerprint("cpu").device_id / "serving"
    rows = pd.read_parquet(folder / "requests-empty-fp16.parquet")
    assert set(rows.groupby(["setting", "level"]).groups) >= {(A.name, 0.3), (A.name, 0.6), (A.name, 0.9)}, text
    code, said = _serve(tmp_path, "empty", stop_after_first_load=False)
    assert code == 0 and f"serving {B.name}" in "\n".join(said)
    resumed = pd.read_parquet(folder / "requests-empty-fp16.parquet")
    assert set(resumed.loc[resumed["setting"] == B.name, "level"]) == {0.3, 0.6, 0.9}


def _load(setting: str, level: float, sizes: list[int], start: int = 0) -> pd.DataFrame:
    """One load's requests as a requests file holds them: a batch per size in ``sizes``, 100 us each."""
    batch_start = start + np.arange(len(sizes)) * 1000
    rows = [(s, b, t) for s, b in zip(batch_start, sizes) for t in range(b)]
    return pd.DataFrame({"model": "m", "precision": "fp16", "setting": setting, "level": level,
                         "start_us": [r[0] for r in rows], "finish_us": [r[0] + 100 * r[1] for r in rows],
                         "batch_size": np.array([r[1] for r in rows], dtype=np.int16)})


def _serial(setting: str, sizes: range) -> pd.DataFrame:
    return pd.DataFrame({"batch": list(sizes) * 3, "service_s": [b * 9e-5 for b in sizes] * 3, "setting": setting})


def _sorted(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(["source", "batch", "service_s"]).reset_index(drop=True)


def test_a_resumed_models_service_table_is_the_one_a_single_run_would_have_built() -> None:
    """The first run served A (its loads formed size 2 rarely: A's serial pass gives it) and was
    stopped; the resumed run serves B, whose loads form size 2 often: one run serving both takes
    size 2 from the loads and drops both serial passes' size 2. A several-instance setting's loads
    are no batch's time alone and stay out."""
    first = [_load(A.name, 0.3, [1] * 6 + [2] * 2), _load(A.name, 0.6, [1] * 5, 50_000)]
    second = [_load(B.name, 0.3, [2] * 4 + [4] * 6), _load(B.name, 0.6, [3] * 5 + [4] * 2, 50_000)]
    several = [_load(X2.name, 0.3, [2] * 9)]
    serial_a, serial_b, serial_x = _serial(A.name, range(1, 3)), _serial(B.name, range(1, 5)), _serial(X2.name,
                                                                                                     range(1, 3))
    settings = (A, B, X2)
    single = service_table(first + second, pd.concat([serial_a, serial_b, serial_x]))
    on_disk = service_table(first, serial_a)  # what the stopped run wrote
    assert 2 in set(on_disk.loc[on_disk["source"] == "serial", "batch"])
    earlier = pd.concat(first, ignore_index=True)
    resumed = resumed_service(earlier, on_disk.assign(model="m", precision="fp16"), settings, second,
                              pd.concat([serial_b, serial_x]))
    pd.testing.assert_frame_equal(_sorted(resumed), _sorted(single))
    assert 2 not in set(resumed.loc[resumed["source"] == "serial", "batch"])
    # an earlier run's several-instance loads on disk stay out of it too
    with_x = resumed_service(pd.concat([earlier, several[0]], ignore_index=True), on_disk, settings, second,
                             pd.concat([serial_b, serial_x]))
    pd.testing.assert_frame_equal(_sorted(with_x), _sorted(single))
    # nothing on disk: the table of this run's loads alone
    pd.testing.assert_frame_equal(resumed_service(None, None, settings, second, serial_b),
                                  service_table(second, serial_b))


def test_unmeasured_loads_match_levels_within_rounding_and_rates_exactly() -> None:
    capacity = 1234.567
    rows = pd.concat([_load(A.name, 0.3 * capacity / capacity, [1]), _load(A.name, 0.6 * capacity / capacity, [1]),
                      _load(B.name, 0.3, [1])], ignore_index=True)
    assert unmeasured_loads(rows, (A, B), (0.3, 0.6, 0.9)) == {A.name: [0.9], B.name: [0.6, 0.9]}
    assert unmeasured_loads(rows, (A,), (0.3, 0.6)) == {}
    assert unmeasured_loads(None, (A,), (0.3,)) == {A.name: [0.3]}
    rated = rows.assign(offered_qps=np.where(rows["setting"] == A.name, 100.0, 250.0))
    assert unmeasured_loads(rated, (A, B), (100.0, 250.0), "offered_qps") == {A.name: [250.0], B.name: [100.0]}


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "serving"
    folder.mkdir()
    write_meta(folder, read_fingerprint("cpu"), "fp16", (0.3, 0.6), 1.0, 0, 1, (A, B))
    return folder


def test_a_model_on_disk_with_a_setting_missing_is_served_that_setting_alone(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    write_requests(pd.concat([_load(A.name, 0.3, [1]), _load(A.name, 0.6, [1])], ignore_index=True),
                   folder / "requests-partial-fp16.parquet")
    write_requests(pd.concat([_load(s.name, x, [1]) for s in (A, B) for x in (0.3, 0.6)], ignore_index=True),
                   folder / "requests-whole-fp16.parquet")
    write_requests(pd.concat([_load(A.name, 0.3, [1]), _load(B.name, 0.3, [1]), _load(B.name, 0.6, [1])],
                             ignore_index=True), folder / "requests-cut-fp16.parquet")
    said: list[str] = []
    items = list(models_to_serve(folder, ["partial", "whole", "cut", "new"], "fp16", (A, B), said.append,
                                 (0.3, 0.6)))
    assert [i.name for i in items] == ["partial", "new"]
    partial, new = items
    assert not partial.serves(A) and partial.serves(B) and new.serves(A) and new.earlier is None
    assert said[0].startswith("partial: partial on disk (2 loads of mb2-nodelay); serving mb4-nodelay")
    assert said[1] == "whole: on disk, skipped"
    assert said[2].startswith("cut: on disk, skipped; not measured: mb2-nodelay at 0.6")
    # the folder says which models are partial, and a resumed run with the same settings keeps saying it
    assert json.loads((folder / "meta.json").read_text())[UNMEASURED] == {"cut": {A.name: [0.6]}}
    write_meta(folder, read_fingerprint("cpu"), "fp16", (0.3, 0.6), 1.0, 0, 1, (A, B))
    assert json.loads((folder / "meta.json").read_text())[UNMEASURED] == {"cut": {A.name: [0.6]}}
    with pytest.raises(ValueError, match="other levels"):  # and still refuses loads measured otherwise
        write_meta(folder, read_fingerprint("cpu"), "fp16", (0.5,), 1.0, 0, 1, (A, B))
    record_unmeasured(folder, "cut", {})
    assert UNMEASURED not in json.loads((folder / "meta.json").read_text())


def test_writing_a_model_again_after_a_stop_appends_its_loads_and_timings_once(tmp_path: Path) -> None:
    """A stop that comes while a model is written has it written again: the same files, nothing twice."""
    folder = _folder(tmp_path)
    target = folder / "requests-m-fp16.parquet"
    earlier = pd.concat([_load(A.name, 0.3, [1]), _load(A.name, 0.6, [1])], ignore_index=True)
    write_requests(earlier, target)
    earlier_service = pd.DataFrame({"model": "m", "precision": "fp16", "batch": [1, 2], "service_s": [1e-3, 2e-3]})
    earlier_service.to_parquet(folder / "service-m-fp16.parquet")
    item = ModelToServe("m", "fp16", target, pd.read_parquet(target))
    frames = [_load(B.name, 0.3, [2])]
    timed = {1: np.array([1.1e-3]), 2: np.array([2.1e-3])}
    read_before = item.earlier_file("service")  # as the collectors read it: before the model is written
    assert read_before is not None
    rows = write_model(folder, item, frames, timed, read_before)
    assert write_model(folder, item, frames, timed, read_before) is not None
    assert rows is not None and len(rows) == len(earlier) + 2
    pd.testing.assert_frame_equal(pd.read_parquet(target), rows)
    assert len(pd.read_parquet(folder / "service-m-fp16.parquet")) == 4
    assert not list(folder.glob("*.partial"))
    assert write_model(folder, item, [], timed, earlier_service) is item.earlier  # nothing new: nothing written
