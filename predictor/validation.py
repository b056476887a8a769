"""Pydantic's validation errors in the words latpred answers with: the failing field as a path
(``nodes[3].params.k``) and a message that says what is wrong. The predictor's ValueErrors and the
service's problem objects both use these, so a field is named the same way in either."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Strict, ValidationError
from pydantic_core import ErrorDetails


def _integral_float(value: Any) -> Any:
    """8.0 as 8: JSON has one number type, and JSON Schema calls 8.0 an integer (generators and
    some serializers write it so); anything else is left for the strict check to refuse."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


#: With ``Strict()``, an integer as JSON means it: 8 or 8.0, never "8", "8.0", "1_000", true or 8.5.
#: Pydantic's lax mode takes all of those; its strict mode refuses 8.0, which JSON Schema calls an
#: integer. Write it last, after the bounds: ``Annotated[int, Strict(), Field(ge=1), INTEGRAL_FLOAT]``
#: (bounds written after it would reach the JSON schema as "ge"/"le", not "minimum"/"maximum").
INTEGRAL_FLOAT = BeforeValidator(_integral_float)
#: an unbounded JSON integer
JsonInt = Annotated[int, Strict(), INTEGRAL_FLOAT]


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a JSON-ish path: ('graphs', 2, 'device') -> graphs[2].device."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def error_message(error: ErrorDetails) -> str:
    """An error's message; a check's own message (a ValueError raised by a validator) without
    pydantic's 'Value error, ' in front, since it already says what is wrong."""
    return str(error["msg"]).removeprefix("Value error, ")


def validation_message(exc: ValidationError, limit: int = 3) -> str:
    """A ValidationError as one line per failing field, each led by its path, with the value
    given where it is short and not a check's own (which names what it refused)."""
    parts = []
    for error in exc.errors(include_url=False)[:limit]:
        path, message = field_path(error["loc"]), error_message(error)
        if error["type"] not in ("value_error", "missing") and not isinstance(error["input"], (dict, list)):
            message += f", got {error['input']!r}"[:120]
        parts.append(f"{path}: {message}" if path else message)
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
