"""Request bodies: which media types a view takes, and JSON parsing that cannot be made to crash.

JSON is parsed by jiter (pydantic's own parser, in Rust), which refuses nesting deeper than 200
levels (Python's json raises RecursionError there, or worse, succeeds and leaves a structure that
later overflows the stack when it is dumped), NaN and Infinity, which are not JSON, and an object
that names a key twice: every parser here would keep the last value and drop the first without
a word, so ``{"batch": 8, "batch": 1}`` would predict batch 1 for a client that may have meant 8.
A body is parsed once and validated against its model from what was parsed (``json_body``). A
malformed body becomes a 400 problem naming the line and column (and the key given twice); a
media type the view does not take, a 415.

Why not pydantic's one-pass ``model_validate_json``: it cannot see a duplicate key, and a second
pass to look for them (the standard library's scanner with a hook) cost 48% of a 100-graph NAS
batch's validation; jiter's parse with the check, then validation of the parsed objects, costs
15% more than the one pass did (``benchmarks/service_batch.py``'s bodies, 5.6 MB).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any, TypeVar

import jiter
from flask import Flask, Request, current_app, request
from flask.json.provider import DefaultJSONProvider
from pydantic import BaseModel
from werkzeug.datastructures import FileStorage

from service.problems import ProblemError

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)
JSON = "application/json"


class StrictJSONProvider(DefaultJSONProvider):
    """Flask's JSON, with loads done by jiter (bounded depth, no NaN, no key twice); keys keep
    their order in answers (a prediction reads better total first than alphabetically)."""

    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            return parse_json(s)
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
    """415 for a media type the view does not take (before anything reads the body); 413 for a
    chunked body over the cap, as for one whose Content-Length says so; 400 for a field given
    twice (``check_fields_given_once``)."""
    wanted = view_attribute("__latpred_accepts__")
    if not wanted or req.method not in ("POST", "PUT", "PATCH"):
        check_fields_given_once(req)
        return
    if req.mimetype not in wanted:
        got = req.mimetype or "no Content-Type"
        raise ProblemError(415, f"this endpoint takes {' or '.join(wanted)}, not {got}", field="Content-Type")
    check_chunked_size(req)
    check_fields_given_once(req)


def check_fields_given_once(req: Request) -> None:
    """400 for a query-string parameter, or a multipart form field or file, given more than once.
    Werkzeug keeps the first and drops the rest without a word: ``?batch=1&batch=32`` answered
    batch 1, and a second ``onnx`` file was never predicted. Lists are one field's comma-separated
    value, so a repeated name is never needed (as a JSON body refuses a key given twice)."""
    _refuse_repeats(req.args, "in the query string")
    if req.method in ("POST", "PUT", "PATCH") and req.mimetype == "multipart/form-data":
        _refuse_repeats(req.form, "as a form field")
        _refuse_repeats(req.files, "as a file")


def _refuse_repeats(fields: Any, where: str) -> None:
    """A 400 naming the first of ``fields`` (a werkzeug MultiDict) that holds more than one value."""
    for name, values in fields.lists():
        if len(values) > 1:
            raise ProblemError(400, f"{name}: given {len(values)} times {where}; give it once (several values "
                                    "go in one, comma-separated, where the field takes a list)", field=name)


def check_chunked_size(req: Request) -> None:
    """A chunked body (no Content-Length) read up to the cap plus one byte: werkzeug stops reading
    at the cap without a word, so a 66 MB body would reach the parser cut at 64 MiB and be
    answered as malformed JSON. Reading one byte more tells a body at the cap from one over it."""
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    if req.content_length is not None or not limit or "chunked" not in req.headers.get("Transfer-Encoding", "").lower():
        return
    try:
        data = req.environ["wsgi.input"].read(limit + 1)
    except Exception as exc:  # noqa: BLE001 - the server's chunk parser: a client gone, or broken framing
        raise ProblemError(400, f"the chunked request body could not be read: {type(exc).__name__}",
                           kind="malformed-body") from None
    if len(data) > limit:
        raise ProblemError(413, f"the request body is larger than this server accepts ({limit} bytes; "
                                "LATPRED_MAX_BODY_BYTES)")
    req.environ["wsgi.input"] = io.BytesIO(data)  # still terminated: werkzeug reads it to its end


def parse_json(data: bytes | str) -> Any:
    """JSON as Python objects, or ValueError: malformed, NaN or Infinity, nested past 200 levels,
    or a key twice in one object (``Detected duplicate key "batch" at line 1 column 31``)."""
    return jiter.from_json(data.encode() if isinstance(data, str) else data, allow_inf_nan=False,
                           catch_duplicate_keys=True)


DUPLICATE = re.compile(r'^Detected duplicate key "(.*)" at line')


def strict_loads(data: bytes | str) -> Any:
    """Parse JSON with bounded depth, no NaN or Infinity and no key twice in an object; a 400
    problem otherwise (naming the key given twice)."""
    try:
        return parse_json(data)
    except ValueError as exc:
        twice = DUPLICATE.match(str(exc))
        if twice:
            raise ProblemError(400, f"the body names the key {twice.group(1)!r} twice in one object ({exc}); "
                                    "JSON parsers disagree on which value wins, so give each key once",
                               field=twice.group(1), kind="malformed-json") from None
        raise ProblemError(400, f"the body is not valid JSON: {exc}", kind="malformed-json") from None


def json_body(model: type[M]) -> M:
    """The request's JSON body parsed (``strict_loads``: malformed JSON is a 400) and validated as
    ``model`` (an invalid value is a 422)."""
    return model.model_validate(strict_loads(request.get_data(cache=True)))


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
