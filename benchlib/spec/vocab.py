"""The words a study file may use: models, data sets, hardware, knobs. Each list lives here once.

Lower layers never hard-code these: the model builder, the data loaders and the knob appliers import
their names from here, and every validator describes them from here.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from ..store.identity import model_token  # noqa: F401  # its home is the run id's: re-exported for the words' users

MODELS: tuple[str, ...] = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "densenet121")
# Beyond the torchvision names: any timm model, any factory a user's package exports, and (from Python)
# a module handed to ``benchlib.benchmark``, registered under its name for the process.
TIMM_PREFIX = "timm:"
_TIMM_REF = re.compile(r"^timm:[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_IMPORT_REF = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
MODEL_FORMS = (f"a torchvision name ({', '.join(MODELS)}), timm:NAME (with timm installed), or an import path "
               "package.module:factory (a function or class returning an nn.Module)")
DATASETS: tuple[str, ...] = ("digits", "synthetic", "cifar10", "tinyimagenet", "imagefolder")
DATASETS_NEEDING_PATH: tuple[str, ...] = ("cifar10", "tinyimagenet", "imagefolder")
# A Dataset or DataLoader handed to ``benchlib.benchmark`` in Python, registered for the process under this.
PYTHON_DATA_PREFIX = "python:"
PYTHON_DATA_REF = re.compile(r"^python:[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
DATA_FORMS = (f"{', '.join(DATASETS)}, or python:NAME (a Dataset or DataLoader handed to benchlib.benchmark in "
              "this process)")
DIGITS_TRAIN_SAMPLES = 1437  # scikit-learn's 1797 digits, 80% in the fixed training split
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
OPTIMIZER_IMPLS: tuple[str, ...] = ("auto", "for_loop", "foreach", "fused")

PRECISIONS: tuple[str, ...] = ("fp32", "amp_fp16", "amp_bf16")
MEMORY_FORMATS: tuple[str, ...] = ("nchw", "channels_last")
COMPILE_MODES: tuple[str, ...] = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
QUANTIZATIONS: tuple[str, ...] = ("none", "dynamic", "static_int8")

# The kinds of operation a layer is judged by, each against a roof measured for that kind (``roofline.ceilings``):
# a dense kxk convolution (k > 1, judged by the 3x3's roof), a pointwise one, a depthwise one, a matrix
# product, and elementwise work (batch norm, activations, pooling, the optimizer), bandwidth-bound
OP_KINDS: tuple[str, ...] = ("conv3x3", "conv1x1", "depthwise", "matmul", "elementwise")
COMPUTE_KINDS: tuple[str, ...] = OP_KINDS[:4]
BANDWIDTH_KINDS: tuple[str, ...] = ("dram", "cache")  # elementwise work on tensors past or inside the cache

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


def is_python_data(name: str) -> bool:
    return bool(PYTHON_DATA_REF.match(name))


# What a setting with a ``pattern`` check allows, in words (fields.describe)
PATTERN_WORDS: dict[re.Pattern[str], str] = {NAME_PATTERN: NAME_WORDS, PYTHON_DATA_REF: "python:NAME"}


def is_timm_ref(model: str) -> bool:
    return bool(_TIMM_REF.match(model))


def is_import_ref(model: str) -> bool:
    """``package.module:factory``: a callable (or module object) a user's package exports."""
    return bool(_IMPORT_REF.match(model)) and not model.startswith(TIMM_PREFIX)


def did_you_mean(word: str, choices: Sequence[str], prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


def model_problem(model: str) -> str | None:
    """What is wrong with a model reference as a study or the command line writes it (None: a valid form), with
    the nearest torchvision name where one is near (``resnet81``: did you mean 'resnet18'?)."""
    if model in MODELS or is_timm_ref(model) or is_import_ref(model):
        return None
    return f"model '{model}' is not a model reference{did_you_mean(model, MODELS)}; allowed: {MODEL_FORMS}"



# Element types ``benchlib flops --dtype`` counts bytes in, by torch's name for them.
ELEMENT_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

# The row of a per-layer table for what no leaf module holds (the loss, a residual add, the optimizer): the
# time and FLOPs counters both name it so, and they join on it.
UNATTRIBUTED_LAYER = "(unattributed)"
# The row of the optimizer's step, one for all parameters (it updates them all in one call).
OPTIMIZER_LAYER = "(optimizer)"
# The row of the time a step waited for its batch (the ``data_wait`` region), measured apart from the rest.
DATA_WAIT_LAYER = "(data wait)"
# The row of what timing a step layer by layer cost it (the hooks' own bodies, timed in place, and their calls'
# overhead, measured on a probe): the instrument's time, never the work's, so no split names it a cause.
TIMING_LAYER = "(timing)"
