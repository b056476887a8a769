"""Bundles that survive restarts (#13, item 7): a reload verifies the new bundle whole before it
switches, a failed one answers 409 and changes nothing, and a worker that starts after it serves
the last good bundle kept under the data directory, never the broken folder.

Every bundle here is a copy in a temporary folder: the shipped one is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from service_helpers import (
    DEVICE,
    ROOT,
    assert_problem,
    bundle_version,
    bundles_with_host,
    child_pids,
    gunicorn_server,
)

from predictor.bundle import BUNDLE_VERSION, TARGETS, check_files, file_sha256
from service.app import create_app
from service.client import LatpredClient, LatpredError
from service.config import ServiceConfig
from service.last_good import POINTER, LastGoodStore, bundle_id

BROKEN = "2099-broken"


def _setup(tmp_path: Path) -> tuple[Path, ServiceConfig]:
    root = bundles_with_host(tmp_path / "bundles", only=(DEVICE,))
    return root, ServiceConfig(bundle_dir=root, data_dir=tmp_path / "data", open_writes=True)


def _started(config: ServiceConfig) -> Any:
    """A new app over ``config``, its bundles loaded: what a gunicorn worker is once it has started."""
    app = create_app(config, load=False)
    app.extensions["latpred"].registry.load()
    return app


def _set_version(root: Path, version: str) -> None:
    meta_path = root / DEVICE / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["version"] = version
    meta_path.write_text(json.dumps(meta, indent=1))


def _break(root: Path) -> Path:
    """A new version whose first kernel model file is cut short (as a copy that ran out of disk);
    returns that file."""
    _set_version(root, BROKEN)
    victim = sorted((root / DEVICE).glob("kernel-*.txt.gz"))[0]
    victim.write_bytes(victim.read_bytes()[:1000])
    return victim


def _served_everywhere(client: Any, version: str) -> None:
    """Predictions in both modes, /v1/models and /readyz all say ``version`` is served."""
    for mode in ("cudagraph", "eager"):
        r = client.post("/v1/predict", json={"model": "resnet18", "mode": mode, "layers": False})
        assert r.status_code == 200, r.get_data(as_text=True)[:500]
        assert r.get_json()["model_version"] == version
    assert client.get("/v1/models").get_json()["bundles"] == [{"device": DEVICE, "version": version}]
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.get_json()["model_versions"] == {DEVICE: version}


def test_a_truncated_bundle_is_refused_by_name_and_changes_nothing(tmp_path: Path) -> None:
    root, config = _setup(tmp_path)
    client = _started(config).test_client()
    victim = _break(root)
    body = assert_problem(client.post("/v1/models/reload"), 409)
    assert body["type"].endswith("bundle-invalid")
    assert victim.name in body["detail"] and "corrupt or truncated" in body["detail"]
    assert victim.name in body["failed"][DEVICE]
    assert body["bundles"] == [{"device": DEVICE, "version": bundle_version()}]
    _served_everywhere(client, bundle_version())
    models = client.get("/v1/models").get_json()
    assert victim.name in models["errors"][DEVICE] and "last good" in models["fallbacks"][DEVICE]
    # nothing switched, so the other workers are not told to reload (they would only fail the same way)
    assert not (config.graph_store / ".reload").exists()


def test_a_worker_started_after_a_failed_reload_serves_the_last_good_bundle(tmp_path: Path) -> None:
    root, config = _setup(tmp_path)
    first = _started(config).test_client()
    _break(root)
    assert_problem(first.post("/v1/models/reload"), 409)
    late = _started(config).test_client()  # a worker gunicorn started afterwards: same folders
    _served_everywhere(late, bundle_version())
    ready = late.get("/readyz").get_json()
    assert "last good" in ready["fallbacks"][DEVICE] and bundle_version() in ready["fallbacks"][DEVICE]
    assert "corrupt or truncated" in late.get("/v1/models").get_json()["errors"][DEVICE]


def test_a_worker_with_no_last_good_bundle_still_refuses_a_broken_folder(tmp_path: Path) -> None:
    """Without a verified bundle ever kept, there is nothing whole to serve: 503, saying why."""
    root, config = _setup(tmp_path)
    _break(root)
    client = _started(config).test_client()
    body = assert_problem(client.get("/readyz"), 503)
    assert "corrupt or truncated" in body["detail"]
    assert LastGoodStore(config.last_good_dir).current_id(DEVICE) is None


def test_a_good_reload_becomes_the_last_good_bundle(tmp_path: Path) -> None:
    root, config = _setup(tmp_path)
    client = _started(config).test_client()
    store = LastGoodStore(config.last_good_dir)
    first_id = store.current_id(DEVICE)
    assert first_id == bundle_id(root / DEVICE)
    _set_version(root, "2099-next")
    assert client.post("/v1/models/reload").status_code == 200
    new_id = store.current_id(DEVICE)
    assert new_id == bundle_id(root / DEVICE) != first_id
    copies = [p.name for p in (config.last_good_dir / DEVICE).iterdir() if p.is_dir()]
    assert copies == [new_id]  # the older copy is gone
    check_files(config.last_good_dir / DEVICE / new_id)
    # the folder breaks next; a worker that starts then serves the newest good bundle, not the first
    _break(root)
    _served_everywhere(_started(config).test_client(), "2099-next")


def test_a_bundle_that_fails_its_smoke_prediction_is_refused(tmp_path: Path) -> None:
    """Whole files that load can still fail every request: here the per-family kernel target has
    no model for conv2d. The checksums pass; the smoke prediction does not."""
    root, config = _setup(tmp_path)
    client = _started(config).test_client()
    meta_path = root / DEVICE / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["targets"]["kernel"]["files"]["conv2d"]
    meta["version"] = BROKEN
    meta_path.write_text(json.dumps(meta, indent=1))
    body = assert_problem(client.post("/v1/models/reload"), 409)
    assert "smoke prediction" in body["detail"] and "conv2d" in body["detail"]
    _served_everywhere(client, bundle_version())


def test_a_folder_without_its_metadata_is_a_broken_bundle_not_a_removed_device(tmp_path: Path) -> None:
    root, config = _setup(tmp_path)
    _started(config)
    (root / DEVICE / "metadata.json").unlink()  # a copy under way writes metadata.json last, say
    client = _started(config).test_client()
    _served_everywhere(client, bundle_version())
    assert "metadata.json is missing" in client.get("/v1/models").get_json()["errors"][DEVICE]


# ------------------------------------------------------------------------------- the store itself
RECORDER = """
import sys
from pathlib import Path
from service.last_good import LastGoodStore, bundle_id
store, sources, rounds, offset = LastGoodStore(Path(sys.argv[1])), sys.argv[2:4], int(sys.argv[4]), int(sys.argv[5])
for i in range(rounds):
    source = Path(sources[(i + offset) % 2])
    store.record("dev", source, bundle_id(source))
    with store.reading("dev") as folder:
        assert folder is not None and (folder / "metadata.json").exists(), folder
"""


def _fake_bundle(folder: Path, tag: str, size: int = 1 << 20) -> Path:
    """A bundle's files and metadata (checksums right, no real models): all ``record`` reads."""
    folder.mkdir(parents=True)
    targets = {}
    for n, target in enumerate(TARGETS):
        path = folder / f"{target}.bin"
        path.write_bytes(bytes([n, ord(tag[0])]) * (size // 2))
        targets[target] = {"library": "xgboost", "interval_log": {},
                           "files": {"*": {"file": path.name, "sha256": file_sha256(path)}}}
    meta = {"bundle_version": BUNDLE_VERSION, "version": tag, "feature_columns": [], "targets": targets}
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


def test_workers_that_record_at_once_leave_one_whole_bundle(tmp_path: Path) -> None:
    """Four processes (gunicorn's workers) each switch the alias between two bundles 8 times."""
    a, b = _fake_bundle(tmp_path / "a", "a"), _fake_bundle(tmp_path / "b", "b")
    store_dir = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, "-c", RECORDER, str(store_dir), str(a), str(b), "8", str(i)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(4)]
    outputs = [(p.wait(timeout=120), p.stdout.read().decode() if p.stdout else "") for p in procs]
    assert [rc for rc, _ in outputs] == [0] * 4, "\n".join(out[-2000:] for _, out in outputs)
    current = LastGoodStore(store_dir).current_id("dev")
    assert current in (bundle_id(a), bundle_id(b))
    assert sorted(p.name for p in (store_dir / "dev").iterdir()) == sorted([current, POINTER])
    check_files(store_dir / "dev" / str(current))


# ------------------------------------------------------------------------------- real gunicorn
def _all_answered(client: LatpredClient, version: str, n: int = 12) -> None:
    """``n`` predicts and a /readyz, each answered 200 with ``version``: raises LatpredError otherwise."""
    for i in range(n):
        out = client.predict("resnet18", mode=("cudagraph", "eager")[i % 2], layers=False)
        assert out["model_version"] == version
    status, ready = client.request("GET", "/readyz")
    assert status == 200 and ready["model_versions"] == {DEVICE: version}


def _kill_and_wait_for_respawn(master: int, victim: int, timeout_s: float = 60) -> None:
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while True:
        workers = child_pids(master)
        if len(workers) == 2 and victim not in workers:
            return
        assert time.monotonic() < deadline, f"gunicorn did not replace worker {victim}: {workers}"
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_gunicorn_workers_killed_after_a_failed_reload_still_answer(tmp_path: Path) -> None:
    pytest.importorskip("gunicorn")
    root = bundles_with_host(tmp_path / "bundles", only=(DEVICE,))
    env = {"LATPRED_WORKERS": "2", "LATPRED_THREADS": "2", "LATPRED_BUNDLES": str(root),
           "LATPRED_DATA_DIR": str(tmp_path / "data"), "LATPRED_API_KEY": "rk"}
    with gunicorn_server(env, tmp_path / "gunicorn.log", api_key="rk") as (client, proc):
        deadline = time.monotonic() + 30
        while len(workers := child_pids(proc.pid)) != 2:
            assert time.monotonic() < deadline, workers
            time.sleep(0.1)
        _break(root)
        with pytest.raises(LatpredError) as refused:
            client.reload()
        assert refused.value.status == 409 and "corrupt or truncated" in refused.value.problem["detail"]
        # One worker dies and is replaced, then the other: requests meanwhile may reach either the
        # old worker or the new one; once both are new, every answer comes from a worker that
        # loaded its bundle after the failed reload.
        first, second = sorted(workers)
        _kill_and_wait_for_respawn(proc.pid, first)
        _all_answered(client, bundle_version())
        _kill_and_wait_for_respawn(proc.pid, second)
        _all_answered(client, bundle_version())
        status, ready = client.request("GET", "/readyz")
        assert DEVICE in ready["fallbacks"], ready
        assert proc.poll() is None
