"""Where and how a graph runs: device, batch, precision and execution mode, declared once.

The predictor checks a prediction's variant with this model; the service's request models,
OpenAPI document and spreadsheet GETs reuse its field types, so a batch, a precision or a mode
is accepted or refused by one rule, with one message, wherever it comes from. JSON requests are
strict (an integer is 8 or 8.0, not "8" or true); a multipart form's text fields are parsed as
numbers by a form model that shares ``Batch`` with lax parsing.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from predictor.compose import MODES
from predictor.precision import PRECISIONS
from predictor.validation import INTEGRAL_FLOAT, validation_message

MAX_BATCH = 65_536
DEFAULT_PRECISION = "fp16"
DEFAULT_MODE = "cudagraph"

Precision = Literal[tuple(PRECISIONS)]  # type: ignore[valid-type]
Mode = Literal[tuple(MODES)]  # type: ignore[valid-type]
Batch = Annotated[int, Field(ge=1, le=MAX_BATCH, description="batch size (default: the graph's own)")]
DeviceName = Annotated[str, Field(min_length=1, max_length=100,
                                  description="device id or a case-insensitive part of its name, e.g. 'h200' "
                                              "(default: the one device with a bundle, if only one)",
                                  examples=["h200"])]


class Variant(BaseModel):
    """Where and how to run a graph; every field has a default. The batch is strict (JSON's 8 or
    8.0, not "8" or true); a form model that parses text uses ``Batch`` itself."""

    model_config = ConfigDict(extra="forbid")

    device: DeviceName | None = None
    batch: Annotated[int, Strict(), Field(ge=1, le=MAX_BATCH), INTEGRAL_FLOAT] | None = None
    precision: Precision = DEFAULT_PRECISION  # type: ignore[valid-type]
    mode: Mode = DEFAULT_MODE  # type: ignore[valid-type]


def check_variant(batch: int | None, precision: str, mode: str) -> None:
    """Refuse a bad batch, precision or mode with a ValueError that names the field."""
    try:
        Variant(batch=batch, precision=precision, mode=mode)
    except ValidationError as exc:
        raise ValueError(validation_message(exc)) from None
