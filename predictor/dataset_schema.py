"""The dataset row contract: one measured operator configuration, versioned and validated.

Collectors validate every shard before it is written and training validates it again on read,
so a bad row is refused where it is made, with a message that names the column. pandera is
imported lazily: the service never loads a dataset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from predictor.catalogue import FAMILIES, PARAMETERS
from predictor.precision import PRECISIONS

if TYPE_CHECKING:
    import pandera.pandas as pa

#: Bump when a column is added, removed or changes meaning; readers refuse other versions, except
#: those ``upgrade_v1`` converts.
SCHEMA_VERSION = 2

STATUSES = ("ok", "failed")
L2_STATES = ("warm", "exceeds_l2", "none")

#: Columns that say where and with what a row was measured.
PROVENANCE_COLUMNS = (
    "device_id", "device_name", "fingerprint", "torch_version", "cuda_version",
    "cudnn_version", "driver_version",
)
TIMING_COLUMNS = ("kernel_us", "dispatch_us", "p10_us", "p50_us", "p90_us", "cv")


class DatasetSchemaError(ValueError):
    """A row or shard breaks the dataset contract; the message names the column."""


def _schema() -> pa.DataFrameSchema:
    import pandera.pandas as pa

    def text(*checks: pa.Check, **kw: Any) -> pa.Column:
        return pa.Column(str, list(checks), **kw)

    columns: dict[str, pa.Column] = {
        "schema_version": pa.Column(int, pa.Check.eq(SCHEMA_VERSION)),
        "config_id": text(pa.Check.str_length(min_value=8), unique=True),
        "status": text(pa.Check.isin(STATUSES)),
        "error": text(nullable=True),
        **{name: text(nullable=name in ("cuda_version", "cudnn_version", "driver_version"))
           for name in PROVENANCE_COLUMNS},
        "family": text(pa.Check.isin(list(FAMILIES))),
        "variant": text(),
        "layout": text(),
        "precision": text(pa.Check.isin(list(PRECISIONS))),
        "batch": pa.Column(int, pa.Check.in_range(1, 1 << 20)),
        **{name: pa.Column("Int64", pa.Check.ge(0), nullable=True) for name in PARAMETERS},
        "allow_tf32_cudnn": pa.Column(bool),
        "allow_tf32_matmul": pa.Column(bool),
        **{name: pa.Column(float, pa.Check.ge(0), nullable=True) for name in TIMING_COLUMNS},
        "repetitions": pa.Column("Int64", pa.Check.ge(1), nullable=True),
        "calls_per_replay": pa.Column("Int64", pa.Check.ge(1), nullable=True),
        "flops": pa.Column(float, pa.Check.ge(0)),
        "bytes": pa.Column(float, pa.Check.ge(0)),
        "throttled": pa.Column(bool),
        "clock_reasons": pa.Column("Int64", nullable=True),
        "sm_clock_mhz": pa.Column("Int64", nullable=True),
        "l2_state": text(pa.Check.isin(L2_STATES)),
        "source": text(),
        "seed": pa.Column(int),
        "host_profile": text(nullable=True),
        "timestamp": pa.Column("datetime64[us, UTC]"),
    }
    measured = pa.Check(
        lambda df: (df["status"] != "ok") | ((df["kernel_us"] > 0) & (df["dispatch_us"] > 0)),
        error="an 'ok' row needs kernel_us > 0 and dispatch_us > 0",
        name="ok_rows_have_timings",
    )
    explained = pa.Check(
        lambda df: (df["status"] != "failed") | (df["error"].fillna("").str.len() > 0),
        error="a 'failed' row needs its error",
        name="failed_rows_have_error",
    )
    return pa.DataFrameSchema(columns, checks=[measured, explained], strict=True, coerce=True)


COLUMNS: tuple[str, ...] = (
    "schema_version", "config_id", "status", "error", *PROVENANCE_COLUMNS, "family", "variant",
    "layout", "precision", "batch", *PARAMETERS, "allow_tf32_cudnn", "allow_tf32_matmul",
    *TIMING_COLUMNS, "repetitions", "calls_per_replay", "flops", "bytes", "throttled",
    "clock_reasons", "sm_clock_mhz", "l2_state", "source", "seed", "host_profile", "timestamp",
)


def upgrade_v1(frame: pd.DataFrame, version: int) -> pd.DataFrame:
    """Version-1 rows as version ``version`` (a frame may mix shards of both): they predate the
    host probe, so their ``host_profile`` (the id of the profile measured beside the row, added
    in version 2) is unknown. Rows of other versions are left for validation to refuse."""
    if "schema_version" not in frame or not len(frame):
        return frame
    old = (frame["schema_version"] == 1).to_numpy()
    if not old.any():
        return frame
    frame = frame.copy()
    if "host_profile" not in frame:
        frame["host_profile"] = None
    frame["host_profile"] = frame["host_profile"].astype(object).where(~old, None)
    frame.loc[old, "schema_version"] = version
    return frame


def validate_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Validate (and coerce) rows against the schema; raise ``DatasetSchemaError`` naming columns."""
    import pandera.errors

    frame = upgrade_v1(frame, SCHEMA_VERSION)
    if "schema_version" in frame and len(frame):
        versions = set(pd.unique(frame["schema_version"]))
        if versions != {SCHEMA_VERSION}:
            raise DatasetSchemaError(
                f"column 'schema_version': found {sorted(versions)}, this latpred reads "
                f"version {SCHEMA_VERSION} only; re-collect or convert the shard"
            )
    try:
        return _schema().validate(frame.reindex(columns=[c for c in COLUMNS if c in frame] +
                                                 [c for c in frame if c not in COLUMNS]), lazy=True)
    except pandera.errors.SchemaErrors as exc:
        raise DatasetSchemaError(_describe(exc.failure_cases)) from None


#: Row-level checks span several columns; pandera reports them once per column, so name the
#: columns that matter instead.
_ROW_CHECK_COLUMNS = {
    "an 'ok' row needs kernel_us > 0 and dispatch_us > 0": "kernel_us', 'dispatch_us",
    "a 'failed' row needs its error": "error",
}


def _describe(cases: pd.DataFrame) -> str:
    lines = []
    cases = cases.assign(column=[
        _ROW_CHECK_COLUMNS.get(str(check), column) for check, column in zip(cases["check"], cases["column"])
    ]).drop_duplicates(subset=["column", "check", "index"])
    column: Any  # a name, or None or NaN where a check covers whole rows (pandas-stubs says Hashable)
    for (column, check), group in cases.groupby(["column", "check"], dropna=False, sort=False):
        where = "" if column is None or pd.isna(column) else f"column '{column}': "
        if str(check) in _ROW_CHECK_COLUMNS:
            rows = ", ".join(str(i) for i in group["index"].head(5))
            lines.append(f"{where}{check} (row(s) {rows})")
            continue
        examples = ", ".join(repr(v) for v in group["failure_case"].head(3))
        lines.append(f"{where}{check} failed ({len(group)} case(s), e.g. {examples})")
    return "dataset rows refused: " + "; ".join(lines)


def refuse_repeated_ids(frame: pd.DataFrame, key: str, where: object) -> None:
    """Raise naming the first ``key`` that ``frame`` (a folder's shards, concatenated) holds twice:
    an interrupted compaction leaves every id twice (``latpred collect compact`` again mends
    it), and a reader that went on would count those rows twice in a fit or a card."""
    if key not in frame.columns:
        raise DatasetSchemaError(f"{where}: the shards have no {key} column: they are not rows latpred wrote")
    repeated = frame[key][frame[key].duplicated()]
    if len(repeated):
        raise DatasetSchemaError(
            f"{where}: {len(repeated)} {key}s appear more than once (e.g. {repeated.iloc[0]}): an interrupted "
            "compaction leaves them, and 'latpred collect compact' on the dataset mends that; rows merged in "
            "twice by hand must be removed by hand")
