"""The measured zoo's torch modules: real models whose whole-model runs are the ground truth for
composition. (``predictor.zoo`` holds the graphs traced from them, which need no torch.)

torchvision CNNs and vision transformers, and transformers encoders and decoders built from
configs (no weights: latency does not depend on their values). Text models are base models
(no LM head) fed 128 tokens. None of ``predictor.holdout.HELD_OUT_MODELS`` may appear here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from predictor.holdout import check_not_held_out

TEXT_SEQUENCE = 128


@dataclass(frozen=True)
class ZooModel:
    """A model of the zoo: how to build it and what one input looks like."""

    name: str
    kind: str  # "vision" or "text"
    build: Callable[[], Any]
    image_size: int = 224
    vocab: int = 0

    def example_input(self, batch: int, device: Any, dtype: Any) -> Any:
        """A random input batch: an image tensor, or token ids for text models."""
        import torch

        if self.kind == "vision":
            return torch.randn(batch, 3, self.image_size, self.image_size, device=device, dtype=dtype)
        return torch.randint(0, self.vocab, (batch, TEXT_SEQUENCE), device=device)


def _vision(name: str, image_size: int = 224) -> ZooModel:
    def build() -> Any:
        import torchvision

        kwargs = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
        return torchvision.models.get_model(name, weights=None, **kwargs)

    return ZooModel(name, "vision", build, image_size=image_size)


def _text(name: str, config_class: str, model_class: str = "AutoModel", **config: Any) -> ZooModel:
    def build() -> Any:
        import transformers

        cfg = getattr(transformers, config_class)(**config)
        cls = getattr(transformers, model_class)
        return cls.from_config(cfg, attn_implementation="sdpa") if model_class == "AutoModel" \
            else cls(cfg)

    return ZooModel(name, "text", build, vocab=config.get("vocab_size", 30522))


VISION = [
    _vision("resnet34"), _vision("resnet101"), _vision("wide_resnet50_2"),
    _vision("resnext101_32x8d"), _vision("vgg11_bn"), _vision("alexnet"), _vision("googlenet"),
    _vision("inception_v3", 299), _vision("mobilenet_v3_small"), _vision("efficientnet_b2", 288),
    _vision("efficientnet_v2_s", 384), _vision("mnasnet0_5"), _vision("regnet_x_400mf"),
    _vision("regnet_y_1_6gf"), _vision("densenet169"), _vision("squeezenet1_0"),
    _vision("shufflenet_v2_x0_5"), _vision("convnext_small"), _vision("vit_b_32"),
    _vision("swin_s"),
]

TEXT = [
    _text("distilbert-base", "DistilBertConfig"),
    _text("electra-small", "ElectraConfig", embedding_size=128, hidden_size=256,
          num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024),
    _text("roberta-large", "RobertaConfig", hidden_size=1024, num_hidden_layers=24,
          num_attention_heads=16, intermediate_size=4096, vocab_size=50265),
    _text("opt-125m", "OPTConfig", vocab_size=50272),
    _text("llama-300m", "LlamaConfig", vocab_size=32000, hidden_size=1024, intermediate_size=2816,
          num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4),
    _text("qwen2-0.5b", "Qwen2Config", vocab_size=151936, hidden_size=896, intermediate_size=4864,
          num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
    _text("t5-small-encoder", "T5Config", "T5EncoderModel", vocab_size=32128),
]

ZOO: dict[str, ZooModel] = {}
for _model in VISION + TEXT:
    check_not_held_out(_model.name)
    ZOO[_model.name] = _model


def get_zoo_model(name: str) -> ZooModel:
    """A zoo model by name, with an error that lists the zoo."""
    try:
        return ZOO[name]
    except KeyError:
        raise ValueError(f"{name!r} is not in the measured zoo: expected one of {', '.join(ZOO)}") from None


#: Held-out models may be offered as named graphs (shapes only, never measured by us).
HELD_OUT_GRAPH_MODELS: dict[str, ZooModel] = {m.name: m for m in [
    _vision("resnet18"), _vision("resnet50"), _vision("resnext50_32x4d"), _vision("mobilenet_v2"),
    _vision("mobilenet_v3_large"), _vision("efficientnet_b0"), _vision("mnasnet1_0"),
    _vision("convnext_tiny"), _vision("regnet_y_800mf"), _vision("densenet121"),
    _vision("squeezenet1_1"), _vision("shufflenet_v2_x1_0"), _vision("vit_b_16"), _vision("swin_t"),
    _text("bert-base", "BertConfig"),
    _text("gpt2", "GPT2Config", vocab_size=50257),
]}
