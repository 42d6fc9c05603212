"""Tests for benchlib.flops: counts against published MACs, FLOP = 2 MAC, training ~3x forward, bytes and intensity."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from benchlib.nets.flops import (
    LAYER_TABLE_COLUMNS,
    PUBLISHED_MACS,
    Complexity,
    complexity,
    complexity_for_run,
    layer_table,
    with_activation_dtype,
)
from benchlib.nets.models import build_model
from benchlib.spec.vocab import MODELS

IMAGENET_SIZE = 224
MACS_TOLERANCE = 0.005  # torchvision rounds its published figures to 2 decimals of a GFLOP
TRAIN_PER_FORWARD_RANGE = (2.5, 3.5)
SWEEP_IMAGE_SIZE = 32  # batch sweeps at CIFAR size keep the suite fast; the amortization logic is the same


@pytest.fixture(scope="module")
def imagenet() -> dict[str, Complexity]:
    """Every model at 224x224, 1000 classes, batch 1: counted once for the whole module."""
    return {name: complexity(name, IMAGENET_SIZE) for name in MODELS}


@pytest.fixture(scope="module")
def resnet18_sweep() -> dict[int, Complexity]:
    return {b: complexity("resnet18", SWEEP_IMAGE_SIZE, batch_size=b, num_classes=10) for b in (1, 8, 64)}


def test_published_macs_cover_every_model() -> None:
    assert set(PUBLISHED_MACS) == set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_fvcore_macs_match_published(imagenet: dict[str, Complexity], name: str) -> None:
    got = imagenet[name].macs_per_sample
    assert got == pytest.approx(PUBLISHED_MACS[name], rel=MACS_TOLERANCE)


@pytest.mark.parametrize("name", MODELS)
def test_flops_are_twice_macs_over_the_same_operators(imagenet: dict[str, Complexity], name: str) -> None:
    """Both counters count convolutions and matrix products; everything else is kept apart, not mixed in."""
    c = imagenet[name]
    assert c.flops_per_sample == pytest.approx(2 * c.macs_per_sample, rel=1e-12)
    assert "conv" not in c.non_mac_ops and c.non_mac_ops_per_sample == pytest.approx(sum(c.non_mac_ops.values()))
    assert c.non_mac_ops_per_sample > 0, "pooling (and batch norm where there is one) are counted apart"
    if name != "squeezenet1_1":
        assert c.non_mac_ops["batch_norm"] > 0


@pytest.mark.parametrize("name", MODELS)
def test_training_flops_are_about_three_times_forward(imagenet: dict[str, Complexity], name: str) -> None:
    c = imagenet[name]
    low, high = TRAIN_PER_FORWARD_RANGE
    assert low <= c.train_flops_per_sample / c.flops_per_sample <= high


@pytest.mark.parametrize("name", MODELS)
def test_record_is_consistent(imagenet: dict[str, Complexity], name: str) -> None:
    c = imagenet[name]
    assert (c.model, c.image_size, c.batch_size, c.num_classes, c.dtype) == (name, 224, 1, 1000, "float32")
    assert c.params > 0 and c.model_size_bytes >= 4 * c.params
    assert c.activation_bytes_per_sample > 0
    assert c.bytes_per_sample == pytest.approx(c.model_size_bytes + c.activation_bytes_per_sample)
    assert c.train_bytes_per_sample == pytest.approx(6 * c.model_size_bytes + 3 * c.activation_bytes_per_sample)
    assert c.arithmetic_intensity == pytest.approx(c.flops_per_sample / c.bytes_per_sample)
    assert c.train_arithmetic_intensity == pytest.approx(c.train_flops_per_sample / c.train_bytes_per_sample)


@pytest.mark.parametrize("name", MODELS)
def test_uncounted_ops_are_listed(imagenet: dict[str, Complexity], name: str) -> None:
    uncounted = imagenet[name].uncounted_ops
    assert set(uncounted) == {"fvcore", "flop_counter"}
    assert all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in uncounted.values())
    assert uncounted["flop_counter"], "FlopCounterMode counts only matmul/conv: something must be listed"
    assert not any(op in uncounted["flop_counter"] for op in ("aten.convolution", "aten.addmm", "aten.view"))


def test_fvcore_silent_ignores_are_reported(imagenet: dict[str, Complexity]) -> None:
    assert "aten::relu_" in imagenet["resnet18"].uncounted_ops["fvcore"]


def test_as_dict_is_json_ready(imagenet: dict[str, Complexity]) -> None:
    d = imagenet["densenet121"].as_dict()
    assert json.loads(json.dumps(d)) == d
    assert isinstance(d["uncounted_ops"], dict)
    assert {"macs_per_sample", "flops_per_sample", "train_flops_per_sample", "arithmetic_intensity"} <= set(d)


def test_intensity_rises_and_bytes_fall_with_batch(resnet18_sweep: dict[int, Complexity]) -> None:
    b1, b8, b64 = resnet18_sweep[1], resnet18_sweep[8], resnet18_sweep[64]
    assert b1.arithmetic_intensity < b8.arithmetic_intensity < b64.arithmetic_intensity
    assert b1.train_arithmetic_intensity < b8.train_arithmetic_intensity < b64.train_arithmetic_intensity
    assert b1.bytes_per_sample > b8.bytes_per_sample > b64.bytes_per_sample
    assert b1.train_bytes_per_sample > b8.train_bytes_per_sample > b64.train_bytes_per_sample
    # work and activations per sample do not depend on the batch: only the weights amortize
    for c in (b8, b64):
        assert c.flops_per_sample == pytest.approx(b1.flops_per_sample, rel=1e-9)
        assert c.macs_per_sample == pytest.approx(b1.macs_per_sample, rel=1e-9)
        assert c.activation_bytes_per_sample == pytest.approx(b1.activation_bytes_per_sample, rel=1e-9)
    assert b64.bytes_per_sample == pytest.approx(b64.model_size_bytes / 64 + b64.activation_bytes_per_sample)


def test_bf16_halves_bytes_and_doubles_intensity(resnet18_sweep: dict[int, Complexity]) -> None:
    fp32 = resnet18_sweep[8]
    bf16 = complexity("resnet18", SWEEP_IMAGE_SIZE, batch_size=8, num_classes=10, dtype=torch.bfloat16)
    assert bf16.dtype == "bfloat16"
    assert bf16.flops_per_sample == fp32.flops_per_sample
    assert bf16.model_size_bytes * 2 == fp32.model_size_bytes
    assert bf16.bytes_per_sample == pytest.approx(fp32.bytes_per_sample / 2)
    assert bf16.train_bytes_per_sample == pytest.approx(fp32.train_bytes_per_sample / 2)
    assert bf16.arithmetic_intensity == pytest.approx(2 * fp32.arithmetic_intensity)
    assert bf16.train_arithmetic_intensity == pytest.approx(2 * fp32.train_arithmetic_intensity)


def test_autocast_counts_activations_at_two_bytes_and_weights_as_stored() -> None:
    fp32 = complexity_for_run("resnet18", SWEEP_IMAGE_SIZE, 64, 10)
    bf16 = complexity_for_run("resnet18", SWEEP_IMAGE_SIZE, 64, 10, activation_dtype=torch.bfloat16)
    assert bf16.activation_dtype == "bfloat16" and fp32.activation_dtype == "float32"
    assert bf16.activation_bytes_per_sample == pytest.approx(fp32.activation_bytes_per_sample / 2)
    assert bf16.model_size_bytes == fp32.model_size_bytes, "autocast keeps fp32 weights in memory"
    assert bf16.bytes_per_sample == pytest.approx(fp32.model_size_bytes / 64 + fp32.activation_bytes_per_sample / 2)
    assert bf16.flops_per_sample == fp32.flops_per_sample
    assert bf16.arithmetic_intensity > 1.4 * fp32.arithmetic_intensity
    assert with_activation_dtype(bf16, torch.float32).bytes_per_sample == pytest.approx(fp32.bytes_per_sample)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_small_images_and_ten_classes(name: str) -> None:
    c = complexity(name, 32, batch_size=4, num_classes=10)
    assert c.num_classes == 10 and c.image_size == 32 and c.batch_size == 4
    assert 0 < c.macs_per_sample < c.flops_per_sample < c.train_flops_per_sample
    assert c.arithmetic_intensity > 0


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "densenet121"])
def test_layer_table(imagenet: dict[str, Complexity], name: str) -> None:
    model = build_model(name, 1000)
    table = layer_table(model, IMAGENET_SIZE)
    leaves = [n for n, m in model.named_modules() if next(m.children(), None) is None]
    assert list(table.columns) == list(LAYER_TABLE_COLUMNS)
    assert {"module", "type", "output_shape", "macs", "flops", "params", "activation_bytes"} <= set(table.columns)
    assert list(table["module"]) == leaves
    assert (table["activation_bytes"] > 0).all()
    assert table["macs"].sum() == pytest.approx(imagenet[name].macs_per_sample, rel=0.01)
    assert table["flops"].sum() == pytest.approx(imagenet[name].flops_per_sample, rel=0.01)
    assert table["params"].sum() == imagenet[name].params
    conv = table[table["type"] == "Conv2d"].iloc[0]
    assert conv["flops"] == 2 * conv["macs"] and len(conv["output_shape"]) == 4


def test_layer_table_scales_with_batch_and_dtype() -> None:
    model = build_model("resnet18", 10)
    one = layer_table(model, 32)
    four_bf16 = layer_table(model, 32, batch_size=4, dtype=torch.bfloat16)
    assert (four_bf16["macs"] == 4 * one["macs"]).all()
    assert (four_bf16["activation_bytes"] == 2 * one["activation_bytes"]).all()


def test_grouped_conv_backward_is_not_overcounted() -> None:
    """Depthwise conv: the weight gradient costs what the forward does, not `groups` times more."""
    model = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1, groups=3, bias=False), nn.Flatten())
    c = complexity(model, 16)
    # input needs no grad, so backward = grad-weight only = one more forward
    assert c.train_flops_per_sample == pytest.approx(2 * c.flops_per_sample)
    assert c.flops_per_sample == 2 * c.macs_per_sample == 2 * 12 * 1 * 9 * 16 * 16


def test_callers_model_is_left_untouched() -> None:
    model = build_model("resnet18", 10)
    model.train()
    model.fc.requires_grad_(False)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    c = complexity(model, 32, batch_size=2, name="mine")
    assert c.model == "mine" and c.num_classes == 10
    assert all(m.training for m in model.modules())
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)

    model.eval()
    layer_table(model, 32)
    assert not any(m.training for m in model.modules())


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"dtype": torch.int8}])
def test_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        complexity("resnet18", 32, **kwargs)


def test_scaling_to_batch_matches_a_count_at_that_batch():
    from benchlib.nets.flops import at_batch_size, complexity, complexity_for_run

    counted = complexity("resnet18", 32, batch_size=8, num_classes=10)
    scaled = at_batch_size(complexity("resnet18", 32, batch_size=2, num_classes=10), 8)
    for key in ("flops_per_sample", "train_flops_per_sample", "bytes_per_sample", "train_bytes_per_sample",
                "arithmetic_intensity", "train_arithmetic_intensity", "activation_bytes_per_sample"):
        assert getattr(scaled, key) == pytest.approx(getattr(counted, key), rel=0.02), key
    assert complexity_for_run("resnet18", 32, 8, 10).batch_size == 8
