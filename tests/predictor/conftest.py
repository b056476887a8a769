"""Fixtures the predictor's importer tests share."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

_OPENED: list[str] = []
_WATCHING: list[bool] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _WATCHING and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


@pytest.fixture
def opened() -> Iterator[list[str]]:
    """Paths Python opens while the test runs: an importer must open none that a model names.
    Audit hooks cannot be removed, so one is added once and switched on per test."""
    if not getattr(sys, "_latpred_open_audit", False):
        sys.addaudithook(_audit)
        sys._latpred_open_audit = True  # type: ignore[attr-defined]
    _OPENED.clear()
    _WATCHING.append(True)
    yield _OPENED
    _WATCHING.clear()
