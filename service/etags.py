"""ETags of the spreadsheet GETs: a tag from the normalised query and what its answer depends on,
and the If-None-Match test, so that a sheet that asks again gets a 304 without any work redone."""

from __future__ import annotations

import hashlib


def etag_of(canonical: str) -> str:
    """A strong ETag for an answer that ``canonical`` (the normalised query, the model versions,
    the contents of what it names, how answers are written) determines."""
    return '"' + hashlib.sha256(canonical.encode()).hexdigest()[:32] + '"'


def matches(header: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names ``etag`` (weakly or strongly) or is ``*``."""
    if not header:
        return False
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or etag in tags or f"W/{etag}" in tags
