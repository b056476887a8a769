"""Model bundles: a written and reloaded bundle predicts exactly as the fitted models did, and a
missing, incomplete or corrupt bundle is refused with a BundleError that names the file."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from predictor.bundle import BUNDLE_VERSION, DEFAULT_BUNDLE_DIR, Bundle, BundleError, bundle_dirs, file_sha256
from predictor.devices import resolve_device
from predictor.predict import Predictor
from predictor.zoo import load_zoo_graph
from training.bundle_export import EXTENSIONS, export_bundle, in_memory_bundle
from training.data import OpData, load_ops
from training.fit import LIBRARIES, FitResult, fit_target

DATASET = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h200"
DEVICE = "nvidia-h200"
#: Composition constants as a trained bundle carries them (values chosen away from the defaults).
METADATA = {
    "version": "test-1",
    "composition": {"constants": {"gap_us": 1.25, "dispatch_share": 1.5, "call_share": 10.0, "view_share": 3.0,
                                  "launch_share": 0.5, "fallback_ratio": 2.0, "sync_us": 12.0,
                                  "group_scale": {"conv": 0.8, "gemm": 1.1, "attention": 2.0, "norm": 0.7,
                                                  "elementwise": 1.6, "fallback": 2.0}},
                    "interval_log": {"cudagraph": 0.3, "eager": 0.4}},
    # the host that measured the bundle's runs: what an eager prediction is for when none is asked
    "host_profile": {"schema_version": 1, "id": "test-host", "label": "measured", "cpu_model": "test CPU",
                     "cpu_cores": 8, "measured_at": "2026-01-01T00:00:00+00:00",
                     "costs_us": {"elementwise": 7.0, "gemm": 11.5, "conv": 13.0, "norm": 10.25, "attention": 16.5,
                                  "view": 0.6, "copy": 9.0, "module_call": 0.9}},
}


@pytest.fixture(scope="module")
def ops() -> OpData:
    return load_ops(DATASET, limit=3000)


@pytest.fixture(scope="module")
def all_fits(ops: OpData) -> dict[str, dict[str, FitResult]]:
    # one thread: on a small shared machine XGBoost's OpenMP threads can spin for many seconds
    return {library: {target: fit_target(ops, target, library, threads=1, scale=0.1)
                      for target in ("kernel", "dispatch")} for library in LIBRARIES}


@pytest.fixture(scope="module")
def all_exported(all_fits: dict[str, dict[str, FitResult]],
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {library: export_bundle(tmp_path_factory.mktemp(library) / DEVICE, DEVICE, fits, METADATA)
            for library, fits in all_fits.items()}


@pytest.fixture(params=LIBRARIES)
def fits(request: pytest.FixtureRequest, all_fits: dict[str, dict[str, FitResult]]) -> dict[str, FitResult]:
    return all_fits[request.param]


@pytest.fixture
def exported(fits: dict[str, FitResult], all_exported: dict[str, Path]) -> Path:
    return all_exported[library_of(fits)]


def library_of(fits: dict[str, FitResult]) -> str:
    return fits["kernel"].library


def copy_of(bundle: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy" / DEVICE
    shutil.copytree(bundle, target)
    return target


def test_export_writes_native_files_and_metadata(exported: Path, fits: dict[str, FitResult]) -> None:
    ext = EXTENSIONS[library_of(fits)]
    assert sorted(p.name for p in exported.iterdir()) == sorted(["metadata.json", f"kernel.{ext}",
                                                                 f"dispatch.{ext}"])
    assert sorted(p.name for p in exported.parent.iterdir()) == [DEVICE]  # no staging left behind
    meta = json.loads((exported / "metadata.json").read_text())
    assert meta["bundle_version"] == BUNDLE_VERSION and meta["device_id"] == DEVICE
    assert meta["targets"]["kernel"] == {"library": library_of(fits), "structure": "single",
                                         "files": {"*": {"file": f"kernel.{ext}",
                                                         "sha256": file_sha256(exported / f"kernel.{ext}")}},
                                         "interval_log": fits["kernel"].interval_log}
    assert meta["composition"] == METADATA["composition"]
    # native formats, gzipped, never pickle
    head = gzip.decompress((exported / f"kernel.{ext}").read_bytes())[:64]
    assert head.startswith(b"{") if ext == "json.gz" else head.startswith(b"tree")


def test_uncompressed_model_files_of_earlier_bundles_still_load(exported: Path, tmp_path: Path) -> None:
    bundle = copy_of(exported, tmp_path)
    meta = json.loads((bundle / "metadata.json").read_text())
    for target in meta["targets"].values():
        for entry in target["files"].values():
            plain = bundle / entry["file"].removesuffix(".gz")
            plain.write_bytes(gzip.decompress((bundle / entry["file"]).read_bytes()))
            (bundle / entry["file"]).unlink()
            entry.update(file=plain.name, sha256=file_sha256(plain))
    (bundle / "metadata.json").write_text(json.dumps(meta))
    x = load_zoo_graph("resnet50")
    device = resolve_device(DEVICE)
    assert Predictor(Bundle.load(bundle), device).predict(x, 4, "fp16").total_ms == \
        Predictor(Bundle.load(exported), device).predict(x, 4, "fp16").total_ms


def test_round_trip_predicts_identically(exported: Path, fits: dict[str, FitResult]) -> None:
    device = resolve_device(DEVICE)
    loaded = Bundle.load(exported)
    memory = in_memory_bundle(DEVICE, fits, METADATA)
    assert loaded.version == memory.version == "test-1"
    assert {t.library for t in loaded.targets.values()} == {library_of(fits)}
    for name in ("bert-base", "resnet50"):
        graph = load_zoo_graph(name)
        for batch, precision, mode in ((1, "fp16", "eager"), (32, "fp32", "cudagraph")):
            a = Predictor(loaded, device).predict(graph, batch, precision, mode)
            b = Predictor(memory, device).predict(graph, batch, precision, mode)
            assert np.allclose([x.kernel_us for x in a.layers], [x.kernel_us for x in b.layers], rtol=1e-6)
            assert np.allclose([x.host_us for x in a.layers], [x.host_us for x in b.layers], rtol=1e-6)
            assert np.allclose([a.total_ms, a.low_ms, a.high_ms], [b.total_ms, b.low_ms, b.high_ms], rtol=1e-6)
            # the composition constants in the metadata were used, not the defaults
            assert Predictor(loaded, device).constants.gap_us == 1.25
            # an eager prediction is for the host the metadata names, and says so
            assert a.host == b.host == ("test-host (measured; test CPU, 8 cores)" if mode == "eager" else None)


def test_export_replaces_an_existing_bundle(exported: Path, fits: dict[str, FitResult], tmp_path: Path) -> None:
    target = copy_of(exported, tmp_path)
    export_bundle(target, DEVICE, fits, {**METADATA, "version": "test-2"})
    assert Bundle.load(target).version == "test-2"
    assert sorted(p.name for p in target.parent.iterdir()) == [DEVICE]


def test_the_committed_bundle_loads() -> None:
    assert "nvidia-h200" in bundle_dirs()
    bundle = Bundle.load(bundle_dirs()["nvidia-h200"])
    assert bundle.device_id == "nvidia-h200"
    assert set(bundle.targets) == {"kernel", "dispatch"}
    assert bundle_dirs(Path("/nonexistent/bundles")) == {}


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"no model bundle at .*nowhere.*metadata\.json is missing"):
        Bundle.load(tmp_path / "nowhere")


def test_a_missing_metadata_file_is_refused(exported: Path, tmp_path: Path) -> None:
    bundle = copy_of(exported, tmp_path)
    (bundle / "metadata.json").unlink()
    with pytest.raises(BundleError, match=r"metadata\.json is missing"):
        Bundle.load(bundle)


@pytest.mark.parametrize("garbage", [b"\x89\xff\xfe\x00garbage", b'{"bundle_version": 1, "device_id"'])
def test_corrupt_metadata_is_refused(exported: Path, tmp_path: Path, garbage: bytes) -> None:
    bundle = copy_of(exported, tmp_path)
    (bundle / "metadata.json").write_bytes(garbage)
    with pytest.raises(BundleError, match=r"metadata\.json is corrupt"):
        Bundle.load(bundle)


@pytest.mark.parametrize("version", [None, 0, 2, "1"])
def test_a_wrong_bundle_version_is_refused(exported: Path, tmp_path: Path, version: object) -> None:
    bundle = copy_of(exported, tmp_path)
    meta = json.loads((bundle / "metadata.json").read_text())
    meta["bundle_version"] = version
    (bundle / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=rf"metadata\.json: bundle version {version!r}"):
        Bundle.load(bundle)


def test_a_missing_target_is_refused(exported: Path, tmp_path: Path) -> None:
    bundle = copy_of(exported, tmp_path)
    meta = json.loads((bundle / "metadata.json").read_text())
    del meta["targets"]["dispatch"]
    (bundle / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=r"metadata\.json: target 'dispatch' is missing"):
        Bundle.load(bundle)


def test_a_missing_model_file_is_refused(exported: Path, tmp_path: Path) -> None:
    bundle = copy_of(exported, tmp_path)
    model = next(bundle.glob("dispatch.*"))
    model.unlink()
    with pytest.raises(BundleError, match=rf"incomplete: .*{model.name} is missing"):
        Bundle.load(bundle)


@pytest.mark.parametrize("garbage", [b"\x00\xffnot a model" * 20, b"", b"tree\nversion=v4\n" + b"x" * 99])
def test_a_corrupt_model_file_is_refused(exported: Path, tmp_path: Path, garbage: bytes) -> None:
    bundle = copy_of(exported, tmp_path)
    model = next(bundle.glob("kernel.*"))
    model.write_bytes(garbage)
    with pytest.raises(BundleError, match=rf"model file .*{model.name} is corrupt"):
        Bundle.load(bundle)


def load_in_subprocess(bundle: Path) -> subprocess.CompletedProcess:
    """Load a bundle in a child process: a native library may take the whole process down."""
    code = ("import sys\nfrom predictor.bundle import Bundle, BundleError\n"
            "try:\n    Bundle.load(sys.argv[1])\nexcept BundleError as exc:\n    print('BundleError:', exc)\n"
            "else:\n    print('loaded')\n")
    return subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])


def truncate_kernel(bundle: Path) -> Path:
    model = next(bundle.glob("kernel.*"))
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2])
    return model


def test_a_truncated_xgboost_model_is_refused(all_exported: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy_of(all_exported["xgboost"], tmp_path)
    model = truncate_kernel(bundle)
    with pytest.raises(BundleError, match=rf"model file .*{model.name} is corrupt"):
        Bundle.load(bundle)


def test_a_truncated_lightgbm_model_is_refused(all_exported: dict[str, Path], tmp_path: Path) -> None:
    bundle = copy_of(all_exported["lightgbm"], tmp_path)
    model = truncate_kernel(bundle)
    result = load_in_subprocess(bundle)
    assert result.returncode == 0, f"loading crashed the process (exit {result.returncode})"
    assert result.stdout.startswith("BundleError:") and model.name in result.stdout


@pytest.mark.parametrize("edit", ["not-an-object", "no-feature-columns"])
def test_metadata_of_the_wrong_shape_is_refused(all_exported: dict[str, Path], tmp_path: Path, edit: str) -> None:
    bundle = copy_of(all_exported["lightgbm"], tmp_path)
    meta = json.loads((bundle / "metadata.json").read_text())
    if edit == "not-an-object":
        (bundle / "metadata.json").write_text(json.dumps([meta]))
    else:
        del meta["feature_columns"]
        (bundle / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=r"metadata\.json"):
        Bundle.load(bundle)


def test_default_bundle_dir_is_inside_the_package() -> None:
    assert DEFAULT_BUNDLE_DIR.parent.name == "predictor"


def test_per_family_models_round_trip(tmp_path: Path) -> None:
    """Per-family kernel models export one file per family and predict the same after loading."""
    from predictor.devices import resolve_device
    from predictor.predict import Predictor
    from predictor.zoo import load_zoo_graph
    from training.bundle_export import export_bundle, in_memory_bundle
    from training.data import load_ops
    from training.fit import fit_target

    data = load_ops(Path("datasets/nvidia-h200"), limit=3000)
    fits = {"kernel": fit_target(data, "kernel", "lightgbm", threads=1, scale=0.1, structure="per_family"),
            "dispatch": fit_target(data, "dispatch", "lightgbm", threads=1, scale=0.1)}
    assert fits["kernel"].structure == "per_family" and len(fits["kernel"].booster) > 5
    target = export_bundle(tmp_path / DEVICE, DEVICE, fits, {"version": "t"})
    meta = json.loads((target / "metadata.json").read_text())
    assert meta["targets"]["kernel"]["structure"] == "per_family"
    assert set(meta["targets"]["kernel"]["files"]) == set(fits["kernel"].booster)
    graph = load_zoo_graph("resnet50")
    device = resolve_device(DEVICE)
    before = Predictor(in_memory_bundle(DEVICE, fits), device).layers(graph, 8, "fp16").kernel_us
    after = Predictor(Bundle.load(target), device).layers(graph, 8, "fp16").kernel_us
    assert np.allclose(before, after, rtol=1e-6)


def test_rows_of_many_families_in_any_order_get_their_own_predictions(ops: OpData) -> None:
    """``predict_log_array`` runs each family's rows in order of their roofline time (compiled
    trees then mispredict fewer branches) and must put each prediction back on its own row:
    shuffled rows of several families predict as each row does alone."""
    kernel = Bundle.load(DEFAULT_BUNDLE_DIR / DEVICE).targets["kernel"]
    x = ops.features[kernel.feature_columns].to_numpy(dtype=np.float64)[:300]
    x = x[np.random.default_rng(3).permutation(len(x))]
    assert len(np.unique(x[:, kernel.feature_columns.index("family_code")])) > 3
    together = kernel.predict_log_array(x)
    alone = np.array([kernel.predict_log_array(x[i:i + 1])[0] for i in range(len(x))])
    assert np.array_equal(together, alone)
    assert kernel.predict_log_array(x[:0]).shape == (0,)
