"""How a serving host's batch times move together: its drift, a slow wander of its speed.

The simulator drew each batch's time on its own (a lognormal around its size's median). Measured
Triton says otherwise: on every H100 host of ``datasets/nvidia-h100-80gb-hbm3/serving-triton*``
a batch's time over its size's median (in spreads of that size) correlates with the batches' around
it, about 0.5 for batches 2-5 ms apart (0.47-0.76 by host), 0.3 at 20-50 ms, 0.15 at 100-200 ms
and none past half a second (``benchmarks/results/service_drift.txt``). A slow stretch of the host
slows every batch in it, so requests queue behind a run of slow batches where independent draws
would have spread the same slowness over the whole run: drawn independently, the simulator's p99
sat below the measured one in most loads (over the first six sets the measured p99 ranked above
90% of short simulated runs in 81 of 146 loads).

A :class:`ServiceDrift` describes that correlation as a few components, each a share of a batch
time's log variance that persists with its own correlation time; what the shares leave is drawn
fresh for each batch. Each component is an Ornstein-Uhlenbeck process of unit variance in
wall-clock time, so the correlation of two batches ``dt`` apart is ``sum(share * exp(-dt / time))``,
and every batch's own spread (its lognormal sigma) is what it was without drift: drift moves the
slow batches together, it adds no slowness. One process per host: every instance of the server
reads the same drift at a batch's start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: more components than this describe noise, not a host
MAX_COMPONENTS = 4
#: a correlation time over this (ms) is no drift within a plan's run but a host of another speed
MAX_TIME_MS = 60_000.0
#: normals drawn per numpy call (one call per batch is slow)
_BLOCK = 4096


@dataclass(frozen=True)
class DriftComponent:
    """A share of a batch time's log variance that persists for about ``time_ms`` (the e-folding
    time of its correlation)."""

    share: float
    time_ms: float


def _number(value: Any, name: str, low: float, high: float, low_open: bool = False) -> float:
    """``value`` as a float in [low, high] ((low, high] with ``low_open``), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not (low < value if low_open else low <= value) or value > high:
        interval = f"({low:g}, {high:g}]" if low_open else f"[{low:g}, {high:g}]"
        raise ValueError(f"{name}: must be a number in {interval}, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class ServiceDrift:
    """The persistent part of a host's batch-time spread: ``components`` whose shares of the log
    variance sum to at most 1 (the rest is drawn anew for every batch)."""

    components: tuple[DriftComponent, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.components, tuple | list):
            raise ValueError(f"components: must be a sequence of DriftComponent, not {self.components!r}")
        components = tuple(self.components)
        if not all(isinstance(c, DriftComponent) for c in components):
            raise ValueError("components: each must be a DriftComponent")
        if len(components) > MAX_COMPONENTS:
            raise ValueError(f"components: at most {MAX_COMPONENTS}, not {len(components)}")
        for i, c in enumerate(components):
            _number(c.share, f"components[{i}].share", 0.0, 1.0)
            _number(c.time_ms, f"components[{i}].time_ms", 0.0, MAX_TIME_MS, low_open=True)
        if self.persistent_share > 1 + 1e-9:
            raise ValueError(f"components: their shares sum to {self.persistent_share:.4g}; a share of the "
                             "log variance cannot exceed 1 in all")
        object.__setattr__(self, "components", components)

    @property
    def persistent_share(self) -> float:
        """The share of a batch time's log variance that persists past the batch."""
        return float(sum(c.share for c in self.components))

    def correlation(self, lag_ms: float) -> float:
        """The correlation of two batches' log times ``lag_ms`` apart, either way (both of sizes whose
        medians they are measured against)."""
        return float(sum(c.share * math.exp(-abs(lag_ms) / c.time_ms) for c in self.components))

    def in_words(self) -> str:
        """"31% for 20 ms + 31% for 200 ms" (each component's share and time), or "none": how every
        command and benchmark names a drift."""
        return " + ".join(f"{c.share:.0%} for {c.time_ms:g} ms" for c in self.components) or "none"

    def normals(self, rng: np.random.Generator) -> DriftNormals:
        """One run's standard normals in time, drawn from ``rng``."""
        return DriftNormals(self, rng)

    def to_dict(self) -> list[dict[str, float]]:
        return [{"share": c.share, "time_ms": c.time_ms} for c in self.components]

    @classmethod
    def from_dict(cls, data: Any, prefix: str = "drift") -> ServiceDrift:
        """A drift from its stored form (a list of {share, time_ms}), or a ValueError naming the field."""
        if not isinstance(data, list):
            raise ValueError(f"{prefix}: must be a list of {{share, time_ms}} objects, not {data!r}")
        components = []
        for i, item in enumerate(data):
            if not isinstance(item, Mapping) or set(item) != {"share", "time_ms"}:
                raise ValueError(f"{prefix}[{i}]: must be an object with share and time_ms, not {item!r}")
            components.append(DriftComponent(_number(item["share"], f"{prefix}[{i}].share", 0.0, 1.0),
                                             _number(item["time_ms"], f"{prefix}[{i}].time_ms", 0.0, MAX_TIME_MS,
                                                     low_open=True)))
        try:
            return cls(tuple(components))
        except ValueError as exc:
            raise ValueError(f"{prefix}.{exc}") from None


class DriftNormals:
    """Standard normals for batches starting at given times, correlated as ``ServiceDrift`` says.

    Each component advances as an Ornstein-Uhlenbeck process from the last time asked to the next
    (a time before the last, as another instance's batch may start, reads the last state); the
    independent rest is a fresh normal per batch."""

    def __init__(self, drift: ServiceDrift, rng: np.random.Generator) -> None:
        self._shares = [math.sqrt(c.share) for c in drift.components]
        self._times_s = [c.time_ms * 1e-3 for c in drift.components]
        self._fresh = math.sqrt(max(0.0, 1.0 - drift.persistent_share))
        self._rng = rng
        self._pool: list[float] = []
        self._states: list[float] | None = None
        self._last_s = 0.0

    def _normal(self) -> float:
        if not self._pool:
            self._pool = rng_block(self._rng)
        return self._pool.pop()

    def at(self, t_s: float) -> float:
        """The normal of a batch starting at ``t_s`` seconds."""
        if self._states is None:
            self._states = [self._normal() for _ in self._shares]
            self._last_s = t_s
        elif t_s > self._last_s:
            dt = t_s - self._last_s
            for k, time_s in enumerate(self._times_s):
                keep = math.exp(-dt / time_s)
                self._states[k] = self._states[k] * keep + math.sqrt(1.0 - keep * keep) * self._normal()
            self._last_s = t_s
        persistent = sum(w * u for w, u in zip(self._shares, self._states))
        return persistent + self._fresh * self._normal()


def rng_block(rng: np.random.Generator) -> list[float]:
    """A block of standard normals as floats (one numpy call for many draws)."""
    return rng.standard_normal(_BLOCK).tolist()


__all__: Sequence[str] = ["MAX_COMPONENTS", "MAX_TIME_MS", "DriftComponent", "DriftNormals", "ServiceDrift"]
