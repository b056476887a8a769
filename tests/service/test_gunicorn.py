"""The service under real gunicorn (gthread workers, no preload), called through the client.

Two workers stand for a production server: a graph stored through one is served by the other,
/metrics adds up all workers, and a reload reaches every worker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import CPU, DEVICE, ROOT, WORKPLACE_CPU, bundle_version, gunicorn_server

from predictor.zoo import load_zoo_graph
from service.client import LatpredClient

pytest.importorskip("gunicorn")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: Any) -> Iterator[tuple[LatpredClient, subprocess.Popen]]:
    env = {"LATPRED_WORKERS": "2", "LATPRED_DATA_DIR": str(tmp_path_factory.mktemp("data")),
           "LATPRED_API_KEY": "gk"}
    with gunicorn_server(env, tmp_path_factory.mktemp("gunicorn") / "gunicorn.log", api_key="gk") as running:
        yield running


def test_predictions_through_gunicorn(server: Any) -> None:
    client, _ = server
    out = client.predict("resnet50", batch=8, layers=False)
    assert out["device"] == DEVICE and out["model_version"] == bundle_version() and out["total_ms"] > 0
    batch = client.predict_batch(["resnet18", "bert-base"], [{"batch": 1}, {"batch": 32, "mode": "eager"}])
    assert batch["count"] == 4 and batch["failed"] == 0
    assert float(client.latency("resnet50", batch=8, format="txt")) == pytest.approx(out["total_ms"], abs=1e-4)


def test_a_stored_graph_is_served_by_every_worker(server: Any) -> None:
    client, _ = server
    gid = client.upload_graph(load_zoo_graph("resnet34").to_json())["id"]
    # Several requests: with two workers, both answer some of them.
    for _ in range(8):
        assert client.predict(graph_id=gid, layers=False)["model"] == "resnet34"


def test_metrics_add_up_all_workers(server: Any) -> None:
    client, _ = server

    def predictions() -> float:
        text = client.request("GET", "/metrics")[1]
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("latpred_predictions_total{"))

    before = predictions()
    for _ in range(10):
        client.predict("resnet18", layers=False)
    assert predictions() == before + 10
    text = client.request("GET", "/metrics")[1]
    assert f'latpred_model_info{{device="{DEVICE}",version="{bundle_version()}"}} 1.0' in text


def test_bad_input_does_not_hurt_the_server(server: Any) -> None:
    client, proc = server
    for body, ct in ((b"[" * 200_000, "application/json"), (b"{", "application/json"), (b"\x00" * 1000,
                                                                                         "text/plain")):
        status = None
        try:
            client.request("POST", "/v1/predict", body=body, content_type=ct)
        except Exception as exc:  # LatpredError
            status = getattr(exc, "status", None)
        assert status in (400, 415)
    assert proc.poll() is None
    assert client.predict("resnet18", layers=False)["total_ms"] > 0


def _port(client: LatpredClient) -> int:
    return int(client.base_url.rsplit(":", 1)[1])


def _raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` on a fresh connection and read what the server answers until it closes. A
    server that answers before the body ends (a 413) may close while we still send: the sending
    stops there, and the answer already received is kept."""
    received: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        def read() -> None:
            try:
                while chunk := sock.recv(65536):
                    received.append(chunk)
            except OSError:
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # answered and closed before the whole body went out
            pass
        reader.join(timeout)
    return b"".join(received)


def test_stalled_uploads_hold_up_neither_livez_nor_predictions(server: Any) -> None:
    """Twelve connections send half a body and stall, more than two gthread workers had threads:
    with gevent workers each costs a greenlet, and the server answers everyone else at once."""
    client, _ = server
    stalled = []
    try:
        for _ in range(12):
            sock = socket.create_connection(("127.0.0.1", _port(client)), timeout=10)
            sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n{\"model\": ")
            stalled.append(sock)
        time.sleep(0.5)
        for _ in range(5):
            started = time.monotonic()
            assert client.request("GET", "/livez")[0] == 200
            assert client.predict("resnet18", layers=False)["total_ms"] > 0
            assert time.monotonic() - started < 2.0  # seconds, not the stalled uploads' lifetime
    finally:
        for sock in stalled:
            sock.close()


def test_a_chunked_body_over_the_cap_is_a_413_and_a_runaway_chunk_line_a_fast_400(server: Any) -> None:
    client, _ = server
    head = (b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    small = _raw(_port(client), head + b"10\r\n" + b'{"model": "x"}  ' + b"\r\n0\r\n\r\n")
    assert small.startswith(b"HTTP/1.1 404"), small[:200]  # a chunked body under the cap is read as any other
    chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
    big = _raw(_port(client), head + chunk * 65 + b"0\r\n\r\n", timeout=60)  # 65 MiB > LATPRED_MAX_BODY_BYTES
    assert big.startswith(b"HTTP/1.1 413"), big[:200]
    started = time.monotonic()
    runaway = _raw(_port(client), head + b"f" * (4 << 20))  # a chunk-size line that never ends
    assert runaway.startswith(b"HTTP/1.1 400") and time.monotonic() - started < 5, runaway[:200]


def test_the_config_sizes_workers_to_the_cores_without_preload(tmp_path: Path) -> None:
    code = ("import json, runpy; c = runpy.run_path('service/gunicorn_conf.py'); "
            "print(json.dumps({k: c[k] for k in ('workers', 'threads', 'worker_class', 'preload_app', 'bind', "
            "'limit_request_line', 'reuse_port')}))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATPRED_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)  # or the config makes a folder of its own
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    conf = json.loads(out.stdout)
    assert conf == {"workers": len(os.sched_getaffinity(0)), "threads": 4,
                    "worker_class": "service.gevent_worker.LatpredGeventWorker", "preload_app": False,
                    "bind": "127.0.0.1:8000", "limit_request_line": 8190, "reuse_port": True}


def test_workers_compile_bundle_after_bundle_into_an_empty_cache_and_get_ready(tmp_path: Path) -> None:
    """A fresh machine's first start: each worker's loading thread compiles one bundle's trees in
    child processes, then the next bundle's. Under gevent's patched os.waitpid a child that the
    loop never reaped stayed a zombie and the second bundle's compile never ended (make run's
    /readyz answered 503 for good); two small bundles are enough to see it."""
    import shutil

    from predictor.bundle import DEFAULT_BUNDLE_DIR

    bundles = tmp_path / "bundles"
    for device in (CPU, WORKPLACE_CPU):  # 2 tree models each, about 20 s
        shutil.copytree(DEFAULT_BUNDLE_DIR / device, bundles / device)
    env = {"LATPRED_WORKERS": "2", "LATPRED_DATA_DIR": str(tmp_path / "data"), "LATPRED_BUNDLES": str(bundles),
           "LATPRED_CACHE_DIR": str(tmp_path / "compiled"), "LATPRED_TREES": "compiled"}
    with gunicorn_server(env, tmp_path / "gunicorn.log", api_key="gk", ready_s=150) as (client, _):
        out = client.predict(model="resnet18", device="epyc", batch=1, precision="fp32", mode="eager")
        assert out["device"] == WORKPLACE_CPU and out["total_ms"] > 0
    assert len(list((tmp_path / "compiled").glob("*.o"))) == 4  # each model once, though both workers compiled
