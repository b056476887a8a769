"""Compacting a folder of shards: the same rows in the same order, and nothing lost to a crash."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from collectors.shards import ShardStore
from predictor.dataset_schema import validate_rows
from training.data import read_frame, shard_paths

DATASET_OPS = Path(__file__).resolve().parents[2] / "datasets" / "nvidia-h200" / "ops"


@pytest.fixture()
def rows() -> pd.DataFrame:
    """300 real operator rows of the committed dataset."""
    return pd.read_parquet(shard_paths(DATASET_OPS)[0]).head(300).reset_index(drop=True)


def three_shards(directory: Path, rows: pd.DataFrame) -> ShardStore:
    store = ShardStore(directory, validate_rows)
    for part in (rows.iloc[:100], rows.iloc[100:250], rows.iloc[250:]):
        store.write(part.to_dict("records"))
    return store


def test_compact_keeps_every_row_in_order(tmp_path: Path, rows: pd.DataFrame) -> None:
    store = three_shards(tmp_path / "ops", rows)
    before = store.read()
    assert store.compact() == (3, 300)
    assert [p.name for p in store.shards()] == ["part-00003.parquet"]
    pd.testing.assert_frame_equal(store.read(), before)
    assert store.completed_ids() == set(rows["config_id"])
    assert store.compact() == (1, 300)  # nothing left to fold
    store.write(rows.head(1).assign(config_id="a-later-sweep").to_dict("records"))
    assert len(store.read()) == 301  # a sweep resumed after compaction appends after it


def test_an_interrupted_compaction_is_refused_then_mended(tmp_path: Path, rows: pd.DataFrame) -> None:
    store = three_shards(tmp_path / "ops", rows)
    before = store.read()
    store._write_frame(before)  # the compacted shard landed; the crash came before the old ones went
    with pytest.raises(ValueError, match="interrupted compaction"):
        store.read()
    with pytest.raises(ValueError, match="interrupted compaction"):
        read_frame(store.directory, validate_rows, "config_id")  # training refuses to count them twice
    assert store.compact() == (4, 300)
    pd.testing.assert_frame_equal(store.read(), before)


def test_a_crash_partway_through_removing_the_old_shards_keeps_the_order(tmp_path: Path, rows: pd.DataFrame) -> None:
    store = three_shards(tmp_path / "ops", rows)
    before = store.read()
    store._write_frame(before)
    store.shards()[0].unlink()  # the first old shard went, the crash came before the other two
    assert store.compact() == (3, 300)
    pd.testing.assert_frame_equal(store.read(), before)  # each id's compacted copy, in the original order


def test_two_different_rows_under_one_id_are_refused_not_picked(tmp_path: Path, rows: pd.DataFrame) -> None:
    store = three_shards(tmp_path / "ops", rows)
    store.write(rows.head(1).assign(kernel_us=rows["kernel_us"].iloc[0] * 2).to_dict("records"))
    shards = [p.name for p in store.shards()]
    with pytest.raises(ValueError, match=f"{rows['config_id'].iloc[0]} has two different rows"):
        store.compact()
    assert [p.name for p in store.shards()] == shards  # nothing written, nothing removed


def test_shards_are_zstd(tmp_path: Path, rows: pd.DataFrame) -> None:
    import pyarrow.parquet as pq

    path = ShardStore(tmp_path, validate_rows).write(rows.to_dict("records"))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
