"""A model bundle: native XGBoost/LightGBM files plus metadata, enough to predict offline.

Layout of a bundle folder: ``metadata.json`` and one model file per target (``kernel.*``,
``dispatch.*``) in the library's own portable format (XGBoost JSON, LightGBM text; never
pickle), gzip-compressed where the name ends in ``.gz`` (a third of the size: every retrain is
committed). xgboost and lightgbm are imported only when a bundle is loaded.

A predictor runs the tree models compiled (``Bundle.compile_trees``, predictor.compiled_trees:
native code made from these same files on the machine that loads them, and cached there), or the
boosters where that cannot be had; ``Bundle.trees`` says which.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.devices import DeviceSpec

BUNDLE_VERSION = 1
TARGETS = ("kernel", "dispatch")
DEFAULT_BUNDLE_DIR = Path(__file__).parent / "bundles"
log = logging.getLogger("latpred.predictor")


class BundleError(ValueError):
    """A bundle is missing, incomplete or corrupt; the message says which file and why."""


@dataclass
class TargetModel:
    """One fitted target: which library, its booster (or one per operator family), and its
    conformal interval widths."""

    library: str
    booster: Any  # one booster, or {family: booster} for per-family models
    interval_log: dict[str, float]  # family -> half-width of a 90% interval in log space
    feature_columns: list[str]
    #: the model files the boosters were read from, keyed as ``booster`` ('*' for a single model);
    #: empty for boosters fitted in memory
    files: dict[str, Path] = field(default_factory=dict)
    #: compiled forms of the boosters (predictor.compiled_trees), same keys; used where present
    compiled: dict[str, Any] = field(default_factory=dict)

    @property
    def structure(self) -> str:
        return "per_family" if isinstance(self.booster, dict) else "single"

    def _predict(self, booster: Any, x: np.ndarray, key: str = "*") -> np.ndarray:
        compiled = self.compiled.get(key)
        if compiled is not None:
            return compiled.predict(x)
        if self.library == "xgboost":
            return np.asarray(booster.inplace_predict(x.astype(np.float32)))
        return np.asarray(booster.predict(x, num_threads=1))

    def predict_log(self, features: pd.DataFrame) -> np.ndarray:
        # Selecting columns costs a pandas reindex per call; the predictor's frames already
        # hold exactly the bundle's columns in its order.
        same = list(features.columns) == self.feature_columns
        x = (features if same else features[self.feature_columns]).to_numpy(dtype=np.float64)
        return self.predict_log_array(x)

    def predict_log_array(self, x: np.ndarray) -> np.ndarray:
        """``predict_log`` of a float64 matrix whose columns are ``feature_columns`` in order:
        the predictor's path, which builds no DataFrame (a cold graph evaluates a hundred
        configurations, and the frame cost a millisecond of its ten)."""
        if not isinstance(self.booster, dict):
            return self._predict(self.booster, x)
        if not len(x):
            return np.empty(0)
        from predictor.features import FAMILY_CODES

        names = {code: name for name, code in FAMILY_CODES.items()}
        codes = x[:, self.feature_columns.index("family_code")]
        # Each family's rows in order of their roofline time: compiled trees run a block of trees
        # over consecutive rows, and rows of like size mostly branch alike, so the CPU mispredicts
        # fewer branches (a cold NAS graph's forests, 0.93x). A permutation: the same predictions.
        sizes = x[:, self.feature_columns.index("log_roofline_us")] if "log_roofline_us" in self.feature_columns \
            else np.zeros(len(x))
        order = np.lexsort((sizes, codes))
        ordered = codes[order]
        edges = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(x)]
        out = np.empty(len(x))
        for start, stop in zip(edges[:-1], edges[1:]):
            family = names[int(ordered[start])]
            if family not in self.booster:
                raise BundleError(f"the bundle has no model for family {family!r}: retrain it")
            rows = order[start:stop]
            out[rows] = self._predict(self.booster[family], x[rows], family)
        return out


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_booster(library: str, path: Path, sha256: str | None = None) -> Any:
    """Load a native model file, turning library errors into a BundleError naming the file.

    The checksum is verified first: LightGBM crashes the whole process (a segfault, no
    exception) on some truncated model files, so a half-copied bundle must never reach it.
    """
    if library not in ("xgboost", "lightgbm"):
        raise BundleError(f"{path}: unknown model library {library!r}")
    if not path.exists():
        raise BundleError(f"model bundle is incomplete: {path} is missing")
    if sha256 is not None and file_sha256(path) != sha256:
        raise BundleError(f"model file {path} is corrupt or truncated: its sha256 does not match "
                          "the bundle's metadata.json")
    try:
        module = __import__(library)
    except ImportError:
        raise BundleError(f"{path} is a {library} model but {library} is not installed: "
                          "pip install 'latpred[predict]'") from None
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else None
        if library == "xgboost":
            booster = module.Booster()
            booster.load_model(str(path) if raw is None else bytearray(raw))
            booster.set_param({"nthread": 1})
            return booster
        if library == "lightgbm":
            return module.Booster(model_file=str(path)) if raw is None else module.Booster(model_str=raw.decode())
    except Exception as exc:
        raise BundleError(f"model file {path} is corrupt or unreadable: {exc}") from None
    raise AssertionError("unreachable")


class Bundle:
    """A loaded bundle: per-target models, composition constants and metadata."""

    def __init__(self, directory: Path, metadata: dict[str, Any], targets: dict[str, TargetModel]) -> None:
        self.directory = directory
        self.metadata = metadata
        self.targets = targets
        self._trees: str | None = None
        self._trees_lock = threading.Lock()

    @property
    def trees(self) -> str:
        """How the tree models run: 'compiled (lleaves)', 'booster (why)', or per target where
        they differ; 'booster' until ``compile_trees`` has run."""
        return self._trees or "booster (not compiled)"

    def compile_trees(self, mode: str | None = None) -> str:
        """Run the tree models compiled from now on (once per bundle; ``mode`` or
        ``$LATPRED_TREES``: auto, compiled or booster, see predictor.compiled_trees), and say how
        they run. Compiles what the cache lacks, in parallel: seconds per model, once per
        machine. Under 'auto' a model that cannot be compiled leaves the bundle on its boosters,
        with a warning in the log and in ``trees``; under 'compiled' that is a BundleError. A
        bundle fitted in memory (training's) has no files to compile, and keeps its boosters."""
        from predictor import compiled_trees

        with self._trees_lock:
            if self._trees is not None:
                return self._trees
            mode = compiled_trees.tree_mode(mode)
            why = None
            with_files = {name: t for name, t in self.targets.items() if t.files}
            if mode == "booster":
                why = f"{compiled_trees.TREES_ENV}=booster"
            elif not with_files:
                why = "no model files (fitted in memory)"
            else:
                why = compiled_trees.unavailable()
                if why is None:
                    try:
                        models = {(name, key): (t.library, path) for name, t in with_files.items()
                                  for key, path in t.files.items()}
                        forests = compiled_trees.compiled_forests(models, len(self.metadata["feature_columns"]))
                        for name, t in with_files.items():
                            t.compiled = {key: forests[(name, key)] for key in t.files}
                    except (compiled_trees.CompileError, OSError, ValueError, KeyError) as exc:
                        why = f"compiling failed: {exc}"
                if why is not None:
                    if mode == "compiled":  # (in-memory bundles never get here)
                        raise BundleError(f"bundle {self.directory}: {compiled_trees.TREES_ENV}=compiled, but "
                                          f"its trees cannot be compiled: {why}")
                    log.warning("bundle %s predicts with its boosters, not compiled trees: %s", self.directory, why)
            parts = {name: ("compiled (lleaves)" if t.compiled else f"booster ({t.library})")
                     for name, t in self.targets.items()}
            if why is not None:
                self._trees = f"booster ({why})"
            elif len(set(parts.values())) == 1:
                self._trees = next(iter(parts.values()))
            else:
                self._trees = ", ".join(f"{name}: {how}" for name, how in parts.items())
            if with_files:
                log.info("bundle %s (%s): trees %s", self.directory, self.version, self._trees)
            return self._trees

    @property
    def device_id(self) -> str:
        return self.metadata["device_id"]

    @property
    def version(self) -> str:
        return str(self.metadata.get("version", "unversioned"))

    @property
    def composition(self) -> dict[str, Any]:
        return self.metadata.get("composition", {})

    @property
    def transfer(self) -> dict[str, Any] | None:
        """What a transfer bundle (training/transfer.py: one kernel model across devices, which
        takes a device's specs as features) says of itself: the devices it was trained on and the
        composition fitted on each measured one's runs; None for a bundle of one device."""
        value = self.metadata.get("transfer")
        return value if isinstance(value, dict) else None

    @property
    def l2_roofline(self) -> bool:
        """Whether a transfer bundle's roofline reads what fits in L2 at the L2's bandwidth
        (``DeviceSpec.memory_seconds``; transfer bundles since 2026-12-05): its features must be
        computed as they were fitted."""
        return bool(self.transfer and self.transfer.get("l2_roofline"))

    def feature_spec(self, device: DeviceSpec) -> DeviceSpec:
        """The spec this bundle's features are computed on for ``device``: a transfer bundle's
        datasheet basis, the only figures a device never measured has (``DeviceSpec.datasheet_spec``);
        a one-device bundle's own device as it is."""
        return device.datasheet_spec(self.l2_roofline) if self.transfer is not None else device

    def measured_on(self, device_id: str) -> bool:
        """Whether this bundle was fitted on ``device_id``'s own measurements: its own device, or a
        device a transfer bundle has runs of (others it predicts from their specs alone)."""
        if self.transfer is None:
            return device_id == self.device_id
        return device_id in self.transfer.get("devices", {})

    def composition_for(self, device_id: str) -> dict[str, Any]:
        """The composition (constants, interval widths) to predict ``device_id`` with: a transfer
        bundle's own fit for a device it measured, its fit across them for any other."""
        if self.transfer is not None:
            own = self.transfer.get("devices", {}).get(device_id)
            if isinstance(own, dict):
                return own
        return self.composition

    @staticmethod
    def load(directory: Path) -> Bundle:
        directory = Path(directory)
        metadata = read_metadata(directory)
        targets = {}
        for name in TARGETS:
            spec = metadata["targets"][name]
            files = spec["files"]
            boosters = {key: load_booster(spec["library"], directory / f["file"], f["sha256"])
                        for key, f in files.items()}
            booster = boosters["*"] if spec.get("structure", "single") == "single" else boosters
            targets[name] = TargetModel(spec["library"], booster, spec["interval_log"], metadata["feature_columns"],
                                        files={key: directory / f["file"] for key, f in files.items()})
        return Bundle(directory, metadata, targets)


def read_metadata(directory: Path) -> dict[str, Any]:
    """A bundle folder's metadata.json, checked for what loading it needs (a BundleError naming
    the file and what is wrong otherwise): its version, feature columns and each target's
    library, interval widths and model files with their sha256."""
    meta_path = Path(directory) / "metadata.json"
    if not meta_path.exists():
        raise BundleError(f"no model bundle at {directory}: {meta_path.name} is missing "
                          "(run 'latpred train' to make one)")
    try:
        metadata = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{meta_path} is corrupt: {exc}") from None
    if not isinstance(metadata, dict):
        raise BundleError(f"{meta_path} is corrupt: expected a JSON object")
    if not isinstance(metadata.get("feature_columns"), list):
        raise BundleError(f"{meta_path} is corrupt: 'feature_columns' is missing")
    if metadata.get("bundle_version") != BUNDLE_VERSION:
        raise BundleError(f"{meta_path}: bundle version {metadata.get('bundle_version')!r} "
                          f"is not {BUNDLE_VERSION}; retrain with this latpred")
    targets = metadata.get("targets")
    for name in TARGETS:
        spec = targets.get(name) if isinstance(targets, dict) else None
        if spec is None:
            raise BundleError(f"{meta_path}: target {name!r} is missing")
        if not isinstance(spec, dict) or not {"library", "files", "interval_log"} <= set(spec):
            raise BundleError(f"{meta_path}: target {name!r} needs 'library', 'files' and 'interval_log'")
        files = spec["files"]
        if not isinstance(files, dict) or not files or not all(
                isinstance(f, dict) and {"file", "sha256"} <= set(f) for f in files.values()):
            raise BundleError(f"{meta_path}: target {name!r}: 'files' must map models to "
                              "{'file', 'sha256'}; retrain with this latpred")
    return metadata


def check_files(directory: Path) -> None:
    """Check every model file of the bundle in ``directory`` against the sha256 its metadata.json
    records, without loading a booster (a BundleError naming the first file that differs): for a
    copy of a bundle that was loaded and verified already, where only the copying can have gone
    wrong."""
    directory = Path(directory)
    metadata = read_metadata(directory)
    for name in TARGETS:
        for f in metadata["targets"][name]["files"].values():
            path = directory / f["file"]
            if not path.is_file():
                raise BundleError(f"model bundle is incomplete: {path} is missing")
            if file_sha256(path) != f["sha256"]:
                raise BundleError(f"model file {path} is corrupt or truncated: its sha256 does not match "
                                  "the bundle's metadata.json")


def bundle_dirs(root: Path = DEFAULT_BUNDLE_DIR) -> dict[str, Path]:
    """Device id -> bundle folder for every bundle under ``root``."""
    if not root.exists():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / "metadata.json").exists()}
