"""The service under real gunicorn (gthread workers, no preload), called through the client.

Two workers stand for a production server: a graph stored through one is served by the other,
/metrics adds up all workers, and a reload reaches every worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import DEVICE, ROOT, bundle_version, gunicorn_server

from predictor.zoo import load_zoo_graph
from service.client import LatpredClient

pytest.importorskip("gunicorn")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: Any) -> Iterator[tuple[LatpredClient, subprocess.Popen]]:
    env = {"LATPRED_WORKERS": "2", "LATPRED_THREADS": "2", "LATPRED_DATA_DIR": str(tmp_path_factory.mktemp("data")),
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


def test_the_config_sizes_workers_to_the_cores_without_preload(tmp_path: Path) -> None:
    code = ("import json, runpy; c = runpy.run_path('service/gunicorn_conf.py'); "
            "print(json.dumps({k: c[k] for k in ('workers', 'threads', 'worker_class', 'preload_app', 'bind')}))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATPRED_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)  # or the config makes a folder of its own
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    conf = json.loads(out.stdout)
    assert conf == {"workers": len(os.sched_getaffinity(0)), "threads": 4, "worker_class": "gthread",
                    "preload_app": False, "bind": "127.0.0.1:8000"}
