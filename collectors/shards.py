"""A folder of parquet shards that a sweep appends to, safely across crashes.

Each shard is validated, written to a temporary file, flushed to disk and renamed into place, so
a killed process leaves either a whole shard or none: rows are never half-written, and a resumed
sweep skips exactly the ids that are on disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd

Validator = Callable[[pd.DataFrame], pd.DataFrame]
SHARD_PATTERN = re.compile(r"^part-(\d{5})\.parquet$")


class ShardStore:
    """Parquet shards ``part-NNNNN.parquet`` in one folder, validated on write and on read."""

    def __init__(self, directory: Path, validate: Validator, key: str = "config_id") -> None:
        self.directory = Path(directory)
        self.validate = validate
        self.key = key

    def shards(self) -> list[Path]:
        """Complete shards, in write order (temporary files from a killed write are ignored)."""
        if not self.directory.exists():
            return []
        return sorted(p for p in self.directory.iterdir() if SHARD_PATTERN.match(p.name))

    def completed_ids(self) -> set[str]:
        """Ids already on disk, measured or failed: a resumed sweep skips these."""
        ids: set[str] = set()
        for shard in self.shards():
            ids.update(pd.read_parquet(shard, columns=[self.key])[self.key])
        return ids

    def write(self, rows: list[dict]) -> Path:
        """Validate ``rows`` and add them as one new shard; returns its path."""
        frame = self.validate(pd.DataFrame(rows))
        self.directory.mkdir(parents=True, exist_ok=True)
        existing = self.shards()
        last = SHARD_PATTERN.match(existing[-1].name) if existing else None  # shards() lists matches only
        index = int(last.group(1)) + 1 if last else 0
        final = self.directory / f"part-{index:05d}.parquet"
        tmp = final.with_name(final.name + ".tmp")
        frame.to_parquet(tmp, index=False)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        return final

    def read(self) -> pd.DataFrame:
        """All shards as one validated frame (empty if there are none)."""
        shards = self.shards()
        if not shards:
            return pd.DataFrame()
        frame = pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True)
        return self.validate(frame)
