"""Helpers shared by the service tests (a module of its own: conftest is for fixtures)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, bundle_dirs
from service.client import LatpredClient, LatpredError
from service.problems import PROBLEM_JSON

DEVICE = "nvidia-h200"
#: the measured CPUs, each with a bundle of its own: the GPU machine's host, and the CPU latpred runs on here
CPU = "cpu-intel-r-xeon-r-processor"
WORKPLACE_CPU = "cpu-amd-epyc"
ROOT = Path(__file__).absolute().parents[2]

#: a valid host profile (the H200 collection host's order of magnitude), for bundles that carry none
TEST_HOST: dict[str, Any] = {
    "schema_version": 1, "id": "test-host-1", "label": "measured",
    "costs_us": {"elementwise": 7.0, "gemm": 11.5, "conv": 12.8, "norm": 10.7, "attention": 16.8, "view": 0.6,
                 "copy": 8.6, "module_call": 0.9},
    "cpu_model": "Intel Xeon", "cpu_cores": 16, "measured_at": "2026-12-01T04:04:00+00:00",
}


def transfer_version() -> str:
    """The shipped transfer bundle's version."""
    return str(json.loads((DEFAULT_BUNDLE_DIR / "transfer" / "metadata.json").read_text())["version"])


def host_profile(**changes: Any) -> dict[str, Any]:
    """A copy of ``TEST_HOST`` with ``changes`` (top-level fields) applied."""
    return {**copy.deepcopy(TEST_HOST), **changes}


def bundles_with_host(root: Path, profile: dict[str, Any] | None = None, only: tuple[str, ...] | None = None) -> Path:
    """A copy of the shipped bundles (``only`` these folders, if given) under ``root`` in which
    each carries a default host profile: its own where it has one (a bundle trained with host
    profiles), else ``profile`` (default ``TEST_HOST``). Eager predictions need one, and the
    service's tests must pass on the shipped bundle, and on a bundle trained before host profiles
    existed, which names none."""
    for device, source in bundle_dirs(DEFAULT_BUNDLE_DIR).items():
        if only is not None and device not in only:
            continue
        target = root / device
        shutil.copytree(source, target)
        meta_path = target / "metadata.json"
        meta = json.loads(meta_path.read_text())
        meta.setdefault("host_profile", copy.deepcopy(profile or TEST_HOST))
        meta_path.write_text(json.dumps(meta, indent=1))
    return root


def assert_problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem with ``status`` (and naming ``field`` if given)."""
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True)[:500])
    assert response.mimetype == PROBLEM_JSON, response.mimetype
    body = response.get_json(force=True)
    assert body["status"] == status and body["title"] and body["detail"] and body["type"].startswith("urn:")
    if field is not None:
        assert body.get("field") == field, body
    return body


def bundle_version(device: str = "") -> str:
    """The shipped bundle's version of ``device`` (default: the H200's)."""
    return str(json.loads((DEFAULT_BUNDLE_DIR / (device or DEVICE) / "metadata.json").read_text())["version"])


def small_onnx(batch: int | str = 1, name: str = "tiny_cnn") -> bytes:
    """A small CNN as ONNX bytes, built with onnx.helper (no torch needed): conv, relu, pool, gemm."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(np.zeros(8, np.float32), "B"),
        numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "Wfc"),
        numpy_helper.from_array(np.zeros(10, np.float32), "Bfc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "Wfc", "Bfc"], ["y"], name="fc", transB=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])
    graph = helper.make_graph(nodes, name, [x], [y], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def sha256_of_canonical(ir: dict[str, Any]) -> str:
    canonical = json.dumps(ir, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def readyz_detail(client: LatpredClient) -> str:
    """What a 503 from /readyz says ('' when it answers 200)."""
    try:
        client.request("GET", "/readyz")
    except LatpredError as exc:
        return str(exc.problem.get("detail", ""))
    return ""


@contextlib.contextmanager
def gunicorn_server(env: dict[str, str], log: Path, api_key: str,
                    ready_s: float = 90) -> Iterator[tuple[LatpredClient, subprocess.Popen[bytes]]]:
    """Real gunicorn (``service/gunicorn_conf.py``) on a free loopback port with ``env`` added,
    its output in ``log``; yields a client once /readyz answers 200, and stops it at the end."""
    port = free_port()
    full = {**os.environ, "LATPRED_BIND": f"127.0.0.1:{port}", "LATPRED_ACCESS_LOG": "", **env}
    full.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "service/gunicorn_conf.py",
                                 "service.wsgi:app"], cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT)
    client = LatpredClient(f"http://127.0.0.1:{port}", api_key=api_key, timeout=30)
    try:
        deadline = time.monotonic() + ready_s
        while not client.ready():
            failed = "could not be loaded" in readyz_detail(client)
            if failed or proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gunicorn did not get ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield client, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (a gunicorn master's workers), from /proc."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it ended meanwhile
            continue
        if int(text[text.rindex(")") + 2:].split()[1]) == pid:
            children.add(int(stat.parent.name))
    return children
