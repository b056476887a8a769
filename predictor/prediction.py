"""What a prediction answers: the contract the CLI prints, the service returns and its OpenAPI
document describes (the service's schema is generated from these types, not written again)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict


@dataclass
class LayerPrediction:
    """One node's share of the latency, in microseconds: its kernel time inside the model with
    an interval, and the host's time to issue it (eager; zero in a CUDA graph, whose replay
    issues no call)."""

    name: str
    op: str
    kind: str
    family: str | None
    kernel_us: float
    low_us: float
    high_us: float
    host_us: float
    merged: Annotated[list[str], Field(description="source nodes kernel detection merged into this one "
                                                   "(e.g. ONNX's MatMul/Softmax/MatMul)")] = field(default_factory=list)


class UnsupportedOp(TypedDict):
    """An operator no learned model covers: costed by the roofline on the bytes it moves."""

    op: str
    count: int
    costed_as: str


@dataclass
class Prediction:
    """A whole-model prediction, the inputs that produced it and what it could not model."""

    model: Annotated[str, Field(description="the graph's name")]
    device: str
    batch: int
    precision: str
    mode: str
    total_ms: float
    low_ms: Annotated[float, Field(description="lower end of the ~90% interval")]
    high_ms: Annotated[float, Field(description="upper end of the ~90% interval")]
    model_version: Annotated[str, Field(description="version of the model bundle that predicted it")]
    host: Annotated[str | None, Field(description="the host profile an eager prediction is for: id, whether "
                                                  "measured or estimated, CPU (none for a CUDA graph, which "
                                                  "no host issues kernel by kernel)")] = None
    provenance: Annotated[str, Field(description=(
        "'measured': the models were fitted on this device's own runs; 'transferred': the device was never "
        "measured, and the transfer model predicts it from its datasheet (a wider interval)"))] = "measured"
    layers: Annotated[list[LayerPrediction], Field(
        description="per-layer breakdown (absent when the request asked for none)")] = field(default_factory=list)
    unsupported: Annotated[list[UnsupportedOp], Field(
        description="operators no model covers, costed by the roofline")] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self, with_layers: bool = True) -> dict[str, Any]:
        """The prediction as JSON-ready data. Layers are shallow copies: ``dataclasses.asdict``
        deep-copies hundreds of layers, milliseconds a graph, which a batch of thousands (the
        service's NAS endpoint) cannot afford."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "layers"}
        if with_layers:
            data["layers"] = [dict(vars(layer)) for layer in self.layers]
        return data
