"""FLOPs of a training step per layer and phase: every op credited once, the backward to the layer it
differentiates (FlopCounterMode's module view credits a downsample branch with the main branch's)."""
from __future__ import annotations

import pytest
import torch
import torchvision

from benchlib.nets.counters import count_forward, count_train_per_sample, counting_copy, random_input
from benchlib.nets.layer_work import UNATTRIBUTED, count_layer_flops


@pytest.fixture(scope="module")
def resnet18_counts():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x = random_input(4, 32)
    per_layer = count_layer_flops(model, x, 10)
    train_per_sample, _ = count_train_per_sample(counting_copy(model), x, 10)
    forward = count_forward(counting_copy(model).eval(), x)
    return per_layer, train_per_sample * 4, forward


def test_the_layers_and_the_rest_sum_to_the_counted_step(resnet18_counts):
    per_layer, train_total, _ = resnet18_counts
    assert sum(per_layer.values()) == pytest.approx(train_total, rel=1e-9)
    leaves = sum(v for (layer, _), v in per_layer.items() if layer != UNATTRIBUTED)
    assert 0.99 * train_total <= leaves <= train_total, "the leaves hold nearly all, never more than all"


def test_forward_per_layer_is_the_forward_count(resnet18_counts):
    per_layer, _, forward = resnet18_counts
    for name, flops in forward.flops_by_module.items():
        if (name, "forward") in per_layer:
            assert per_layer[(name, "forward")] == flops, name


def test_each_convolution_s_backward_is_its_own_formula(resnet18_counts):
    per_layer, _, _ = resnet18_counts
    # the first convolution's input needs no gradient: its backward is the weight gradient alone
    assert per_layer[("conv1", "backward")] == per_layer[("conv1", "forward")]
    # every other convolution computes its input and weight gradients: twice its forward
    for name in ("layer1.0.conv1", "layer2.0.conv2", "layer2.0.downsample.0", "layer4.1.conv2"):
        assert per_layer[(name, "backward")] == 2 * per_layer[(name, "forward")], name
    assert per_layer[("fc", "backward")] == 2 * per_layer[("fc", "forward")]
