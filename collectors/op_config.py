"""One operator configuration to measure, with a stable id that makes sweeps resumable."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OpConfig:
    """Family, parameters (per sample), variant, layout, precision and batch of one measurement.

    ``source`` says where the shape came from ("model:<name>", "perturbed:<name>", "grid") and
    is not part of the id: the same configuration drawn twice is measured once.
    """

    family: str
    params: tuple[tuple[str, int], ...]
    variant: str
    layout: str
    precision: str
    batch: int
    source: str = ""

    @staticmethod
    def make(family: str, params: Mapping[str, int], variant: str = "", layout: str = "contiguous",
             precision: str = "fp32", batch: int = 1, source: str = "") -> OpConfig:
        """Build a config with parameters in canonical (sorted) order."""
        return OpConfig(family, tuple(sorted((k, int(v)) for k, v in params.items())), variant,
                        layout, precision, int(batch), source)

    @property
    def param_dict(self) -> dict[str, int]:
        """The parameters by name, as the catalogue's formulas and the builders take them."""
        return dict(self.params)

    @property
    def config_id(self) -> str:
        """Hash of everything that defines the measurement (not of where the shape came from)."""
        key = json.dumps([self.family, self.params, self.variant, self.layout, self.precision,
                          self.batch], separators=(",", ":"))
        return hashlib.sha256(key.encode()).hexdigest()[:20]
