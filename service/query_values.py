"""Values of a spreadsheet GET's query string, each refused with what is wrong with it.

``GET /v1/capacity`` and ``GET /v1/select`` take plain decimals and case-insensitive names that a
sheet types by hand; a pattern in the OpenAPI document says what is taken, and these say *why* a
value is not (a pattern mismatch cannot), as a 400 problem naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from predictor.validation import validation_message
from predictor.variant import Variant
from service.problems import TITLES, ProblemError
from service.schemas.capacity import MAX_VALUES


@contextmanager
def as_bad_request() -> Iterator[None]:
    """A query string's bad value is a Bad Request (400), whatever status the shared code it went
    through (a body's 422) raised it with."""
    try:
        yield
    except ProblemError as exc:
        if exc.status == 422:
            exc.status, exc.title = 400, TITLES[400]
        raise


def variant_field(field: str, value: str | None, default: str) -> str:
    """A precision or mode, case-insensitive (sheets are typed by hand), checked by predictor's Variant."""
    if value is None:
        return default
    try:
        return str(getattr(Variant.model_validate({field: value.strip(" ").lower()}), field))
    except ValidationError as exc:
        raise ProblemError(400, validation_message(exc), field=field) from None


def numbers(value: str, field: str, pattern: str, low: float, high: float) -> list[float]:
    """A comma-separated list of plain decimals from ``low`` to ``high`` (at most ``MAX_VALUES``),
    each refused with what is wrong with it: the document's pattern says the same, without the why."""
    items = [item.strip(" ") for item in value.split(",")]
    if len(items) > MAX_VALUES:
        raise ProblemError(400, f"{field}: {len(items)} values; at most {MAX_VALUES} a request", field=field,
                           kind="too-many-combinations")
    found = []
    for item in items:
        if not item:
            raise ProblemError(400, f"{field}: an empty item in {value!r}", field=field)
        try:
            number = float(item) if item.isascii() else math.nan
        except ValueError:
            number = math.nan
        if math.isnan(number) or math.isinf(number):
            problem = "is not a number"
        elif number <= 0:
            problem = "must be positive"
        elif number < low or number > high:
            problem = f"must be from {low:g} to {high:.0f}"
        elif not re.fullmatch(pattern, item):
            problem = "must be written as a plain decimal (digits, one point; no sign, exponent or separators)"
        else:
            found.append(number)
            continue
        raise ProblemError(400, f"{field}: {item!r} {problem}", field=field)
    return found
