"""RFC 9457 problem details: every error the service returns is ``application/problem+json``.

A problem names the offending field (``field``, a path such as ``graphs[2].device``) so a client
can point at it, and a batch item that fails carries the same object instead of failing the whole
batch. Handlers raise :class:`ProblemError`; the error handlers registered here turn it, Werkzeug's
HTTP errors (413 from the body cap, 404, 405), pydantic's validation errors and any unexpected
exception (a logged 500) into the one shape.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, current_app, json, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from predictor.validation import error_message, field_path

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:latpred:problem:"
log = logging.getLogger("latpred.service")

TITLES = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    409: "Conflict", 413: "Content Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Content",
    500: "Internal Server Error", 503: "Service Unavailable",
}


class ProblemError(Exception):
    """An error a handler can raise anywhere; ``to_dict`` is its problem object."""

    def __init__(self, status: int, detail: str, *, field: str | None = None, kind: str | None = None,
                 title: str | None = None, headers: dict[str, str] | None = None,
                 errors: list[dict[str, Any]] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.kind = kind or _default_kind(status)
        self.title = title or TITLES.get(status, "Error")
        self.headers = headers or {}
        self.errors = errors
        self.extra = extra

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"type": TYPE_PREFIX + self.kind, "title": self.title, "status": self.status,
                                "detail": self.detail}
        if instance:
            body["instance"] = instance
        if self.field is not None:
            body["field"] = self.field
        if self.errors:
            body["errors"] = self.errors
        body.update(self.extra)
        return body


def _default_kind(status: int) -> str:
    return {400: "bad-request", 401: "unauthorized", 403: "forbidden", 404: "not-found", 405: "method-not-allowed",
            413: "too-large", 415: "unsupported-media-type", 422: "invalid-input",
            500: "internal-error", 503: "not-ready"}.get(status, f"http-{status}")


def join_path(prefix: str, field: str) -> str:
    """``graphs[2]`` + ``device`` -> ``graphs[2].device``; ``graphs`` + ``[2]`` -> ``graphs[2]``."""
    if not prefix:
        return field
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def validation_problem(exc: ValidationError, status: int = 422, prefix: str = "") -> ProblemError:
    """A pydantic ValidationError as one problem listing every failing field, the first as ``field``."""
    errors = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        # Unions add their branch name to the location; a client wants the field, not the branch.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        errors.append({"field": join_path(prefix, field_path(loc)), "message": error_message(err), "type": err["type"]})
    first = errors[0] if errors else {"field": prefix, "message": "invalid input"}
    detail = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more)"
    return ProblemError(status, detail, field=first["field"] or None, errors=errors, kind="validation-error")


def problem_response(problem: ProblemError) -> Response:
    """The HTTP response for ``problem``: its JSON, its status and any headers it asks for."""
    instance = request.path if request else None
    response = current_app.response_class(json.dumps(problem.to_dict(instance)), status=problem.status,
                                          mimetype=PROBLEM_JSON)
    for key, value in problem.headers.items():
        response.headers[key] = value
    return response


def location_of(exc: ValidationError) -> str:
    """Where a flask-openapi3 validation error came from, by the model's declared ``LOCATION``."""
    from service.schemas.common import LOCATIONS

    return LOCATIONS.get(exc.title, "body")


def openapi_validation_callback(exc: ValidationError) -> Response:
    """flask-openapi3's hook for request-model failures: a 400 for the query, 422 for a body."""
    where = location_of(exc)
    return problem_response(validation_problem(exc, 400 if where in ("query", "path") else 422))


def register_error_handlers(app: Flask) -> None:
    """Make every error path answer with problem+json (and log the unexpected ones)."""

    @app.errorhandler(ProblemError)
    def _problem(exc: ProblemError) -> Response:
        return problem_response(exc)

    @app.errorhandler(ValidationError)
    def _validation(exc: ValidationError) -> Response:
        return problem_response(validation_problem(exc))

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        if isinstance(exc.response, Response) and exc.response.mimetype == PROBLEM_JSON:
            return exc.response  # flask-openapi3 aborts with the response our callback made
        status = exc.code or 500
        detail = exc.description or TITLES.get(status, "error")
        if status == 413:
            limit = current_app.config.get("MAX_CONTENT_LENGTH")
            detail = f"the request body is larger than this server accepts ({limit} bytes; LATPRED_MAX_BODY_BYTES)"
        headers = {}
        if status == 405 and exc.valid_methods:  # type: ignore[attr-defined]
            headers["Allow"] = ", ".join(exc.valid_methods)  # type: ignore[attr-defined]
        return problem_response(ProblemError(status, detail, headers=headers))

    @app.errorhandler(RecursionError)
    def _recursion(exc: RecursionError) -> Response:
        return problem_response(ProblemError(400, "the request nests too deeply to be processed",
                                             kind="too-deep"))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return problem_response(ProblemError(500, f"unexpected {type(exc).__name__}: the error was logged"))
