"""Models beyond the five torchvision names: a module handed over in Python, a timm name, an import path.

- ``register_model(name, model)``: an ``nn.Module`` (each build gets a deep copy of it, so every configuration
  starts from the same weights) or a zero-argument factory, under ``name`` for this process. This is how
  ``benchlib.benchmark(my_net)`` reaches the code that builds each configuration's model.
- ``timm:NAME``: ``timm.create_model(NAME, pretrained=False, num_classes=...)`` (timm is an optional extra;
  nothing is downloaded).
- ``package.module:factory``: imported and called, with ``num_classes=`` when its signature takes it, so a
  study YAML names a user's own networks and papermill kernels can build them.
"""
from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from ..errors import ConfigError, missing
from ..spec.vocab import MODEL_FORMS, TIMM_PREFIX, is_import_ref, is_timm_ref

ModelSource = nn.Module | Callable[..., nn.Module]


@dataclass(frozen=True)
class _Registered:
    source: ModelSource
    generation: int  # changes when the name is registered again: caches keyed on it count afresh


_REGISTERED: dict[str, _Registered] = {}
_generations = 0


def register_model(name: str, model: ModelSource) -> str:
    """Make ``model`` buildable as ``name`` in this process; returns ``name``."""
    global _generations
    if not (isinstance(model, nn.Module) or callable(model)):
        raise ConfigError(f"model {model!r}: not an nn.Module or a function returning one; allowed: {MODEL_FORMS}, "
                          "or an nn.Module (or a zero-argument factory) from Python")
    _generations += 1
    _REGISTERED[name] = _Registered(model, _generations)
    return name


def is_registered(name: str) -> bool:
    return name in _REGISTERED


def generation(name: str) -> int:
    """0 for a name not registered in this process; otherwise the registration's number (for cache keys)."""
    entry = _REGISTERED.get(name)
    return entry.generation if entry else 0


def is_user_model(name: str) -> bool:
    return is_registered(name) or is_timm_ref(name) or is_import_ref(name)


def _call(factory: Callable[..., object], num_classes: int | None, where: str) -> nn.Module:
    try:
        takes_classes = "num_classes" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins and some C extensions have no signature
        takes_classes = False
    built = factory(num_classes=num_classes) if takes_classes and num_classes is not None else factory()
    if not isinstance(built, nn.Module):
        raise ConfigError(f"model '{where}': the factory returned {type(built).__name__}, not an nn.Module; "
                          "allowed: a function or class returning an nn.Module")
    return built


def _timm(name: str, num_classes: int | None) -> nn.Module:
    try:
        import timm
    except ImportError as exc:
        raise missing("timm", f"model '{TIMM_PREFIX}{name}'") from exc
    if not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:5]
        raise ConfigError(f"model '{TIMM_PREFIX}{name}': timm has no such model; allowed: a name from "
                          f"timm.list_models(){' (close: ' + ', '.join(close) + ')' if close else ''}")
    if num_classes is None:
        return timm.create_model(name, pretrained=False)
    return timm.create_model(name, pretrained=False, num_classes=num_classes)


def _imported(ref: str, num_classes: int | None) -> nn.Module:
    module_name, _, attr = ref.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"model '{ref}': cannot import '{module_name}' ({exc}); allowed: an import path "
                          "package.module:factory that this Python can import (is the package installed, or "
                          "its folder on PYTHONPATH?)") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"model '{ref}': '{module_name}' has no '{attr}'; allowed: a function or class in "
                              f"it that returns an nn.Module")
        obj = getattr(obj, part)
    if isinstance(obj, nn.Module):
        return copy.deepcopy(obj)
    if not callable(obj):
        raise ConfigError(f"model '{ref}' is a {type(obj).__name__}; allowed: a function or class returning an "
                          "nn.Module")
    return _call(obj, num_classes, ref)


def build_user_model(name: str, num_classes: int | None) -> nn.Module:
    """A fresh instance of a registered, timm or imported model (``num_classes`` where it takes one)."""
    entry = _REGISTERED.get(name)
    if entry is not None:
        if isinstance(entry.source, nn.Module):
            return copy.deepcopy(entry.source)
        return _call(entry.source, num_classes, name)
    if is_timm_ref(name):
        return _timm(name.removeprefix(TIMM_PREFIX), num_classes)
    if is_import_ref(name):
        return _imported(name, num_classes)
    raise ConfigError(f"unknown model '{name}'; allowed: {MODEL_FORMS}")
