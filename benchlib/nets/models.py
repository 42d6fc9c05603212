"""torchvision CNNs with their classifier head sized for the data set, and transfer learning; other models
(a user's module, timm, an import path) through :mod:`benchlib.nets.user_models`.

Pretrained weights go through torchvision's weights API and torch hub's cache; nothing is downloaded
when the file is already cached or given as ``weights_path``.
"""
from __future__ import annotations

import os
import urllib.error
from functools import cache
from pathlib import Path

import torch
import torchvision
from torch import nn

from ..errors import ConfigError, WeightsUnavailableError, first_line
from ..spec.vocab import MODEL_FORMS, MODELS
from .user_models import build_user_model, is_user_model


def _head_of(model: nn.Module, name: str) -> tuple[nn.Module, str, nn.Module]:
    """Return (parent module, attribute, layer) of the classifier head to replace."""
    if name.startswith("resnet"):
        parent, attr = model, "fc"
    elif name in ("mobilenet_v2", "squeezenet1_1"):
        parent, attr = model.get_submodule("classifier"), "1"
    elif name == "densenet121":
        parent, attr = model, "classifier"
    else:
        raise ConfigError(f"unknown model '{name}'; allowed: {', '.join(MODELS)}")
    return parent, attr, parent.get_submodule(attr)


def _new_head(old: nn.Module, num_classes: int) -> nn.Module:
    if isinstance(old, nn.Linear):
        return nn.Linear(old.in_features, num_classes)
    if isinstance(old, nn.Conv2d):  # squeezenet's 1x1 conv classifier
        return nn.Conv2d(old.in_channels, num_classes, kernel_size=old.kernel_size[:2])  # type: ignore[arg-type]
    raise TypeError(f"cannot replace a classifier head of type {type(old).__name__}")


def replace_head(model: nn.Module, name: str, num_classes: int) -> nn.Module:
    """Swap the final classifier for a fresh one with ``num_classes`` outputs."""
    parent, attr, old = _head_of(model, name)
    new = _new_head(old, num_classes)
    setattr(parent, attr, new)  # nn.Sequential names its children "0", "1", ...
    return model


def head_parameters(model: nn.Module, name: str) -> list[nn.Parameter]:
    """Parameters of the classifier head: what stays trainable with a frozen backbone."""
    _, _, head = _head_of(model, name)
    return list(head.parameters())


def pretrained_cache_path(name: str) -> Path:
    """Where torch hub keeps (or would keep) the default pretrained weights of ``name``."""
    weights = torchvision.models.get_model_weights(name).DEFAULT
    filename = os.path.basename(weights.url)
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def _load_weights_file(path: Path, name: str) -> dict[str, torch.Tensor]:
    """Load a state_dict with ``weights_only=True``: a checkpoint never runs code."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise WeightsUnavailableError(f"weights file '{path}' is not a PyTorch checkpoint that loads as a plain "
                                      f"state_dict (weights_only=True says: {first_line(exc) or type(exc).__name__})"
                                      ) from exc
    if not isinstance(state, dict):
        raise WeightsUnavailableError(
            f"weights file '{path}' holds a {type(state).__name__}, not a state_dict of {name}"
        )
    return state


def _pretrained_state_dict(name: str, weights_path: str | None) -> dict[str, torch.Tensor]:
    if weights_path:
        path = Path(weights_path)
        if not path.is_file():
            raise WeightsUnavailableError(f"weights_path '{path}' does not exist: give a .pth state_dict of {name}")
        return _load_weights_file(path, name)
    cached = pretrained_cache_path(name)
    if cached.is_file():
        return _load_weights_file(cached, name)
    weights = torchvision.models.get_model_weights(name).DEFAULT
    try:
        return torch.hub.load_state_dict_from_url(weights.url, progress=False, map_location="cpu", weights_only=True)
    except (urllib.error.URLError, OSError, RuntimeError) as exc:
        raise WeightsUnavailableError(
            f"pretrained weights for {name} are not cached and could not be downloaded ({type(exc).__name__}): "
            f"put {cached.name} (from {weights.url}) at {cached}, or set weights_path"
        ) from exc


def build_model(
    name: str,
    num_classes: int,
    *,
    pretrained: bool = False,
    freeze_backbone: bool = False,
    weights_path: str | None = None,
) -> nn.Module:
    """Build a torchvision CNN with a head for ``num_classes``.

    With ``pretrained`` the ImageNet backbone is loaded (cache, ``weights_path`` or download) and the
    1000-way head is replaced; ``freeze_backbone`` then leaves only the new head trainable, as in the
    transfer-learning set-up of the cats-vs-dogs paper.
    """
    if name not in MODELS:
        if not is_user_model(name):
            raise ConfigError(f"unknown model '{name}'; allowed: {MODEL_FORMS}")
        if pretrained or freeze_backbone:
            raise ConfigError(f"model '{name}': pretrained and freeze_backbone are for the torchvision models "
                              f"({', '.join(MODELS)}); give your own model its weights in its factory")
        return build_user_model(name, num_classes)
    if freeze_backbone and not pretrained:
        raise ConfigError("freeze_backbone: true needs pretrained: true (a frozen random backbone learns nothing)")
    if not pretrained:
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    model = torchvision.models.get_model(name, weights=None)
    try:
        model.load_state_dict(_pretrained_state_dict(name, weights_path))
    except RuntimeError as exc:  # keys or shapes of another architecture
        raise WeightsUnavailableError(f"weights for {name} do not fit the model: {first_line(exc)}") from exc
    replace_head(model, name, num_classes)
    if freeze_backbone:
        head = {id(p) for p in head_parameters(model, name)}
        for p in model.parameters():
            p.requires_grad_(id(p) in head)
    return model


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(all parameters, trainable parameters)."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return total, trainable


def check_weights_file(name: str, path: Path) -> None:
    """Refuse, in one line, weights that do not exist, do not load as a plain state_dict, or do not fit ``name``.

    Checked on the CPU against torchvision's ImageNet layout of the model, before any configuration runs.
    """
    if not path.is_file():
        raise WeightsUnavailableError(f"weights_path '{path}' does not exist: give a .pth state_dict of {name}")
    state = _load_weights_file(path, name)
    expected = torchvision.models.get_model(name, weights=None).state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    reshaped = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or reshaped:
        example = (missing or unexpected or reshaped)[0]
        raise WeightsUnavailableError(
            f"weights file '{path}' does not fit {name}: {len(missing)} of its keys missing, {len(unexpected)} "
            f"unexpected, {len(reshaped)} of another shape (e.g. '{example}'); allowed: a state_dict of {name} "
            "in torchvision's ImageNet layout")


_PROBE_SIZES_PX = (8, 16, 24, 32, 40, 48, 64, 96, 128, 160, 224)


@cache
def smallest_image_size(name: str) -> int:
    """The smallest square input (of a few probed sizes) the network takes: one forward pass of zeros on the CPU.

    1 for a model other than the torchvision ones: its own code says what it takes, when it runs.
    """
    if name not in MODELS:
        return 1
    with torch.random.fork_rng(devices=[]):
        model = torchvision.models.get_model(name, weights=None, num_classes=10).eval()
    for size in _PROBE_SIZES_PX:
        try:
            with torch.no_grad():
                model(torch.zeros(1, 3, size, size))
            return size
        except RuntimeError:
            continue
    return _PROBE_SIZES_PX[-1]
