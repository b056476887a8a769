"""Eager composition on a host profile: a slower host never makes a forward faster and every kind
of call a graph makes shows in its total; an eager prediction needs a host and names it; and
predictor.host_profile's contract (parsing, the store, means and estimates, the published JSON
Schema)."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.compose import GROUPS, CompositionConstants, LayerArrays, compose, family_group, host_costs
from predictor.devices import resolve_device
from predictor.graph import Graph
from predictor.host_profile import (
    HOST_KINDS,
    SCHEMA_FILE,
    HostConflictError,
    HostProfile,
    HostProfileError,
    HostStore,
    UnknownHostError,
    estimate_profile,
    host_kind,
    json_schema,
    load_profile,
    mean_profile,
    parse_profile,
    profile_version,
)
from predictor.host_spread import spread_interval_log
from predictor.predict import ESTIMATED_EXTRA_LOG, Predictor
from predictor.zoo import load_zoo_graph

#: a measured profile as the probe writes it (an H200 host's costs, rounded)
PROFILE: dict = {
    "schema_version": 1, "id": "test-h200-0123456789", "label": "measured", "cpu_model": "Test Xeon",
    "cpu_cores": 16, "cpu_score_ns": 450.0, "torch_version": "2.11.0+cu130", "cuda_version": "13.0",
    "gpu": "NVIDIA H200", "hostname": "vm", "measured_at": "2026-01-01T00:00:00+00:00", "probe_seconds": 0.8,
    "costs_us": {"elementwise": 7.0, "gemm": 11.8, "conv": 12.7, "norm": 10.8, "attention": 16.4, "view": 0.57,
                 "copy": 8.9, "module_call": 0.92},
}
HOST = parse_profile(PROFILE)


def changed(replace_costs: bool = False, **fields: object) -> dict:
    """PROFILE with ``fields`` replaced (a ``costs_us`` given is merged into PROFILE's, unless
    ``replace_costs``)."""
    data = json.loads(json.dumps(PROFILE))
    costs = fields.pop("costs_us", None)
    data.update(fields)
    if isinstance(costs, dict):
        data["costs_us"] = costs if replace_costs else {**data["costs_us"], **costs}
    return data


# --- composition grows with every host cost -------------------------------------------------------

#: between them the two graphs make calls of every kind: swin_t convolutions, norms, launched
#: copies and fallbacks; llama-300m attention and copies of its own
GRAPHS = ("swin_t", "llama-300m")


def structure_arrays(graph: Graph, seed: int) -> LayerArrays:
    """The graph's nodes as compose sees them (kernel calls of each family's host kind, kernels
    another call launches, views, fallbacks), with short kernels and dispatch ratios near 1: a
    batch-1 forward that the host sets the pace of."""
    rng = np.random.default_rng(seed)
    g = graph.at_precision("fp16", 1)
    is_kernel = np.array([n.kind == "kernel" and g.runs_kernel(n, "fp16") for n in g.nodes])
    is_fallback = np.array([n.kind == "fallback" for n in g.nodes])
    is_launched = np.array([bool(n.launched_by) for n in g.nodes]) & is_kernel
    n = len(g.nodes)
    kernel = np.where(is_kernel | is_fallback, rng.uniform(0.5, 3.0, n), 0.0)
    return LayerArrays(kernel, kernel * 0.8, kernel * 1.25, np.where(is_kernel, rng.uniform(0.8, 1.6, n), 0.0),
                       np.zeros(n), np.array([GROUPS.index(family_group(x.family, x.kind)) for x in g.nodes]),
                       is_kernel, is_fallback, is_launched,
                       np.array([HOST_KINDS.index(host_kind(x.family)) for x in g.nodes], dtype=np.intp))


def shipped_bundle_has_a_host() -> bool:
    metadata = json.loads((DEFAULT_BUNDLE_DIR / "nvidia-h200" / "metadata.json").read_text())
    return metadata.get("host_profile") is not None


def layers_and_host(source: str, name: str) -> tuple[LayerArrays, CompositionConstants, np.ndarray]:
    """A graph's layers, the constants and a host's costs at a host-bound setting: from its
    structure (HOST), or as the shipped bundle predicts them (its own host, four times slower)."""
    graph = load_zoo_graph(name)
    if source == "structure":
        return structure_arrays(graph, seed=len(name)), CompositionConstants(), host_costs(HOST)
    predictor = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))
    assert predictor.host is not None
    layers = predictor.layers(graph.at_precision("fp16", 1), 1, "fp16", "eager")
    return layers, predictor.constants, 4.0 * host_costs(predictor.host)


def kinds_present(a: LayerArrays, c: CompositionConstants) -> set[str]:
    """The profile kinds whose cost some node of ``a`` pays a positive multiple of."""
    own = a.is_kernel & ~a.is_launched
    present = {HOST_KINDS[k] for k in a.host_kind[own & (a.dispatch_ratio > 0)]} if c.dispatch_share > 0 else set()
    if c.call_share > 0 and (own | a.is_fallback).any():
        present.add("module_call")
    if c.view_share > 0 and a.is_view.any():
        present.add("view")
    if (c.launch_share > 0 and a.is_launched.any()) or (c.fallback_ratio > 0 and a.is_fallback.any()):
        present.add("elementwise")
    return present


SOURCES = ["structure", pytest.param("shipped bundle", marks=pytest.mark.skipif(
    not shipped_bundle_has_a_host(), reason="the shipped bundle names no host profile (trained before profiles)"))]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", GRAPHS)
def test_eager_grows_with_each_host_cost_and_a_captured_graph_not(source: str, name: str) -> None:
    a, c, costs = layers_and_host(source, name)
    present = kinds_present(a, c)
    eager, captured = compose(a, c, "eager", costs), compose(a, c, "cudagraph", costs)
    for i, kind in enumerate(HOST_KINDS):
        raised = costs.copy()
        raised[i] *= 1.5
        slower = compose(a, c, "eager", raised)
        if kind in present:
            assert slower > eager, f"{kind} x1.5 did not slow {name}'s eager forward"
        else:
            assert slower == eager, f"{name} has no {kind} call, yet its cost changed the forward"
        assert compose(a, c, "cudagraph", raised) == captured  # no host issues a captured graph
    # every cost raised at once: as much slower as the host, since the forward is host-bound
    assert compose(a, c, "eager", 1.5 * costs) - c.sync_us == pytest.approx(1.5 * (eager - c.sync_us), rel=0.05)


def test_the_graphs_make_calls_of_every_kind() -> None:
    """The monotonicity above is strict for every kind in one graph or the other."""
    c = CompositionConstants()
    present = set().union(*(kinds_present(structure_arrays(load_zoo_graph(n), 0), c) for n in GRAPHS))
    assert present == set(HOST_KINDS)


# --- an eager prediction needs a host and names it ------------------------------------------------

def test_eager_compose_without_a_host_is_refused() -> None:
    a = structure_arrays(load_zoo_graph("swin_t"), 0)
    with pytest.raises(ValueError, match="host profile"):
        compose(a, CompositionConstants(), "eager")
    assert compose(a, CompositionConstants(), "cudagraph") > 0  # a captured graph needs none


@pytest.fixture(scope="module")
def hostless() -> Predictor:
    """The shipped bundle's models, as a bundle that names no host profile."""
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200")
    bundle.metadata = {k: v for k, v in bundle.metadata.items() if k != "host_profile"}
    return Predictor(bundle, resolve_device("h200"), constants=CompositionConstants())


def test_an_eager_prediction_needs_a_host_and_names_it(hostless: Predictor) -> None:
    graph = load_zoo_graph("resnet18")
    assert hostless.host is None
    with pytest.raises(ValueError, match="host profile"):
        hostless.predict(graph, 1, "fp16", "eager")
    eager = hostless.predict(graph, 1, "fp16", "eager", host=HOST)
    assert eager.host == HOST.summary() and HOST.id in eager.host
    assert hostless.predict(graph, 1, "fp16", "cudagraph", host=HOST).host is None
    slow = parse_profile(changed(id="test-slow", costs_us={k: 2 * v for k, v in PROFILE["costs_us"].items()}))
    assert hostless.predict(graph, 1, "fp16", "eager", host=slow).total_ms > eager.total_ms


def test_an_estimated_host_widens_the_eager_interval(hostless: Predictor) -> None:
    graph = load_zoo_graph("resnet18")
    estimated = HOST.model_copy(update={"label": "estimated", "id": "cpu-estimated"})
    measured_p = hostless.predict(graph, 1, "fp16", "eager", host=HOST)
    estimated_p = hostless.predict(graph, 1, "fp16", "eager", host=estimated)
    assert estimated_p.total_ms == measured_p.total_ms  # the same costs: only the interval differs
    widening = math.log(estimated_p.high_ms / estimated_p.total_ms) - math.log(measured_p.high_ms / measured_p.total_ms)
    assert widening == pytest.approx(hostless.bundle.composition.get("estimated_host_extra_log",
                                                                     ESTIMATED_EXTRA_LOG))
    assert "estimated" in (estimated_p.host or "")
    # a bundle says how much its estimates missed
    bundle = hostless.bundle
    told = Bundle(bundle.directory, {**bundle.metadata, "composition": {
        **bundle.composition, "estimated_host_extra_log": 0.7}}, bundle.targets)
    wider = Predictor(told, hostless.device, constants=hostless.constants).predict(graph, 1, "fp16", "eager",
                                                                                    host=estimated)
    assert math.log(wider.high_ms / wider.total_ms) - math.log(measured_p.high_ms / measured_p.total_ms) == \
        pytest.approx(0.7)
    # a captured graph's interval does not depend on a host
    assert hostless.predict(graph, 1, "fp16", "cudagraph", host=estimated).high_ms == \
        hostless.predict(graph, 1, "fp16", "cudagraph", host=HOST).high_ms


# --- predictor.host_profile -----------------------------------------------------------------------

def test_a_probed_profile_parses_with_its_costs_in_kind_order() -> None:
    assert HOST.costs() == [PROFILE["costs_us"][k] for k in HOST_KINDS]
    assert HOST.summary() == "test-h200-0123456789 (measured; Test Xeon, 16 cores)"


@pytest.mark.parametrize("data,field", [
    (changed(costs_us={k: v for k, v in PROFILE["costs_us"].items() if k != "conv"}, replace_costs=True),
     r"costs_us: missing kind\(s\) conv"),
    (changed(costs_us={"gpu_launch": 3.0}), r"costs_us: unknown kind\(s\) gpu_launch"),
    (changed(costs_us={"gemm": -1.0}), "costs_us: gemm: -1.0"),
    (changed(costs_us={"gemm": 1e9}), "costs_us: gemm: 1000000000.0"),
    (changed(costs_us={"norm": math.nan}), "costs_us: norm: nan"),
    (changed(schema_version=4), "schema_version: 4"),
    (changed(schema_version=3, forward_spread=0.5), "forward_spread: "),
    (changed(schema_version=3, forward_spread=1e4), "forward_spread: "),
    (changed(schema_version=3, forward_spread="1.2"), "forward_spread: "),
    (changed(schema_version=2, reference_ms={"nas-1002|b4|fp16": 3.0}),
     r"reference_ms: unknown reference forward\(s\) nas-1002\|b4"),
    (changed(schema_version=2, reference_ms={"nas-1002|b1|fp16": 0.0}), r"reference_ms: nas-1002\|b1\|fp16: 0.0 ms"),
    (changed(schema_version=2, reference_ms={"nas-1002|b1|fp16": 3e6}),
     r"reference_ms: nas-1002\|b1\|fp16: 3000000.0 ms"),
    (changed(schema_version=2, reference_ms={}), "reference_ms: no reference forwards"),
    (changed(id="../etc/passwd"), "id: "),
    (changed(id=""), "id: "),
    (changed(label="guessed"), "label: "),
])
def test_an_invalid_profile_is_refused_naming_the_field(data: dict, field: str) -> None:
    with pytest.raises(HostProfileError, match=f"^{field}"):
        parse_profile(data)


def test_an_unknown_schema_version_is_named_before_any_other_field() -> None:
    with pytest.raises(HostProfileError, match="^schema_version: 7 .*written by a newer latpred: upgrade"):
        parse_profile(changed(schema_version=7, id="", costs_us={"gemm": -1.0}))
    with pytest.raises(HostProfileError, match="^schema_version: 0 .*probe again"):
        parse_profile(changed(schema_version=0))


def test_a_profile_is_written_at_the_lowest_version_that_holds_it() -> None:
    """A reader of version 2 reads every profile without a spread; a spread needs version 3."""
    assert profile_version({"forward_spread": None}) == 2 and profile_version({"forward_spread": 1.4}) == 3
    estimate = estimate_profile(HOST.model_copy(update={"schema_version": 3, "forward_spread": 2.0}), 675.0,
                                cpu_model="x", cpu_cores=1, measured_at="2026-01-02T00:00:00+00:00")
    assert estimate.schema_version == 2 and estimate.forward_spread is None  # an estimate never saw the host run
    with pytest.raises(HostProfileError, match="^forward_spread: given in a profile of schema_version 2"):
        parse_profile(changed(schema_version=2, forward_spread=1.4))
    spread = HOST.model_copy(update={"id": "test-spread", "schema_version": 3, "forward_spread": 1.44})
    both = mean_profile(spread, HOST.model_copy(update={"id": "test-none", "schema_version": 2}))
    assert both.forward_spread == pytest.approx(1.44) and both.schema_version == 3


def test_the_store_adds_a_new_profile_accepts_it_again_and_never_overwrites(tmp_path: Path) -> None:
    store = HostStore(tmp_path / "hosts")
    assert store.ids() == []
    assert store.put(HOST) is True
    assert store.ids() == [HOST.id] and store.get(HOST.id) == HOST
    stored = store.path(HOST.id).read_bytes()
    assert store.put(parse_profile(PROFILE)) is False  # the same profile again
    other = parse_profile(changed(costs_us={"gemm": 12.5}))
    with pytest.raises(HostConflictError, match=HOST.id):
        store.put(other)
    assert store.path(HOST.id).read_bytes() == stored
    assert store.get(HOST.id) == HOST
    assert [p.name for p in (tmp_path / "hosts").iterdir()] == [f"{HOST.id}.json"]  # no temporary left


def test_a_stored_profile_is_read_only_under_its_own_id(tmp_path: Path) -> None:
    """The store is keyed by file name: a copy renamed by hand made two files claim one id, and the
    last one read won (a check's eager scores moved from 92% to 21% without a word); a file named
    otherwise than an id was a KeyError traceback. Both are refused naming the file."""
    store = HostStore(tmp_path)
    store.put(HOST)
    (tmp_path / "zzzz-copy.json").write_text(store.path(HOST.id).read_text())
    with pytest.raises(HostProfileError, match=r"zzzz-copy\.json: holds the profile 'test-h200-0123456789'"):
        store.all()
    (tmp_path / "zzzz-copy.json").unlink()
    (tmp_path / "my profile.json").write_text(store.path(HOST.id).read_text())
    with pytest.raises(HostProfileError, match=r"my profile\.json: not a host profile's file name"):
        store.all()
    (tmp_path / "my profile.json").unlink()
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(HostProfileError, match=r"deep\.json: not a readable JSON host profile \(nested too deeply\)"):
        load_profile(tmp_path / "deep.json")


def race(store: HostStore, profiles: list[HostProfile]) -> list[object]:
    """Each profile put by a thread of its own, all released at once: what each put answered."""
    start = threading.Barrier(len(profiles))
    outcomes: list[object] = [None] * len(profiles)

    def put(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = store.put(profiles[i])
        except HostConflictError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(profiles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_writers_racing_for_one_id_store_one_whole_profile_and_tell_the_others(tmp_path: Path) -> None:
    """A service's threads share a process: each writer's temporary file must be its own, or one
    thread truncates what another is linking in (a torn profile, a 201 for a profile not stored)."""
    store = HostStore(tmp_path)
    for round_number in range(25):
        profiles = [parse_profile(changed(id=f"race-{round_number}", cpu_model="x" * (1 + 40 * (i % 4)),
                                          costs_us={"gemm": 10.0 + i})) for i in range(12)]
        outcomes = race(store, profiles)
        winners = [i for i, outcome in enumerate(outcomes) if outcome is True]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, HostConflictError) for i, o in enumerate(outcomes) if i != winners[0]), outcomes
        assert store.get(f"race-{round_number}") == profiles[winners[0]]  # whole, and the one answered as stored
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"race-{n}.json" for n in range(25))


def test_an_unknown_host_is_named(tmp_path: Path) -> None:
    store = HostStore(tmp_path)
    store.put(HOST)
    with pytest.raises(UnknownHostError) as info:
        store.get("nvidia-h200-ffffffffff")
    assert "nvidia-h200-ffffffffff" in str(info.value) and HOST.id in str(info.value)  # the known ones listed
    with pytest.raises(UnknownHostError, match="not a host profile id"):
        store.get("../secrets")


def test_the_mean_of_two_probes_is_geometric_per_kind() -> None:
    after = parse_profile(changed(id="test-h200-9876543210", cpu_score_ns=800.0,
                                  costs_us={k: v * (1.0 + i / 4) for i, (k, v) in
                                            enumerate(PROFILE["costs_us"].items())}))
    mean = mean_profile(HOST, after)
    for kind in HOST_KINDS:
        assert mean.costs_us[kind] == pytest.approx(math.sqrt(HOST.costs_us[kind] * after.costs_us[kind]))
    assert mean.costs_us["elementwise"] == pytest.approx(7.0)  # factor 1: the same cost
    assert mean.cpu_score_ns == pytest.approx(math.sqrt(450.0 * 800.0))
    assert mean.id != HOST.id and mean.id != after.id and HOST.id in (mean.note or "")
    assert parse_profile(mean.model_dump(mode="json")) == mean  # a valid profile


def test_an_estimate_scales_by_the_cpus_single_thread_time() -> None:
    estimate = estimate_profile(HOST, 675.0, cpu_model="Other CPU", cpu_cores=4,
                                measured_at="2026-01-02T00:00:00+00:00")
    assert estimate.label == "estimated" and estimate.estimated_from == HOST.id and estimate.gpu is None
    assert estimate.cpu_score_ns == 675.0
    assert estimate.costs() == pytest.approx([1.5 * c for c in HOST.costs()])
    assert estimate.id != HOST.id and "estimated" in estimate.summary()
    with pytest.raises(HostProfileError, match="cpu_score_ns"):
        estimate_profile(parse_profile(changed(cpu_score_ns=None)), 675.0, cpu_model="x", cpu_cores=1,
                         measured_at="2026-01-02T00:00:00+00:00")


def test_an_estimate_of_an_estimate_names_the_measured_profile_and_times_what_it_times() -> None:
    once = estimate_profile(HOST, 675.0, cpu_model="x", cpu_cores=1, measured_at="2026-01-02T00:00:00+00:00")
    twice = estimate_profile(once, 900.0, cpu_model="y", cpu_cores=2, measured_at="2026-01-03T00:00:00+00:00")
    assert twice.estimated_from == HOST.id and twice.costs() == pytest.approx([2.0 * c for c in HOST.costs()])
    assert HOST.times_gpu_launches and once.times_gpu_launches and twice.times_gpu_launches  # a GPU's launches
    cpu = parse_profile(changed(id="cpu-0123456789", gpu=None))  # probed without a GPU: a CPU's own operators
    of_cpu = estimate_profile(cpu, 675.0, cpu_model="x", cpu_cores=1, measured_at="2026-01-02T00:00:00+00:00")
    assert cpu.times_gpu_launches is False and of_cpu.times_gpu_launches is False
    unnamed = once.model_copy(update={"estimated_from": None})  # an estimate naming no reference: unknown
    assert unnamed.times_gpu_launches is None


# --- the published JSON Schema ---------------------------------------------------------------------

def test_published_schema_is_current() -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema(), (
        "predictor/host_profile.schema.json is stale: regenerate it with python -m predictor.host_profile"
    )


def test_a_profile_validates_against_the_published_schema() -> None:
    import jsonschema as js

    schema = json.loads(SCHEMA_FILE.read_text())
    js.validate(PROFILE, schema)
    js.validate(HOST.model_dump(mode="json"), schema)
    missing = changed()
    del missing["costs_us"]["conv"]
    with pytest.raises(js.ValidationError, match="conv"):
        js.validate(missing, schema)
    with pytest.raises(js.ValidationError, match="gpu_launch"):
        js.validate(changed(costs_us={"gpu_launch": 3.0}), schema)
    js.validate(changed(schema_version=3, forward_spread=1.4), schema)
    with pytest.raises(js.ValidationError, match="3 was expected"):  # a spread is a version 3 field
        js.validate(changed(schema_version=2, forward_spread=1.4), schema)
    with pytest.raises(js.ValidationError):
        js.validate(changed(costs_us={"gemm": 1e9}), schema)


def test_an_eager_interval_follows_how_steadily_the_host_ran_its_forwards(hostless: Predictor) -> None:
    graph = load_zoo_graph("resnet18")
    widths = hostless.bundle.composition["interval_log"]

    def half_width(host: HostProfile, mode: str = "eager") -> float:
        p = hostless.predict(graph, 1, "fp16", mode, host=host)
        return math.log(p.high_ms / p.total_ms)

    steady = HOST.model_copy(update={"id": "test-steady", "schema_version": 3, "forward_spread": 1.1})
    shaky = HOST.model_copy(update={"id": "test-shaky", "schema_version": 3, "forward_spread": 2.0})
    still = HOST.model_copy(update={"id": "test-still", "schema_version": 3, "forward_spread": 1.0})
    assert half_width(HOST) == pytest.approx(widths["eager"])  # no spread measured: the bundle's one width
    assert half_width(steady) == pytest.approx(spread_interval_log(1.1)) and half_width(steady) < widths["eager"]
    assert half_width(shaky) == pytest.approx(spread_interval_log(2.0)) and half_width(shaky) > widths["eager"]
    assert half_width(still) == pytest.approx(widths["cudagraph"])  # never narrower than the kernels' own error
    # the same costs: only the interval differs, and a captured graph's does not depend on the host
    assert hostless.predict(graph, 1, "fp16", "eager", host=shaky).total_ms == \
        hostless.predict(graph, 1, "fp16", "eager", host=HOST).total_ms
    assert half_width(shaky, "cudagraph") == pytest.approx(widths["cudagraph"])
    # an unsteady host is said, by name and spread; a steady one is not
    warned = hostless.predict(graph, 1, "fp16", "eager", host=shaky).warnings
    assert any("test-shaky" in w and "2.00x" in w for w in warned)
    assert not any("apart (p90/p10)" in w for w in hostless.predict(graph, 1, "fp16", "eager", host=steady).warnings)
    assert not any("apart (p90/p10)" in w for w in hostless.predict(graph, 1, "fp16", "cudagraph", host=shaky).warnings)


def test_a_cpus_eager_interval_keeps_its_bundles_width_whatever_the_spread() -> None:
    """The spread's line was fitted on hosts issuing to an H200: a CPU's forward is its own
    operators, and its bundle's one width stands (nor is a CPU host warned of by that line)."""
    cpu = Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "cpu-amd-epyc"), resolve_device("cpu-amd-epyc"))
    assert cpu.host is not None and not cpu.spread_sized()
    graph = load_zoo_graph("resnet18")
    steady = cpu.host.model_copy(update={"id": "cpu-steady", "schema_version": 3, "forward_spread": 1.05})
    plain, told = (cpu.predict(graph, 1, "fp32", "eager", host=h) for h in (cpu.host, steady))
    assert told.high_ms / told.total_ms == pytest.approx(plain.high_ms / plain.total_ms)
    assert math.log(plain.high_ms / plain.total_ms) == pytest.approx(cpu.bundle.composition["interval_log"]["eager"])


def test_an_id_ending_in_json_is_looked_up_as_an_id_where_no_such_file_is(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # POST /v1/hosts stores id 'box.json'; the CLI's --host read every name ending in .json as a file
    from predictor.host_lookup import resolve_host

    store = HostStore(tmp_path / "hosts")
    box = HOST.model_copy(update={"id": "box.json"})
    store.put(box)
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200")
    monkeypatch.chdir(tmp_path)
    assert resolve_host("box.json", bundle, [store]) == box
    (tmp_path / "box.json").write_text(json.dumps(HOST.model_dump(mode="json")))  # a file of that name wins
    assert resolve_host("box.json", bundle, [store]) == HOST
    with pytest.raises(HostProfileError, match="nothing.json"):  # neither a file nor an id: the file is missing
        resolve_host("nothing.json", bundle, [store])


def test_a_host_probed_beside_another_gpu_is_said_where_it_is_used() -> None:
    # the transfer bundle's hosts are the H200 machine's: an eager H100 answer on its default host is
    # that machine's host, which the answer now says, whether the profile was named (as the service
    # names the default) or not; the H200 and its partitions run on that host
    from predictor.device_bundles import load_predictor

    graph = load_zoo_graph("resnet50")
    elsewhere = "was probed beside NVIDIA H200, not this GPU"
    h100 = load_predictor("nvidia-h100-80gb-hbm3")
    assert any(elsewhere in w for w in h100.predict(graph, 1, "fp16", "eager").warnings)
    assert any(elsewhere in w for w in h100.predict(graph, 1, "fp16", "eager", host=h100.host).warnings)
    h100_probed = h100.host.model_copy(update={"id": "h100-box", "gpu": "NVIDIA H100 80GB HBM3"})
    assert not any(elsewhere in w for w in h100.predict(graph, 1, "fp16", "eager", host=h100_probed).warnings)
    assert not any(elsewhere in w for w in h100.predict(graph, 1, "fp16", "cudagraph").warnings)
    for device in ("nvidia-h200", "nvidia-h200-sm72"):
        assert not any(elsewhere in w for w in load_predictor(device).predict(graph, 1, "fp16", "eager").warnings)
