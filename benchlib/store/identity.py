"""A row's identity: the run id of a configuration, built from its readable parts and a digest of its settings.

One formula for both ends: ``spec.settings.RunConfig.run_id`` writes ids with it, and ``store.integrity`` builds
a stored row's id again from the settings the row recorded, so a row cannot claim another configuration's id.
No pandas, no torch: a study file is refused, and a run id made, without them.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .atomic import safe_name


def digest(values: Mapping[str, Any], length: int = 8) -> str:
    """A short, stable hash of a mapping of plain values (a tuple hashes as the list JSON reads it back as)."""
    payload = json.dumps(dict(values), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


# Settings added after rows were first written, left out of a hash where they hold their default: a
# configuration that does not use them keeps the run id and weights key it always had (its rows resume and its
# diff pairs them across versions); one that does gets a new one.
LATER_SETTINGS: dict[str, Any] = {"nesterov": False, "grad_scaler": True}


def stable_flat(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``flat`` without the ``LATER_SETTINGS`` that hold their default: what a hash of the settings reads."""
    return {k: v for k, v in flat.items() if not (k in LATER_SETTINGS and v == LATER_SETTINGS[k])}


def settings_of(settings_json: object) -> dict[str, Any]:
    """A row's ``settings_json`` as a mapping: the one reader of that column, so every table parses it alike.
    Empty where the row recorded none or its text is not a JSON object (a row of an older benchlib)."""
    if not isinstance(settings_json, str) or not settings_json:
        return {}
    try:
        value = json.loads(settings_json)
    except ValueError:
        return {}
    return dict(value) if isinstance(value, dict) else {}


def settings_digest_of(flat: Mapping[str, Any]) -> str:
    """Hash of every flat setting except the seed: repeats of a configuration share it, any other change does not."""
    return digest({k: v for k, v in stable_flat(flat).items() if k != "seed"})


def model_token(model: str) -> str:
    """The model as it stands in run ids and file names: ``timm:convnext_tiny`` -> ``timm-convnext_tiny``,
    ``mypkg.nets:make_net`` -> ``mypkg.nets-make_net`` (never a ``__``, which separates a run id's fields)."""
    return re.sub(r"_{2,}", "_", safe_name(model))


def readable_head(hardware: str, model: str, batch_size: int, variant: str, precision: str) -> str:
    """The run id's first fields: ``cpu__resnet18__bs64__default__fp32``."""
    return f"{hardware.replace(':', '')}__{model_token(model)}__bs{batch_size}__{variant}__{precision}"


def run_id_tail(settings_digest: str, world_size: int, seed: int) -> str:
    """The run id's last fields: ``__<digest>``, ``__ddpN`` for N data-parallel processes, ``__seedS``."""
    ddp = f"__ddp{world_size}" if world_size > 1 else ""
    return f"__{settings_digest}{ddp}__seed{seed}"


def run_id_of(hardware: str, model: str, batch_size: int, variant: str, precision: str,
              swept: Sequence[tuple[str, Any]], settings_digest: str, world_size: int, seed: int) -> str:
    """``cpu__resnet18__bs64__default__fp32__threads2__<digest>__seed0``: the readable head, each swept
    setting with its value, and the tail."""
    extra = "".join(f"__{k}{v}" for k, v in swept)
    return readable_head(hardware, model, batch_size, variant, precision) + extra + run_id_tail(
        settings_digest, world_size, seed)
