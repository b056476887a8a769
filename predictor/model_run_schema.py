"""The whole-model run contract: one model at one batch, precision and execution mode.

These rows are the ground truth that summed per-layer predictions are checked against. The
eager row of each (model, batch, precision) carries the torch.profiler breakdown as JSON: the
top-level aten ops in issue order, each with its input shapes, host time and kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from predictor.dataset_schema import PROVENANCE_COLUMNS, DatasetSchemaError, _describe, upgrade_v1
from predictor.model_kinds import MODEL_KINDS, MODES
from predictor.precision import PRECISIONS

#: 2 added ``host_profile``: the id of the host profile probed before the run (version-1 rows are
#: read as version 2 with none)
MODEL_RUN_SCHEMA_VERSION = 2
#: folder of a device's dataset that holds its live whole-model runs: one protocol
#: (``latpred collect models``: interleaved rounds), one row per unit and mode. Rows that a
#: re-measurement superseded live under ``archive/``, which training never reads.
MODEL_RUNS_FOLDER = "models"
#: folder beside it for whole-model runs a later measurement of the same units superseded, one
#: subfolder per set: kept for comparison, read by nothing in training.
ARCHIVE_FOLDER = "archive"
#: folder beside it for the NAS suites' whole-model runs, measured like the zoo's: nas-test's are
#: read by validation only (``latpred validate --suite``); training fits composition on
#: nas-train's runs (``training.suites.nas_train_runs``) and calibrates the interval on nas-dev's.
NAS_RUNS_FOLDER = "nas"
#: folder beside it for whole-model runs measured under other host conditions (another machine, a
#: contended core), one subfolder per condition with its shards and sweep log: eager predictions
#: are scored there with each run's own host profile (``latpred validate --hosts``); training
#: never fits on them.
HOST_RUNS_FOLDER = "host_runs"


def validate_model_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Validate whole-model run rows; raise ``DatasetSchemaError`` naming the columns."""
    import pandera.errors
    import pandera.pandas as pa

    def text(*checks: pa.Check, **kw: Any) -> pa.Column:
        return pa.Column(str, list(checks), **kw)

    # (inf passes gt(0), and then breaks every ratio and plot made from it)
    finite = pa.Check(lambda s: s.isna() | np.isfinite(s), error="must be a finite number", name="finite")

    schema = pa.DataFrameSchema({
        "schema_version": pa.Column(int, pa.Check.eq(MODEL_RUN_SCHEMA_VERSION)),
        "config_id": text(),  # the (model, batch, precision) unit a sweep resumes by
        "run_id": text(unique=True),
        "status": text(pa.Check.isin(["ok", "failed"])),
        "error": text(nullable=True),
        **{name: text(nullable=name in ("cuda_version", "cudnn_version", "driver_version"))
           for name in PROVENANCE_COLUMNS},
        "model": text(),
        "model_kind": text(pa.Check.isin(list(MODEL_KINDS))),
        "batch": pa.Column(int, pa.Check.ge(1)),
        "precision": text(pa.Check.isin(list(PRECISIONS))),
        "mode": text(pa.Check.isin(list(MODES))),
        "allow_tf32_cudnn": pa.Column(bool),
        "allow_tf32_matmul": pa.Column(bool),
        **{name: pa.Column(float, [pa.Check.gt(0), finite], nullable=True)
           for name in ("latency_ms", "p10_ms", "p90_ms")},
        "cv": pa.Column(float, [pa.Check.ge(0), finite], nullable=True),
        "repetitions": pa.Column("Int64", pa.Check.ge(1), nullable=True),
        "throttled": pa.Column(bool),
        "clock_reasons": pa.Column("Int64", nullable=True),
        "profile": text(nullable=True),
        "host_profile": text(nullable=True),
        "timestamp": pa.Column("datetime64[us, UTC]"),
    }, strict=True, coerce=True)
    try:
        valid = schema.validate(upgrade_v1(frame, MODEL_RUN_SCHEMA_VERSION), lazy=True)
    except pandera.errors.SchemaErrors as exc:
        raise DatasetSchemaError(_describe(exc.failure_cases)) from None
    # Checked here, not as a frame-wide check of the schema: pandera reports one of those against
    # every column, a screenful that named each but latency_ms.
    empty = valid[(valid["status"] == "ok") & valid["latency_ms"].isna()]
    if len(empty):
        r = empty.iloc[0]
        raise DatasetSchemaError(f"column 'latency_ms': {len(empty)} 'ok' row(s) without it (e.g. {r['model']} batch "
                                 f"{r['batch']} {r['precision']} {r['mode']}, run {r['run_id']}): a run that "
                                 "measured nothing is status 'failed'")
    return valid
