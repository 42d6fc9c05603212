"""Models: heads sized for the data set, and transfer learning from cached or local weights only."""
from __future__ import annotations

import urllib.error

import pytest
import torch
import torchvision

from benchlib.errors import ConfigError, WeightsUnavailableError
from benchlib.nets.models import build_model, count_parameters, pretrained_cache_path
from benchlib.spec.vocab import MODELS


@pytest.mark.parametrize("name", MODELS)
def test_head_matches_num_classes(name):
    model = build_model(name, 7).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 7)


def test_unknown_model():
    with pytest.raises(ConfigError, match=r"unknown model 'alexnet'; allowed: a torchvision name \(resnet18"):
        build_model("alexnet", 10)


@pytest.fixture
def cached_resnet18(tmp_path, monkeypatch):
    """A fake 'pretrained' resnet18 checkpoint at the exact path torch hub would cache it."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    torch.manual_seed(123)
    reference = torchvision.models.resnet18(weights=None)
    path = pretrained_cache_path("resnet18")
    path.parent.mkdir(parents=True)
    torch.save(reference.state_dict(), path)
    return reference, path


def test_pretrained_loads_cached_weights_and_replaces_head(cached_resnet18):
    reference, path = cached_resnet18
    assert str(path).startswith(str(torch.hub.get_dir()))
    model = build_model("resnet18", 2, pretrained=True)
    assert torch.equal(model.conv1.weight, reference.conv1.weight)
    assert model.fc.out_features == 2
    total, trainable = count_parameters(model)
    assert total == trainable


def test_frozen_backbone_trains_only_the_head(cached_resnet18):
    model = build_model("resnet18", 2, pretrained=True, freeze_backbone=True)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["fc.weight", "fc.bias"]


def test_weights_path(tmp_path):
    torch.manual_seed(7)
    ref = torchvision.models.squeezenet1_1(weights=None)
    file = tmp_path / "sq.pth"
    torch.save(ref.state_dict(), file)
    model = build_model("squeezenet1_1", 3, pretrained=True, weights_path=str(file))
    assert torch.equal(model.features[0].weight, ref.features[0].weight)
    assert model.classifier[1].out_channels == 3


def test_weights_load_refuses_pickled_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    file = tmp_path / "evil.pth"
    torch.save({"x": Evil()}, file)
    with pytest.raises(WeightsUnavailableError, match="not a PyTorch checkpoint"):
        build_model("resnet18", 2, pretrained=True, weights_path=str(file))


def test_weights_of_another_model_are_refused(tmp_path):
    file = tmp_path / "sq.pth"
    torch.save(torchvision.models.squeezenet1_1(weights=None).state_dict(), file)
    with pytest.raises(WeightsUnavailableError, match="do not fit the model"):
        build_model("resnet18", 2, pretrained=True, weights_path=str(file))


def test_missing_weights_name_the_file_to_put(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))

    def offline(*a, **k):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    with pytest.raises(WeightsUnavailableError) as info:
        build_model("densenet121", 2, pretrained=True)
    message = str(info.value)
    assert "not cached and could not be downloaded" in message
    assert str(pretrained_cache_path("densenet121")) in message
    assert "weights_path" in message


def test_missing_weights_path():
    with pytest.raises(WeightsUnavailableError, match="/no/file.pth"):
        build_model("resnet18", 2, pretrained=True, weights_path="/no/file.pth")
