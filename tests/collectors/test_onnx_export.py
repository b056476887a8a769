"""as_trained: the constants an untrained model's initialization leaves get varied values before export."""

from __future__ import annotations

import torch

from collectors.onnx_export import as_trained


def _untrained() -> tuple[torch.nn.Sequential, torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.Linear]:
    conv = torch.nn.Conv2d(3, 8, 3)
    torch.nn.init.zeros_(conv.bias)  # as torchvision's SqueezeNet and VGG initialize theirs
    linear = torch.nn.Linear(8, 4)
    torch.nn.init.zeros_(linear.bias)
    norm = torch.nn.BatchNorm2d(8)
    model = torch.nn.Sequential(conv, norm, torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), linear)
    return model.eval(), conv, norm, linear


def test_every_constant_tensor_varies_afterwards_and_the_others_are_untouched() -> None:
    model, conv, norm, linear = _untrained()
    weights = conv.weight.detach().clone()
    # conv bias, linear bias, the norm's weight, bias, running mean and running variance
    assert as_trained(model) == 6
    for tensor in (conv.bias, linear.bias, norm.weight, norm.bias, norm.running_mean, norm.running_var):
        assert tensor.unique().numel() == tensor.numel()
    assert torch.equal(conv.weight, weights)
    assert bool((norm.running_var > 0).all()) and 0.5 <= float(norm.weight.min()) <= float(norm.weight.max()) <= 1.5
    assert float(conv.bias.abs().max()) < 0.2  # a trained bias's order, not a weight's
    assert norm.num_batches_tracked.dtype == torch.long  # integers are not values initialization chose
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 4)
    assert as_trained(model) == 0  # nothing is left constant


def test_it_is_the_same_for_the_same_seed() -> None:
    (first, conv_1, norm_1, _), (second, conv_2, norm_2, _) = _untrained(), _untrained()
    as_trained(first, seed=3)
    as_trained(second, seed=3)
    assert torch.equal(conv_1.bias, conv_2.bias) and torch.equal(norm_1.running_var, norm_2.running_var)


def test_a_one_element_zero_bias_gets_a_value_and_a_scalar_buffer_is_left_alone() -> None:
    head = torch.nn.Linear(4, 1)
    torch.nn.init.zeros_(head.bias)
    head.register_buffer("scale", torch.tensor(-1e4))  # a constant the model reads, as GPT-2's masked_bias
    assert as_trained(head) == 1
    assert float(head.bias) != 0.0 and float(head.scale) == -1e4
