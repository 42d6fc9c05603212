"""Checks that a valid study can run here, before any work starts: devices present, data folders in shape.

The spec layer validates what a study asks for without touching the machine; this module checks the
machine. Every problem is one line (ConfigError, exit 2) naming the file or flag, the key and what is
available.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data.datasets import check_data_path
from ..env.devices import resolve_hardware
from ..errors import BenchlibError, ConfigError
from ..spec.settings import RunSettings, setting_names, settings_from_mapping
from ..spec.study import StudyConfig
from ..spec.study import load_study as parse_study_file
from ..spec.vocab import DATASETS_NEEDING_PATH


def check_hardware(hardware: Sequence[str], where: str, key: str = "key 'hardware'") -> None:
    """Every hardware name is present on this machine."""
    for h in hardware:
        try:
            resolve_hardware(h)
        except BenchlibError as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from exc


def check_data(s: RunSettings, where: str) -> None:
    """The data set's folder exists and has its on-disk layout (only folders are listed: cheap)."""
    if s.dataset in DATASETS_NEEDING_PATH:
        try:
            check_data_path(s.dataset, s.data_path)
        except BenchlibError as exc:
            raise ConfigError(f"{where}: key 'data_path': {exc}") from exc


def check_study(cfg: StudyConfig) -> None:
    check_hardware(cfg.hardware, cfg.source)
    check_data(cfg.settings, cfg.source)


def load_study(path: str | Path, *, check_devices: bool = True) -> StudyConfig:
    """Read and validate a study file, then check that it can run here.

    ``check_devices=False`` skips the device check: a SLURM job is written here for nodes that have them.
    """
    cfg = parse_study_file(path)
    if check_devices:
        check_hardware(cfg.hardware, cfg.source)
    check_data(cfg.settings, cfg.source)
    return cfg


def settings_from_params(namespace: Mapping[str, Any], where: str = "notebook parameters") -> RunSettings:
    """RunSettings from the variables a papermill ``parameters`` cell defined (validated and checked)."""
    settings = settings_from_mapping({k: namespace[k] for k in setting_names() if k in namespace}, where)
    check_data(settings, where)
    return settings
