"""Fixtures for the service tests: the real app over the shipped bundle, loaded once a session.

The bundle is served from a copy that carries a host profile (``bundles_with_host``: the
shipped one's own once it has one), since eager predictions need one. The service's default data
directory is the user's (``~/.local/share/latpred``): every test session points it at a temporary
folder, so an app or a gunicorn made without naming its folders still writes nothing there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask_openapi3")

from service_helpers import bundles_with_host  # noqa: E402

from service.app import create_app  # noqa: E402
from service.config import ServiceConfig  # noqa: E402
from service.registry import ModelRegistry  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _no_writes_to_the_users_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``XDG_DATA_HOME`` and ``LATPRED_DATA_DIR`` in a temporary folder for the whole session
    (before any module-scoped server starts, and inherited by the gunicorn it runs)."""
    data = tmp_path_factory.mktemp("xdg-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_DATA_HOME", str(data))
        mp.setenv("LATPRED_DATA_DIR", str(data / "latpred"))
        yield data


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    """The shipped bundles (with a host profile), loaded once (about 1.5 s) and shared by every test's app."""
    reg = ModelRegistry(bundles_with_host(tmp_path_factory.mktemp("bundles")))
    reg.load()
    assert reg.ready, reg.state_detail()
    return reg


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    """Folders in ``tmp_path``; writes open (no key), as a trusted single-user server has them."""
    return ServiceConfig(data_dir=tmp_path, graph_store=tmp_path / "graphs", host_store=tmp_path / "hosts",
                         open_writes=True)


@pytest.fixture
def app(config: ServiceConfig, registry: ModelRegistry) -> Any:
    return create_app(config, registry=registry)


@pytest.fixture
def client(app: Any) -> Any:
    return app.test_client()
