"""Stored graphs on disk, content-addressed by the sha256 of their canonical IR JSON.

The id is a hash of the content, so storing the same graph twice gives the same id, any worker
can serve any id, and a parsed graph can be cached forever. A graph is written to a temporary
file in the same folder, flushed to disk and renamed into place: a reader never sees half a file
and an accepted upload survives a crash. Ids are checked against their pattern before any path
is built, so a request can never name a file outside the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from predictor.graph import Graph

ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")


def canonical_bytes(graph: Graph) -> bytes:
    """The graph's IR JSON with sorted keys and no spaces: equal graphs give equal bytes."""
    return json.dumps(graph.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def graph_id(graph: Graph) -> str:
    return hashlib.sha256(canonical_bytes(graph)).hexdigest()


class GraphStore:
    """A folder of ``<id[:2]>/<id>.json`` files with a small in-memory cache of parsed graphs."""

    def __init__(self, root: Path, cache_size: int = 256) -> None:
        self.root = Path(root)
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Graph] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, gid: str) -> Path:
        if not ID_PATTERN.match(gid):
            raise KeyError(gid)
        return self.root / gid[:2] / f"{gid}.json"

    def put(self, graph: Graph) -> tuple[str, bool]:
        """Store ``graph``; returns its id and whether it was new."""
        data = canonical_bytes(graph)
        gid = hashlib.sha256(data).hexdigest()
        path = self.path(gid)
        if path.exists():
            return gid, False
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{gid}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return gid, True

    def raw(self, gid: str) -> bytes:
        """The stored canonical JSON; KeyError if there is no such graph."""
        try:
            return self.path(gid).read_bytes()
        except FileNotFoundError:
            raise KeyError(gid) from None

    def get(self, gid: str) -> Graph:
        """The stored graph, parsed once per worker and then served from the cache."""
        with self._lock:
            cached = self._cache.get(gid)
            if cached is not None:
                self._cache.move_to_end(gid)
                return cached
        graph = Graph.from_json(json.loads(self.raw(gid)))
        if self.cache_size:
            with self._lock:
                self._cache[gid] = graph
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return graph


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (the directory entry), where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
