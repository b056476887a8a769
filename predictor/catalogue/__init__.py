"""The operator catalogue: families, their parameters, FLOPs and bytes formulas."""

from predictor.catalogue import families as _families  # noqa: F401  (registers the families)
from predictor.catalogue.family import (
    FAMILIES,
    PARAMETERS,
    OpFamily,
    bytes_moved,
    flops,
    get_family,
    weight_bytes,
)

__all__ = ["FAMILIES", "PARAMETERS", "OpFamily", "bytes_moved", "flops", "get_family", "weight_bytes"]
