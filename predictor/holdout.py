"""Models kept out of every measured zoo and every fit.

An independent accuracy check predicts these and compares with its own measurements, so their
whole-model runs must never be collected by our zoo, nor their layers drawn into the shape
distribution that operator sweeps sample from. They may still be offered later as named graphs.
"""

HELD_OUT_MODELS: frozenset[str] = frozenset({
    "resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_large",
    "efficientnet_b0", "mnasnet1_0", "convnext_tiny", "regnet_y_800mf", "densenet121",
    "squeezenet1_1", "shufflenet_v2_x1_0", "vit_b_16", "swin_t", "bert-base", "gpt2",
})


def check_not_held_out(name: str) -> None:
    """Refuse to measure or fit a held-out model, saying why."""
    if name.lower().replace("_", "-") in {m.replace("_", "-") for m in HELD_OUT_MODELS}:
        raise ValueError(
            f"{name} is held out for the independent accuracy check: it may not be measured "
            "into the zoo or used in fitting"
        )
