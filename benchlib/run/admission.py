"""One admission check for every entry point: what was asked, checked against this machine before any work.

The command line (``run``, ``profile``, ``layers``), ``benchmark()`` and ``compare()``, and a study file all
hand their configurations to :func:`admit`, so the same request meets the same checks in the same order,
each refusal one line naming the caller's own flag or key (:class:`Names`) and what is allowed:

1. the hardware is present (``auto`` resolved to what it picks here);
2. the GPUs: one per process, kernels for their architecture, the precision asked, room for the ceilings;
3. what the device can run: each configuration's knobs on its device (``engine.setup.check_runs``);
4. the settings: threads and workers the CPUs can carry, the data, each model buildable at the image size,
   pretrained weights that fit, and each variant's threads;
5. the batch sizes against the training samples (a user's own data set too);
6. each CUDA training batch against its GPU's free memory (a floor that cannot be beaten).

Where one configuration was asked for, one its device cannot run is refused (``ConfigError``). In a grid it
is admitted as ``skipped`` with the reason: the grid runs, and its row records why (``run.record``).
The individual checks live in ``run/preflight.py``; this module decides which apply and in what order.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import log as messages
from ..data.user_data import user_facts
from ..engine.setup import check_runs
from ..errors import ConfigError, SkippedConfiguration
from ..spec.fields import rules_of
from ..spec.knobs import Knobs
from ..spec.settings import RunConfig, RunSettings, check_batch_sizes
from ..spec.study import StudyConfig, study_from_file
from ..spec.vocab import is_python_data
from .preflight import (
    check_gpu_memory,
    check_gpus,
    check_hardware,
    check_machine,
    check_settings,
    resolved_hardware,
)


@dataclass(frozen=True)
class Names:
    """How a caller names what it was given, so that a refusal names the caller's own flag or key."""

    where: str  # "command line", "benchmark", a study file's path
    hardware: str = "key 'hardware'"  # "--device" on the command line, "hardware" in benchmark()
    batch_sizes: str = "key 'batch_sizes'"  # "--batch-size" on the command line
    knobs: Mapping[str, str] = field(default_factory=dict)  # a knob -> where it was set: "--set precision=amp_bf16"
    variant: str | None = None  # where the other knobs came from: "--variant gpu-amp"

    def source(self, knob: str, value: Any) -> str:
        """Where ``knob`` got ``value``: the flag or key that set it."""
        return self.knobs.get(knob) or self.variant or f"{knob} {_word(value)}"


@dataclass(frozen=True)
class Admission:
    """What may run here: the configurations admitted (hardware resolved), and in a grid those whose device
    cannot run them, each with why (a grid still records them, as ``skipped`` rows)."""

    configs: tuple[RunConfig, ...]
    skipped: tuple[tuple[RunConfig, str], ...] = ()
    hardware: Mapping[str, str] = field(default_factory=dict)  # each hardware name asked -> the device it is


def admit(configs: Sequence[RunConfig], names: Names, *, single: bool = False, settings: RunSettings | None = None,
          sweep: Mapping[str, Sequence[Any]] | None = None, processes: int = 1, devices: bool = True) -> Admission:
    """Check ``configs`` against this machine before any work; raise ConfigError (one line) on the first problem.

    ``single``: one configuration was asked for, so one its device cannot run is refused rather than skipped.
    ``settings``: what every configuration shares before variants and sweeps (default: the first's), checked
    once, with ``sweep``'s values named as ``sweep.KEY``. ``processes``: data-parallel processes this node
    starts, a GPU each. ``devices=False`` leaves the devices out (a SLURM job written for other nodes).
    """
    if not configs:
        return Admission(())
    base = settings or configs[0].settings
    where = names.where
    hardware: dict[str, str] = {}
    runnable: list[RunConfig] = list(configs)
    skipped: list[tuple[RunConfig, str]] = []
    if devices:
        hardware = check_hardware([c.hardware for c in configs], where, key=names.hardware)
        runnable = [dataclasses.replace(c, hardware=hardware[c.hardware]) for c in configs]
        check_gpus(list(dict.fromkeys(hardware.values())), [base], where, processes=processes, key=names.hardware)
        runnable, skipped = _runs_here(runnable, names, single)
    check_settings(base, list(dict.fromkeys(c.model for c in configs)), where, sweep)
    _check_variants(configs, base, where)
    _check_batch_sizes(configs, names)
    if devices:
        for world_size in sorted({c.world_size for c in runnable}):
            check_gpu_memory([c for c in runnable if c.world_size == world_size], where, world_size=world_size,
                             key=names.batch_sizes)
    return Admission(tuple(runnable), tuple(skipped), hardware)


# ---------------------------------------------------------------- what the device can run

def why_not(s: RunSettings, device: str) -> str | None:
    """Why ``device`` cannot run these settings' knobs (the line a skipped row records), or None."""
    try:
        check_runs(s, device)
    except SkippedConfiguration as exc:
        return str(exc)
    return None


def _runs_here(configs: Sequence[RunConfig], names: Names,
               single: bool) -> tuple[list[RunConfig], list[tuple[RunConfig, str]]]:
    """The configurations their device runs, and the others with why (refused at once when ``single``)."""
    reasons: dict[tuple[str, Knobs], str | None] = {}
    runnable: list[RunConfig] = []
    skipped: list[tuple[RunConfig, str]] = []
    for c in configs:
        key = (c.hardware, c.settings.knobs)
        if key not in reasons:
            reasons[key] = why_not(c.settings, c.hardware)
        reason = reasons[key]
        if reason is None:
            runnable.append(c)
        elif single:
            raise refusal(c, reason, names)
        else:
            skipped.append((c, reason))
    for (hardware, variant), reason in {(c.hardware, c.settings.variant): r for c, r in skipped}.items():
        messages.warning(f"{names.where}: variant '{variant}' cannot run on {hardware}: {reason}; its rows are "
                         "recorded as skipped")
    return runnable, skipped


def refusal(c: RunConfig, reason: str, names: Names) -> ConfigError:
    """The one line refusing a configuration its device cannot run: the flag that asked for the knob, the
    problem on this device, and the values of that knob it runs."""
    culprit = _culprit(c.settings, c.hardware, reason)
    if culprit is None:
        return ConfigError(f"{names.where}: {names.variant or names.hardware} on {c.hardware}: {reason}")
    knob, allowed = culprit
    source = names.source(knob, getattr(c.settings.knobs, knob))
    if c.hardware.split(":")[0] not in reason.lower():
        source += f" on {c.hardware}"
    return ConfigError(f"{names.where}: {source}: {_without_hint(reason)}; allowed: {knob} "
                       f"{', '.join(_word(v) for v in allowed)}")


def _culprit(s: RunSettings, device: str, reason: str) -> tuple[str, list[Any]] | None:
    """The knob behind ``reason`` and the values of it ``device`` runs (each judged with the other knobs at
    their defaults); None where no one knob explains it."""
    found: list[tuple[str, list[Any], str]] = []
    for knob, rule in rules_of(Knobs).items():
        values = rule.choices or ((False, True) if rule.type is bool else ())
        if not values:
            continue
        alone = why_not(_with_knob(s, knob, getattr(s.knobs, knob)), device)
        if alone is not None:
            allowed = [v for v in values if why_not(_with_knob(s, knob, v), device) is None]
            found.append((knob, allowed, alone))
    matching = [(knob, allowed) for knob, allowed, alone in found if alone == reason]
    candidates = matching or [(knob, allowed) for knob, allowed, _ in found]
    return candidates[0] if candidates else None


def _with_knob(s: RunSettings, knob: str, value: Any) -> RunSettings:
    return dataclasses.replace(s, knobs=dataclasses.replace(Knobs(), **{knob: value}))


def _without_hint(reason: str) -> str:
    """A skipped row's reason less its "; use X" hint: a refusal says what is allowed instead."""
    return re.sub(r";\s*use [^;]*$", "", reason)


def _word(value: Any) -> str:
    """A knob's value as a study file or ``--set`` spells it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


# ---------------------------------------------------------------- settings and batch sizes

def _check_variants(configs: Sequence[RunConfig], base: RunSettings, where: str) -> None:
    """Each variant's threads and workers this machine can carry (the shared settings are checked already)."""
    seen: set[tuple[Any, ...]] = set()
    for c in configs:
        s = c.settings
        key = (s.variant, s.get("threads"), s.get("interop_threads"), s.get("num_workers"))
        if s.variant != base.variant and key not in seen:
            seen.add(key)
            check_machine(s, f"{where}: variant '{s.variant}'")


def _check_batch_sizes(configs: Sequence[RunConfig], names: Names) -> None:
    """Each batch size against the training samples of its data (a user's own data set's too)."""
    for s, sizes in _by_settings(configs).items():
        check_batch_sizes(sizes, s, names.where)
        if is_python_data(s.dataset) and max(sizes) > (n_train := user_facts(s.dataset)[0]):
            raise ConfigError(f"{names.where}: {names.batch_sizes} has {max(sizes)}, larger than the {n_train} "
                              f"training samples of '{s.dataset}'; allowed: 1..{n_train}")


def _by_settings(configs: Sequence[RunConfig]) -> dict[RunSettings, list[int]]:
    out: dict[RunSettings, list[int]] = {}
    for c in configs:
        sizes = out.setdefault(c.settings, [])
        if c.batch_size not in sizes:
            sizes.append(c.batch_size)
    return out


# ---------------------------------------------------------------- a study file

def load_study(path: str | Path, *, check_devices: bool = True,
               overrides: Mapping[str, Any] | None = None) -> StudyConfig:
    """Read and validate a study file (its keys replaced by ``overrides``), then admit its grid here.

    ``check_devices=False`` leaves the devices out: a SLURM job is written here for nodes that have them.
    """
    cfg = study_from_file(path, overrides)
    if check_devices:
        cfg = dataclasses.replace(cfg, hardware=resolved_hardware(cfg.hardware, cfg.source))
    admit(cfg.all_configs(), Names(cfg.source), settings=cfg.settings, sweep=dict(cfg.sweep), devices=check_devices)
    return cfg
