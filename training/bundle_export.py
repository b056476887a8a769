"""Write a model bundle: native model files plus metadata (see ``predictor.bundle``).

The bundle is written to a temporary folder beside the target and renamed into place, so a
crash mid-export never leaves a half-written bundle where the service would load it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

from predictor.bundle import BUNDLE_VERSION, Bundle, TargetModel, file_sha256
from predictor.features import FEATURE_COLUMNS, feature_codes
from training.fit import FitResult

EXTENSIONS = {"xgboost": "json.gz", "lightgbm": "txt.gz"}


def in_memory_bundle(device_id: str, fits: dict[str, FitResult], extra: dict[str, Any] | None = None) -> Bundle:
    """A Bundle over freshly fitted boosters, before anything is written."""
    metadata = {"bundle_version": BUNDLE_VERSION, "device_id": device_id,
                "feature_columns": list(FEATURE_COLUMNS), "feature_codes": feature_codes(), **(extra or {})}
    targets = {name: TargetModel(fit.library, fit.booster, fit.interval_log, list(FEATURE_COLUMNS))
               for name, fit in fits.items()}
    return Bundle(Path("."), metadata, targets)


def save_booster(library: str, booster: Any, path: Path) -> None:
    """The booster in its library's text format, gzipped (mtime 0: the same model, the same bytes)."""
    text = booster.save_raw("json") if library == "xgboost" else booster.model_to_string().encode()
    path.write_bytes(gzip.compress(bytes(text), mtime=0))


def export_bundle(target_dir: Path, device_id: str, fits: dict[str, FitResult], metadata: dict[str, Any]) -> Path:
    """Write the bundle for ``device_id`` to ``target_dir`` atomically; returns the folder."""
    target_dir = Path(target_dir)
    staging = target_dir.with_name(target_dir.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    targets = {}
    for name, fit in fits.items():
        boosters = fit.booster if isinstance(fit.booster, dict) else {"*": fit.booster}
        files = {}
        for key, booster in boosters.items():
            filename = f"{name}.{EXTENSIONS[fit.library]}" if key == "*" else f"{name}-{key}.{EXTENSIONS[fit.library]}"
            save_booster(fit.library, booster, staging / filename)
            files[key] = {"file": filename, "sha256": file_sha256(staging / filename)}
        targets[name] = {"library": fit.library, "structure": fit.structure, "files": files,
                         "interval_log": fit.interval_log}
    full = {"bundle_version": BUNDLE_VERSION, "device_id": device_id,
            "feature_columns": list(FEATURE_COLUMNS), "feature_codes": feature_codes(), **metadata,
            "targets": targets}
    (staging / "metadata.json").write_text(json.dumps(full, indent=1, sort_keys=True))
    old = target_dir.with_name(target_dir.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target_dir.exists():
        os.replace(target_dir, old)
    os.replace(staging, target_dir)
    shutil.rmtree(old, ignore_errors=True)
    return target_dir
