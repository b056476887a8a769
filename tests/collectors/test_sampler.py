"""Sampling sweep configurations from the committed layer-shape catalogue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.layer_shapes import Shape, load_shapes
from collectors.op_config import OpConfig
from collectors.sampler import BATCHES, SamplerSettings, sample_configs
from predictor.catalogue import bytes_moved, flops, get_family
from predictor.holdout import HELD_OUT_MODELS
from predictor.precision import PRECISIONS

SHAPES_FILE = Path(__file__).resolve().parents[2] / "datasets" / "layer_shapes.json"


def normalized(name: str) -> str:
    return name.lower().replace("_", "-")


@pytest.fixture(scope="module")
def shapes() -> list[Shape]:
    return load_shapes(SHAPES_FILE)


@pytest.fixture(scope="module")
def configs(shapes: list[Shape]) -> list[OpConfig]:
    return sample_configs(shapes, SamplerSettings(seed=0, target_configs=2000))


def test_same_seed_same_configs(shapes: list[Shape], configs: list[OpConfig]) -> None:
    assert len(configs) == 2000
    again = sample_configs(shapes, SamplerSettings(seed=0, target_configs=2000))
    assert again == configs


def test_other_seed_other_configs(shapes: list[Shape], configs: list[OpConfig]) -> None:
    other = sample_configs(shapes, SamplerSettings(seed=1, target_configs=2000))
    assert [c.config_id for c in other] != [c.config_id for c in configs]


def test_ids_are_unique(configs: list[OpConfig]) -> None:
    assert len({c.config_id for c in configs}) == len(configs)


def test_every_config_is_valid(configs: list[OpConfig]) -> None:
    for c in configs:
        get_family(c.family).check(c.param_dict, c.variant, c.layout)
        assert c.precision in PRECISIONS and c.batch in BATCHES


def test_precisions_batches_and_sources_all_appear(configs: list[OpConfig]) -> None:
    assert {c.precision for c in configs} == set(PRECISIONS)
    assert {c.batch for c in configs} == set(BATCHES)
    assert {c.source.split(":")[0] for c in configs} == {"model", "perturbed", "random"}


def test_conv_configs_have_both_layouts(configs: list[OpConfig]) -> None:
    assert {c.layout for c in configs if c.family == "conv2d"} == {"nchw", "nhwc"}


def test_families_are_covered(configs: list[OpConfig]) -> None:
    from predictor.catalogue import FAMILIES

    assert {c.family for c in configs} == set(FAMILIES)


def test_caps_are_respected(shapes: list[Shape]) -> None:
    settings = SamplerSettings(seed=0, target_configs=2000, max_bytes=2e7, max_flops=1e9)
    capped = sample_configs(shapes, settings)
    assert len(capped) == 2000
    for c in capped:
        assert bytes_moved(c.family, c.param_dict, c.variant, c.batch, 4) <= settings.max_bytes
        assert flops(c.family, c.param_dict, c.variant, c.batch) <= settings.max_flops


def test_a_floor_on_arithmetic_keeps_only_larger_calls(shapes: list[Shape]) -> None:
    """What extends an earlier sweep to the calls it capped away: every call at least min_flops."""
    settings = SamplerSettings(seed=0, target_configs=500, families=("linear", "conv2d"), precisions=("fp32",),
                               min_flops=2e9, max_flops=5e10)
    large = sample_configs(shapes, settings)
    assert len(large) == 500 and {c.family for c in large} == {"linear", "conv2d"}
    for c in large:
        assert 2e9 <= flops(c.family, c.param_dict, c.variant, c.batch) <= 5e10


def test_family_and_precision_filters(shapes: list[Shape]) -> None:
    settings = SamplerSettings(seed=0, target_configs=300, families=("softmax", "mean"),
                               precisions=("fp16",), max_bytes=2e6, max_flops=1e8)
    picked = sample_configs(shapes, settings)
    assert len(picked) == 300
    assert {c.family for c in picked} == {"softmax", "mean"}
    assert {c.precision for c in picked} == {"fp16"}


def test_no_held_out_model_in_the_shapes(shapes: list[Shape], configs: list[OpConfig]) -> None:
    held_out = {normalized(m) for m in HELD_OUT_MODELS}
    meta = json.loads(SHAPES_FILE.read_text())["meta"]
    assert len(meta["models"]) >= 20
    assert not held_out & {normalized(m) for m in meta["models"]}
    sources = {normalized(m) for s in shapes for m in s.get("sources", {})}
    assert sources and not held_out & sources
    drawn = {normalized(c.source.split(":", 1)[1]) for c in configs if ":" in c.source}
    assert drawn and not held_out & drawn


def test_a_shape_with_a_layout_is_measured_in_that_layout_only() -> None:
    conv = {"family": "conv2d", "variant": "", "sources": {"nas-1002": 1},
            "params": dict(c_in=64, c_out=64, h=28, w=28, kernel=7, stride=1, groups=64)}
    settings = SamplerSettings(seed=0, target_configs=10_000, random_shapes_per_family=0, families=("conv2d",))
    anywhere = sample_configs([conv], settings)
    channels_last = sample_configs([{**conv, "layout": "nhwc"}], settings)
    assert {c.layout for c in anywhere} == {"nchw", "nhwc"}
    assert {c.layout for c in channels_last} == {"nhwc"}  # its perturbation too
    assert {c.source.split(":")[0] for c in channels_last} == {"model", "perturbed"}
    assert sample_configs([{**conv, "layout": "nhwc"}], SamplerSettings(
        seed=0, random_shapes_per_family=0, families=("conv2d",), layouts=("nchw",))) == []
