"""A bundle's tree models as native code (lleaves), built from the bundle's own files and cached
on disk.

Why: a new graph brings a few dozen kernel configurations per family, and LightGBM's booster
spends about 30 us per call and 8-10 us per row on 300 trees of 127 leaves, XGBoost's about
130 us per call: most of a cold prediction. lleaves compiles the same trees with LLVM into a
function that costs 1-2 us per call. A row costs what its walk down 300 trees costs, mostly
mispredicted branches: about 2 us for rows alike (a batch of graphs, whose rows repeat
configurations), 4-9 us for the distinct rows a single cold graph brings (on this workplace's
2-core Intel Xeon, 2026-12-05). Compiled for LLVM's small code model in blocks of 8 trees
(``CODE_MODEL``, ``BLOCK_TREES``), a cold graph's forest calls take 0.51-0.76x as long as under
lleaves' defaults (the large code model, blocks of 34). Each branch also carries the training
rows that took either way as its weights (predictor.branch_weights), so that the commoner child
falls through: 0.60-0.87x as long again (ad hoc timings per family, and ``cold_forests.py``
against the code before, in ``benchmarks/results/cold_forests.txt``).
LightGBM models compile as they are
(the same sums in blocks of trees: equal to the booster to about 1e-14). An XGBoost model is
first written as the equivalent LightGBM text (``xgboost_as_lightgbm``: XGBoost's ``x < t`` on
float32 is ``x <= the float32 below t``, a missing value goes where XGBoost sends it, its base
score is a first one-leaf tree) and compiled in float32 with the trees summed in XGBoost's order,
so that it gives XGBoost's predictions bit for bit.

Bundles keep shipping LightGBM text and XGBoost JSON (never pickle, never a binary): the compiled
code is made from those files on the machine that loads them, and kept in ``cache_dir()``
(``$LATPRED_CACHE_DIR``, else ``$XDG_CACHE_HOME/latpred/compiled``, else
``~/.cache/latpred/compiled``), one object file per model, named by the sha256 of the model
text, the library, the lleaves and llvmlite versions and the host CPU (LLVM compiles for the CPU
it runs on: an object made on another machine could hold instructions this one lacks).
Compiling one 300-tree model of 127 leaves takes 8-12 s on this workplace's CPU, without
inlining (with it, 40-80 s, for a cold graph's rows about 1.2x faster before the branch weights,
and no clear gain with them); the shipped bundle's 16 models, about 66 s on 2 cores. Models missing from the cache
are compiled in parallel, one subprocess per core (lleaves builds its IR in Python, so threads
would not help), each under a file lock, written under a temporary name and renamed: two
gunicorn workers that start together compile each model once, and a reader never sees half a
file.

``LATPRED_TREES`` picks the path: ``auto`` (the default) compiles where lleaves is installed and
falls back to the boosters otherwise, saying so in a log line and in ``Bundle.trees``;
``compiled`` refuses to fall back (a BundleError); ``booster`` never compiles.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from predictor.branch_weights import weighted_compiles

log = logging.getLogger("latpred.predictor")

TREES_ENV = "LATPRED_TREES"
CACHE_ENV = "LATPRED_CACHE_DIR"
TREE_MODES = ("auto", "compiled", "booster")
LIBRARIES = ("lightgbm", "xgboost")
#: bumped when the translation of a model changes, so that old cache entries are not used
#: (2: the small code model in blocks of BLOCK_TREES trees; 3: branches weighted by their counts;
#: 4: weights in proportion to the commoner child, objectives that call exp in the large code model)
FORMAT = 4
#: LLVM's code model: 'small' reaches constants with 32-bit offsets, so a 300-tree model's code
#: is smaller and a cold graph's forest calls take 0.52-0.76x as long as under lleaves' default
#: 'large' (``_load`` keeps the sections near each other, as that needs)
CODE_MODEL = "small"
#: LightGBM objectives whose output lleaves computes inline. The others (poisson, gamma, tweedie,
#: binary, cross entropy, multiclass) call the C library's exp or log, which llvmlite's memory
#: manager cannot place after it reserved an object's sections (it aborts): they compile in the
#: large code model and load with LLVM's own memory manager, as lleaves would.
INLINE_OBJECTIVES = ("regression", "regression_l1", "huber", "fair", "quantile", "mape", "lambdarank",
                     "rank_xendcg", "custom")
#: trees a row runs through before the next row does (lleaves' cache blocking; its default is 34):
#: a block of 8 trees' code stays in the core's caches while a few dozen rows run through it
BLOCK_TREES = 8
#: the entry point lleaves gives the compiled forest
ROOT_FUNCTION = "forest_root"
#: one compile of a 300-tree model takes seconds; a stuck compiler is stopped after this
COMPILE_TIMEOUT_S = 900.0
#: XGBoost objectives whose prediction is the raw sum of the trees (no link function)
IDENTITY_OBJECTIVES = ("reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror")
#: (data, results, first row, end row): lleaves' entry point, called with raw addresses so a call
#: builds no pointer objects (a CFUNCTYPE call releases the GIL while the forest runs)
_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)


class CompileError(RuntimeError):
    """A model could not be compiled or loaded compiled; the message says which and why."""


def tree_mode(mode: str | None = None) -> str:
    """``mode``, else ``$LATPRED_TREES``, else 'auto'; checked against TREE_MODES."""
    value = (mode or os.environ.get(TREES_ENV) or "auto").strip().lower()
    if value not in TREE_MODES:
        raise ValueError(f"{TREES_ENV}={value!r}: expected one of {', '.join(TREE_MODES)}")
    return value


def cache_dir() -> Path:
    """Where compiled models are kept (``$LATPRED_CACHE_DIR`` overrides)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "latpred" / "compiled"


def unavailable() -> str | None:
    """None when lleaves can compile here, else why not (for the log line and ``Bundle.trees``)."""
    try:
        import lleaves  # noqa: F401
        import llvmlite.binding  # noqa: F401
    except ImportError as exc:
        return f"lleaves is not installed ({exc.name}; pip install 'latpred[predict]')"
    return None


def _host_tag() -> str:
    """lleaves and llvmlite versions and the CPU LLVM compiles for, as part of a cache name."""
    from importlib.metadata import version

    import llvmlite.binding as llvm

    _initialize_llvm()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        features = ""
    cpu = hashlib.sha256(f"{llvm.get_host_cpu_name()} {features}".encode()).hexdigest()[:12]
    return f"lleaves{version('lleaves')}-llvmlite{version('llvmlite')}-cpu{cpu}"


def objective(text: str) -> str:
    """The objective a LightGBM model's text names in its header ('regression' for
    ``objective=regression``, 'binary' for ``objective=binary sigmoid:1``); '' if none."""
    for line in text.splitlines():
        if line.startswith("objective="):
            return line.partition("=")[2].split(" ")[0]
        if line.startswith("Tree="):  # past the header
            break
    return ""


def model_text(path: Path) -> bytes:
    """A model file's text, gunzipped where its name ends in .gz."""
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if path.name.endswith(".gz") else raw


def _f32(value: float | np.floating[Any]) -> np.float32:
    return np.float32(value)


def _f32_text(value: float | np.floating[Any]) -> str:
    """A float32's exact value as text (its double's repr)."""
    return repr(float(_f32(value)))


def _lightgbm_tree(number: int, tree: dict[str, Any]) -> list[str]:
    """One XGBoost tree as the lines of a LightGBM tree (see ``xgboost_as_lightgbm``)."""
    if any(tree.get("split_type", [])):
        raise CompileError("XGBoost models with categorical splits are not compiled")
    left, right = tree["left_children"], tree["right_children"]
    split, condition, default_left = tree["split_indices"], tree["split_conditions"], tree["default_left"]
    internal: list[int] = []  # XGBoost's split nodes in LightGBM's order (the root first)
    leaves: list[int] = []
    ref: dict[int, str] = {}  # XGBoost node -> LightGBM child reference (a leaf is ~index)
    order = [0]
    for node in order:
        if left[node] == -1:
            ref[node] = str(-(len(leaves) + 1))
            leaves.append(node)
        else:
            ref[node] = str(len(internal))
            internal.append(node)
            order += [left[node], right[node]]
    below = [repr(float(np.nextafter(_f32(condition[n]), np.float32(-np.inf)))) for n in internal]
    lines = [
        f"Tree={number}", f"num_leaves={len(leaves)}", "num_cat=0",
        "split_feature=" + " ".join(str(split[n]) for n in internal),
        "threshold=" + " ".join(below),
        # decision type: missing type NaN (2 << 2), default side left (2) or right (0)
        "decision_type=" + " ".join(str(8 | (2 if default_left[n] else 0)) for n in internal),
        "left_child=" + " ".join(ref[left[n]] for n in internal),
        "right_child=" + " ".join(ref[right[n]] for n in internal),
        "leaf_value=" + " ".join(_f32_text(condition[n]) for n in leaves)]
    hessian = tree.get("sum_hessian")
    if hessian:  # a squared error's hessian is 1 a row: the rows that reached each node, as LightGBM counts them
        lines += ["internal_count=" + " ".join(repr(float(hessian[n])) for n in internal),
                  "leaf_count=" + " ".join(repr(float(hessian[n])) for n in leaves)]
    return lines


def xgboost_as_lightgbm(model: dict[str, Any]) -> tuple[str, int]:
    """An XGBoost regression model (its JSON, parsed) as LightGBM model text that lleaves compiles
    to the same predictions, bit for bit, when compiled in float32 with one block of trees;
    returns (text, number of trees).

    XGBoost casts each feature to float32, goes left where ``x < t`` (t a float32), sends a
    missing value (NaN) to the side its node names, and sums the leaves in float32, starting from
    the base score, tree by tree. In LightGBM's terms: the threshold is the float32 just below t
    (``x <= that`` is ``x < t`` for a float32 x), missing type NaN with the default side as
    XGBoost's, and a first one-leaf tree that holds the base score. Each node's hessian sum goes
    in as its count (rows, under squared error), for the branch weights of predictor.branch_weights.
    Refuses (CompileError) what this does not cover: other boosters, categorical splits, several
    outputs, a link function.
    """
    learner = model["learner"]
    booster = learner["gradient_booster"]
    objective = learner["objective"]["name"]
    params = learner["learner_model_param"]
    if booster.get("name") != "gbtree":
        raise CompileError(f"XGBoost booster {booster.get('name')!r} is not compiled (only gbtree)")
    if objective not in IDENTITY_OBJECTIVES:
        raise CompileError(f"XGBoost objective {objective!r} is not compiled")
    if int(params.get("num_target", "1") or 1) > 1 or int(params.get("num_class", "0") or 0) > 1:
        raise CompileError("XGBoost models with several outputs are not compiled")
    n_features = int(params["num_feature"])
    base = _f32(float(str(params["base_score"]).strip("[]")))
    trees = booster["model"]["trees"]

    blocks = [["Tree=0", "num_leaves=1", "num_cat=0", "split_feature=", "threshold=", "decision_type=",
               "left_child=", "right_child=", f"leaf_value={_f32_text(base)}"]]
    blocks += [_lightgbm_tree(number, tree) for number, tree in enumerate(trees, start=1)]
    head = ["tree", "version=v4", "num_class=1", "num_tree_per_iteration=1", "label_index=0",
            f"max_feature_idx={n_features - 1}", "objective=regression",
            "feature_infos=" + " ".join(["[-1e308:1e308]"] * n_features),
            "tree_sizes=" + " ".join(["0"] * len(blocks))]
    text = "\n".join(head) + "\n\n" + "\n\n".join("\n".join(b) for b in blocks)
    return text + "\n\nend of trees\n\npandas_categorical:[]\n", len(blocks)


@dataclass
class CompiledForest:
    """One compiled model: ``predict(x)`` (a float64 matrix whose columns are the model's
    features) is the booster's prediction: LightGBM's to about 1e-14, XGBoost's exactly."""

    path: Path
    n_features: int
    dtype: type[np.floating[Any]]  # what the code computes in: float64 (LightGBM), float32 (XGBoost)
    engine: Any  # llvmlite's execution engine: it holds the code, so it lives as long as we do
    entry: Any

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=self.dtype)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"{self.path.name}: expected rows of {self.n_features} features, got {x.shape}")
        out = np.empty(len(x), dtype=self.dtype)
        if len(x):
            self.entry(x.ctypes.data, out.ctypes.data, 0, len(x))
        return out


def _load(path: Path, n_features: int, dtype: type[np.floating[Any]], code_model: str) -> CompiledForest:
    """Map a cached object file in and find its entry point (50-100 ms for 300 trees).

    Code compiled for LLVM's small code model reaches the model's constants (its thresholds)
    32-bit relative: the code and its constant pool must lie within 2 GiB of each other. LLVM's
    default memory manager maps each section on its own, anywhere; llvmlite's (``use_lmm``)
    reserves one block for all of an object's sections first, so they are always near. It
    asserts (aborting the process) if an object asks for more than it reserved, as one whose
    code calls a library function does (``INLINE_OBJECTIVES``): ``compile_model`` compiles those
    in the large code model, and loads each object it writes in its own subprocess first, so an
    object that reaches here has loaded before.
    """
    import llvmlite.binding as llvm

    _initialize_llvm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    machine = target.create_target_machine(reloc="pic", codemodel=code_model)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine, use_lmm=code_model == "small")
    code = path.read_bytes()
    engine.set_object_cache(getbuffer_func=lambda _module: code)  # the object instead of the empty module
    engine.finalize_object()
    address = engine.get_function_address(ROOT_FUNCTION)
    if not address:
        raise CompileError(f"{path}: no {ROOT_FUNCTION} in the compiled model")
    return CompiledForest(path, n_features, dtype, engine, _ENTRY(address))


def _initialize_llvm() -> None:
    """LLVM's per-process state for the host's target (safe to repeat)."""
    import llvmlite.binding as llvm

    llvm.initialize()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (a lock file beside the compiled model), across processes."""
    import fcntl

    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sidecar(target: Path) -> Path:
    return target.with_suffix(".json")


def _cached(target: Path) -> dict[str, Any] | None:
    """What the sidecar says of a cached object file, if the object is whole (its sha256 is the
    one recorded when it was written); None if either is missing, unreadable or does not match
    (then it is compiled again): a damaged object could crash the process that maps it in."""
    try:
        info = json.loads(_sidecar(target).read_text())
        data = target.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or hashlib.sha256(data).hexdigest() != info.get("sha256"):
        return None
    return info


def compile_model(library: str, source: Path, target: Path) -> None:
    """Compile the model file ``source`` of ``library`` into the object file ``target`` (the work
    of one subprocess): under a lock, skipped when another process made it meanwhile, written
    under a temporary name and renamed, with a sidecar that records its features and dtype."""
    import lleaves

    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.with_name(target.name + ".lock")):
        if _cached(target) is not None:  # another process compiled it meanwhile
            return
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".compile-") as tmp:
            text = Path(tmp) / "model.txt"
            if library == "xgboost":
                converted, trees = xgboost_as_lightgbm(json.loads(model_text(source)))
                text.write_text(converted)
                # float32, and one block of trees: the leaves summed in XGBoost's order
                options: dict[str, Any] = {"use_fp64": False, "fblocksize": trees}
            else:
                text.write_bytes(model_text(source))
                options = {"fblocksize": BLOCK_TREES}
            model = lleaves.Model(model_file=str(text))
            if model.num_model_per_iteration() != 1:
                raise CompileError(f"{source}: {model.num_model_per_iteration()} outputs per row; latpred's "
                                   "models have one")
            started = time.perf_counter()
            # No inlining: 7 s instead of 56-80 s for a 300-tree model, predictions 1.2-1.3x slower.
            # Each branch weighted by the training rows that took it (predictor.branch_weights).
            code_model = CODE_MODEL if objective(text.read_text()) in INLINE_OBJECTIVES else "large"
            with weighted_compiles() as weighted:
                model.compile(cache=str(Path(tmp) / "model.o"), finline=False, fcodemodel=code_model, **options)
            seconds = time.perf_counter() - started
            # Loaded once here, in the compiling subprocess: a load that fails aborts this process,
            # never the one that maps the object in later (``_load``).
            forest = _load(Path(tmp) / "model.o", model.num_feature(),
                           np.float32 if library == "xgboost" else np.float64, code_model)
            forest.predict(np.zeros((1, model.num_feature())))
            (Path(tmp) / "model.json").write_text(json.dumps({
                "n_features": model.num_feature(), "trees": model.num_trees(),
                "dtype": "float32" if library == "xgboost" else "float64", "compile_s": round(seconds, 2),
                "branch_weights": weighted, "code_model": code_model,
                "library": library, "source": str(source),
                "sha256": hashlib.sha256((Path(tmp) / "model.o").read_bytes()).hexdigest()}))
            os.replace(Path(tmp) / "model.o", target)  # the object first: the sidecar says it is whole
            os.replace(Path(tmp) / "model.json", _sidecar(target))


def _jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _run_compiles(pending: Sequence[tuple[str, Path, Path]]) -> dict[Path, str]:
    """Compile every (library, source, target) in subprocesses, one per core at a time, largest
    first (the last to finish is then a small one); the errors by target."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    queue = sorted(pending, key=lambda job: -job[1].stat().st_size)
    running: list[tuple[Path, subprocess.Popen[bytes], float]] = []
    errors: dict[Path, str] = {}
    jobs = _jobs()
    while queue or running:
        while queue and len(running) < jobs:
            library, source, target = queue.pop(0)
            process = subprocess.Popen(
                [sys.executable, "-m", "predictor.compiled_trees", library, str(source), str(target)],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            running.append((target, process, time.monotonic()))
        done = next((r for r in running if r[1].poll() is not None), None)
        if done is None:
            time.sleep(0.05)
            target, process, started = running[0]
            if time.monotonic() - started > COMPILE_TIMEOUT_S:
                process.kill()
                process.communicate()
                errors[target] = f"compiling took more than {COMPILE_TIMEOUT_S:.0f} s"
                running.pop(0)
            continue
        target, process, _ = done
        running.remove(done)
        output, _ = process.communicate()
        if process.returncode != 0:
            lines = output.decode(errors="replace").strip().splitlines()
            errors[target] = lines[-1] if lines else f"exit status {process.returncode}"
    return errors


def compiled_forests(models: dict[Any, tuple[str, Path]], n_features: int) -> dict[Any, CompiledForest]:
    """The compiled form of each (library, model file), by the caller's key: from the cache, or
    compiled now, all in parallel; raises CompileError naming the first that cannot be had."""
    unknown = {library for library, _ in models.values()} - set(LIBRARIES)
    if unknown:
        raise CompileError(f"{', '.join(sorted(unknown))} models are not compiled")
    directory = cache_dir()
    host = _host_tag()
    targets = {key: directory / f"{hashlib.sha256(model_text(path)).hexdigest()}-{library}{FORMAT}-{host}.o"
               for key, (library, path) in models.items()}
    found = {target: _cached(target) for target in set(targets.values())}
    pending = {target: (models[key][0], models[key][1], target) for key, target in targets.items()
               if found[target] is None}  # by target: a model listed twice is compiled once
    if pending:
        started = time.perf_counter()
        log.info("compiling %d tree model(s) with lleaves into %s (once per model and machine)",
                 len(pending), directory)
        errors = _run_compiles(list(pending.values()))
        if errors:
            target, why = next(iter(errors.items()))
            raise CompileError(f"compiling {target.name} failed: {why}")
        log.info("compiled %d tree model(s) in %.1f s", len(pending), time.perf_counter() - started)
    forests = {}
    for key, target in targets.items():
        info = found[target] or _cached(target)
        if info is None:
            raise CompileError(f"{target.name} is missing or damaged in {directory} after compiling it")
        if info.get("n_features") != n_features:
            raise CompileError(f"{models[key][1]}: the model reads {info.get('n_features')} features, "
                               f"the bundle lists {n_features}")
        dtype = np.float32 if info.get("dtype") == "float32" else np.float64
        forests[key] = _load(target, n_features, dtype, str(info.get("code_model", CODE_MODEL)))
    return forests


if __name__ == "__main__":  # python -m predictor.compiled_trees LIBRARY MODEL_FILE TARGET.o: one compile
    compile_model(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
