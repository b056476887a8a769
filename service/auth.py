"""The API key that guards the writing endpoints (graph and host profile upload, model reload).

Set ``LATPRED_API_KEY`` and those endpoints want it in ``X-API-Key`` or ``Authorization:
Bearer``; reads stay open, so a spreadsheet needs no secret in its URLs. Keys are compared in
constant time. With no key set, writes are refused (403, naming both settings) unless the
operator sets ``LATPRED_OPEN_WRITES=1``: a server started with no settings at all, then bound to
an address others reach, must not be writable by anyone who finds it. A key, once set, is wanted
whatever ``LATPRED_OPEN_WRITES`` says.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, TypeVar

from flask import request
from flask_openapi3.types import SecuritySchemesDict

from service.config import ServiceConfig
from service.problems import ProblemError
from service.state import state

F = TypeVar("F", bound=Callable[..., Any])
#: the OpenAPI security requirement of a guarded operation (either scheme will do).
SECURITY: list[dict[str, list[str]]] = [{"ApiKey": []}, {"Bearer": []}]
SECURITY_SCHEMES: SecuritySchemesDict = {
    "ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    "Bearer": {"type": "http", "scheme": "bearer"},
}


def presented_key() -> str | None:
    key = request.headers.get("X-API-Key")
    if key:
        return key
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def check_key() -> None:
    """Raise a 401 problem unless the request presents the configured key; with no key
    configured, a 403 unless writes are open."""
    config = state().config
    expected = config.api_key
    if not expected:
        if config.open_writes:
            return
        raise ProblemError(403, "this server takes no writes, having no API key: its operator can set "
                                "LATPRED_API_KEY (writers then send it as 'X-API-Key: <key>'), or "
                                "LATPRED_OPEN_WRITES=1 to let anyone write without a key", kind="writes-disabled",
                           settings=["LATPRED_API_KEY", "LATPRED_OPEN_WRITES"])
    given = presented_key()
    if given is None:
        raise ProblemError(401, "this endpoint needs the API key: send it as 'X-API-Key: <key>' or "
                                "'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"},
                           kind="unauthorized")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ProblemError(401, "the API key is wrong", headers={"WWW-Authenticate": "Bearer"},
                           kind="unauthorized")


def refusals(config: ServiceConfig) -> tuple[int, ...]:
    """The statuses ``check_key`` can answer a writing request with under ``config``, for the
    OpenAPI document: 401 with a key, 403 with neither key nor open writes, none with open writes."""
    if config.api_key:
        return (401,)
    return () if config.open_writes else (403,)


def guarded(func: F) -> F:
    """Mark a view as writing: the app's before-request hook checks the key before the body is read."""
    func.__latpred_guarded__ = True  # type: ignore[attr-defined]
    return func
