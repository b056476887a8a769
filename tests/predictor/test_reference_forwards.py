"""Reference forwards calibrate a host profile (predictor.host_references): the factor solved from
them, on the shipped bundle, and what an eager prediction says of it: a predictor built to
calibrate applies it, the default one uses the costs as probed and only says where the forwards
disagree with them by far."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.devices import resolve_device
from predictor.graph import Graph
from predictor.host_profile import (
    CALIBRATION_KEYS,
    REFERENCE_KEYS,
    REFERENCE_MODELS,
    HostProfile,
    mean_profile,
    mean_references,
    parse_profile,
    parse_reference_key,
)
from predictor.host_references import GRAPH_DIR, SCALE_BOUNDS, solve_scale
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph

SUITE_TRACES = Path(__file__).parents[2] / "datasets" / "suites" / "nas-train" / "torch"


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor(Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200"), resolve_device("h200"))


@pytest.fixture(scope="module")
def calibrating(predictor: Predictor) -> Predictor:
    return Predictor(predictor.bundle, predictor.device, calibrate_hosts=True)


@pytest.fixture(scope="module")
def host(predictor: Predictor) -> HostProfile:
    assert predictor.host is not None and not predictor.host.reference_ms
    return predictor.host


def scaled(host: HostProfile, factor: float, **fields: object) -> HostProfile:
    return parse_profile({**host.model_dump(mode="json"), "schema_version": 2,
                          "costs_us": {k: v * factor for k, v in host.costs_us.items()}, **fields})


def measured_as(predictor: Predictor, host: HostProfile, keys: tuple[str, ...] = CALIBRATION_KEYS
                ) -> dict[str, float]:
    """The reference forwards as ``host`` would run them, were the predictions exact."""
    out = {}
    for key in keys:
        model, batch, precision = parse_reference_key(key)
        graph = Graph.load(GRAPH_DIR / f"{model}.json")
        out[key] = predictor.predict(graph, batch, precision, "eager", with_layers=False, host=host).total_ms
    return out


def test_the_shipped_reference_graphs_are_the_suites_torch_traces() -> None:
    assert sorted(p.stem for p in GRAPH_DIR.glob("*.json")) == sorted(REFERENCE_MODELS)
    for model in REFERENCE_MODELS:
        assert json.loads((GRAPH_DIR / f"{model}.json").read_text()) == \
            json.loads((SUITE_TRACES / f"{model}.json").read_text())


def test_the_keys_parse_into_model_batch_and_precision() -> None:
    assert parse_reference_key("nas-1003|b8|bf16") == ("nas-1003", 8, "bf16")
    assert len(REFERENCE_KEYS) == 18 and all(parse_reference_key(k)[0] in REFERENCE_MODELS for k in REFERENCE_KEYS)
    assert len(CALIBRATION_KEYS) == 6 and {parse_reference_key(k)[2] for k in CALIBRATION_KEYS} == {"fp32"}


def test_the_factor_sets_the_median_error_to_zero_and_stays_in_its_bounds() -> None:
    # predicted = 1 + s * host, so the median of log(predicted / measured) is zero at s = 2 for these
    measured = {"a": 3.0, "b": 5.0, "c": 100.0}
    host = {"a": 1.0, "b": 2.0, "c": 1.0}
    s = solve_scale(measured, lambda k, s: 1 + s * host[k])
    assert s == pytest.approx(2.0, rel=1e-6)
    assert solve_scale({"a": 1e6}, lambda k, s: 1 + s) == SCALE_BOUNDS[1]
    assert solve_scale({"a": 1e-6}, lambda k, s: 1 + s) == SCALE_BOUNDS[0]


def test_a_host_whose_forwards_ran_slower_is_predicted_with_costs_scaled_to_them(
        predictor: Predictor, calibrating: Predictor, host: HostProfile) -> None:
    # the references ran as a host with 1.3x the probed costs runs them: the prediction is that host's
    slower = scaled(host, 1.3)
    calibrated = scaled(host, 1.0, id="calibrated-host", reference_ms=measured_as(predictor, slower))
    graph = load_zoo_graph("resnet18")
    got = calibrating.predict(graph, 1, "fp16", "eager", host=calibrated)
    want = predictor.predict(graph, 1, "fp16", "eager", host=slower)
    assert got.total_ms == pytest.approx(want.total_ms, rel=1e-4)
    assert got.total_ms > predictor.predict(graph, 1, "fp16", "eager", host=host).total_ms * 1.1
    assert got.host is not None and got.host.startswith("calibrated-host (")
    assert "costs x1.30 from 6 reference forwards" in got.host
    assert got.warnings == []  # 1.3x: within what a probe may miss
    # a captured graph is the GPU's: no host, no calibration
    assert calibrating.predict(graph, 1, "fp16", "cudagraph", host=calibrated).host is None


def test_by_default_a_prediction_uses_the_costs_as_probed(predictor: Predictor, host: HostProfile) -> None:
    """The forwards are read for a warning only: the answer is the probed costs', and names no factor."""
    with_forwards = scaled(host, 1.0, id="forwards-host", reference_ms=measured_as(predictor, scaled(host, 1.3)))
    graph = load_zoo_graph("resnet18")
    got = predictor.predict(graph, 1, "fp16", "eager", host=with_forwards)
    assert got.total_ms == predictor.predict(graph, 1, "fp16", "eager", host=host).total_ms
    assert got.host is not None and got.host.startswith("forwards-host (") and "reference forwards" not in got.host
    assert got.warnings == []


def test_forwards_far_from_the_probe_say_so(predictor: Predictor, host: HostProfile) -> None:
    far = scaled(host, 1.0, id="contended-host", reference_ms=measured_as(predictor, scaled(host, 2.2)))
    p = predictor.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", host=far)
    assert any("reference forwards ran 2.2" in w and "probe again" in w for w in p.warnings)
    # beyond the factor's bound: the warning says the forwards are further off than it
    beyond = scaled(host, 1.0, id="beyond-host",
                    reference_ms={k: v * 100 for k, v in measured_as(predictor, host, CALIBRATION_KEYS[:3]).items()})
    p = predictor.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", host=beyond)
    assert any(f"ran at least {SCALE_BOUNDS[1]:.2f}x" in w for w in p.warnings)


def test_forwards_timed_on_another_gpu_do_not_calibrate_and_say_so(predictor: Predictor, calibrating: Predictor,
                                                                  host: HostProfile) -> None:
    other = scaled(host, 1.0, id="h100-host", gpu="NVIDIA H100 80GB HBM3",
                   reference_ms=measured_as(predictor, scaled(host, 1.3)))
    assert calibrating.calibrated_host(other) == (other, None)
    graph = load_zoo_graph("resnet18")
    p = calibrating.predict(graph, 1, "fp16", "eager", host=other)
    plain = calibrating.predict(graph, 1, "fp16", "eager", host=other.model_copy(update={"reference_ms": None}))
    assert p.total_ms == plain.total_ms
    assert any("timed on NVIDIA H100 80GB HBM3" in w and "used as probed" in w for w in p.warnings)


def test_only_the_fp32_forwards_calibrate_and_a_profile_without_them_says_so(predictor: Predictor,
                                                                          calibrating: Predictor,
                                                                          host: HostProfile) -> None:
    # a profile of all 18 whose fp16 and bf16 forwards ran as a host 3x slower: the fp32 ones decide
    others = tuple(k for k in REFERENCE_KEYS if k not in CALIBRATION_KEYS)
    all18 = {**measured_as(predictor, scaled(host, 1.3)), **measured_as(predictor, scaled(host, 3.0), others)}
    calibration = predictor.calibrated_host(scaled(host, 1.0, id="all-18", reference_ms=all18))[1]
    assert calibration is not None and calibration.forwards == 6
    assert calibration.scale == pytest.approx(1.3, rel=1e-3)
    # half-precision forwards only: the costs as probed, and the answer says why
    half = scaled(host, 1.0, id="half-only", reference_ms=measured_as(predictor, scaled(host, 1.3), others))
    assert predictor.calibrated_host(half) == (half, None)
    p = calibrating.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", host=half)
    assert p.total_ms == predictor.predict(load_zoo_graph("resnet18"), 1, "fp16", "eager", host=host).total_ms
    assert any("none of the host's 12 reference forwards is in fp32" in w for w in p.warnings)


def test_a_calibrated_profile_carries_no_forwards_to_calibrate_again(predictor: Predictor, host: HostProfile) -> None:
    profile = scaled(host, 1.0, id="twice",
                     reference_ms=measured_as(predictor, scaled(host, 1.2), CALIBRATION_KEYS[:2]))
    calibrated, calibration = predictor.calibrated_host(profile)
    assert calibration is not None and calibrated.reference_ms is None
    assert predictor.calibrated_host(calibrated) == (calibrated, None)


def test_means_of_reference_forwards_take_each_forward_where_it_was_timed(host: HostProfile) -> None:
    a, b, c = REFERENCE_KEYS[:3]
    assert mean_references([{a: 2.0, b: 1.0}, None, {a: 8.0, c: 5.0}]) == \
        {a: pytest.approx(4.0), b: pytest.approx(1.0), c: pytest.approx(5.0)}
    assert mean_references([None, {}]) is None
    before, after = host, scaled(host, 1.0, id="after-host", reference_ms={a: 3.0})
    pair = mean_profile(before, after)  # a version 1 probe before, a version 2 one after
    assert pair.reference_ms == {a: pytest.approx(3.0)} and pair.schema_version == 2
    parse_profile(pair.model_dump(mode="json"))  # what it holds is a valid profile


def test_slower_forwards_never_make_a_calibrated_prediction_faster(predictor: Predictor, calibrating: Predictor,
                                                                   host: HostProfile) -> None:
    graph = load_zoo_graph("mobilenet_v3_small")
    base = measured_as(predictor, host, CALIBRATION_KEYS[:4])
    totals = [calibrating.predict(graph, 8, "bf16", "eager", host=scaled(
        host, 1.0, id=f"r{i}", reference_ms={k: v * f for k, v in base.items()})).total_ms
        for i, f in enumerate((0.8, 1.0, 1.25, 1.6))]
    assert totals == sorted(totals) and totals[-1] > totals[0]
    # the same forwards measured as the predictions are: the factor is 1
    same = predictor.calibrated_host(scaled(host, 1.0, id="same", reference_ms=base))[1]
    assert same is not None and math.isclose(same.scale, 1.0, rel_tol=1e-4) and same.forwards == 4
