"""Checks that a valid study can run here, before any work starts: devices, CPUs, data, weights, image sizes.

The spec layer validates what a study asks for without touching the machine; this module checks the
machine and the files: devices present, thread and worker counts the CPUs can carry, data folders in their
layout with enough images and at least two classes, pretrained weights that load and fit, and an image size
each network can take. Every problem is one line (ConfigError, exit 2) naming the file or flag, the key
and what is allowed, before any configuration runs. Which checks apply to a request, and in what order, is
``run/admission.py``'s to decide: every entry point (the command line, ``benchmark()``, a study file) goes
through it; the notebook's parameters cell (:func:`settings_from_params`) checks its settings here.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..data.datasets import check_data_path, load_dataset
from ..data.user_data import user_facts
from ..engine.setup import num_classes
from ..env import gpu as gpu_env
from ..env.devices import cuda_uuids, resolve_hardware
from ..env.gpu import GpuFacts, arch_problem, copy_bytes_for, gpu_facts, precision_problem
from ..env.threads import usable_cpus
from ..errors import BenchlibError, ConfigError
from ..instruments.nvml import free_bytes
from ..nets.memory_floor import largest_batch_within, training_floor_bytes
from ..nets.models import build_model, check_weights_file, smallest_image_size
from ..nets.user_models import generation
from ..roofline.ceilings import DEFAULT_COPY_BYTES
from ..spec.settings import RunConfig, RunSettings, setting_names, settings_from_mapping
from ..spec.vocab import DATASETS_NEEDING_PATH, MODELS, is_python_data
from .columns import ACTIVATION_DTYPES

# How far thread and worker counts may exceed the CPUs this process may use: scaling studies measure a
# little past the cores; a thousand threads on two cores only load the machine for minutes.
OVERSUBSCRIPTION = 2


def check_hardware(hardware: Sequence[str], where: str, key: str = "key 'hardware'") -> dict[str, str]:
    """Every hardware name is present on this machine; returns each name -> the device it is (``auto``: the
    one it picks here)."""
    present: dict[str, str] = {}
    for h in dict.fromkeys(hardware):
        try:
            present[h] = resolve_hardware(h)
        except BenchlibError as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from exc
    return present


def resolved_hardware(hardware: Sequence[str], where: str) -> tuple[str, ...]:
    """``auto`` resolved to what it picks here, and a device listed twice kept once (with a warning)."""
    out: list[str] = []
    for h in hardware:
        name = resolve_hardware(h) if h == "auto" else h
        same = "cuda:0" if name == "cuda" else name
        if any(("cuda:0" if o == "cuda" else o) == same for o in out):
            warnings.warn(f"{where}: hardware '{name}' is listed twice (as '{h}'): measured once", stacklevel=2)
            continue
        out.append(name)
    return tuple(out)


def check_gpus(hardware: Sequence[str], settings: Sequence[RunSettings], where: str, *, processes: int = 1,
               key: str = "key 'hardware'") -> None:
    """Before any GPU work: the processes asked for have a GPU each, and each CUDA device listed has kernels in
    this torch build, room for the ceilings' buffers, and native support for the precision every one of its
    configurations would run (a variant's own precision is judged per row: it is skipped with the reason)."""
    import torch

    cuda = [h for h in hardware if h.split(":")[0] == "cuda"]
    if not cuda or not torch.cuda.is_available():
        return
    count = torch.cuda.device_count()
    if processes > count:
        names = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(count))
        raise ConfigError(f"{where}: {processes} data-parallel processes need a GPU each; this machine has {count} "
                          f"({names}); allowed: --nproc-per-node 1..{count}")
    for h in dict.fromkeys(cuda):
        gpu = _facts(h)
        problems = [arch_problem(gpu), *(precision_problem(gpu, p) for p in {s.knobs.precision for s in settings})]
        try:
            copy_bytes_for(gpu, DEFAULT_COPY_BYTES["cuda"])
        except ValueError as exc:
            problems.append(str(exc))
        for problem in problems:
            if problem:
                raise ConfigError(f"{where}: {key}: {problem}")


def _facts(hardware: str) -> GpuFacts:
    """A CUDA device's facts, its free memory read through NVML, else by a child process: never by torch in
    this process, which would keep a CUDA context on the GPU while the study's notebooks measure."""
    index = int(hardware.split(":")[1]) if ":" in hardware else 0
    free = free_bytes(cuda_uuids([index])[0])
    return gpu_facts(index, free_bytes=free if free is not None else gpu_env.free_bytes_in_child(index))


def check_gpu_memory(configs: Sequence[RunConfig], where: str, *, world_size: int = 1,
                     key: str = "key 'batch_sizes'") -> None:
    """Each CUDA training configuration's largest batch fits its GPU's free memory, by a floor that cannot
    be beaten (weights and what autograd keeps for the backward pass: ``nets/memory_floor.py``).

    Under ``world_size`` data-parallel processes each GPU holds its share of the batch. Compiled and
    inference-only configurations are not judged (see the floor's docstring).
    """
    import torch

    largest: dict[tuple, int] = {}
    for c in configs:
        k = c.settings.knobs
        if c.hardware.split(":")[0] != "cuda" or not k.trains or k.compile != "off":
            continue
        shape = (c.hardware, c.model, c.settings.image_size, num_classes(c.settings), k.precision,
                 c.settings.freeze_backbone)
        largest[shape] = max(largest.get(shape, 0), -(-c.batch_size // world_size))
    if not largest or not torch.cuda.is_available():
        return
    gpus = {h: _facts(h) for h in {shape[0] for shape in largest}}
    for (hardware, model, image_size, classes, precision, head_only), batch in largest.items():
        gpu, itemsize = gpus[hardware], ACTIVATION_DTYPES[precision].itemsize
        need = training_floor_bytes(model, image_size, classes, batch, itemsize, head_only)
        if need > gpu.free_bytes:
            fits = largest_batch_within(model, image_size, classes, gpu.free_bytes, itemsize, head_only)
            per = " per GPU" if world_size > 1 else ""
            raise ConfigError(
                f"{where}: {key}: {gpu.label()} has {gpu.free_bytes / 2**30:.2f} GiB free; training {model} at "
                f"batch {batch}{per} ({image_size} px, {precision}) holds at least {need / 2**30:.2f} GiB (weights "
                f"and what autograd keeps for the backward pass); allowed: batch sizes up to {fits}{per} on it, "
                "or free the GPU (nvidia-smi shows who holds it)")


def _cpu_bound(key: str, value: int | None, where: str) -> None:
    cpus = usable_cpus()
    limit = cpus * OVERSUBSCRIPTION
    if value is not None and value > limit:
        raise ConfigError(f"{where}: key '{key}' is {value}; allowed: 1..{limit} (the {cpus} CPUs this process may "
                          f"use, up to {OVERSUBSCRIPTION}x oversubscribed for scaling studies)")


def check_machine(s: RunSettings, where: str, sweep: Mapping[str, Sequence[Any]] | None = None) -> None:
    """Thread and worker counts this machine can carry."""
    for key in ("threads", "interop_threads", "num_workers"):
        _cpu_bound(key, s.get(key), where)
    for key, values in (sweep or {}).items():
        if key in ("threads", "interop_threads", "num_workers"):
            for value in values:
                _cpu_bound(f"sweep.{key}", value, where)


@lru_cache(maxsize=16)
def _split_facts(dataset: str, data_path: str | None) -> tuple[int, int, int]:
    """(training images, test images, classes) of a data set, read once per process."""
    splits = load_dataset(dataset, data_path, 8)
    return len(splits.train), len(splits.test), splits.num_classes  # type: ignore[arg-type]


def check_data(s: RunSettings, where: str) -> None:
    """The data set exists in its layout, holds enough images for the subsets and at least two classes."""
    if s.dataset == "synthetic":
        return
    try:
        if s.dataset in DATASETS_NEEDING_PATH:
            check_data_path(s.dataset, s.data_path)
        if is_python_data(s.dataset):  # registered in this process, and maybe again: read as it is now
            train, test, classes = user_facts(s.dataset)
        else:
            train, test, classes = _split_facts(s.dataset, s.data_path)
    except BenchlibError as exc:
        raise ConfigError(f"{where}: key 'data_path': {exc}") from exc
    for key, wanted, have, split in (("train_subset", s.train_subset, train, "training"),
                                     ("test_subset", s.test_subset, test, "test")):
        if wanted is not None and wanted > have:
            raise ConfigError(f"{where}: key '{key}' is {wanted}, more than the {have} images of the {split} split; "
                              f"allowed: 1..{have}")
    if classes < 2:
        raise ConfigError(f"{where}: key 'data_path': data set '{s.dataset}' at {s.data_path} has {classes} class; "
                          "allowed: 2 or more classes (over one class every prediction is right)")


def check_model(model: str, s: RunSettings, where: str, key: str = "key 'image_size'") -> None:
    """The network can be built here (a user's import path imports, a timm name exists) and takes the image
    size, and pretrained weights from ``weights_path`` load and fit it."""
    if model not in MODELS:
        _check_buildable(model, s, where)
    smallest = smallest_image_size(model)
    if s.image_size < smallest:
        flag = key.removeprefix("key ").strip("'")
        raise ConfigError(f"{where}: {key} is {s.image_size}: too small for {model} (its layers shrink it to "
                          f"nothing); allowed: {flag} >= {smallest} for {model}")
    if s.pretrained and s.weights_path:
        try:
            check_weights_file(model, Path(s.weights_path))
        except BenchlibError as exc:
            raise ConfigError(f"{where}: key 'weights_path': {exc}") from exc


@lru_cache(maxsize=64)
def _buildable(model: str, pretrained: bool, generation: int) -> str | None:
    """Why ``model`` cannot be built here, or None (built once on the CPU, the weights thrown away)."""
    try:
        build_model(model, 10, pretrained=pretrained)
    except BenchlibError as exc:  # a bad path, an unknown timm name, a missing extra
        return str(exc)
    return None


def _check_buildable(model: str, s: RunSettings, where: str) -> None:
    if problem := _buildable(model, s.pretrained, generation(model)):
        raise ConfigError(f"{where}: key 'models': {problem}")


def check_settings(s: RunSettings, models: Sequence[str], where: str,
                   sweep: Mapping[str, Sequence[Any]] | None = None) -> None:
    check_machine(s, where, sweep)
    check_data(s, where)
    for model in models:
        check_model(model, s, where)


def settings_from_params(namespace: Mapping[str, Any], where: str = "notebook parameters") -> RunSettings:
    """RunSettings from the variables a papermill ``parameters`` cell defined (validated and checked)."""
    settings = settings_from_mapping({k: namespace[k] for k in setting_names() if k in namespace}, where)
    check_machine(settings, where)
    check_data(settings, where)
    return settings
