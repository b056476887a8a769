"""Property-based tests generated from the OpenAPI document (schemathesis): whatever the document
allows, and whatever it does not, the service answers without a server error, with a status,
content type and body the document declares.

The schema is loaded from a module-level app (schemathesis' lazy fixture loader does not run
under pytest 9); a fixture hands that app the session's loaded bundles and a fresh graph store.
Examples per operation are kept modest so the suite stays quick; the reload operation is left
out (it rereads the bundles, a second and a half each time; test_models covers it).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from predictor.host_profile import HostStore  # noqa: E402
from service.app import create_app  # noqa: E402
from service.config import ServiceConfig  # noqa: E402
from service.graph_store import GraphStore  # noqa: E402
from service.sources import GraphResolver  # noqa: E402

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
UNUSED = Path(tempfile.gettempdir()) / "latpred-unused"  # the fixture below gives the app its stores
# Writes open, so the generated cases reach the upload endpoints' own validation.
APP = create_app(ServiceConfig(data_dir=UNUSED, graph_store=UNUSED, host_store=UNUSED / "hosts", open_writes=True),
                 load=False)
schema = schemathesis.openapi.from_wsgi("/openapi.json", APP).exclude(path="/v1/models/reload")


@pytest.fixture(autouse=True, scope="module")
def _served(registry: Any, tmp_path_factory: Any) -> Iterator[None]:
    st = APP.extensions["latpred"]
    store_dir = tmp_path_factory.mktemp("schemathesis-graphs")
    st.registry = registry
    st.store = GraphStore(store_dir)
    st.resolver = GraphResolver(st.store, st.config.max_nodes)
    st.host_store = HostStore(store_dir / "hosts")
    yield
    shutil.rmtree(store_dir, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors_and_answers_match_the_document(case: Any) -> None:
    case.call_and_validate(checks=CHECKS)
