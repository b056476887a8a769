"""Fixtures for the service tests: the real app over the shipped bundle, loaded once a session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask_openapi3")

from predictor.bundle import DEFAULT_BUNDLE_DIR  # noqa: E402
from service.app import create_app  # noqa: E402
from service.config import ServiceConfig  # noqa: E402
from service.registry import ModelRegistry  # noqa: E402


@pytest.fixture(scope="session")
def registry() -> ModelRegistry:
    """The shipped bundles, loaded once (about 1.5 s) and shared by every test's app."""
    reg = ModelRegistry(DEFAULT_BUNDLE_DIR)
    reg.load()
    assert reg.ready, reg.state_detail()
    return reg


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    return ServiceConfig(graph_store=tmp_path / "graphs")


@pytest.fixture
def app(config: ServiceConfig, registry: ModelRegistry) -> Any:
    return create_app(config, registry=registry)


@pytest.fixture
def client(app: Any) -> Any:
    return app.test_client()
