"""gunicorn settings: ``gunicorn -c service/gunicorn_conf.py service.wsgi:app``.

- gevent workers (``service.gevent_worker``): each connection is read in a greenlet, so clients
  that stall mid-upload cost a greenlet each and never hold up ``/livez`` or predictions, as they
  held gthread workers' threads (issue #13); once a request's body is in, the app runs on it in
  one of a few native threads per worker. No ``preload_app``: XGBoost's and LightGBM's boosters
  (and the thread that loads them) do not survive a fork, so each worker imports the app and
  loads its own bundles.
- One worker per core the process may use, a few app threads each: a prediction holds the GIL,
  so threads only let a short request pass a long one, and more workers than cores would only
  contend.
- Booster and BLAS threads capped at one per app thread (set here, before any worker imports
  xgboost or lightgbm; predictor also passes nthread=1 / num_threads=1 when it predicts).
- Prometheus multiprocess mode: every worker writes its metrics to a folder made here, so
  ``/metrics`` adds up all workers whichever one answers.

Environment: LATPRED_BIND (default 127.0.0.1:8000), LATPRED_WORKERS (default: the cores),
LATPRED_THREADS (default 4: app threads per worker), LATPRED_WORKER_CONNECTIONS (default 1000:
open connections a worker keeps), LATPRED_REUSE_PORT (default 1: a socket per worker),
LATPRED_ACCESS_LOG ("-" stdout, a path, or "" for none), LATPRED_CONTROL_SOCKET (gunicornc's
socket; off by default), and the app's LATPRED_* settings (service/config.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_made_metrics_dir = None
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _made_metrics_dir = tempfile.mkdtemp(prefix="latpred-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _made_metrics_dir

bind = os.environ.get("LATPRED_BIND", "127.0.0.1:8000")
worker_class = "service.gevent_worker.LatpredGeventWorker"
workers = int(os.environ.get("LATPRED_WORKERS", _cores()))
threads = int(os.environ.get("LATPRED_THREADS", 4))  # the app's threads per worker (gevent_worker.ThreadedApp)
worker_connections = int(os.environ.get("LATPRED_WORKER_CONNECTIONS", 1000))
# Each worker listens on a socket of its own (SO_REUSEPORT), over which the kernel spreads new
# connections: on one shared socket the gevent worker that woke first accepted a burst whole, and
# 64 keep-alive clients landed 64 + 0 on two workers, leaving a core idle (3,000 predictions/s
# where spread they get 5,400; benchmarks/service_load.py). The price: connections queued on a
# worker's own socket when it dies are reset with it (on a shared socket another worker would take
# them); LATPRED_REUSE_PORT=0 chooses the shared socket.
reuse_port = (os.environ.get("LATPRED_REUSE_PORT") or "1").strip().lower() not in ("0", "false", "no", "off")
preload_app = False
timeout = 60  # a 64 MiB ONNX upload's import is the slowest request: seconds, not a minute
graceful_timeout = 30
keepalive = 5
# The longest request line gunicorn takes (its maximum): every URL the OpenAPI document allows fits
# (service/schemas/latency.py sizes GET /v1/latency's parameters for it), so the app answers them;
# past it gunicorn's own parser answers 400 with an HTML page, which the document declares.
limit_request_line = 8190
accesslog = os.environ.get("LATPRED_ACCESS_LOG", "-") or None  # "" turns it off
# gunicorn >= 25.1 opens a control socket at one fixed path per user, which a second server on the
# same machine (a test, a benchmark) would take over: off unless a path is given.
control_socket = os.environ.get("LATPRED_CONTROL_SOCKET") or "gunicorn.ctl"
control_socket_disable = not os.environ.get("LATPRED_CONTROL_SOCKET")


def child_exit(server: Any, worker: Any) -> None:
    """Drop a dead worker's live gauges from the metrics."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    if _made_metrics_dir:
        shutil.rmtree(_made_metrics_dir, ignore_errors=True)
