"""Strict leave-one-model-out: per-layer models refitted without the held-out model's shapes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.bundle import DEFAULT_BUNDLE_DIR
from training.validate import strict_validate

DATASET = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h200"
MODELS = ["resnet34", "mobilenet_v3_small", "vgg11_bn"]


def small_dataset(root: Path) -> Path:
    """A real slice of the H200 dataset: 4,000 operator rows and three models' runs."""
    target = root / "nvidia-h200"
    (target / "ops").mkdir(parents=True)
    (target / "models").mkdir()
    shutil.copy(DATASET / "fingerprint.json", target)
    shutil.copy(DATASET / "sweep_log.jsonl", target)  # which probes pair up
    shutil.copytree(DATASET / "hosts", target / "hosts")
    ops = pd.concat([pd.read_parquet(p) for p in sorted((DATASET / "ops").glob("part-*.parquet"))])
    held = ops["source"].isin([f"model:{m}" for m in MODELS])
    probed = ops["host_profile"].notna()  # the dispatch model learns from these
    sample = pd.concat([ops[held & ~probed].sample(n=1500, random_state=0),
                        ops[~held & ~probed].sample(n=2000, random_state=0), ops[probed].sample(n=500, random_state=0)])
    sample.to_parquet(target / "ops" / "part-00000.parquet", index=False)
    runs = pd.concat([pd.read_parquet(p) for p in sorted((DATASET / "models").glob("part-*.parquet"))])
    runs[runs["model"].isin(MODELS)].to_parquet(target / "models" / "part-00000.parquet", index=False)
    return target


def test_strict_validation_predicts_every_run_of_every_model(tmp_path: Path) -> None:
    report = strict_validate(DEFAULT_BUNDLE_DIR / "nvidia-h200", small_dataset(tmp_path), scale=0.1, threads=1)
    predictions = report.predictions
    assert sorted(predictions["model"].unique()) == sorted(MODELS)
    assert len(predictions) == len(MODELS) * 4 * 3 * 2  # batches x precisions x modes
    assert (predictions["predicted_ms"] > 0).all()
    # a real predictor, not a constant: predictions follow the measurements across batch sizes
    graph = predictions[predictions["mode"] == "cudagraph"]
    assert np.corrcoef(np.log(graph["predicted_ms"]), np.log(graph["measured_ms"]))[0, 1] > 0.8
    assert set(report.overall["method"]) == {"latpred", "roofline"}  # no FLOPs baseline in strict mode
