"""gunicorn's gevent worker, reading requests in greenlets and running the app in threads.

Why gevent: a gthread worker gives each connection a thread from the moment its request starts,
so ten clients that send half a body and stall held every thread of two workers, and ``/livez``
and predictions waited for as long as they stayed (issue #13). A gevent worker reads each
connection in a greenlet: a stalled upload costs a few kilobytes, not a thread.

Why threads as well: a greenlet that predicts keeps its worker's loop until it is done, and every
other connection of the worker waits, ``/livez`` included: a 50 MB body parsed for a second, or a
request at the work budget, stalled them all, and 64 keep-alive clients saw a p99 of 100 ms where
gthread workers gave 60. So ``ThreadedApp`` reads a request's whole body in its greenlet (up to
the body cap: what a buffering proxy in front would do), then runs the app on it in one of
``threads`` native threads (``LATPRED_THREADS``), which share the GIL by time slices as gthread's
did, while the loop goes on reading other connections. ``/livez`` is answered in the loop itself.

Why not gevent's full monkey-patching: ``patch_all()`` also turns ``threading`` into greenlets,
and the bundle loader (``service.registry``) compiles tree models for seconds to a minute in a
background thread; as a greenlet that would block the loop for the whole load, and past gunicorn's
timeout the arbiter would kill the worker before it ever served. ``subprocess`` stays the standard
library's too: gevent's needs the main thread's loop, and ONNX imports start their child process
(``service.onnx_budget``) from the app's threads. And ``os``: patched, ``os.waitpid`` is gevent's,
which learns of a child's exit from SIGCHLD on the main thread's loop; the loader's thread polls
its compiling children through it, and on a fresh machine (an empty compile cache) the second
bundle's children were never reaped, so the load hung and ``/readyz`` answered 503 for good.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from typing import Any

from gevent import monkey
from gevent.threadpool import ThreadPool
from gunicorn.http.body import ChunkedReader
from gunicorn.http.errors import InvalidChunkSize
from gunicorn.workers.ggevent import GeventWorker

#: paths answered in the worker's loop, never queued behind the threads: a liveness probe must
#: not wait for predictions
IN_LOOP_PATHS = frozenset({"/livez"})
READ_CHUNK = 1 << 20

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class LatpredGeventWorker(GeventWorker):
    """``worker_class`` in ``service/gunicorn_conf.py``."""

    sockets: list[Any]
    wsgi: Any
    cfg: Any

    def patch(self) -> None:
        monkey.patch_all(thread=False, subprocess=False, os=False)
        from gevent import socket  # what GeventWorker.patch does next: reopen the listeners as gevent sockets

        self.sockets = [socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach()) for s in self.sockets]

    def load_wsgi(self) -> None:
        # imported here, after patch(): the master loads this module before it forks, unpatched
        from service.config import ServiceConfig

        super().load_wsgi()
        max_body = ServiceConfig.from_env().max_body_bytes  # the app's own cap, read as the app reads it
        self.wsgi = ThreadedApp(self.wsgi, ThreadPool(max(1, self.cfg.threads)), max_body)


class ThreadedApp:
    """A WSGI app run in ``pool``'s threads on requests whose bodies were read beforehand."""

    def __init__(self, app: WSGIApp, pool: ThreadPool, max_body: int) -> None:
        self.app = app
        self.pool = pool
        self.max_body = max_body

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in IN_LOOP_PATHS:
            return self.app(environ, start_response)
        try:
            environ["wsgi.input"] = io.BytesIO(self._read_body(environ))
        except Exception as exc:  # noqa: BLE001 - the client went away, or its chunked framing broke
            return _bad_body(start_response, exc)
        started: list[tuple[Any, ...]] = []

        def run() -> list[bytes]:
            result = self.app(environ, lambda *args: started.append(args))
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

        body = self.pool.apply(run)
        start_response(*started[-1])
        return body

    def _read_body(self, environ: dict[str, Any]) -> bytes:
        """The body, read here, cooperatively: all of it, up to one byte past the cap (the app
        answers 413 for that, as for a Content-Length over it, which is not read at all)."""
        length = environ.get("CONTENT_LENGTH")
        if length and int(length) > self.max_body:
            return b""
        stream = environ["wsgi.input"]
        parts, size = [], 0
        while size <= self.max_body:
            part = stream.read(min(READ_CHUNK, self.max_body + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
        return b"".join(parts)


def _bad_body(start_response: StartResponse, exc: Exception) -> list[bytes]:
    """The problem the app would give (``request_body.check_chunked_size``) for a body that could
    not be read; answered here, since the app never gets a request without its body."""
    from service.problems import PROBLEM_JSON, ProblemError

    problem = ProblemError(400, f"the request body could not be read: {type(exc).__name__}", kind="malformed-body")
    body = json.dumps(problem.to_dict()).encode()
    start_response("400 Bad Request", [("Content-Type", PROBLEM_JSON), ("Content-Length", str(len(body))),
                                       ("Connection", "close")])
    return [body]


#: bytes a chunk-size line (or a trailer section) may take before it ends: a few hex digits and
#: extensions need tens. gunicorn 26.2.0 has no bound and searches its whole buffer again after
#: every read, so a line that never ends costs CPU quadratic in its length (70 MB: 290 CPU-seconds,
#: issue #13). gunicorn 26.2.1 bounds it, but no 26.2.1 is on this index, and mlflow (the training
#: extra) pins gunicorn below 27; this backport goes once gunicorn >= 26.2.1 can be required.
CHUNK_LINE_LIMIT = 64 * 1024
_unbounded_get_data = ChunkedReader.get_data


def _bounded_get_data(self: ChunkedReader, unreader: Any, buf: io.BytesIO) -> None:
    """``ChunkedReader.get_data``, refusing a size line or trailers past ``CHUNK_LINE_LIMIT``: it
    is only called while the line's CRLF has not been found in ``buf``."""
    if buf.tell() > CHUNK_LINE_LIMIT:
        raise InvalidChunkSize(b"a chunk-size line or trailer section over 64 KiB")
    _unbounded_get_data(self, unreader, buf)


if not hasattr(ChunkedReader, "limit_chunk_size_line"):  # gunicorn < 26.2.1
    ChunkedReader.get_data = _bounded_get_data
