"""The operator family: one definition of an operator's parameters and cost formulas.

Every part of latpred (the collector that measures an operator, the features that describe it,
the importers that recognise it, the API that reports it) names operators by family and reads
their parameters from the one ``OpFamily`` registered here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: The shared parameter vocabulary. Each is an integer, given *per sample*: the batch size is
#: never a parameter, so one shape can be measured at every batch size.
PARAMETERS: dict[str, str] = {
    "c_in": "input channels (conv)",
    "c_out": "output channels (conv)",
    "h": "input height",
    "w": "input width",
    "kernel": "square kernel size (conv, pool)",
    "stride": "stride (conv, pool)",
    "groups": "groups (conv: 1 dense, c_in depthwise; group norm: number of groups)",
    "tokens": "rows per sample (linear, layer norm, embedding)",
    "k": "reduction size (linear, matmul)",
    "n": "output columns (linear, matmul)",
    "m": "rows of the left operand (matmul)",
    "heads": "independent matrices or attention heads per sample (matmul, sdpa)",
    "seq_q": "query length (sdpa)",
    "seq_kv": "key/value length (sdpa)",
    "head_dim": "head size (sdpa)",
    "causal": "1 for a causal mask (sdpa)",
    "c": "channels or features (norms, softmax, mean, embedding dim, concat)",
    "rows": "rows per sample (softmax, mean)",
    "elements": "elements per sample (activations, binary elementwise)",
    "vocab": "table size (embedding)",
    "inputs": "number of tensors joined (concat)",
    "d1": "first permuted dimension (transpose)",
    "d2": "second permuted dimension (transpose)",
    "d3": "trailing dimension kept in place (transpose)",
}

Params = Mapping[str, int]
FlopsFormula = Callable[[Params, str, int], float]
BytesFormula = Callable[[Params, str, int, int], float]
WeightsFormula = Callable[[Params, str, int], float]


@dataclass(frozen=True)
class OpFamily:
    """One operator family.

    ``flops(params, variant, batch)`` counts floating-point operations of one call;
    ``bytes_moved(params, variant, batch, element_bytes)`` counts the fewest bytes that call
    must move through device memory (each input read once, each output written once);
    ``weight_bytes(params, variant, element_bytes)`` counts the layer's own parameters among them
    (weights and bias), which a forward reads once each: cold from HBM inside a model, where a
    sweep that replays the layer alone finds them warm in L2.
    """

    name: str
    params: tuple[str, ...]
    flops: FlopsFormula
    bytes_moved: BytesFormula
    description: str
    variants: tuple[str, ...] = ("",)
    layouts: tuple[str, ...] = ("contiguous",)
    validate: Callable[[Params, str], str | None] = field(default=lambda p, v: None)
    weight_bytes: WeightsFormula = field(default=lambda p, v, e: 0.0)

    def check(self, params: Params, variant: str = "", layout: str | None = None) -> None:
        """Raise ``ValueError`` naming the first problem with a configuration of this family."""
        missing = [p for p in self.params if p not in params]
        if missing:
            raise ValueError(f"{self.name}: missing parameter(s) {', '.join(missing)}")
        extra = [p for p in params if p not in self.params]
        if extra:
            raise ValueError(
                f"{self.name}: unknown parameter(s) {', '.join(extra)}; "
                f"expected {', '.join(self.params)}"
            )
        for name in self.params:
            value = params[name]
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{self.name}: parameter {name} must be an integer, got {value!r}")
            if value < 0 or (value == 0 and name != "causal"):
                raise ValueError(f"{self.name}: parameter {name} must be positive, got {value}")
        if variant not in self.variants:
            raise ValueError(
                f"{self.name}: unknown variant {variant!r}; expected one of {self.variants}"
            )
        if layout is not None and layout not in self.layouts:
            raise ValueError(
                f"{self.name}: unknown layout {layout!r}; expected one of {self.layouts}"
            )
        problem = self.validate(params, variant)
        if problem:
            raise ValueError(f"{self.name}: {problem}")


FAMILIES: dict[str, OpFamily] = {}


def register(family: OpFamily) -> OpFamily:
    """Add a family to the registry; every parameter must come from the shared vocabulary."""
    unknown = [p for p in family.params if p not in PARAMETERS]
    if unknown:
        raise ValueError(f"{family.name}: parameters not in the vocabulary: {unknown}")
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name} registered twice")
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> OpFamily:
    """Look a family up by name, with an error that lists the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown operator family {name!r}: expected one of {', '.join(sorted(FAMILIES))}"
        ) from None


def flops(family: str, params: Params, variant: str, batch: int) -> float:
    """Floating-point operations of one call of ``family`` at ``batch``."""
    return float(get_family(family).flops(params, variant, batch))


def bytes_moved(family: str, params: Params, variant: str, batch: int, element_bytes: int) -> float:
    """Fewest bytes one call of ``family`` at ``batch`` moves through device memory."""
    return float(get_family(family).bytes_moved(params, variant, batch, element_bytes))


def weight_bytes(family: str, params: Params, variant: str, element_bytes: int) -> float:
    """Bytes of the parameters (weights and bias) one call of ``family`` reads."""
    return float(get_family(family).weight_bytes(params, variant, element_bytes))
