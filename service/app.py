"""The app factory: settings, bundles loading in the background, blueprints, errors, metrics.

``create_app()`` returns at once; the model bundles load in a background thread (``/livez``
answers immediately, ``/readyz`` when they are in). Tests pass a registry already loaded, so the
boosters are read once per test session rather than once per app.
"""

from __future__ import annotations

import time

from flask import Response, g, request
from flask_openapi3 import Info

from predictor.host_profile import HostStore
from service import request_body
from service.auth import SECURITY_SCHEMES, check_key
from service.config import ServiceConfig
from service.graph_store import GraphStore
from service.last_good import LastGoodStore
from service.metrics import Metrics
from service.onnx_budget import ImportBudget, shared_importer
from service.openapi import LatpredOpenAPI
from service.problems import openapi_validation_callback, register_error_handlers
from service.registry import ModelRegistry
from service.sources import GraphResolver
from service.state import ServiceState

API_VERSION = "1.0.0"
DESCRIPTION = """Predict how long a neural network takes on a GPU, from per-layer models learned on
real measurements. Errors are RFC 9457 `application/problem+json` naming the offending `field`.
Writing endpoints want the API key (`X-API-Key` or `Authorization: Bearer`); a server with no key
refuses them unless its operator opened writes to all (`LATPRED_OPEN_WRITES=1`)."""


def create_app(config: ServiceConfig | None = None, registry: ModelRegistry | None = None,
               load: bool = True) -> LatpredOpenAPI:
    """A configured app. Without ``registry`` one is made and, if ``load``, starts loading."""
    config = config or ServiceConfig.from_env()
    app = LatpredOpenAPI(
        __name__, info=Info(title="latpred", version=API_VERSION, description=DESCRIPTION),
        security_schemes=SECURITY_SCHEMES, doc_prefix="/docs", doc_url="/openapi.json",
        validation_error_status=422, validation_error_callback=openapi_validation_callback,
    )
    app.config.update(MAX_CONTENT_LENGTH=config.max_body_bytes)
    request_body.install(app)
    metrics = Metrics()
    marker = config.graph_store / ".reload"
    if registry is None:
        registry = ModelRegistry(config.bundle_dir, marker=marker, load_wait_s=config.load_wait_s,
                                 last_good=LastGoodStore(config.last_good_dir))
    store = GraphStore(config.graph_store, config.graph_cache_size, max_bytes=config.graph_store_max_bytes,
                       max_graph_bytes=config.graph_max_bytes)
    importer = shared_importer(ImportBudget(config.onnx_import_seconds, config.onnx_import_max_bytes))
    app.extensions["latpred"] = ServiceState(config, registry, store, GraphResolver(store, config.max_nodes, importer),
                                             metrics, HostStore(config.host_store))
    metrics.served({}, registry.snapshot.versions())
    registry.listeners.append(lambda old, new: metrics.served(old.versions(), new.versions()))
    register_error_handlers(app)
    _register_hooks(app)
    _register_blueprints(app)
    app.add_url_rule("/openapi.json", "openapi_json", lambda: app.api_doc)
    if load and not registry.snapshot.loaded:
        registry.start()
    return app


def _register_blueprints(app: LatpredOpenAPI) -> None:
    from service.api import capacity, devices, graphs, health, hosts, latency, models, predict, select

    for module in (health, predict, latency, capacity, select, graphs, hosts, devices, models):
        app.register_api(module.api)


def _register_hooks(app: LatpredOpenAPI) -> None:
    @app.before_request
    def _before() -> None:
        g.started = time.perf_counter()
        st = app.extensions["latpred"]
        st.registry.follow_marker()
        if request_body.view_attribute("__latpred_guarded__"):
            check_key()
        request_body.check_body(request)

    @app.after_request
    def _after(response: Response) -> Response:
        st = app.extensions["latpred"]
        endpoint = request.url_rule.rule if request.url_rule is not None else "unmatched"
        st.metrics.requests.labels(endpoint, request.method, str(response.status_code)).inc()
        started = g.get("started")
        if started is not None:
            st.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        return response
