"""The API key that guards the writing endpoints (graph and host profile upload, model reload).

Set ``LATPRED_API_KEY`` and those endpoints want it in ``X-API-Key`` or ``Authorization:
Bearer``; reads stay open, so a spreadsheet needs no secret in its URLs. Keys are compared in
constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, TypeVar

from flask import request
from flask_openapi3.types import SecuritySchemesDict

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
    """Raise a 401 problem unless no key is configured or the request presents it."""
    expected = state().config.api_key
    if not expected:
        return
    given = presented_key()
    if given is None:
        raise ProblemError(401, "this endpoint needs the API key: send it as 'X-API-Key: <key>' or "
                                "'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"},
                           kind="unauthorized")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ProblemError(401, "the API key is wrong", headers={"WWW-Authenticate": "Bearer"},
                           kind="unauthorized")


def guarded(func: F) -> F:
    """Mark a view as writing: the app's before-request hook checks the key before the body is read."""
    func.__latpred_guarded__ = True  # type: ignore[attr-defined]
    return func
