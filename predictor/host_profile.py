"""The host profile: what eager composition needs to know about the CPU that issues kernels.

Eager PyTorch at small batch runs at the speed of the host: the same models on two H200 machines
of one kind came out 0.38x to 1.14x apart in eager mode, while CUDA-graph replays agreed within
5%. So a host is described by what one call of each kind of node costs it (``HOST_KINDS``),
measured by a probe in seconds (``latpred host probe``, collectors.host_probe), and stored beside
every sweep and whole-model run. The dispatch model learns a call's cost *relative* to its
kind's cost in the profile measured beside it, and a prediction multiplies back by the profile
of the host asked for: a host's speed is an input, not something one machine baked into the
model.

A profile is identified by a short ``id``; a store (``HostStore``) keeps one JSON file per id
and refuses to overwrite a stored profile with a different one. The JSON Schema beside this
module (``host_profile.schema.json``) is generated from ``HostProfile``:
``python -m predictor.host_profile`` rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator

from predictor.validation import INTEGRAL_FLOAT, validation_message

#: version 2 adds ``reference_ms`` (reference forwards, predictor.host_references), version 3
#: ``forward_spread`` (how steadily they ran, predictor.host_spread); earlier profiles (the
#: dataset's before each) are read as they are. A profile is written at the lowest version that
#: holds its fields (``profile_version``), so a latpred that reads up to version 2 still reads
#: every profile without a spread; a spread in a profile of version 1 or 2 is refused, since
#: such a reader could not read it (``reference_ms`` predates that rule: it is read in any version)
HOST_PROFILE_SCHEMA_VERSION = 3
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
#: the version that introduced ``forward_spread``
SPREAD_SCHEMA_VERSION = 3
#: the folder of a device's dataset that holds the profiles probed beside its sweeps and runs
HOSTS_FOLDER = "hosts"

#: What a host's issue time is made of, per call. elementwise: a tensor function's dispatch and
#: launch (an add); gemm: a linear through cuBLAS; conv: a convolution through cuDNN; norm: a
#: layer norm; attention: scaled_dot_product_attention; view: a call that launches nothing
#: (a reshape); copy: a strided view made contiguous (a copy kernel); module_call: the Python of
#: calling an ``nn.Module`` (its ``__call__`` and hooks' checks), with no kernel.
HOST_KINDS = ("elementwise", "gemm", "conv", "norm", "attention", "view", "copy", "module_call")

#: Which kind's cost a family's calls are learned relative to (the rest are elementwise-like:
#: tensor functions that dispatch and launch one kernel).
FAMILY_HOST_KIND: dict[str, str] = {
    "conv2d": "conv", "linear": "gemm", "matmul": "gemm", "sdpa": "attention",
    "batch_norm": "norm", "layer_norm": "norm", "group_norm": "norm",
    "transpose": "copy", "concat": "copy",
}

#: Bounds of a plausible per-call cost, in microseconds: no call costs nothing, and a host that
#: takes over a millisecond for one is not one eager PyTorch can be predicted on (a profile with
#: such a number is a unit mistake: seconds or nanoseconds for microseconds).
MIN_COST_US = 0.05
MAX_COST_US = 1000.0

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
#: the CPU score's plausible range, ns per iteration: the profiles committed here score 370-2,280,
#: and an estimate divides by it (0 or infinity would scale every cost out of range)
MIN_CPU_SCORE_NS, MAX_CPU_SCORE_NS = 10.0, 100_000.0
HostId = Annotated[str, Field(pattern=ID_PATTERN, description="short id of a stored host profile",
                              examples=["h200-a1b2c3d4e5"])]


#: The reference forwards a probe times (whole eager forwards of three ``nas-train`` architectures:
#: an MBConv CNN, a transformer encoder, a ResNet; predictor.host_references says why), each at
#: these batches and precisions. They are part of the profile's contract: a profile names
#: nothing else, so that every latpred that reads it can predict what it names.
REFERENCE_MODELS = ("nas-1002", "nas-1003", "nas-1004")
REFERENCE_BATCHES = (1, 8)
REFERENCE_PRECISIONS = ("fp32", "fp16", "bf16")
#: plausible bounds of one reference forward, in milliseconds (the three take 1-10 ms on the H200)
MIN_REFERENCE_MS = 0.01
MAX_REFERENCE_MS = 10_000.0
#: the largest plausible ``forward_spread`` (p90 / p10 of one forward's timings): the contended
#: H200 cores spread a run's forwards up to 4x; a hundredfold is a broken timer, not a host
MAX_FORWARD_SPREAD = 100.0


def reference_key(model: str, batch: int, precision: str) -> str:
    """How a profile names one reference forward: ``<model>|b<batch>|<precision>``."""
    return f"{model}|b{batch}|{precision}"


def parse_reference_key(key: str) -> tuple[str, int, str]:
    """``nas-1002|b8|fp16`` -> (model, batch, precision): ``reference_key`` read back."""
    model, batch, precision = key.split("|")
    return model, int(batch.removeprefix("b")), precision


REFERENCE_KEYS = tuple(reference_key(m, b, p) for m in REFERENCE_MODELS for p in REFERENCE_PRECISIONS
                       for b in REFERENCE_BATCHES)
#: Of those, the forwards a calibration reads and a probe times: the six in fp32. Decided on
#: development data only (the zoo's eager runs under five host conditions, benchmarks/reference_cut.py,
#: and nas-dev's four groups, datasets/nvidia-h200/diagnostics/reference_forward_analysis.py):
#: calibrated from the fp32 forwards 48% and 69.9% of runs came within +-10%, from all 18 43% and
#: 69.1%. A profile may still carry the others (the datasets' profiles do); they are not read.
CALIBRATION_PRECISIONS = ("fp32",)
CALIBRATION_KEYS = tuple(k for k in REFERENCE_KEYS if parse_reference_key(k)[2] in CALIBRATION_PRECISIONS)


def host_kind(family: str | None) -> str:
    """The profile kind a node of ``family`` is costed relative to."""
    return FAMILY_HOST_KIND.get(family or "", "elementwise")


class HostProfile(BaseModel):
    """One host's per-call costs, and what identifies the host and its software."""

    #: strict: a cost is a JSON number, not "8.5"; a core count an integer (8 or 8.0), not true.
    #: The published schema says what ``_spread_needs_its_version`` checks: a spread only in version 3.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, json_schema_extra={
        "if": {"properties": {"forward_spread": {"type": "number"}}, "required": ["forward_spread"]},
        "then": {"properties": {"schema_version": {"const": SPREAD_SCHEMA_VERSION}}}})

    schema_version: Literal[1, 2, 3] = Field(description="version of this schema; readers refuse others")
    id: HostId
    label: Literal["measured", "estimated"] = Field(
        description="'measured': by the GPU probe on this host; 'estimated': scaled from a measured "
                    "profile by the CPU's single-thread speed (no GPU on the target), with wider intervals")
    costs_us: dict[str, float] = Field(
        description=f"host time of one call of each kind, in microseconds: {', '.join(HOST_KINDS)}",
        json_schema_extra={"required": list(HOST_KINDS), "propertyNames": {"enum": list(HOST_KINDS)},
                           "additionalProperties": {"type": "number", "minimum": MIN_COST_US,
                                                    "maximum": MAX_COST_US}})
    reference_ms: dict[str, float] | None = Field(
        None, description="eager forwards of the reference architectures timed with the probe (or through a "
                          "run's rounds), median milliseconds, by '<model>|b<batch>|<precision>' "
                          f"({', '.join(REFERENCE_MODELS)} at batch {', '.join(map(str, REFERENCE_BATCHES))} in "
                          f"{', '.join(REFERENCE_PRECISIONS)}; schema version 2): "
                          f"an eager prediction scales the costs by how far the {', '.join(CALIBRATION_PRECISIONS)} "
                          "ones ran from their prediction (the others are read as valid and not used)",
        json_schema_extra={"propertyNames": {"enum": list(REFERENCE_KEYS)}, "minProperties": 1,
                           "additionalProperties": {"type": "number", "minimum": MIN_REFERENCE_MS,
                                                    "maximum": MAX_REFERENCE_MS}})
    forward_spread: float | None = Field(
        None, ge=1.0, le=MAX_FORWARD_SPREAD,
        description="how steadily the reference forwards ran while probed (through a run's rounds for a run's "
                    "profile): per forward the 90th over the 10th percentile of its timings, the median over "
                    "the forwards (schema version 3). How closely a host repeats a forward bounds how closely "
                    "any prediction lands on it: an eager prediction's interval on a measured GPU is sized by "
                    "it, and a host above 1.3 is warned of")
    cpu_score_ns: float | None = Field(
        None, ge=MIN_CPU_SCORE_NS, le=MAX_CPU_SCORE_NS, allow_inf_nan=False,
        description="a fixed pure-Python workload's time per iteration (collectors.cpu_score): "
                    "what an estimated profile is scaled by")
    cpu_model: str = Field(max_length=200)
    cpu_cores: Annotated[int, Strict(), Field(ge=1, le=100_000), INTEGRAL_FLOAT]
    torch_version: str | None = Field(None, max_length=100)
    cuda_version: str | None = Field(None, max_length=100)
    gpu: str | None = Field(None, max_length=200, description="the GPU the probe issued to (None: CPU-only)")
    hostname: str | None = Field(None, max_length=200)
    measured_at: str = Field(max_length=64, description="when the probe ran (ISO 8601, UTC)")
    probe_seconds: float | None = Field(None, ge=0)
    estimated_from: str | None = Field(None, pattern=ID_PATTERN,
                                       description="the measured profile an estimated one was scaled from")
    note: str | None = Field(None, max_length=500, description="the conditions the probe ran under")

    @field_validator("costs_us")
    @classmethod
    def _costs(cls, costs: dict[str, float]) -> dict[str, float]:
        missing = [k for k in HOST_KINDS if k not in costs]
        unknown = sorted(set(costs) - set(HOST_KINDS))
        if missing:
            raise ValueError(f"missing kind(s) {', '.join(missing)}: a profile gives all of {', '.join(HOST_KINDS)}")
        if unknown:
            raise ValueError(f"unknown kind(s) {', '.join(unknown)}: the kinds are {', '.join(HOST_KINDS)}")
        bad = {k: v for k, v in costs.items() if not (isinstance(v, (int, float)) and math.isfinite(v)
                                                      and MIN_COST_US <= v <= MAX_COST_US)}
        if bad:
            k, v = next(iter(bad.items()))
            raise ValueError(f"{k}: {v!r} us per call is not a plausible cost (between {MIN_COST_US} and "
                             f"{MAX_COST_US:.0f} us; are the units microseconds?)")
        return {k: float(costs[k]) for k in HOST_KINDS}

    @field_validator("reference_ms")
    @classmethod
    def _references(cls, references: dict[str, float] | None) -> dict[str, float] | None:
        if references is None:
            return None
        if not references:
            raise ValueError("no reference forwards: leave the field out, or give at least one")
        unknown = sorted(set(references) - set(REFERENCE_KEYS))
        if unknown:
            raise ValueError(f"unknown reference forward(s) {', '.join(unknown[:3])}: this latpred knows "
                             f"{', '.join(REFERENCE_KEYS[:2])}, ... ({len(REFERENCE_KEYS)} in all)")
        for k, v in references.items():
            if not (isinstance(v, (int, float)) and math.isfinite(v) and MIN_REFERENCE_MS <= v <= MAX_REFERENCE_MS):
                raise ValueError(f"{k}: {v!r} ms is not a plausible forward (between {MIN_REFERENCE_MS} and "
                                 f"{MAX_REFERENCE_MS:.0f} ms; are the units milliseconds?)")
        return {k: float(references[k]) for k in REFERENCE_KEYS if k in references}

    @model_validator(mode="after")
    def _spread_needs_its_version(self) -> HostProfile:
        if self.forward_spread is not None and self.schema_version < SPREAD_SCHEMA_VERSION:
            raise ValueError(f"forward_spread: given in a profile of schema_version {self.schema_version}; it is a "
                             f"version {SPREAD_SCHEMA_VERSION} field (a reader of version {self.schema_version} "
                             "could not read this profile): set schema_version to 3")
        return self

    @property
    def times_gpu_launches(self) -> bool | None:
        """Whether the costs are a host issuing a GPU's kernels (True), not a CPU computing its own
        operators (False): probed beside a GPU, or estimated from such a profile. An estimate's
        ``gpu`` is None either way, so the measured profile it was scaled from (``estimated_from``,
        always a measured one: ``estimate_profile``) says which by its id (``make_id``: a CPU's
        start 'cpu-', a GPU host's with its GPU's slug). None: unknown, an estimate naming none."""
        if self.label == "estimated":
            return None if self.estimated_from is None else not self.estimated_from.startswith("cpu-")
        return self.gpu is not None

    def cost(self, kind: str) -> float:
        return self.costs_us[kind]

    def costs(self) -> list[float]:
        """The costs in ``HOST_KINDS`` order."""
        return [self.costs_us[k] for k in HOST_KINDS]

    def summary(self) -> str:
        """One line naming the profile: what every eager prediction says it used."""
        return f"{self.id} ({self.label}; {self.cpu_model}, {self.cpu_cores} cores)"


class HostProfileError(ValueError):
    """A profile breaks the contract; the message names the field."""


def parse_profile(data: Any) -> HostProfile:
    """A profile from JSON data; a ``HostProfileError`` naming the field where it is invalid
    (an unknown schema version is named as such, before any other field)."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(data, dict) and (isinstance(version, bool) or version not in (None, *READABLE_SCHEMA_VERSIONS)):
        newer = (isinstance(version, int) and not isinstance(version, bool)
                 and version > max(READABLE_SCHEMA_VERSIONS))
        fix = "written by a newer latpred: upgrade this one to read it" if newer else "probe again with this latpred"
        raise HostProfileError(f"schema_version: {version!r} is not a host profile version this latpred reads "
                               f"({', '.join(map(str, READABLE_SCHEMA_VERSIONS))}); {fix}")
    try:
        return HostProfile.model_validate(data)
    except ValidationError as exc:
        raise HostProfileError(validation_message(exc)) from None


def load_profile(path: Path) -> HostProfile:
    """A profile from a JSON file; errors name the file and the field."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HostProfileError(f"{path}: not a readable JSON host profile ({exc})") from None
    except RecursionError:  # (json nests as deep as the file does, until the stack runs out)
        raise HostProfileError(f"{path}: not a readable JSON host profile (nested too deeply)") from None
    try:
        return parse_profile(data)
    except HostProfileError as exc:
        raise HostProfileError(f"{path}: {exc}") from None


def profile_version(fields: Mapping[str, Any]) -> int:
    """The lowest schema version that holds ``fields``: 3 with a ``forward_spread``, else 2."""
    return SPREAD_SCHEMA_VERSION if fields.get("forward_spread") is not None else 2


def make_id(fields: dict[str, Any], prefix: str = "h") -> str:
    """A short id for a new profile: a prefix (the GPU's slug, or 'cpu') and ten hex digits of
    the hash of its fields (costs and timestamp included, so two probes never share one)."""
    slug = re.sub(r"[^a-z0-9]+", "-", prefix.lower()).strip("-")[:40] or "h"
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{slug}-{digest}"


def estimate_profile(reference: HostProfile, cpu_score_ns: float, **fields: Any) -> HostProfile:
    """A profile for a host without a GPU probe: ``reference``'s costs scaled by this CPU's
    single-thread time against the reference's (``cpu_score_ns``, lower is faster).

    Dispatch is single-threaded CPU work (Python, the dispatcher, the driver's launch path), so
    it follows single-thread speed; what the ratio cannot see (the driver, the PCIe link, the
    GPU's launch queue) is why an estimated profile carries wider intervals."""
    if reference.cpu_score_ns is None:
        raise HostProfileError(f"profile {reference.id} has no cpu_score_ns: it cannot be scaled to another CPU")
    ratio = cpu_score_ns / reference.cpu_score_ns
    # an estimate of an estimate names the measured profile at its root: what it times (a GPU's
    # launches or a CPU's operators, HostProfile.times_gpu_launches) is that profile's
    root = reference.estimated_from if reference.label == "estimated" and reference.estimated_from else reference.id
    body = {"schema_version": 2, "label": "estimated",  # (no spread: an estimate never saw the host run)
            "costs_us": {k: v * ratio for k, v in reference.costs_us.items()}, "cpu_score_ns": cpu_score_ns,
            "estimated_from": root, "gpu": None, **fields}
    body["id"] = make_id(body, "cpu")
    return parse_profile(body)


def mean_costs(costs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per kind, the geometric mean of several measurements of one host's costs: a host that is
    1.5x slower for a while weighs as much as one 1.5x faster."""
    return {k: math.exp(math.fsum(math.log(c[k]) for c in costs) / len(costs)) for k in HOST_KINDS}


def mean_references(measured: Sequence[Mapping[str, float] | None]) -> dict[str, float] | None:
    """Per reference forward, the geometric mean of the measurements that timed it (None where
    none did)."""
    present = [m for m in measured if m]
    keys = [k for k in REFERENCE_KEYS if any(k in m for m in present)]
    if not keys:
        return None
    return {k: math.exp(math.fsum(math.log(m[k]) for m in present if k in m) / sum(k in m for m in present))
            for k in keys}


def mean_spread(spreads: Sequence[float | None]) -> float | None:
    """The geometric mean of the spreads measured (None where none was)."""
    present = [s for s in spreads if s is not None]
    return math.exp(math.fsum(map(math.log, present)) / len(present)) if present else None


def mean_cpu_score(before: HostProfile, after: HostProfile) -> float | None:
    """The CPU score of a run probed before and after: the geometric mean of the two (the
    probe before's where the one after has none)."""
    if before.cpu_score_ns and after.cpu_score_ns:
        return math.sqrt(before.cpu_score_ns * after.cpu_score_ns)
    return before.cpu_score_ns


def mean_profile(before: HostProfile, after: HostProfile) -> HostProfile:
    """The profile of a run probed before and after: the geometric mean of the two, cost by
    cost. A host drifts while it works: on the second H200 machine the probe after 157 s of eager
    rounds cost 1.44x the one before, and the runs between were 1.25x the first machine's, whose
    probes agreed within 5%; the mean of the pair was 1.30x."""
    return before.model_copy(update={
        "id": f"{before.id}_{after.id.rsplit('-', 1)[-1]}"[:64],
        "schema_version": max(before.schema_version, after.schema_version,
                              profile_version({"forward_spread": mean_spread([before.forward_spread,
                                                                              after.forward_spread])})),
        "costs_us": mean_costs([before.costs_us, after.costs_us]), "cpu_score_ns": mean_cpu_score(before, after),
        "reference_ms": mean_references([before.reference_ms, after.reference_ms]), "probe_seconds": None,
        "forward_spread": mean_spread([before.forward_spread, after.forward_spread]),
        "note": (f"{before.note + ': ' if before.note else ''}geometric mean of probes {before.id} "
                 f"and {after.id}")[:500]})


class HostConflictError(ValueError):
    """A profile with this id is stored and differs: stored profiles are never overwritten."""


class UnknownHostError(KeyError):
    """No profile with this id is stored."""

    def __str__(self) -> str:  # KeyError quotes its message
        return str(self.args[0]) if self.args else "unknown host profile"


class HostStore:
    """Profiles on disk, one ``<id>.json`` each. ``put`` stores a new id, accepts the same
    profile again, and refuses a different profile under a stored id (``HostConflictError``):
    a dataset's rows and the predictions made for a host name profiles by id, so an id must keep
    meaning one profile."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, host_id: str) -> Path:
        if not re.match(ID_PATTERN, host_id):
            raise UnknownHostError(f"{host_id!r} is not a host profile id (letters, digits, '.', '_', '-'; "
                                   "at most 64)")
        return self.directory / f"{host_id}.json"

    def get(self, host_id: str) -> HostProfile:
        path = self.path(host_id)
        if not path.exists():
            raise UnknownHostError(f"no host profile {host_id!r} is stored (known: "
                                   f"{', '.join(self.ids()[:10]) or 'none'})")
        profile = load_profile(path)
        if profile.id != host_id:  # a copy renamed by hand: two files could then claim one id
            raise HostProfileError(f"{path}: holds the profile {profile.id!r}; a stored profile's file is named "
                                   f"by its id ({profile.id}.json)")
        return profile

    def ids(self) -> list[str]:
        """The stored profiles' ids: the names of the folder's files that are ids (a stray file,
        as 'my profile.json' or a '._x.json' another system left, is no profile: ``all`` names it)."""
        if not self.directory.exists():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json") if re.match(ID_PATTERN, p.stem))

    def all(self) -> list[HostProfile]:
        """Every stored profile; a file named otherwise than an id is refused naming it, not
        skipped (a dataset's hosts/ folder is read whole: a profile left out changes its scores)."""
        paths = sorted(self.directory.glob("*.json")) if self.directory.exists() else []
        for path in paths:
            if not re.match(ID_PATTERN, path.stem):
                raise HostProfileError(f"{path}: not a host profile's file name (a profile's id, then .json; "
                                       "letters, digits, '.', '_', '-', at most 64)")
        return [self.get(path.stem) for path in paths]

    def put(self, profile: HostProfile) -> bool:
        """Store ``profile``; True if it was new, False if the same profile was already stored."""
        path = self.path(profile.id)
        text = json.dumps(profile.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
        if path.exists():
            if load_profile(path) == profile:
                return False
            raise HostConflictError(f"a different host profile is already stored as {profile.id!r}: stored "
                                    "profiles are never overwritten; give this one another id")
        self.directory.mkdir(parents=True, exist_ok=True)
        # A temporary file of this writer's own (a service's threads share a process id: with a
        # name of the pid alone, one thread truncated the file another was linking, and a stored
        # profile came out torn), written whole before it is linked in under the profile's name.
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=self.directory)
        temporary = Path(name)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fchmod(f.fileno(), 0o644)  # as a plain write makes it (mkstemp's 0600 would lock others out)
                os.fsync(f.fileno())
            os.link(temporary, path)  # fails if another writer stored this id first: no overwrite
        except FileExistsError:
            if load_profile(path) != profile:
                raise HostConflictError(f"a different host profile was stored as {profile.id!r} meanwhile") from None
            return False
        finally:
            temporary.unlink(missing_ok=True)
        return True


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of a host profile, from the model that validates one."""
    schema = HostProfile.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "latpred host profile",
            **{k: v for k, v in schema.items() if k != "title"}}


SCHEMA_FILE = Path(__file__).parent / "host_profile.schema.json"

if __name__ == "__main__":
    SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=1) + "\n")
    print(f"wrote {SCHEMA_FILE}")
