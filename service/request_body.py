"""Request bodies: which media types a view takes, and JSON parsing that cannot be made to crash.

JSON is parsed by pydantic-core's parser, which refuses nesting deeper than 200 levels (Python's
json raises RecursionError there, or worse, succeeds and leaves a structure that later overflows
the stack when it is dumped) and here also NaN and Infinity, which are not JSON. A body is parsed
and validated against its model in one pass (``json_body``): a batch of thousands of graphs is
never built as Python objects twice. A malformed body becomes a 400 problem naming the line and
column; a media type the view does not take, a 415.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pydantic_core
from flask import Flask, Request, current_app, request
from flask.json.provider import DefaultJSONProvider
from pydantic import BaseModel, ValidationError
from werkzeug.datastructures import FileStorage

from service.problems import ProblemError

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)
JSON = "application/json"


class StrictJSONProvider(DefaultJSONProvider):
    """Flask's JSON, with loads done by pydantic-core (bounded depth, no NaN); keys keep their
    order in answers (a prediction reads better total first than alphabetically)."""

    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            return pydantic_core.from_json(s, allow_inf_nan=False)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None


def accepts(*mimetypes: str) -> Callable[[F], F]:
    """Declare the media types a view's body may have; others get a 415 before the view runs."""

    def mark(func: F) -> F:
        func.__latpred_accepts__ = tuple(mimetypes)  # type: ignore[attr-defined]
        return func

    return mark


def view_attribute(name: str) -> Any:
    view = current_app.view_functions.get(request.endpoint or "")
    return getattr(view, name, None)


def check_body(req: Request) -> None:
    """415 for a media type the view does not take (before anything reads the body)."""
    wanted = view_attribute("__latpred_accepts__")
    if not wanted or req.method not in ("POST", "PUT", "PATCH"):
        return
    if req.mimetype not in wanted:
        got = req.mimetype or "no Content-Type"
        raise ProblemError(415, f"this endpoint takes {' or '.join(wanted)}, not {got}", field="Content-Type")


def strict_loads(data: bytes | str) -> Any:
    """Parse JSON with bounded depth and no NaN or Infinity; a 400 problem otherwise."""
    try:
        return pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        raise ProblemError(400, f"the body is not valid JSON: {exc}", kind="malformed-json") from None


def json_body(model: type[M]) -> M:
    """The request's JSON body parsed and validated as ``model`` in one pass (Rust), with the
    same refusals as ``strict_loads``: malformed JSON is a 400, an invalid value a 422."""
    data = request.get_data(cache=True)
    if b"NaN" in data or b"Infinity" in data:  # rare: let the strict parser say whether they are tokens
        return model.model_validate(strict_loads(data))
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        broken = [e for e in exc.errors(include_url=False) if e["type"] == "json_invalid"]
        if broken:
            reason = str(broken[0]["msg"]).removeprefix("Invalid JSON: ")
            raise ProblemError(400, f"the body is not valid JSON: {reason}", kind="malformed-json") from None
        raise


class LatpredRequest(Request):
    """Flask's request, with JSON failures as problems instead of HTML error pages."""

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        if e is None:
            raise ProblemError(415, "the body must be application/json", field="Content-Type")
        raise ProblemError(400, f"the body is {e}", kind="malformed-json")


def onnx_upload() -> FileStorage:
    """The ONNX file of a multipart request (field ``onnx``); any other file field is refused,
    so a misnamed upload is an error that names it rather than a missing file."""
    extra_files = [k for k in request.files if k != "onnx"]
    if extra_files:
        raise ProblemError(422, f"unexpected file field(s) {extra_files}: the ONNX file goes in 'onnx'",
                           field=extra_files[0])
    upload = request.files.get("onnx")
    if upload is None:
        raise ProblemError(422, "a multipart request needs the ONNX file in field 'onnx'", field="onnx")
    return upload


def install(app: Flask) -> None:
    """Use the strict JSON parser and the problem-raising request class in ``app``."""
    app.json = StrictJSONProvider(app)
    app.request_class = LatpredRequest
