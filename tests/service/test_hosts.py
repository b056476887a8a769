"""/v1/hosts (storing and listing host profiles) and `host` in every prediction request, through the real app."""

from __future__ import annotations

import csv
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from service_helpers import CPU, DEVICE, WORKPLACE_CPU, assert_problem, bundles_with_host, host_profile, small_onnx

from predictor.host_profile import parse_profile, parse_reference_key
from predictor.host_references import reference_graph
from predictor.zoo import load_zoo_graph
from service.app import create_app
from service.config import ServiceConfig

KEY = "host-key"


@pytest.fixture
def default(client: Any) -> dict[str, Any]:
    """The profile the served bundle predicts eager latency for when a request names none."""
    hosts = client.get("/v1/hosts").get_json()["hosts"]
    entry = next(h for h in hosts if h["source"] == "bundle" and h["device"] == DEVICE and h["default"])
    return client.get(entry["url"]).get_json()["profile"]


@pytest.fixture
def slow(client: Any, default: dict[str, Any]) -> dict[str, Any]:
    """A stored profile whose every call costs twice the default host's."""
    profile = {**default, "id": "slow-host", "label": "measured",
               "costs_us": {k: 2 * v for k, v in default["costs_us"].items()}}
    assert client.post("/v1/hosts", json=profile).status_code == 201
    return profile


def stored_file(config: ServiceConfig, host_id: str) -> Path:
    return config.host_store / f"{host_id}.json"


def test_a_posted_profile_is_stored_listed_and_served(client: Any, config: ServiceConfig) -> None:
    profile = host_profile(id="ci-box-1", gpu="NVIDIA H200")
    r = client.post("/v1/hosts", json=profile)
    assert r.status_code == 201, r.get_json()
    assert r.headers["Location"] == "/v1/hosts/ci-box-1"
    body = r.get_json()
    assert body["source"] == "stored" and body["created"] is True
    assert parse_profile(body["profile"]) == parse_profile(profile)
    assert parse_profile(json.loads(stored_file(config, "ci-box-1").read_text())) == parse_profile(profile)
    hosts = client.get("/v1/hosts").get_json()["hosts"]
    stored = [h for h in hosts if h["source"] == "stored"]
    assert [h["id"] for h in stored] == ["ci-box-1"]
    assert stored[0]["cpu_cores"] == 16 and stored[0]["gpu"] == "NVIDIA H200"
    assert stored[0]["costs_us"] == profile["costs_us"] and stored[0]["default"] is False
    carried = [h for h in hosts if h["source"] == "bundle"]
    for bundle in {h["device"] for h in carried}:  # each bundle's default first (the transfer bundle's too)
        own = [h for h in carried if h["device"] == bundle]
        assert [h["default"] for h in own].count(True) == 1 and own[0]["default"]
    assert {h["device"] for h in carried} == {DEVICE, CPU, WORKPLACE_CPU, "transfer"}
    got = client.get("/v1/hosts/ci-box-1").get_json()
    assert got["profile"] == body["profile"] and got["source"] == "stored"


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda p: p["costs_us"].pop("conv"), "costs_us", "missing kind(s) conv"),
    (lambda p: p["costs_us"].update(gemm=-3.0), "costs_us", "gemm: -3.0"),
    (lambda p: p["costs_us"].update(view=1e9), "costs_us", "not a plausible cost"),
    (lambda p: p.update(schema_version=7), "schema_version", "7 is not a host profile version"),
    (lambda p: p.pop("cpu_cores"), "cpu_cores", "required"),
    (lambda p: p.update(reference_ms={"resnet50|b1|fp16": 3.0}), "reference_ms", "unknown reference forward"),
    (lambda p: p.update(reference_ms={"nas-1004|b1|fp16": -2.0}), "reference_ms", "-2.0 ms is not a plausible"),
    (lambda p: p.update(schema_version=3, forward_spread=0.8), "forward_spread", "greater than or equal to 1"),
    (lambda p: p.update(schema_version=3, forward_spread=1e6), "forward_spread", "less than or equal to 100"),
])
def test_an_invalid_profile_is_a_422_naming_the_field(client: Any, config: ServiceConfig, change: Any,
                                                      field: str, words: str) -> None:
    profile = host_profile(id="broken")
    change(profile)
    body = assert_problem(client.post("/v1/hosts", json=profile), 422, field)
    assert words in body["detail"]
    assert not stored_file(config, "broken").exists()


def test_a_body_that_is_not_json_is_a_400(client: Any) -> None:
    assert_problem(client.post("/v1/hosts", data="{nope", content_type="application/json"), 400)


def test_posting_needs_the_key_when_one_is_configured(registry: Any, tmp_path: Path) -> None:
    keyed = create_app(ServiceConfig(data_dir=tmp_path, graph_store=tmp_path / "graphs", host_store=tmp_path / "hosts",
                                     api_key=KEY), registry=registry).test_client()
    profile = host_profile(id="keyed-host")
    assert_problem(keyed.post("/v1/hosts", json=profile), 401)
    assert_problem(keyed.post("/v1/hosts", json=profile, headers={"X-API-Key": "wrong"}), 401)
    assert not (tmp_path / "hosts" / "keyed-host.json").exists()
    assert keyed.post("/v1/hosts", json=profile, headers={"X-API-Key": KEY}).status_code == 201
    assert keyed.get("/v1/hosts/keyed-host").status_code == 200  # reads stay open


def test_the_same_profile_again_is_a_200_and_is_not_rewritten(client: Any, config: ServiceConfig) -> None:
    profile = host_profile(id="twice")
    assert client.post("/v1/hosts", json=profile).status_code == 201
    path = stored_file(config, "twice")
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino)
    again = client.post("/v1/hosts", json=profile)
    assert again.status_code == 200 and again.get_json()["created"] is False
    assert again.headers["Location"] == "/v1/hosts/twice"
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino) == before


def test_another_profile_under_a_stored_id_is_a_409_and_the_stored_one_stays(client: Any,
                                                                            config: ServiceConfig) -> None:
    assert client.post("/v1/hosts", json=host_profile(id="taken")).status_code == 201
    path = stored_file(config, "taken")
    before = path.read_bytes()
    other = host_profile(id="taken", cpu_cores=64)
    body = assert_problem(client.post("/v1/hosts", json=other), 409, "id")
    assert "never overwritten" in body["detail"]
    assert path.read_bytes() == before
    assert client.get("/v1/hosts/taken").get_json()["profile"]["cpu_cores"] == 16


def test_a_bundles_profile_cannot_be_replaced_but_can_be_posted_again(client: Any, config: ServiceConfig,
                                                                      default: dict[str, Any]) -> None:
    same = client.post("/v1/hosts", json=default)
    assert same.status_code == 200 and same.get_json()["source"] == "bundle"
    assert DEVICE in same.get_json()["devices"]
    changed = {**default, "cpu_model": "another CPU"}
    assert "never overwritten" in assert_problem(client.post("/v1/hosts", json=changed), 409, "id")["detail"]
    assert not stored_file(config, default["id"]).exists()


def test_a_stored_profile_is_readable_by_others_and_a_stray_file_is_no_profile(client: Any,
                                                                            config: ServiceConfig) -> None:
    """Written through a temporary file of its own, a profile keeps a plain file's mode (mkstemp
    makes 0600); a file in the store that is not named by an id ('._x.json' from another system)
    is no profile: the listing and a 404 stay what they are, not a 500."""
    assert client.post("/v1/hosts", json=host_profile(id="ci-box-2")).status_code == 201
    assert stored_file(config, "ci-box-2").stat().st_mode & 0o777 == 0o644
    (config.host_store / "._ci-box-2.json").write_text("AppleDouble")
    (config.host_store / "my notes.json").write_text("{}")
    assert [h["id"] for h in client.get("/v1/hosts").get_json()["hosts"] if h["source"] == "stored"] == ["ci-box-2"]
    assert_problem(client.get("/v1/hosts/no-such-host"), 404, "host_id")


def test_an_unknown_id_is_a_404_naming_it(client: Any) -> None:
    body = assert_problem(client.get("/v1/hosts/no-such-host"), 404, "host_id")
    assert "no-such-host" in body["detail"]
    assert_problem(client.get("/v1/hosts/.hidden"), 400, "host_id")  # not an id


def test_eager_predictions_name_their_host_and_follow_its_costs(client: Any, default: dict[str, Any],
                                                                slow: dict[str, Any], registry: Any) -> None:
    def predict(mode: str, host: str | None = None, layers: bool = False) -> dict[str, Any]:
        body = {"model": "resnet50", "batch": 1, "mode": mode, "layers": layers}
        r = client.post("/v1/predict", json=body if host is None else {**body, "host": host})
        assert r.status_code == 200, r.get_json()
        return r.get_json()

    base, slower = predict("eager"), predict("eager", "slow-host")
    assert base["host"].startswith(default["id"] + " (") and slower["host"].startswith("slow-host (measured")
    assert slower["total_ms"] > base["total_ms"] * 1.05  # a named graph's cache keeps the hosts apart
    assert predict("eager", default["id"])["total_ms"] == base["total_ms"]
    direct = registry.predictor(DEVICE).predict(load_zoo_graph("resnet50"), 1, "fp16", "eager",
                                                host=parse_profile(slow))
    assert slower["total_ms"] == pytest.approx(direct.total_ms)
    assert predict("eager", "slow-host", layers=True)["total_ms"] == pytest.approx(slower["total_ms"])
    graph = predict("cudagraph")
    assert graph["host"] is None
    assert predict("cudagraph", "slow-host")["total_ms"] == graph["total_ms"]


def test_a_profile_with_reference_forwards_is_predicted_from_its_costs_and_warns_of_them(
        client: Any, default: dict[str, Any], slow: dict[str, Any], registry: Any) -> None:
    """Forwards that ran as the twice-as-slow host runs them, on a profile whose costs are the
    default host's: the service predicts from the costs as probed (predictor.host_references says
    why), and says that the forwards and the probe disagree."""
    predictor = registry.predictor(DEVICE)
    references = {}
    for key in ("nas-1002|b1|fp32", "nas-1003|b1|fp32", "nas-1004|b8|fp32"):
        model, batch, precision = parse_reference_key(key)
        references[key] = predictor.predict(reference_graph(model), batch, precision, "eager", with_layers=False,
                                            host=parse_profile(slow)).total_ms
    profile = {**default, "schema_version": 2, "id": "forwards-host", "label": "measured", "reference_ms": references}
    assert client.post("/v1/hosts", json=profile).status_code == 201
    body = {"model": "resnet50", "batch": 1, "mode": "eager", "precision": "fp16"}
    got = client.post("/v1/predict", json={**body, "host": "forwards-host"}).get_json()
    probed = client.post("/v1/predict", json=body).get_json()  # the default host: the same costs
    slower = client.post("/v1/predict", json={**body, "host": "slow-host"}).get_json()
    assert got["total_ms"] == pytest.approx(probed["total_ms"], rel=1e-9) and got["total_ms"] < slower["total_ms"]
    assert got["host"].startswith("forwards-host (") and "reference forwards" not in got["host"]
    assert any("reference forwards ran 2.00x" in w and "probe again" in w for w in got["warnings"])
    sheet = client.get("/v1/latency?model=resnet50&batch=1&mode=eager&precision=fp16&host=forwards-host&format=txt")
    assert float(sheet.get_data(as_text=True)) == pytest.approx(got["total_ms"], rel=1e-3)


def test_an_unsteady_hosts_eager_answer_says_so_with_a_wider_interval(client: Any, default: dict[str, Any]) -> None:
    """A profile of schema version 3 says how steadily its reference forwards ran; the interval of an
    eager answer for it is sized by that, and a host that wavered is named in ``warnings``."""
    for host_id, spread in (("steady-host", 1.1), ("shaky-host", 2.0)):
        profile = {**default, "schema_version": 3, "id": host_id, "label": "measured", "forward_spread": spread}
        assert client.post("/v1/hosts", json=profile).status_code == 201
    body = {"model": "resnet50", "batch": 1, "mode": "eager", "precision": "fp16"}
    steady = client.post("/v1/predict", json={**body, "host": "steady-host"}).get_json()
    shaky = client.post("/v1/predict", json={**body, "host": "shaky-host"}).get_json()
    assert steady["total_ms"] == pytest.approx(shaky["total_ms"], rel=1e-12)  # the same costs
    assert shaky["high_ms"] / shaky["total_ms"] > steady["high_ms"] / steady["total_ms"]
    assert any("shaky-host" in w and "2.00x apart" in w for w in shaky["warnings"])
    assert not any("apart (p90/p10)" in w for w in steady["warnings"])
    assert client.get("/v1/hosts/shaky-host").get_json()["profile"]["forward_spread"] == 2.0
    listed = {h["id"]: h for h in client.get("/v1/hosts").get_json()["hosts"]}
    assert listed["shaky-host"]["forward_spread"] == 2.0 and listed[default["id"]]["forward_spread"] is None


@pytest.mark.parametrize("host, status", [("no-such-host", 404), ("missing.json", 404), ("../../etc/passwd", 422),
                                          ("/tmp/x.json", 422), ("", 422)])
def test_an_unknown_host_is_a_404_and_a_malformed_one_a_422_naming_host(client: Any, host: str, status: int) -> None:
    r = client.post("/v1/predict", json={"model": "resnet18", "mode": "eager", "host": host})
    body = assert_problem(r, status, "host")
    if host == "no-such-host":
        assert "no-such-host" in body["detail"] and "GET /v1/hosts" in body["detail"]


def test_the_multipart_form_takes_a_host(client: Any, slow: dict[str, Any]) -> None:
    def upload(**fields: str) -> Any:
        return client.post("/v1/predict", data={"onnx": (io.BytesIO(small_onnx()), "m.onnx"), "mode": "eager",
                                                "layers": "false", **fields}, content_type="multipart/form-data")

    base, slower = upload().get_json(), upload(host="slow-host").get_json()
    assert slower["host"].startswith("slow-host") and slower["total_ms"] > base["total_ms"]
    assert_problem(upload(host="nope"), 404, "host")


def test_each_batch_variant_names_its_host(client: Any, slow: dict[str, Any], default: dict[str, Any]) -> None:
    r = client.post("/v1/predict/batch", json={
        "graphs": [{"model": "resnet50"}, {"model": "mobilenet_v2"}],
        "variants": [{"mode": "eager", "batch": 1}, {"mode": "eager", "batch": 1, "host": "slow-host"},
                     {"mode": "eager", "host": "nope"}]})
    assert r.status_code == 200, r.get_json()
    results = r.get_json()["results"]
    assert r.get_json()["failed"] == 2
    for i in range(2):
        base, slower, unknown = results[3 * i: 3 * i + 3]
        assert base["prediction"]["host"].startswith(default["id"])
        assert slower["prediction"]["host"].startswith("slow-host")
        assert slower["prediction"]["total_ms"] > base["prediction"]["total_ms"]
        assert unknown["problem"]["field"] == "variants[2].host"


def test_the_spreadsheet_takes_hosts_and_names_them_in_a_column(client: Any, slow: dict[str, Any],
                                                                default: dict[str, Any]) -> None:
    r = client.get("/v1/latency?model=resnet50&batch=1&mode=eager,cudagraph&host=slow-host&format=csv")
    assert r.status_code == 200, r.get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(r.get_data(as_text=True))))
    by_mode = {row["mode"]: row for row in rows}
    assert by_mode["eager"]["host"].startswith("slow-host (") and by_mode["cudagraph"]["host"] == ""
    base = client.get("/v1/latency?model=resnet50&batch=1&mode=eager&format=txt")
    slower = client.get("/v1/latency?model=resnet50&batch=1&mode=eager&host=slow-host&format=txt")
    assert float(slower.get_data(as_text=True)) > float(base.get_data(as_text=True))
    assert slower.headers["ETag"] != base.headers["ETag"]
    both = client.get(f"/v1/latency?model=resnet50&batch=1&mode=eager&host={default['id']},slow-host").get_json()
    assert [row["host"].split(" ")[0] for row in both] == [default["id"], "slow-host"]
    assert_problem(client.get("/v1/latency?model=resnet50&mode=eager&host=nope"), 404, "host")
    assert_problem(client.get("/v1/latency?model=resnet50&host=..%2Fx"), 400, "host")


def test_the_document_has_the_hosts_endpoints_and_the_predictions_host(registry: Any, tmp_path: Path) -> None:
    keyed = create_app(ServiceConfig(data_dir=tmp_path, api_key=KEY), registry=registry).test_client()
    spec = keyed.get("/openapi.json").get_json()
    assert spec["paths"]["/v1/hosts"]["post"]["security"] == [{"ApiKey": []}, {"Bearer": []}]
    assert "409" in spec["paths"]["/v1/hosts"]["post"]["responses"]
    assert "404" in spec["paths"]["/v1/hosts/{host_id}"]["get"]["responses"]
    assert "host" in spec["components"]["schemas"]["Prediction"]["properties"]
    assert "host" in spec["components"]["schemas"]["PredictRequest"]["properties"]
    assert "host" in spec["components"]["schemas"]["PredictForm"]["properties"]


def test_the_python_client_posts_lists_and_predicts_with_a_host(registry: Any, tmp_path: Path) -> None:
    from werkzeug.serving import make_server

    from service.client import LatpredClient, LatpredError

    app = create_app(ServiceConfig(data_dir=tmp_path, graph_store=tmp_path / "graphs", host_store=tmp_path / "hosts",
                                   api_key=KEY), registry=registry)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = LatpredClient(f"http://127.0.0.1:{server.server_port}", api_key=KEY, timeout=30)
        path = tmp_path / "probe.json"
        path.write_text(json.dumps(host_profile(id="client-host")))
        assert api.upload_host(path)["created"] is True
        assert "client-host" in [h["id"] for h in api.hosts()]
        assert api.host("client-host")["source"] == "stored"
        eager = api.predict("resnet18", mode="eager", layers=False, host="client-host")
        assert eager["host"].startswith("client-host (")
        assert api.predict(onnx=small_onnx(), mode="eager", layers=False, host="client-host")["host"] == eager["host"]
        assert api.latency("resnet18", mode="eager", host="client-host", format="json")[0]["host"] == eager["host"]
        with pytest.raises(LatpredError) as refused:
            api.upload_host(host_profile(id="client-host", cpu_cores=2))
        assert refused.value.status == 409
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_a_bundle_without_a_default_host_needs_one_named_for_eager(tmp_path: Path) -> None:
    from service.registry import ModelRegistry

    root = bundles_with_host(tmp_path / "bundles", only=(DEVICE,))
    meta_path = root / DEVICE / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("host_profile")
    meta.pop("host_profiles", None)
    meta_path.write_text(json.dumps(meta))
    registry = ModelRegistry(root)
    registry.load()
    client = create_app(ServiceConfig(data_dir=tmp_path, graph_store=tmp_path / "graphs", host_store=tmp_path / "hosts",
                                      open_writes=True), registry=registry).test_client()
    assert [h for h in client.get("/v1/hosts").get_json()["hosts"] if h["source"] == "bundle"] == []
    body = assert_problem(client.post("/v1/predict", json={"model": "resnet18", "mode": "eager"}), 422, "host")
    assert "names no host profile" in body["detail"]
    batch = client.post("/v1/predict/batch", json={"graphs": [{"model": "resnet18"}],
                                                   "variants": [{"mode": "eager"}]}).get_json()
    assert batch["results"][0]["problem"]["field"] == "variants[0].host"
    assert_problem(client.get("/v1/latency?model=resnet18&mode=eager"), 400, "host")
    assert client.post("/v1/hosts", json=host_profile(id="named")).status_code == 201
    named = client.post("/v1/predict", json={"model": "resnet18", "mode": "eager", "host": "named"})
    assert named.status_code == 200 and named.get_json()["host"].startswith("named (")
    # a CUDA graph is answered, or refused naming 'host', as the predictor itself does
    try:
        registry.predictor(DEVICE).predict(load_zoo_graph("resnet18"), None, "fp16", "cudagraph")
        expected = 200
    except ValueError:
        expected = 422
    graph = client.post("/v1/predict", json={"model": "resnet18", "mode": "cudagraph"})
    assert graph.status_code == expected and (expected == 200 or graph.get_json()["field"] == "host")


def test_capacity_and_select_name_the_profile_that_stood_in_for_the_one_asked(client: Any) -> None:
    """A profile probed without a GPU is estimated again for a GPU (Predictor.host_for_device): the
    answers name the estimate used, 'for' the id asked, with its warning, in JSON and in the
    Latpred-Host header that a txt answer, a number alone, carries too."""
    assert client.post("/v1/hosts", json=host_profile(id="gpu-less-box", cpu_score_ns=500.0)).status_code == 201
    query = f"model=resnet50&device={DEVICE}&mode=eager&host=gpu-less-box"
    latency = client.get(f"/v1/latency?{query}&format=txt")
    assert latency.status_code == 200
    named = latency.headers["Latpred-Host"]
    assert "(estimated" in named and named.endswith("for gpu-less-box")
    capacity = client.get(f"/v1/capacity?{query}&qps=50&slo_p99_ms=100")
    assert capacity.status_code == 200, capacity.get_json()
    [row] = capacity.get_json()
    assert row["host"] == named and row["warnings"]
    assert client.get(f"/v1/capacity?{query}&qps=50&slo_p99_ms=100&format=txt").headers["Latpred-Host"] == named
    select = client.get(f"/v1/select?model=resnet50&mode=eager&host=gpu-less-box&devices={DEVICE}")
    assert select.status_code == 200, select.get_json()
    assert select.get_json()["ranked"][0]["host"] == named and select.headers["Latpred-Host"] == named
    assert client.get(f"/v1/latency?model=resnet50&device={DEVICE}&format=txt").headers["Latpred-Host"] == "none"


def test_a_stored_file_that_is_no_readable_profile_is_listed_apart_and_refused_by_name(
        client: Any, config: ServiceConfig) -> None:
    assert client.post("/v1/hosts", json=host_profile(id="good-box")).status_code == 201
    stored_file(config, "broken-box").write_text('{"schema_version": 99, "id": "broken-box"}')
    listing = client.get("/v1/hosts")
    assert listing.status_code == 200
    assert [h["id"] for h in listing.get_json()["hosts"] if h["source"] == "stored"] == ["good-box"]
    [unreadable] = listing.get_json()["unreadable"]
    assert unreadable["id"] == "broken-box" and "schema_version" in unreadable["problem"]
    for response, field in ((client.get("/v1/hosts/broken-box"), "host_id"),
                            (client.get(f"/v1/latency?model=resnet50&device={DEVICE}&mode=eager&host=broken-box"),
                             "host")):
        body = assert_problem(response, 500, field)
        assert "broken-box" in body["detail"] and "cannot be read" in body["detail"]
