"""Fixtures for the service tests: the real app over the shipped bundle, loaded once a session.

The bundle is served from a copy that carries a host profile (``bundles_with_host``: the
shipped one's own once it has one), since eager predictions need one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask_openapi3")

from service_helpers import bundles_with_host  # noqa: E402

from service.app import create_app  # noqa: E402
from service.config import ServiceConfig  # noqa: E402
from service.registry import ModelRegistry  # noqa: E402


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    """The shipped bundles (with a host profile), loaded once (about 1.5 s) and shared by every test's app."""
    reg = ModelRegistry(bundles_with_host(tmp_path_factory.mktemp("bundles")))
    reg.load()
    assert reg.ready, reg.state_detail()
    return reg


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    return ServiceConfig(graph_store=tmp_path / "graphs", host_store=tmp_path / "hosts")


@pytest.fixture
def app(config: ServiceConfig, registry: ModelRegistry) -> Any:
    return create_app(config, registry=registry)


@pytest.fixture
def client(app: Any) -> Any:
    return app.test_client()
