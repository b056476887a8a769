"""The served bundle is replaced only by a bundle that validates at least as well."""

from __future__ import annotations

import json
from pathlib import Path

from training.train import served_score


def test_served_score_reads_the_recorded_metric(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_text(json.dumps({"metrics": {"lomo_within_10pct": 0.42}}))
    assert served_score(tmp_path) == 0.42


def test_a_missing_or_unreadable_bundle_scores_below_any_new_one(tmp_path: Path) -> None:
    assert served_score(tmp_path / "absent") == -1.0
    (tmp_path / "metadata.json").write_text("{not json")
    assert served_score(tmp_path) == -1.0
    (tmp_path / "metadata.json").write_text(json.dumps({"metrics": {}}))
    assert served_score(tmp_path) == -1.0


def test_the_shipped_bundle_records_its_score() -> None:
    from predictor.bundle import DEFAULT_BUNDLE_DIR

    assert 0.0 <= served_score(DEFAULT_BUNDLE_DIR / "nvidia-h200") <= 1.0
