"""A bundle verified for serving: its checksums, its load, and a smoke prediction in each mode.

Why more than ``Bundle.load``: a bundle whose files are whole and whose boosters load can still
fail every request: operator codes from another latpred, a per-family target without a model
for a family the zoo uses, trees that give NaN. The service switches to a bundle, or starts
serving one, only once it has predicted one small zoo graph at batch 1 in both execution modes
(eager alone for a CPU),
so a bundle that would fail requests is refused when it is loaded rather than found by clients.

The graph is the zoo's smallest (by file size, then name, so always the same one: alexnet today,
22 nodes), a few milliseconds of prediction; the eager prediction uses the host profile the
bundle names, and is skipped for a bundle that names none (such a bundle predicts eager only
for a host the request gives).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from predictor.bundle import Bundle, BundleError
from predictor.devices import DeviceSpec
from predictor.graph import Graph
from predictor.predict import Predictor
from predictor.zoo import GRAPH_DIR, load_zoo_graph, zoo_names

SMOKE_BATCH = 1
SMOKE_MODES = ("cudagraph", "eager")


@functools.lru_cache(maxsize=1)
def smoke_graph() -> Graph:
    """The zoo's smallest graph (by file size, then name): the same one on every call and machine."""
    name = min(zoo_names(), key=lambda n: ((GRAPH_DIR / f"{n}.json").stat().st_size, n))
    return load_zoo_graph(name)


def smoke_test(predictor: Predictor) -> None:
    """Predict ``smoke_graph`` at batch 1 in each mode; a BundleError naming the bundle, the
    prediction and what went wrong unless each gives a positive, finite time within its interval."""
    graph = smoke_graph()
    where = f"bundle {predictor.bundle.directory}"
    modes = [m for m in SMOKE_MODES if m in predictor.device.modes  # (a CPU runs eager only)
             and not (m == "eager" and predictor.host is None)]
    if not modes:
        raise BundleError(f"{where}: names no host profile, and {predictor.device.device_id} runs eager only: "
                          "nothing it could serve can be checked (retrain it with 'latpred train')")
    for mode in modes:
        what = f"the smoke prediction ({graph.name}, batch {SMOKE_BATCH}, {mode})"
        try:
            out = predictor.predict(graph, batch=SMOKE_BATCH, mode=mode, with_layers=False)
        except Exception as exc:  # whatever it is, this bundle would fail the same requests
            raise BundleError(f"{where}: {what} failed: {type(exc).__name__}: {exc}") from None
        if not (math.isfinite(out.total_ms) and out.total_ms > 0 and out.low_ms <= out.total_ms <= out.high_ms):
            raise BundleError(f"{where}: {what} gave {out.total_ms} ms (interval {out.low_ms} to {out.high_ms}), "
                              "not a positive, finite time within its interval")


def load_verified(directory: Path, device: DeviceSpec) -> Predictor:
    """A predictor over the bundle in ``directory``, once its model files match their checksums,
    its boosters load and it passes ``smoke_test``; a BundleError naming the file or step and
    why otherwise."""
    try:
        predictor = Predictor(Bundle.load(directory), device)
    except BundleError:
        raise
    except (ValueError, OSError) as exc:  # a bundle for another device; a file that cannot be read
        raise BundleError(f"bundle {directory}: {exc}") from None
    smoke_test(predictor)
    return predictor
