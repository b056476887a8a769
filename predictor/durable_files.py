"""Making a rename durable: the one directory fsync the dataset's shard writer and the service's
stores share (both may import ``predictor``; neither may import the other)."""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: Path) -> None:
    """fsync ``directory`` itself, so the entries renamed into it survive a crash (an fsync of
    the files alone does not make their names durable)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
