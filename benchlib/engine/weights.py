"""Trained weights shared between configurations that differ only in how the model is evaluated.

A study that compares inference variants (static int8, dynamic quantization) must evaluate every one of
them on the very weights its fp32 baseline trained, and should not train the same model twice to get
them. The training configuration saves its trained weights; each inference variant with the same
training key (:attr:`benchlib.spec.settings.RunConfig.training_key`, a hash of every setting that can
change the trained weights) loads them instead of training, so a changed learning rate or seed never
reuses stale weights.
"""
from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..spec.settings import RunConfig
from ..store.atomic import atomic_write_bytes
from ..store.layout import ResultsLayout


@dataclass(frozen=True)
class WeightsPlan:
    """Where one configuration's shared weights live, and whether it loads or saves them."""

    path: Path
    training_key: str
    load: bool  # evaluate saved weights instead of training, when they exist
    save: bool  # another configuration will evaluate the weights this one trains


def plan_weights(layout: ResultsLayout, machine: str, configs: Sequence[RunConfig]) -> dict[str, WeightsPlan]:
    """The weights plan of every configuration of a pair (by run id); a lone training config gets none."""
    needed = {c.training_key for c in configs if c.evaluates_only}
    plans = {}
    for cfg in configs:
        key = cfg.training_key
        if key in needed:
            plans[cfg.run_id] = WeightsPlan(layout.weights_path(machine, cfg.model, key), key,
                                            load=cfg.evaluates_only, save=True)
    return plans


def save_weights(plan: WeightsPlan, model: torch.nn.Module, trained_by: str) -> None:
    """Write the trained weights atomically (a killed run leaves the old file or none, never a part)."""
    buffer = io.BytesIO()
    torch.save({"training_key": plan.training_key, "trained_by": trained_by,
                "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}, buffer)
    atomic_write_bytes(plan.path, buffer.getvalue())


def load_weights(plan: WeightsPlan, model: torch.nn.Module) -> str | None:
    """Load the saved weights into ``model``; return the run id that trained them, or None if absent.

    A file whose key does not match (other settings wrote it) or that cannot be read is not used:
    the configuration then trains its own weights.
    """
    if not plan.path.exists():
        return None
    try:
        saved = torch.load(plan.path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated or foreign file: train instead, and say so
        warnings.warn(f"{plan.path}: unreadable shared weights ({type(exc).__name__}); training instead", stacklevel=2)
        return None
    if not isinstance(saved, dict) or saved.get("training_key") != plan.training_key:
        return None
    model.load_state_dict(saved["state_dict"])
    return str(saved["trained_by"])
