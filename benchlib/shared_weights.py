"""Trained weights shared between configurations that differ only in how the model is evaluated.

A study that compares inference variants (static int8, dynamic quantization) must evaluate every one
of them on the very weights its fp32 baseline trained, and should not train the same model twice to
get them. The training configuration saves its trained weights under ``<results>/weights/``; each
inference variant with the same *training key* loads them instead of training. The key hashes every
setting that can change the trained weights, so a changed learning rate or seed never reuses stale
weights.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import RunConfig, RunSettings
from .results import atomic_write_bytes, safe_name

# Settings that only change how an already trained model is evaluated or observed.
INFERENCE_ONLY_SETTINGS = ("quantization", "variant", "latency_repeats", "infer_warmup_batches",
                           "telemetry", "telemetry_interval_s")


def training_key(cfg: RunConfig) -> str:
    """A hash of everything that decides the trained weights: model, hardware, batch, processes, settings."""
    defaults = RunSettings()
    settings = dataclasses.replace(cfg.settings, **{k: getattr(defaults, k) for k in INFERENCE_ONLY_SETTINGS})
    identity = {"model": cfg.model, "hardware": cfg.hardware, "batch_size": cfg.batch_size,
                "world_size": cfg.world_size, "settings": dataclasses.asdict(settings)}
    payload = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def evaluates_only(cfg: RunConfig) -> bool:
    """True for a configuration that needs trained weights but not its own training (a quantized one)."""
    return cfg.settings.quantization != "none"


@dataclass(frozen=True)
class WeightsPlan:
    """Where one configuration's shared weights live, and whether it loads or saves them."""

    path: Path
    training_key: str
    load: bool  # evaluate saved weights instead of training, when they exist
    save: bool  # another configuration will evaluate the weights this one trains


def plan_weights(results_dir: Path, machine: str, configs: list[RunConfig]) -> dict[str, WeightsPlan]:
    """The weights plan of every configuration of a pair (by run id); a lone training config gets none."""
    needed = {training_key(c) for c in configs if evaluates_only(c)}
    plans = {}
    for cfg in configs:
        key = training_key(cfg)
        if key in needed:
            path = Path(results_dir) / "weights" / f"{safe_name(machine + '__' + cfg.model + '__' + key)}.pt"
            plans[cfg.run_id] = WeightsPlan(path, key, load=evaluates_only(cfg), save=True)
    return plans


def training_first(configs: list[RunConfig]) -> list[RunConfig]:
    """Configurations that train before those that only evaluate, so the weights exist when needed."""
    return sorted(configs, key=evaluates_only)  # stable: the study's order otherwise


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
