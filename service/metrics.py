"""Prometheus metrics: requests and their latency per endpoint, predictions, unsupported ops met,
and the model version served.

Each app gets its own registry, so tests can build many apps in one process. Under gunicorn
(``PROMETHEUS_MULTIPROC_DIR`` set by ``service/gunicorn_conf.py`` before any worker imports
prometheus_client) every worker writes its values to files there and ``/metrics`` adds up all
workers, whichever worker answers the scrape.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

disable_created_metrics()  # the *_created series double the output and no dashboard reads them

#: distinct op names counted by name per worker; the rest are counted as "other", since op names
#: come from users' graphs and every label value is a time series kept forever.
MAX_OP_LABELS = 200


class Metrics:
    """The service's metrics, registered in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("latpred_http_requests", "HTTP requests answered",
                                ["endpoint", "method", "status"], registry=r)
        self.latency = Histogram("latpred_http_request_duration_seconds", "time to answer a request",
                                 ["endpoint"], registry=r,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.predictions = Counter("latpred_predictions", "graph predictions made", ["device", "mode"],
                                   registry=r)
        self.prediction_errors = Counter("latpred_prediction_problems", "graph predictions refused (4xx)",
                                         registry=r)
        self.unsupported = Counter("latpred_unsupported_ops", "operator calls met that no model covers "
                                   "(costed by the roofline)", ["op"], registry=r)
        self.model_info = Gauge("latpred_model_info", "the model bundle version served, per device (1 = served)",
                                ["device", "version"], registry=r, multiprocess_mode="livemax")
        self._ops: set[str] = set()
        self._lock = threading.Lock()

    def count_unsupported(self, unsupported: Iterable[Mapping[str, Any]]) -> None:
        for item in unsupported:
            op = str(item.get("op", "?"))
            if op not in self._ops:
                with self._lock:
                    if len(self._ops) < MAX_OP_LABELS:
                        self._ops.add(op)
                    else:
                        op = "other"
            self.unsupported.labels(op).inc(item.get("count", 1))

    def served(self, old: dict[str, str], new: dict[str, str]) -> None:
        """Record a (re)load: the new versions become 1, the ones replaced 0."""
        for device, version in old.items():
            if new.get(device) != version:
                self.model_info.labels(device, version).set(0)
        for device, version in new.items():
            self.model_info.labels(device, version).set(1)

    def render(self) -> tuple[bytes, str]:
        """The exposition text: all workers' values under gunicorn, this process's otherwise."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
