"""The words a study file may use: models, data sets, hardware, knobs. Each list lives here once.

Lower layers never hard-code these: the model builder, the data loaders and the knob appliers import
their names from here, and every validator describes them from here.
"""
from __future__ import annotations

import re

MODELS: tuple[str, ...] = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "densenet121")
DATASETS: tuple[str, ...] = ("digits", "synthetic", "cifar10", "tinyimagenet", "imagefolder")
DATASETS_NEEDING_PATH: tuple[str, ...] = ("cifar10", "tinyimagenet", "imagefolder")
DIGITS_TRAIN_SAMPLES = 1437  # scikit-learn's 1797 digits, 80% in the fixed training split
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
OPTIMIZER_IMPLS: tuple[str, ...] = ("auto", "for_loop", "foreach", "fused")

PRECISIONS: tuple[str, ...] = ("fp32", "amp_fp16", "amp_bf16")
MEMORY_FORMATS: tuple[str, ...] = ("nchw", "channels_last")
COMPILE_MODES: tuple[str, ...] = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
QUANTIZATIONS: tuple[str, ...] = ("none", "dynamic", "static_int8")

HARDWARE_CHOICES = "cpu, cuda, cuda:N, mps, auto"
CUDA_NAME = re.compile(r"^cuda(?::(\d+))?$")

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # names become file and folder names
NAME_MAX_CHARS = 100
NAME_WORDS = f"a name of letters, digits, '.', '_' and '-' (at most {NAME_MAX_CHARS} characters)"


def is_valid_hardware_name(name: str) -> bool:
    """True for cpu, mps, auto, cuda and cuda:N (whether present or not)."""
    return name in ("cpu", "mps", "auto") or bool(CUDA_NAME.match(name))


def cuda_index(name: str) -> int | None:
    """N of ``cuda:N`` (0 for plain ``cuda``); None for other hardware names."""
    match = CUDA_NAME.match(name)
    return None if match is None else int(match.group(1) or 0)
