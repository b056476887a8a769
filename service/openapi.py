"""The OpenAPI 3.1 document: flask-openapi3's, generated from the pydantic models, finished here.

flask-openapi3 documents one body media type per operation and its own validation-error shape;
this app also takes multipart uploads on the JSON endpoints and answers every error as RFC 9457
problem+json. So after flask-openapi3 has built the document, ``LatpredOpenAPI`` adds the extra
request bodies views declare with :func:`request_bodies`, replaces the validation-error responses
by the Problem schema, and marks the key-guarded operations with their security requirement and
the refusals (401, 403) the running configuration can give: none of either where writes are open
to all and no key is set, since a document that asks for a key nobody checks misleads clients.
The predicting operations also state the running configuration's work budget
(``LATPRED_MAX_WORK``, ``x-latpred-max-work``) where they document the refusal it gives.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, TypeVar

from flask_openapi3 import OpenAPI
from flask_openapi3.types import ResponseDict
from pydantic import BaseModel, TypeAdapter

from service.auth import SECURITY, refusals
from service.graph_names import NAME_PATTERN, RULE
from service.problems import PROBLEM_JSON, TITLES
from service.request_body import accepts
from service.schemas.common import TEXT_LOCATIONS, Problem, without_null
from service.work_budget import openapi_note

F = TypeVar("F", bound=Callable[..., Any])
REF = "#/components/schemas/{model}"


def problem_ref() -> dict[str, Any]:
    return {PROBLEM_JSON: {"schema": {"$ref": REF.format(model="Problem")}}}


def problems(*codes: int) -> ResponseDict:
    """``responses=`` entries for the problems an operation can answer with."""
    return {code: {"description": TITLES.get(code, "error"), "content": problem_ref()} for code in codes}


def request_bodies(**by_mimetype: type[BaseModel]) -> Callable[[F], F]:
    """Declare a view's bodies by media type, e.g. ``json=PredictRequest, form=PredictForm``;
    the view parses them itself, and only these media types are let through."""
    names = {"json": "application/json", "form": "multipart/form-data"}
    bodies = {names[k]: model for k, model in by_mimetype.items()}

    def mark(func: F) -> F:
        func.__latpred_bodies__ = bodies  # type: ignore[attr-defined]
        return accepts(*bodies)(func)

    return mark


def documents(*models: type) -> Callable[[F], F]:
    """Put models a view's responses refer to by $ref (not as a pydantic response) into the document."""

    def mark(func: F) -> F:
        func.__latpred_models__ = models  # type: ignore[attr-defined]
        return func

    return mark


def budgeted(status: int) -> Callable[[F], F]:
    """Mark a view that refuses requests over the work budget with ``status`` (service.work_budget),
    so that its document states the budget the server runs with."""

    def mark(func: F) -> F:
        func.__latpred_budget_status__ = status  # type: ignore[attr-defined]
        return func

    return mark


def json_response(model: type, description: str = "OK") -> dict[str, Any]:
    """A ``responses=`` entry whose JSON body is ``model`` by $ref (a type flask-openapi3 cannot
    take as a response itself, such as predictor's dataclasses; list it with ``documents``)."""
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}}


def add_model(schemas: dict[str, Any], model: type) -> str:
    """Put ``model`` (a pydantic model or any type pydantic can describe, and the types it uses)
    into the components; returns its name."""
    schema = TypeAdapter(model).json_schema(ref_template=REF)
    if getattr(model, "LOCATION", "body") in TEXT_LOCATIONS:  # a form's fields are text: no null
        without_null(schema)
    for name, sub in schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    name = model.__name__
    schemas[name] = schema
    return name


def describe(view: Callable[..., Any]) -> dict[str, str]:
    """Summary (the docstring's first line) and description (its other paragraphs, unwrapped:
    flask-openapi3 would put a line break at every wrapped line)."""
    doc = inspect.getdoc(view) or ""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    if not paragraphs:
        return {}
    out = {"summary": paragraphs[0]}
    if len(paragraphs) > 1:
        out["description"] = "\n\n".join(paragraphs[1:])
    return out


class LatpredOpenAPI(OpenAPI):
    """flask-openapi3's app whose document tells the truth about bodies, errors and keys."""

    def generate_spec_json(self) -> None:
        super().generate_spec_json()
        spec = self.spec_json
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas.pop("ValidationErrorModel", None)
        add_model(schemas, Problem)
        ops = spec.get("paths", {})
        config = self.extensions["latpred"].config
        for op in (o for item in ops.values() for o in item.values() if isinstance(o, dict)):
            for status, response in list(op.get("responses", {}).items()):
                content = response.get("content", {})
                if "application/json" in content and "ValidationErrorModel" in str(content["application/json"]):
                    op["responses"][status] = {"description": TITLES.get(int(status), "error"),
                                               "content": problem_ref()}
        for rule in self.url_map.iter_rules():
            view = self.view_functions.get(rule.endpoint)
            uri = re.sub(r"<([^<:]+:)?", "{", rule.rule).replace(">", "}")
            for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
                op = ops.get(uri, {}).get(method.lower())
                if op is None or view is None:
                    continue
                op["operationId"] = view.__name__
                op.update(describe(view))
                for model in getattr(view, "__latpred_models__", ()):
                    add_model(schemas, model)
                bodies = getattr(view, "__latpred_bodies__", None)
                if bodies:
                    op["requestBody"] = {"required": True, "content": {
                        mimetype: {"schema": {"$ref": REF.format(model=add_model(schemas, model))}}
                        for mimetype, model in bodies.items()}}
                status = getattr(view, "__latpred_budget_status__", None)
                if status is not None:
                    note = openapi_note(config.max_work)
                    op["x-latpred-max-work"] = note["x-latpred-max-work"]
                    response = op["responses"].setdefault(str(status), problems(status)[status])
                    response["description"] = f"{response['description']}. {note['description']}"
                if getattr(view, "__latpred_guarded__", False):
                    if config.api_key:  # with no key set, no credential opens a closed write: only 403
                        op["security"] = SECURITY
                    for status in (401, 403):
                        op["responses"].pop(str(status), None)
                    op["responses"].update({str(k): v for k, v in problems(*refusals(config)).items()})
        declare_name_rule(schemas)
        declare_parser_refusals(ops)


def declare_parser_refusals(ops: dict[str, Any]) -> None:
    """A URL over gunicorn's request-line limit (8,190 bytes, ``gunicorn_conf``) is refused by its
    HTTP parser with an HTML 400 before the app sees it. Every URL the document allows fits when
    written in ASCII; one that breaks its patterns with non-ASCII text (twelve bytes a character
    once percent-encoded) may not, so operations with parameters declare that answer too."""
    for op in (o for item in ops.values() for o in item.values() if isinstance(o, dict)):
        if not any(p.get("in") in ("query", "path") for p in op.get("parameters", [])):
            continue
        response = op["responses"].setdefault("400", {"description": "Bad Request", "content": problem_ref()})
        response["content"]["text/html"] = {"schema": {"type": "string"}}
        response["description"] += "; text/html from the HTTP server for a request line over 8,190 bytes"


def declare_name_rule(schemas: dict[str, Any]) -> None:
    """The graph IR's ``name`` as the service takes it (``graph_names``): the IR itself allows any
    name, since the CLI reads local files whose names it escapes, but every graph given to the
    service must pass the rule, and a document that did not say so would call refused names valid.
    ``\\w`` is Unicode in the service (Python) and ASCII in an ECMA-262 validator: what the latter
    calls valid, the service takes."""
    name = schemas.get("Graph", {}).get("properties", {}).get("name")
    if name is not None:
        name["pattern"] = NAME_PATTERN
        name["description"] = (name.get("description", "") + " " + RULE[0].upper() + RULE[1:]).strip()
