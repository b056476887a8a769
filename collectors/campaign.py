"""One device's dataset on disk, and the collection steps that fill it.

Layout under ``<root>/<device_id>/``: ``ops/`` and ``models/`` hold parquet shards,
``fingerprint.json`` the device, ``sweep_log.jsonl`` one line per sweep run (what the dataset
card's rates and device time are computed from), ``README.md`` the card. The layer-shape
catalogue ``<root>/layer_shapes.json`` is shared by every device.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.dataset_schema import validate_rows
from predictor.model_run_schema import validate_model_runs

from collectors.fingerprint import DeviceFingerprint, open_nvml, read_fingerprint
from collectors.layer_shapes import load_shapes
from collectors.model_runs import ModelMeasurer, model_units
from collectors.op_measure import OpMeasurer
from collectors.sampler import SamplerSettings, sample_configs
from collectors.shards import ShardStore
from collectors.sweep import SweepReport, run_sweep
from collectors.timing import make_timer

SHAPES_FILE = "layer_shapes.json"


class Campaign:
    """Paths and stores of one device's dataset folder."""

    def __init__(self, root: Path, fingerprint: DeviceFingerprint) -> None:
        self.root = Path(root)
        self.fp = fingerprint
        self.directory = self.root / fingerprint.device_id
        self.ops = ShardStore(self.directory / "ops", validate_rows)
        self.models = ShardStore(self.directory / "models", validate_model_runs)

    def record_fingerprint(self) -> None:
        """Write the device fingerprint beside the data (kept current across resumed runs)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "fingerprint.json").write_text(json.dumps(self.fp.as_dict(), indent=1))

    def log(self, kind: str, report: SweepReport, settings: dict[str, Any]) -> None:
        """Append one sweep run's report to the log the dataset card reads."""
        entry = {"kind": kind, "finished": pd.Timestamp.now(tz="UTC").isoformat(), **asdict(report),
                 "per_second": report.per_second, "settings": settings}
        with open(self.directory / "sweep_log.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")


def require_validation() -> None:
    """Fail before measuring, not at the first flush, where shards cannot be validated."""
    try:
        import pandera.pandas  # noqa: F401
    except ImportError:
        raise RuntimeError("pandera is not installed, so no shard could be validated and written: "
                           "install latpred[collect] (on a machine without a registry, carry its "
                           "wheels: see the README)") from None


def shapes_path(root: Path) -> Path:
    return Path(root) / SHAPES_FILE


def collect_ops(root: Path, device: str, settings: SamplerSettings, budget_s: float | None,
                flush_every: int = 1000, progress: bool | None = None) -> SweepReport:
    """Sample the configurations for ``settings`` and measure those not yet on disk."""
    require_validation()
    path = shapes_path(root)
    if not path.exists():
        raise FileNotFoundError(
            f"no layer-shape catalogue at {path}: run 'latpred collect shapes' (needs torchvision "
            "and transformers) or point --out at a dataset root that has one"
        )
    fp = read_fingerprint(device)
    campaign = Campaign(root, fp)
    campaign.record_fingerprint()
    configs = sample_configs(load_shapes(path), settings)
    measurer = OpMeasurer(fp, make_timer(fp.kind), open_nvml() if fp.kind == "cuda" else None,
                          seed=settings.seed)
    report = run_sweep(configs, campaign.ops, measurer, flush_every=flush_every,
                       budget_s=budget_s, progress=progress, description=f"ops on {fp.device_id}")
    campaign.log("ops", report, asdict(settings))
    return report


def collect_models(root: Path, device: str, models: list[str], batches: tuple[int, ...],
                   precisions: tuple[str, ...], budget_s: float | None,
                   progress: bool | None = None) -> SweepReport:
    """Measure whole-model units of the zoo not yet on disk."""
    require_validation()
    fp = read_fingerprint(device)
    campaign = Campaign(root, fp)
    campaign.record_fingerprint()
    measurer = ModelMeasurer(fp, open_nvml() if fp.kind == "cuda" else None)
    started = time.perf_counter()
    report = run_sweep(model_units(models, batches, precisions), campaign.models, measurer.measure,
                       flush_every=12, budget_s=budget_s, progress=progress,
                       description=f"models on {fp.device_id}")
    campaign.log("models", report, {"models": models, "batches": batches, "precisions": precisions,
                                    "seconds": time.perf_counter() - started})
    return report


def collect_shapes(root: Path, device: str, models: list[str]) -> dict[str, Any]:
    """Extract the layer shapes of ``models`` (batch 1, fp32) into the shared catalogue."""
    import torch

    from collectors.layer_shapes import extract_model_shapes, merge_shapes, save_shapes
    from collectors.zoo import get_zoo_model

    fp = read_fingerprint(device)
    target = torch.device("cuda" if fp.kind == "cuda" else "cpu")
    per_model, failures = [], {}
    for name in models:
        zoo = get_zoo_model(name)
        try:
            with torch.device(target):
                model = zoo.build().eval()
            per_model.append((name, extract_model_shapes(model, zoo.example_input(1, target, torch.float32))))
        except Exception as exc:  # one model that will not trace must not lose the others
            failures[name] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            model = None
    shapes = merge_shapes(per_model)
    import torchvision
    import transformers

    meta = {"models": [n for n, _ in per_model], "failures": failures,
            "torch": torch.__version__, "torchvision": torchvision.__version__,
            "transformers": transformers.__version__}
    save_shapes(shapes, shapes_path(root), meta)
    return {"shapes": len(shapes), **meta}
