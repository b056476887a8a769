"""The device catalog: the GPUs (and CPUs) latpred knows, read from a data file users can extend.

The shipped file (``device_catalog.toml``, beside this module) holds each GPU's size and ceilings
with the page every figure came from, and an on-demand price. Prices go stale and specs get added
by the people who use them, so a second file (``$LATPRED_DEVICE_CATALOG``, TOML or JSON) is laid
over the shipped one by device id, field by field: a known id changes only the fields it gives, a
new id adds a device and must give them all.

Every entry is validated before anything uses it: a spec that is missing, non-finite or out of
any GPU's range (a typo of three orders of magnitude, a sparsity figure pasted as a bandwidth)
would silently skew every roofline and cost computed from it, so it is refused with the device
id and the field named. This module knows nothing of ``DeviceSpec``: ``predictor.devices`` turns
the validated entries into specs.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

#: the catalog shipped with latpred (package data)
SHIPPED_CATALOG = Path(__file__).with_name("device_catalog.toml")
#: a user's catalog, laid over the shipped one by id
CATALOG_ENV = "LATPRED_DEVICE_CATALOG"

#: precisions a device's tensor cores may list; fp16 every tensor-core GPU has, the others are
#: left out where the hardware lacks them (a T4 has neither bf16 nor tf32)
TENSOR_PRECISIONS = ("fp16", "bf16", "tf32")
REQUIRED_TENSOR_PRECISIONS = ("fp16",)

#: ceilings beyond any GPU made or announced: a value past them is a unit or typing error
MAX_SM_COUNT = 1000
MAX_BANDWIDTH = 100e12  # B/s
MAX_FLOPS = 100e15  # FLOP/s
MAX_MEMORY_BYTES = 4 * 2**40  # 4 TiB
MAX_TDP_W = 10_000.0
MAX_CLOCK_HZ = 10e9
#: Below these a spec is a unit mistake, not a device (a bandwidth in GB/s, memory in GiB): each is
#: far under the smallest device latpred could serve a model on (a laptop CPU; a 1g MIG slice). An
#: entry of 2 bytes and 1 B/s loaded, and then a selection answered a cost of Infinity.
MIN_BANDWIDTH = 1e9  # B/s
MIN_FLOPS = 1e9  # FLOP/s
MIN_MEMORY_BYTES = 2**28  # 256 MiB
MIN_L2_BYTES = 2**16  # 64 KiB
MIN_TDP_W = 1.0
MIN_CLOCK_HZ = 1e8
#: USD per device-hour above this is no price (a whole 8-GPU server rents for under a tenth of it)
MAX_PRICE_PER_HOUR = 1000.0

#: an id is what a query is compared with after lowercasing, and what a dataset folder is named
ID_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

Provenance = Literal["measured", "transferred"]
#: 'gpu', or 'cpu': a CPU timed through torch on the CPU, whose eager forward is one call after
#: another (predictor.compose, serial) and which runs no CUDA graph
DeviceKind = Literal["gpu", "cpu"]


def _check_tensor_flops(value: dict[str, float], required: tuple[str, ...] = REQUIRED_TENSOR_PRECISIONS
                        ) -> dict[str, float]:
    """Known precisions only, the ``required`` ones present, each rate a FLOP/s in range."""
    unknown = sorted(set(value) - set(TENSOR_PRECISIONS))
    if unknown:
        raise ValueError(f"unknown precision(s) {', '.join(map(repr, unknown))}: expected some of "
                         f"{', '.join(TENSOR_PRECISIONS)} (leave out one the hardware lacks)")
    missing = [p for p in required if p not in value]
    if missing:
        raise ValueError(f"{', '.join(missing)} is required")
    for precision, rate in value.items():
        if not math.isfinite(rate) or not MIN_FLOPS <= rate <= MAX_FLOPS:
            raise ValueError(f"{precision} = {rate!r} is not a FLOP/s in [{MIN_FLOPS:g}, {MAX_FLOPS:g}]")
    return value


class CatalogError(ValueError):
    """A catalog file that cannot be read, or entries refused: the message names the file, device
    and field (the CLI answers it as an error, not a traceback: the catalog loads with
    predictor.devices, before any command's own checks)."""


class Datasheet(BaseModel):
    """A measured device's datasheet ceilings, beside the measured ones its entry states: the basis
    on which the transfer model compares it with devices known only from their datasheets."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    memory_bandwidth: float = Field(ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH, description="bytes per second")
    tensor_flops: dict[str, float] = Field(description="precision -> dense tensor-core FLOP/s")
    vector_flops: float = Field(ge=MIN_FLOPS, le=MAX_FLOPS, description="fp32 FLOP/s on CUDA cores")

    @field_validator("tensor_flops")
    @classmethod
    def _tensor_flops(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_tensor_flops(value)


class CatalogEntry(BaseModel):
    """One device as the catalog states it. ``provenance`` is 'measured' where the repository
    holds a dataset and bundle for it (its ceilings were measured), 'transferred' where its
    specs are datasheet figures and its predictions are to come from a transfer model."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    name: str = Field(min_length=1, max_length=200)
    provenance: Provenance
    #: a CPU's sm_count is the cores torch computes on, its l2_bytes its last-level cache, its
    #: tensor_flops empty (none required) and its vector_flops its fp32 rate
    kind: DeviceKind = "gpu"
    sm_count: int = Field(gt=0, le=MAX_SM_COUNT)
    l2_bytes: int = Field(ge=MIN_L2_BYTES)
    memory_bytes: int = Field(ge=MIN_MEMORY_BYTES, le=MAX_MEMORY_BYTES)
    memory_bandwidth: float = Field(ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH, description="bytes per second")
    tensor_flops: dict[str, float] = Field(description="precision -> dense tensor-core FLOP/s")
    vector_flops: float = Field(ge=MIN_FLOPS, le=MAX_FLOPS, description="fp32 FLOP/s on CUDA cores")
    tdp_w: float = Field(ge=MIN_TDP_W, le=MAX_TDP_W)
    #: a GPU's boost clock (what its datasheet prints), which sizes its L2's bandwidth on the transfer
    #: model's basis (``DeviceSpec.l2_bandwidth``); a CPU has none
    boost_clock_hz: float | None = Field(default=None, ge=MIN_CLOCK_HZ, le=MAX_CLOCK_HZ)
    #: on-demand USD per GPU-hour; left out (None): unknown, which TOML, having no null, can only say so
    price_per_hour: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_HOUR)
    source: str = Field(min_length=1, description="where the specs come from")
    price_source: str | None = None
    #: the datasheet's ceilings where those above were measured (None: those above are the datasheet's)
    datasheet: Datasheet | None = None

    @field_validator("name", "source")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("tensor_flops")
    @classmethod
    def _tensor_flops(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        return _check_tensor_flops(value, () if info.data.get("kind") == "cpu" else REQUIRED_TENSOR_PRECISIONS)

    @model_validator(mode="after")
    def _clock_for_gpus(self) -> CatalogEntry:
        """A GPU needs its boost clock (the transfer model's L2 bandwidth is derived from it); a CPU's
        would mean nothing here."""
        if self.kind == "gpu" and self.boost_clock_hz is None:
            raise ValueError("boost_clock_hz: missing: a GPU's boost clock in Hz, as its datasheet prints it "
                             "(e.g. 1.98e9)")
        if self.kind == "cpu" and self.boost_clock_hz is not None:
            raise ValueError("boost_clock_hz: a CPU has none here (the L2 bandwidth it sizes is a GPU's)")
        return self

    @model_validator(mode="after")
    def _l2_below_memory(self) -> CatalogEntry:
        """An L2 cannot outsize the memory it caches (a byte count typed in the wrong unit)."""
        if self.l2_bytes >= self.memory_bytes:
            raise ValueError(f"l2_bytes: {self.l2_bytes} is not below memory_bytes ({self.memory_bytes})")
        return self


def read_file(path: Path) -> dict[str, dict[str, Any]]:
    """The raw device tables of one catalog file: ``{"devices": {id: {field: value}}}`` in
    TOML, or the same in JSON (``.json``). Refused, naming the file, if it is not that shape."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError and JSONDecodeError are ValueErrors
        raise CatalogError(f"device catalog {path}: {exc}") from None
    devices = data.get("devices") if isinstance(data, dict) else None
    if not isinstance(devices, dict) or set(data) != {"devices"}:
        raise CatalogError(f"device catalog {path}: expected one top-level 'devices' table of id -> fields")
    for device_id, fields in devices.items():
        if not isinstance(fields, dict):
            raise CatalogError(f"device catalog {path}: device {device_id!r}: expected a table of fields")
    return devices


def merge(base: Mapping[str, Mapping[str, Any]], overlay: Mapping[str, Mapping[str, Any]],
          overlay_name: str) -> dict[str, dict[str, Any]]:
    """``overlay`` laid over ``base`` by id: a known id's fields replace the base's one by one
    (``tensor_flops`` as a whole, so a precision can be taken away), a new id is appended. A
    price changed without a ``price_source`` is credited to ``overlay_name`` rather than left
    under the shipped source that no longer states it."""
    merged = {device_id: dict(fields) for device_id, fields in base.items()}
    for device_id, fields in overlay.items():
        entry = merged.setdefault(device_id, {})
        entry.update(fields)
        if "price_per_hour" in fields and "price_source" not in fields:
            entry["price_source"] = f"set in {overlay_name}"
    return merged


def validate(raw: Mapping[str, Mapping[str, Any]], origin: str) -> dict[str, CatalogEntry]:
    """Every entry of ``raw`` validated; all problems at once in one ValueError, each naming
    the device id and the field (``origin`` says which files the entries came from)."""
    entries: dict[str, CatalogEntry] = {}
    problems: list[str] = []
    for device_id, fields in raw.items():
        if not ID_PATTERN.match(device_id):
            problems.append(f"device {device_id!r}: id must be lowercase letters, digits and single '-' "
                            "(the slug of the name CUDA reports)")
            continue
        try:
            entries[device_id] = CatalogEntry.model_validate(dict(fields))
        except ValidationError as exc:
            for err in exc.errors():
                where, message = ".".join(str(part) for part in err["loc"]), _message(err)
                if not where:  # a check across fields names its field at the start of its message
                    where, _, message = message.partition(": ")
                problems.append(f"device {device_id!r}: {where}: {message}")
    if problems:
        raise CatalogError(f"device catalog ({origin}) refused:\n  " + "\n  ".join(problems))
    return entries


def _message(err: Mapping[str, Any]) -> str:
    """Pydantic's message, with the value given where it helps (a bound broken, a wrong type)."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] in ("missing", "extra_forbidden"):
        return "missing" if err["type"] == "missing" else "unknown field (a typo?)"
    return f"{msg} (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else msg


def user_catalog_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The user's catalog file named by ``$LATPRED_DEVICE_CATALOG``, if any."""
    value = (os.environ if environ is None else environ).get(CATALOG_ENV, "").strip()
    return Path(value).expanduser() if value else None


def load_catalog(shipped: Path = SHIPPED_CATALOG, user: Path | None = None) -> dict[str, CatalogEntry]:
    """The shipped catalog with ``user`` laid over it, validated, in file order (shipped devices
    first, then the user's new ones)."""
    raw: dict[str, dict[str, Any]] = {k: dict(v) for k, v in read_file(shipped).items()}
    origin = str(shipped)
    if user is not None:
        raw = merge(raw, read_file(user), str(user))
        origin = f"{shipped} with {user} over it"
    return validate(raw, origin)
