"""The graph store's limits: a total cap with least-recently-used eviction, a per-graph cap, and
a location under the data directory rather than the working directory.

The graphs are alexnet under names of one length, so each is the same number of bytes (``SIZE``)
and a cap can be stated in graphs.
"""

from __future__ import annotations

import fcntl
import io
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from service_helpers import assert_problem, small_onnx

from predictor.graph import Graph
from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.config import ServiceConfig
from service.graph_store import (
    EVICT_TO,
    LOCK_FILE,
    USAGE_FILE,
    GraphStore,
    GraphTooLargeError,
    canonical_bytes,
    graph_id,
)


def alexnet(name: str) -> Graph:
    return Graph.from_json({**load_zoo_graph("alexnet").to_json(), "name": name})


SIZE = len(canonical_bytes(alexnet("g0")))
#: four graphs fit and a fifth does not; evicting down to EVICT_TO of it leaves four.
CAP = int(4.5 * SIZE)
assert 4 * SIZE <= CAP * EVICT_TO < 5 * SIZE


def stored(root: Path) -> set[str]:
    return {p.stem for p in root.rglob("*.json")}


def on_disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.json"))


@pytest.fixture
def small(registry: Any, tmp_path: Path) -> Any:
    """An app whose store holds four graphs (writes open)."""
    config = ServiceConfig(data_dir=tmp_path, graph_store_max_bytes=CAP, graph_max_bytes=SIZE, open_writes=True)
    return create_app(config, registry=registry)


def post(client: Any, graph: Graph) -> str:
    r = client.post("/v1/graphs", json=graph.to_json())
    assert r.status_code in (200, 201), r.get_json()
    return str(r.get_json()["id"])


USES: dict[str, Callable[[Any, str], None]] = {
    "GET the graph": lambda c, gid: _ok(c.get(f"/v1/graphs/{gid}")),
    "predict by graph_id": lambda c, gid: _ok(c.post("/v1/predict", json={"graph_id": gid, "layers": False})),
    "a spreadsheet GET": lambda c, gid: _ok(c.get(f"/v1/latency?graph={gid}&format=txt")),
}


def _ok(response: Any) -> None:
    assert response.status_code == 200, response.get_data(as_text=True)[:300]


@pytest.mark.parametrize("use", list(USES))
def test_past_the_cap_the_least_recently_used_graph_goes_and_a_recently_used_one_stays(small: Any, use: str) -> None:
    client, root = small.test_client(), small.extensions["latpred"].config.graph_store
    first = post(client, alexnet("g0"))
    USES[use](client, first)  # a prediction now also parses it into this worker's cache
    older = [post(client, alexnet(f"g{i}")) for i in (1, 2, 3)]
    USES[use](client, first)  # used again (from the cache, for a prediction): now the most recent but none
    newest = post(client, alexnet("g4"))
    assert stored(root) == {first, *older[1:], newest}  # g1, the least recently used, went; only it
    assert on_disk(root) <= CAP


def test_an_evicted_id_is_answered_as_an_unknown_one(small: Any) -> None:
    client = small.test_client()
    gone = post(client, alexnet("g0"))
    for i in range(1, 5):
        post(client, alexnet(f"g{i}"))
    never = "f" * 64
    for gid in (gone, never):
        body = assert_problem(client.get(f"/v1/graphs/{gid}"), 404, "graph_id")
        assert "evicted" in body["detail"] and "store it again" in body["detail"]
    evicted = assert_problem(client.post("/v1/predict", json={"graph_id": gone}), 404, "graph_id")
    unknown = assert_problem(client.post("/v1/predict", json={"graph_id": never}), 404, "graph_id")
    assert evicted["type"] == unknown["type"] and "evicted" in evicted["detail"]
    assert post(client, alexnet("g0")) == gone  # stored again, under the same id
    assert client.get(f"/v1/graphs/{gone}").status_code == 200


def test_the_stored_bytes_stay_under_the_cap(small: Any) -> None:
    client, root = small.test_client(), small.extensions["latpred"].config.graph_store
    for i in range(12):
        gid = post(client, alexnet(f"g{i:x}"))
        assert gid in stored(root)  # the graph just written is never the one evicted
        assert on_disk(root) <= CAP
        assert int((root / USAGE_FILE).read_text()) == on_disk(root)  # the running total is exact
    assert len(stored(root)) == 4


def test_a_graph_evicted_by_another_worker_is_gone_from_this_ones_cache(small: Any, registry: Any) -> None:
    """Workers share only the folder: one that has a graph parsed must not keep serving it once
    another has evicted it, or the same id would answer differently by worker."""
    one = small.test_client()
    other = create_app(small.extensions["latpred"].config, registry=registry).test_client()
    gid = post(one, alexnet("g0"))
    _ok(one.post("/v1/predict", json={"graph_id": gid, "layers": False}))  # parsed and cached in `one`
    for i in range(1, 5):
        post(other, alexnet(f"g{i}"))
    assert_problem(one.post("/v1/predict", json={"graph_id": gid}), 404, "graph_id")


def test_a_graph_over_the_per_graph_cap_is_a_413_naming_the_limit(registry: Any, tmp_path: Path) -> None:
    config = ServiceConfig(data_dir=tmp_path, graph_max_bytes=1000, open_writes=True)
    client = create_app(config, registry=registry).test_client()
    body = assert_problem(client.post("/v1/graphs", json=alexnet("g0").to_json()), 413, "nodes")
    assert "LATPRED_GRAPH_MAX_BYTES" in body["detail"] and "1000" in body["detail"] and body["limit"] == 1000
    upload = {"onnx": (io.BytesIO(small_onnx()), "m.onnx")}
    body = assert_problem(client.post("/v1/graphs", data=upload, content_type="multipart/form-data"), 413, "onnx")
    assert "LATPRED_GRAPH_MAX_BYTES" in body["detail"]
    assert not stored(tmp_path)
    tiny = {**alexnet("t").to_json(), "nodes": alexnet("t").to_json()["nodes"][:1]}
    assert client.post("/v1/graphs", json=tiny).status_code == 201  # under the cap: stored


def test_the_graph_being_written_is_never_evicted(tmp_path: Path) -> None:
    """A graph as large as the whole store: every other goes, it stays, though the store is still
    above the level eviction aims for."""
    big = alexnet("a-much-longer-name-for-the-big-one")
    size = len(canonical_bytes(big))
    store = GraphStore(tmp_path, max_bytes=size, max_graph_bytes=size)
    small_one = Graph.from_json({**alexnet("s").to_json(), "nodes": alexnet("s").to_json()["nodes"][:1]})
    store.put(small_one)
    gid, created = store.put(big)
    assert created and stored(tmp_path) == {gid} and store.total_bytes() == size
    with pytest.raises(GraphTooLargeError):
        store.put(Graph.from_json({**big.to_json(), "name": big.name + "!"}))
    assert stored(tmp_path) == {gid}


def test_storing_a_stored_graph_again_counts_as_a_use(tmp_path: Path) -> None:
    store = GraphStore(tmp_path, max_bytes=CAP, max_graph_bytes=SIZE)
    ids = [store.put(alexnet(f"g{i}"))[0] for i in range(4)]
    assert store.put(alexnet("g0")) == (ids[0], False)
    store.put(alexnet("g4"))
    assert ids[0] in stored(tmp_path) and ids[1] not in stored(tmp_path)


def test_workers_storing_at_once_keep_the_total_exact_and_under_the_cap(tmp_path: Path) -> None:
    """Eight stores on one folder (workers' stand-ins), storing overlapping graphs (so some find
    theirs stored by another meanwhile) while others are evicted."""
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        store = GraphStore(tmp_path, max_bytes=CAP, max_graph_bytes=SIZE)
        try:
            for i in range(8):
                store.put(alexnet(f"g{(w + i) % 10}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert on_disk(tmp_path) <= CAP and int((tmp_path / USAGE_FILE).read_text()) == on_disk(tmp_path)
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_graph_is_put_in_place_only_under_the_stores_lock(tmp_path: Path) -> None:
    """Another process holding the lock (an flock on .lock, taken here as a gunicorn worker would)
    holds a new graph back from the store and from the total until it lets go."""
    store = GraphStore(tmp_path, max_bytes=CAP, max_graph_bytes=SIZE)
    store.put(alexnet("g0"))
    gid = graph_id(alexnet("g1"))
    writer = threading.Thread(target=store.put, args=(alexnet("g1"),))
    with open(tmp_path / LOCK_FILE, "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        writer.start()
        writer.join(timeout=0.5)
        assert writer.is_alive() and gid not in stored(tmp_path)
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    writer.join(timeout=10)
    assert gid in stored(tmp_path) and int((tmp_path / USAGE_FILE).read_text()) == 2 * SIZE


def test_a_missing_or_stale_running_total_is_recounted(tmp_path: Path) -> None:
    """The total is a file beside the graphs; one that does not describe the store (an older store,
    a graph deleted by hand) is counted again from the files, rather than evicting for nothing."""
    store = GraphStore(tmp_path, max_bytes=CAP, max_graph_bytes=SIZE)
    ids = [store.put(alexnet(f"g{i}"))[0] for i in range(3)]
    (tmp_path / USAGE_FILE).unlink()
    ids.append(store.put(alexnet("g3"))[0])
    assert int((tmp_path / USAGE_FILE).read_text()) == 4 * SIZE
    store.path(ids[0]).unlink()  # by hand: the total now says one graph too many
    ids.append(store.put(alexnet("g4"))[0])  # past the cap by the count, not by the files
    assert stored(tmp_path) == set(ids[1:]) and int((tmp_path / USAGE_FILE).read_text()) == 4 * SIZE


def test_the_default_location_is_the_users_data_dir_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    config = ServiceConfig.from_env({"HOME": str(home)})
    assert config.data_dir == home / ".local" / "share" / "latpred"
    assert (config.graph_store, config.host_store) == (config.data_dir / "graphs", config.data_dir / "hosts")
    for path in (config.data_dir, config.graph_store, config.host_store):
        assert path.is_absolute() and not path.is_relative_to(cwd)
    xdg = ServiceConfig.from_env({"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert xdg.graph_store == tmp_path / "xdg" / "latpred" / "graphs"
    relative_xdg = ServiceConfig.from_env({"HOME": str(home), "XDG_DATA_HOME": "share"})  # ignored, per XDG
    assert relative_xdg.data_dir == config.data_dir


def test_an_app_on_the_defaults_writes_under_the_data_dir(
        registry: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    env = {"LATPRED_DATA_DIR": str(tmp_path / "data"), "LATPRED_OPEN_WRITES": "1"}
    client = create_app(ServiceConfig.from_env(env), registry=registry).test_client()
    gid = post(client, alexnet("g0"))
    assert stored(tmp_path / "data" / "graphs") == {gid} and not list(cwd.rglob("*"))
    moved = ServiceConfig.from_env({**env, "LATPRED_GRAPH_STORE": str(tmp_path / "elsewhere")})
    assert moved.graph_store == tmp_path / "elsewhere" and moved.host_store == tmp_path / "data" / "hosts"


def test_the_caps_come_from_the_environment_and_are_checked_at_start_up() -> None:
    config = ServiceConfig.from_env({"LATPRED_GRAPH_STORE_MAX_BYTES": "5000000", "LATPRED_GRAPH_MAX_BYTES": "1000"})
    assert (config.graph_store_max_bytes, config.graph_max_bytes) == (5_000_000, 1000)
    defaults = ServiceConfig.from_env({})
    assert (defaults.graph_store_max_bytes, defaults.graph_max_bytes) == (1 << 30, 16 << 20)
    with pytest.raises(ValueError, match="LATPRED_GRAPH_MAX_BYTES.*LATPRED_GRAPH_STORE_MAX_BYTES"):
        ServiceConfig.from_env({"LATPRED_GRAPH_STORE_MAX_BYTES": "1000", "LATPRED_GRAPH_MAX_BYTES": "2000"})
    with pytest.raises(ValueError, match="LATPRED_GRAPH_STORE_MAX_BYTES"):
        ServiceConfig.from_env({"LATPRED_GRAPH_STORE_MAX_BYTES": "lots"})
