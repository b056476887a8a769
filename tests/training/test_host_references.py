"""Host profiles beside the committed data: which profile each row is measured against, and
eager predictions that follow the host."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from predictor.bundle import DEFAULT_BUNDLE_DIR, Bundle
from predictor.devices import resolve_device
from predictor.host_profile import HOST_KINDS, load_profile
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph
from training.data import load_model_runs
from training.host_validation import LIVE_CONDITION, host_conditions
from training.hosts import probe_pairs, reference_profiles

DATASET = Path("datasets/nvidia-h200")


def test_every_probed_row_has_its_reference_profile() -> None:
    references = reference_profiles(DATASET)
    for name, runs in host_conditions(DATASET).items():
        named = set(runs["host_profile"].dropna())
        assert named, f"{name}: no eager run names a host profile"
        assert named <= set(references), f"{name}: runs name profiles that are not stored"


def test_a_logged_pair_is_averaged_geometrically() -> None:
    pairs = probe_pairs(DATASET)
    references = reference_profiles(DATASET)
    before, after = next(iter(pairs.items()))
    mean = references[before]
    first = load_profile(DATASET / "hosts" / f"{before}.json")
    last = load_profile(DATASET / "hosts" / f"{after}.json")
    for kind in HOST_KINDS:
        assert mean.costs_us[kind] == pytest.approx(math.sqrt(first.costs_us[kind] * last.costs_us[kind]))
    assert mean.id.startswith(before)


def test_the_conditions_are_the_live_runs_and_each_host_runs_folder() -> None:
    conditions = host_conditions(DATASET)
    assert LIVE_CONDITION in conditions and len(conditions) >= 3
    assert all(set(runs["mode"]) == {"eager"} for runs in conditions.values())


@pytest.fixture(scope="module")
def shipped() -> Predictor:
    bundle = Bundle.load(DEFAULT_BUNDLE_DIR / "nvidia-h200")
    if bundle.metadata.get("host_profile") is None:
        pytest.skip("the shipped bundle names no host profile")
    return Predictor(bundle, resolve_device(bundle.device_id))


def test_eager_predictions_at_two_profiles_bracket_the_second_machines_runs(shipped: Predictor) -> None:
    """The second machine ran the zoo about 1.25x slower at batch 1 than the one the bundle was
    fitted on, and the same machine with its core shared about 2x slower again: predicted for
    the first host and for the contended one, every run of a host-bound slice lies between."""
    references = reference_profiles(DATASET)
    conditions = host_conditions(DATASET)
    fast = references[conditions[LIVE_CONDITION]["host_profile"].mode()[0]]
    slow = references[conditions["machine-2-contended"]["host_profile"].mode()[0]]
    assert all(slow.costs_us[k] > fast.costs_us[k] for k in HOST_KINDS)
    runs = load_model_runs(DATASET, "host_runs/machine-2")
    slice_ = runs[(runs["batch"] == 1) & (runs["precision"] == "fp16")
                  & runs["model"].isin(["resnet34", "mobilenet_v3_small", "densenet169", "distilbert-base",
                                        "efficientnet_b2", "swin_s"])]
    assert len(slice_) == 6
    for r in slice_.itertuples():
        graph = load_zoo_graph(r.model)
        low = shipped.predict(graph, 1, "fp16", "eager", with_layers=False, host=fast).total_ms
        high = shipped.predict(graph, 1, "fp16", "eager", with_layers=False, host=slow).total_ms
        assert low < r.latency_ms < high, f"{r.model}: {r.latency_ms:.2f} ms measured, predicted {low:.2f}-{high:.2f}"


def test_unprobed_rows_get_a_host_inferred_from_their_small_elementwise_calls() -> None:
    import numpy as np
    import pandas as pd

    from training.hosts import unprobed_costs

    # two probed elementwise calls at 8 us on a host whose elementwise cost is 4 us and GEMM 6 us;
    # two unprobed ones at 12 us: a host 1.5x slower, whose GEMM calls cost 9 us
    rows = pd.DataFrame({"family": ["binary", "activation", "linear", "binary", "activation", "linear", "conv2d"],
                         "kernel_us": [1.0, 2.0, 30.0, 1.0, 2.0, 30.0, 40.0],
                         "dispatch_us": [8.0, 8.0, 12.0, 12.0, 12.0, 20.0, 20.0]})
    kinds = np.array(["elementwise", "elementwise", "gemm", "elementwise", "elementwise", "gemm", "conv"])
    probed = np.array([4.0, 4.0, 6.0, np.nan, np.nan, np.nan, np.nan])
    costs = unprobed_costs(rows, kinds, probed)
    np.testing.assert_allclose(costs[:5], [4.0, 4.0, 6.0, 6.0, 6.0])
    assert costs[5] == 9.0 and np.isnan(costs[6])  # no probed conv row: nothing to scale
    assert np.isnan(unprobed_costs(rows.iloc[3:], kinds[3:], probed[3:])).all()  # no probed rows at all


def test_a_sweep_whose_calls_ran_far_from_its_probes_is_left_out_of_host_learning() -> None:
    import numpy as np
    import pandas as pd

    from training.hosts import MAX_SWEEP_TO_PROBE, MIN_SWEEP_CALLS, off_probe_sweeps

    n = MIN_SWEEP_CALLS
    # four probed sweeps of n small adds each at 4 us of probed elementwise cost, plus one GEMM row:
    # at 1.1x their probe, at 1.3x, at 1/1.3x, and at 1.3x with too few calls to judge
    sweeps = {"near": 4.4, "far": 5.2, "fast": 4.0 / 1.3, "few": 5.2}
    rows = pd.DataFrame({
        "family": ["binary"] * (4 * n) + ["linear"] * 4,
        "kernel_us": [1.0] * (4 * n) + [50.0] * 4,
        "dispatch_us": [d for d in sweeps.values() for _ in range(n)] + [9.0] * 4,
        "host_profile": [h for h in sweeps for _ in range(n)] + list(sweeps)})
    rows = pd.concat([rows.iloc[: 3 * n + 10], rows.iloc[4 * n:]], ignore_index=True)  # 'few' keeps 10 calls
    probed = np.where(rows["family"] == "binary", 4.0, 6.0)
    off = off_probe_sweeps(rows, probed)
    assert not off[rows["host_profile"] == "near"].any()
    assert off[rows["host_profile"] == "far"].all()  # its GEMM row too: the whole sweep goes
    assert off[rows["host_profile"] == "fast"].all()  # either way
    assert not off[rows["host_profile"] == "few"].any()
    assert 1.1 < MAX_SWEEP_TO_PROBE < 1.3
    unprobed = rows.assign(host_profile=None)
    assert not off_probe_sweeps(unprobed, probed).any()  # rows naming no profile are not a sweep to judge


def test_cuda_graph_runs_do_not_follow_the_host() -> None:
    """Issue #12's premise, on the committed runs: the zoo as CUDA graphs on a fifth machine
    (2026-12-01, probed before and after each batch value) against the zoo's CUDA-graph runs of
    2026-11-30 on the first: at least 95% of the 324 (model, batch, precision) runs within 5%
    (measured: 99.1%), where eager runs moved 0.38x-1.14x between machines."""
    key = ["model", "batch", "precision"]
    live = load_model_runs(DATASET)
    first = live[live["mode"] == "cudagraph"].groupby(key)["latency_ms"].median()
    fifth = load_model_runs(DATASET, "host_runs/machine-5-cudagraph").groupby(key)["latency_ms"].median()
    ratio = (fifth / first).dropna()
    assert len(ratio) == 324
    assert ((ratio - 1).abs() <= 0.05).mean() >= 0.95
    assert set(load_model_runs(DATASET, "host_runs/machine-5-cudagraph")["host_profile"]) <= \
        set(reference_profiles(DATASET))


def test_runs_measured_with_reference_forwards_carry_them_and_a_calibrating_predictor_reads_them(
        shipped: Predictor) -> None:
    """Machine 10's zoo runs (2026-12-02) sampled the reference forwards between their rounds: their
    profile carries all 18; a predictor built to calibrate scales an eager prediction for it by the
    six fp32 ones, the shipped one predicts from its costs as probed."""
    from predictor.host_profile import CALIBRATION_KEYS, REFERENCE_KEYS

    runs = host_conditions(DATASET)["machine-10-2026-12-02"]
    profile = reference_profiles(DATASET)[runs["host_profile"].mode()[0]]
    assert set(profile.reference_ms or {}) == set(REFERENCE_KEYS)
    calibrated, calibration = shipped.calibrated_host(profile)
    assert calibration is not None and calibration.forwards == len(CALIBRATION_KEYS)
    assert calibrated.costs_us["gemm"] == pytest.approx(profile.costs_us["gemm"] * calibration.scale)
    graph = load_zoo_graph("resnet34")
    plain = profile.model_copy(update={"reference_ms": None})
    calibrating = Predictor(shipped.bundle, shipped.device, calibrate_hosts=True)
    ratio = (calibrating.predict(graph, 1, "fp16", "eager", with_layers=False, host=profile).total_ms
             / calibrating.predict(graph, 1, "fp16", "eager", with_layers=False, host=plain).total_ms)
    assert ratio == pytest.approx(calibration.scale, rel=0.1) and ratio != pytest.approx(1.0, abs=1e-3)
    assert shipped.predict(graph, 1, "fp16", "eager", with_layers=False, host=profile).total_ms == \
        shipped.predict(graph, 1, "fp16", "eager", with_layers=False, host=plain).total_ms


def test_a_condition_is_scored_with_how_often_its_intervals_hold_the_measurement() -> None:
    import pandas as pd

    from training.host_validation import _scores

    runs = pd.DataFrame({"measured_ms": [1.0, 1.0, 1.0, 1.0], "predicted_ms": [1.05, 0.8, 1.0, 1.5],
                         "low_ms": [0.9, 0.7, 1.01, 1.2], "high_ms": [1.1, 0.9, 1.2, 1.8]})
    scores = _scores(runs)
    assert scores["within10"] == 0.5 and scores["coverage90"] == 0.25  # only the first interval holds 1.0


def test_the_first_runs_measured_with_a_forward_spread_name_profiles_that_carry_it() -> None:
    """Machine 21's runs (2026-12-05) were the first whose profiles say how steadily the host ran
    its reference forwards (schema version 3), read through each run's rounds."""
    references = reference_profiles(DATASET)
    runs = host_conditions(DATASET)["machine-21-contended"]
    (named,) = set(runs["host_profile"])
    profile = references[named]
    assert profile.schema_version == 3 and profile.forward_spread is not None and profile.forward_spread > 1.3
