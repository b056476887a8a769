"""Stored graphs on disk, content-addressed by the sha256 of their canonical IR JSON, within limits.

The id is a hash of the content, so storing the same graph twice gives the same id, any worker
can serve any id, and a parsed graph can be cached forever. A graph is written to a temporary
file in the same folder, flushed to disk and renamed into place: a reader never sees half a file
and an accepted upload survives a crash. Ids are checked against their pattern before any path
is built, so a request can never name a file outside the store.

Anyone allowed to write could otherwise fill the disk, so the store has two caps: one graph's
canonical JSON (``max_graph_bytes``, refused before anything is written) and the whole store's
(``max_bytes``). Past the total, the least recently used graphs are evicted down to
``EVICT_TO`` of it, so a full store is scanned once per tenth of the cap written rather than on
every upload. "Used" is the file's mtime: storing a graph and every read of it (a GET, a
prediction naming its id, even one answered from a worker's parsed cache) set it to now. gunicorn
workers share the folder and nothing else, so the running total lives in a file beside the
graphs (``.usage``) and every rename into place, eviction and change of the total happens under
an ``flock`` on ``.lock``; reads take no lock. A total that is missing or unreadable (the first
upload to a store, one made before there was a total) is recounted from the files, and so is the
total every time it passes the cap, so graphs deleted by hand are soon forgotten; only a crash
between a rename and the total's update can undercount, by that one graph. An evicted id is simply
unknown again: every worker answers it as it answers an id never stored, the one that still has
it parsed included.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from predictor.durable_files import sync_directory
from predictor.graph import Graph

ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")
_SHARD = re.compile(r"^[0-9a-f]{2}$")
#: a full store is evicted down to this fraction of its cap (hysteresis: one scan per tenth written).
EVICT_TO = 0.9
#: a temporary file older than this is an upload that died midway (a killed worker): removed on a scan.
STALE_TMP_S = 3600
USAGE_FILE = ".usage"
LOCK_FILE = ".lock"


class GraphTooLargeError(ValueError):
    """A graph whose canonical JSON is over the per-graph cap; nothing was written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the graph is {size} bytes as canonical JSON; at most {limit} may be stored")
        self.size = size
        self.limit = limit


@dataclass(frozen=True)
class _Entry:
    mtime_ns: int
    size: int
    path: Path


def canonical_bytes(graph: Graph) -> bytes:
    """The graph's IR JSON with sorted keys and no spaces: equal graphs give equal bytes."""
    return json.dumps(graph.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def graph_id(graph: Graph) -> str:
    return hashlib.sha256(canonical_bytes(graph)).hexdigest()


class GraphStore:
    """A folder of ``<id[:2]>/<id>.json`` files, capped in total (least recently used evicted first)
    and per graph, with a small in-memory cache of parsed graphs."""

    def __init__(self, root: Path, cache_size: int = 256, max_bytes: int = 1 << 30,
                 max_graph_bytes: int = 16 << 20) -> None:
        if max_graph_bytes > max_bytes:
            raise ValueError(f"one graph may not be larger ({max_graph_bytes} bytes) than the store ({max_bytes})")
        self.root = Path(root)
        self.cache_size = cache_size
        self.max_bytes = max_bytes
        self.max_graph_bytes = max_graph_bytes
        self._cache: OrderedDict[str, Graph] = OrderedDict()
        self._lock = threading.Lock()

    def path(self, gid: str) -> Path:
        if not ID_PATTERN.match(gid):
            raise KeyError(gid)
        return self.root / gid[:2] / f"{gid}.json"

    def put(self, graph: Graph) -> tuple[str, bool]:
        """Store ``graph``; returns its id and whether it was new. Storing counts as a use.
        ``GraphTooLargeError`` if its canonical JSON is over ``max_graph_bytes``."""
        data = canonical_bytes(graph)
        if len(data) > self.max_graph_bytes:
            raise GraphTooLargeError(len(data), self.max_graph_bytes)
        gid = hashlib.sha256(data).hexdigest()
        path = self.path(gid)
        if _touch(path):
            return gid, False
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written and flushed outside the lock (the slow part); only the rename and the books are locked.
        fd, tmp = tempfile.mkstemp(prefix=f".{gid}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with self._locked():
                if _touch(path):  # another worker stored it meanwhile
                    Path(tmp).unlink()
                    return gid, False
                os.replace(tmp, path)
                _touch(path)
                self._account(len(data), keep=path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return gid, True

    def raw(self, gid: str) -> bytes:
        """The stored canonical JSON; KeyError if there is no such graph (never stored, or evicted)."""
        path = self.path(gid)
        if not _touch(path):
            raise KeyError(gid)
        try:
            return path.read_bytes()
        except FileNotFoundError:  # evicted between the touch and the read
            raise KeyError(gid) from None

    def get(self, gid: str) -> Graph:
        """The stored graph, parsed once per worker and then served from the cache while its file
        is there (the touch that marks the use also says whether another worker evicted it)."""
        if not _touch(self.path(gid)):
            with self._lock:
                self._cache.pop(gid, None)
            raise KeyError(gid)
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

    def total_bytes(self) -> int:
        """Bytes of graph JSON stored now, counted from the files."""
        return sum(e.size for e in self._scan())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The store's lock across processes (a fresh descriptor per holder, so threads exclude
        each other too: flock locks belong to the open file, not the process)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_FILE, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _account(self, added: int, keep: Path) -> None:
        """Add ``added`` bytes to the total and evict past the cap; under the lock. ``keep`` (the
        graph just written) is never evicted."""
        usage = self.root / USAGE_FILE
        try:
            total: int | None = int(usage.read_text()) + added
        except (FileNotFoundError, ValueError):
            total = None
        if total is None or total > self.max_bytes:
            entries = self._scan()
            total = sum(e.size for e in entries)
            if total > self.max_bytes:
                total = _evict(entries, total, int(self.max_bytes * EVICT_TO), keep)
                with self._lock:  # this worker's cache need not wait for a read to find them gone
                    for gid in [g for g in self._cache if not self.path(g).exists()]:
                        del self._cache[gid]
        usage.write_text(str(total))

    def _scan(self) -> list[_Entry]:
        """Every stored graph with its last use and size; removes temporary files left by uploads
        that died midway."""
        entries: list[_Entry] = []
        if not self.root.is_dir():
            return entries
        now = time.time()
        for shard in os.scandir(self.root):
            if not (_SHARD.match(shard.name) and shard.is_dir(follow_symlinks=False)):
                continue
            for item in os.scandir(shard.path):
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if item.name.endswith(".json") and ID_PATTERN.match(item.name[:-5]):
                    entries.append(_Entry(st.st_mtime_ns, st.st_size, Path(item.path)))
                elif item.name.startswith(".") and item.name.endswith(".tmp") and now - st.st_mtime > STALE_TMP_S:
                    Path(item.path).unlink(missing_ok=True)
        return entries


def _evict(entries: list[_Entry], total: int, target: int, keep: Path) -> int:
    """Delete the least recently used graphs (oldest mtime first) until ``total`` is at most
    ``target``; returns the new total."""
    for entry in sorted(entries, key=lambda e: (e.mtime_ns, e.path.name)):
        if total <= target:
            break
        if entry.path == keep:
            continue
        entry.path.unlink(missing_ok=True)
        total -= entry.size
    return total


def _touch(path: Path) -> bool:
    """Mark ``path`` used now (its mtime, to the nanosecond: the kernel's own clock for "now" is
    coarser, and ties would make the eviction order arbitrary); False if it is not there. A file
    this process may not touch (a store another user filled) is still served, its use unmarked."""
    now = time.time_ns()
    try:
        os.utime(path, ns=(now, now))
    except FileNotFoundError:
        return False
    except OSError:
        return path.is_file()
    return True


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (the directory entry), where the OS allows it."""
    try:
        sync_directory(directory)
    except OSError:
        pass
