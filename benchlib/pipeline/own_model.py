"""One call on your own model: ``benchlib.benchmark(my_net)`` measures it as a study measures its models.

The model may be an ``nn.Module`` (each configuration trains a deep copy, so all start from the same
weights), a zero-argument factory, a torchvision name, ``timm:NAME`` or an import path
``package.module:factory``. Its input size and class count are read from the model where it tells them
(timm's ``pretrained_cfg``, the width of the logits of one probe batch); every configuration is recorded in
``results_dir`` like a study's (so ``benchlib report`` and the summary include it), and the rows come back
as a DataFrame with the results schema's columns.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..data.user_data import register_data, set_classes, user_data
from ..engine.setup import num_classes as data_classes
from ..errors import ConfigError, one_line
from ..nets.models import build_model
from ..nets.user_models import ModelSource, is_registered, register_model
from ..report.display.glance import BenchmarkResults, save_figure
from ..run import admission
from ..run.record import ProgressFn, pair_configs, run_pair, say
from ..spec.settings import RunSettings, settings_from_mapping
from ..spec.variants import Variant, parse_variant
from ..spec.vocab import MODELS, NAME_PATTERN, TIMM_PREFIX, model_problem
from ..store.layout import ResultsLayout
from ..store.rows import read_results
from ..store.schema import key_first

DEFAULT_IMAGE_SIZE_PX = 224  # what ImageNet-style networks are built for, when the model does not say
DEFAULT_STEPS = 20
DEFAULT_BATCH_SIZES = (32,)
PROBE_CLASSES = 10  # the class count a factory that takes num_classes is probed with
# A data set's name, or a user's own Dataset or DataLoader, or a (train, test) pair of them.
DataArgument = str | Dataset[Any] | DataLoader[Any] | tuple[Any, Any]


def model_reference(model: ModelSource | str, name: str | None = None) -> str:
    """The model as the rest of benchlib names it: a reference string; a module or factory is registered."""
    if isinstance(model, str):
        if is_registered(model):  # a module registered earlier in this process (register_model, compare)
            return model
        if problem := model_problem(model):
            raise ConfigError(f"benchmark: {problem}")
        return model
    name = name or str(type(model).__name__ if isinstance(model, nn.Module) else getattr(model, "__name__", ""))
    if not NAME_PATTERN.match(name) or "__" in name:
        raise ConfigError(f"benchmark: name {name!r} for the model; allowed: letters, digits, '.', '_' and '-' "
                          "without '__' (pass name=...)")
    if name in MODELS:
        raise ConfigError(f"benchmark: name '{name}' is torchvision's {name}; pass name=... for your own model")
    return register_model(name, model)


def _timm_input_size(ref: str) -> int | None:
    if not ref.startswith(TIMM_PREFIX):
        return None
    import timm

    size = timm.get_pretrained_cfg_value(ref.removeprefix(TIMM_PREFIX), "input_size")
    return int(size[-1]) if size else None


def probe_classes(ref: str, image_size: int, asked: int = PROBE_CLASSES) -> int:
    """The number of logits the model returns for a batch of images when built for ``asked`` classes (a
    factory may take ``num_classes``; a module has its own), in one line where it cannot take images."""
    with torch.random.fork_rng(devices=[]):
        net = build_model(ref, asked).eval()
        try:
            with torch.no_grad():
                out = net(torch.zeros(2, 3, image_size, image_size))
        except Exception as exc:  # the user's forward: anything may go wrong in it
            raise ConfigError(f"model '{ref}' did not take a batch of images [2, 3, {image_size}, {image_size}]: "
                              f"{one_line(exc)}; allowed: a "
                              "model whose forward takes one image tensor (pass image_size=... if it needs another "
                              "size)") from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 2:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"model '{ref}' returned {shape} for 2 images; allowed: logits of shape [batch, classes] "
                          "(wrap a model that returns a dict or several outputs in a module that returns the logits)")
    return int(out.shape[1])


def _python_data(data: Any, data_name: str | None, model: str, image_size: int | None, num_classes: int | None,
                 batch_sizes: Sequence[int] | None, flat: dict[str, Any]) -> tuple[str, int, Sequence[int] | None]:
    """Register a user's data; returns its reference, its image size and the batch sizes (a DataLoader's own
    where none were asked); its loader's workers become the default ``num_workers``."""
    train, test = data if isinstance(data, tuple) and len(data) == 2 else (data, None)
    base = train.dataset if isinstance(train, DataLoader) else train
    ref = register_data(data_name or type(base).__name__, train, test, num_classes)
    entry = user_data(ref)
    if image_size is not None and image_size != entry.image_size:
        raise ConfigError(f"benchmark: image_size is {image_size}; data '{ref}' holds images of {entry.image_size} "
                          f"px; allowed: image_size {entry.image_size} (or leave it out)")
    if entry.num_classes is None:
        set_classes(ref, probe_classes(model, entry.image_size))
    if entry.num_workers is not None:
        flat.setdefault("num_workers", entry.num_workers)
    return ref, entry.image_size, batch_sizes or ([entry.batch_size] if entry.batch_size else None)


@dataclass(frozen=True)
class BenchmarkPlan:
    """One ``benchmark`` call's configurations, admitted on this machine: what :func:`run_benchmark` measures."""

    study: str
    device: str
    model: str
    batch_sizes: tuple[int, ...]
    settings: RunSettings
    variants: tuple[Variant, ...]


def benchmark(model: ModelSource | str, *, name: str | None = None, hardware: str = "auto",
              batch_sizes: Sequence[int] | None = None, image_size: int | None = None, num_classes: int | None = None,
              variants: Sequence[str | Mapping[str, Any] | Variant] = (), steps: int = DEFAULT_STEPS,
              data: DataArgument = "synthetic",
              data_path: str | None = None, data_name: str | None = None, results_dir: str | Path = "results/adhoc",
              study: str = "adhoc", settings: Mapping[str, Any] | None = None, resume: bool = False,
              progress: ProgressFn | None = say) -> BenchmarkResults:
    """Train and time ``model`` at each batch size and variant on ``hardware``; record and return the rows
    (a DataFrame; in Jupyter it displays as a short table with its flags and a throughput figure).

    ``steps`` timed training steps (after the settings' warmup); ``settings`` sets any other run setting
    (``{"epochs": 2, "lr": 0.05}``). With ``data="synthetic"`` the data has the model's own class count; a
    data set name (``digits``, ``cifar10`` with ``data_path``, ...) must match it; so must a user's own
    ``Dataset`` or ``DataLoader`` (or a ``(train, test)`` pair of them; ``data_name`` names it, else its
    class), whose image size it takes and whose class count is ``num_classes``, else the one it states, else
    the model's output width (``data/user_data.py``). ``resume`` keeps rows a
    previous call recorded with the same settings (off by default: a model defined in a notebook may have
    changed under the same name). A variant ``hardware`` cannot run is recorded as a ``skipped`` row with
    the reason (and a warning says so first). A call never moves another call's rows: rows of other batch
    sizes or settings in ``results_dir`` stay where they are (each row's run id names its settings), where a
    study would set aside the rows its grid no longer has.
    """
    plan = plan_benchmark(model, name=name, hardware=hardware, batch_sizes=batch_sizes, image_size=image_size,
                          num_classes=num_classes, variants=variants, steps=steps, data=data, data_path=data_path,
                          data_name=data_name, study=study, settings=settings)
    return run_benchmark(plan, results_dir, resume=resume, progress=progress)


def plan_benchmark(model: ModelSource | str, *, name: str | None = None, hardware: str = "auto",
                   batch_sizes: Sequence[int] | None = None, image_size: int | None = None,
                   num_classes: int | None = None, variants: Sequence[str | Mapping[str, Any] | Variant] = (),
                   steps: int = DEFAULT_STEPS, data: DataArgument = "synthetic", data_path: str | None = None,
                   data_name: str | None = None, study: str = "adhoc",
                   settings: Mapping[str, Any] | None = None) -> BenchmarkPlan:
    """What :func:`benchmark` would measure, admitted here (``run/admission.py``) before any of it runs: a bad
    argument is one ConfigError naming it (``hardware``, ``batch_sizes``, a key of ``settings``)."""
    ref = model_reference(model, name)
    chosen = [v if isinstance(v, Variant) else parse_variant(v, "benchmark: variants") for v in variants]
    flat: dict[str, Any] = {"train_steps": steps, **(settings or {})}
    if data_path is not None:
        flat["data_path"] = data_path
    size = image_size or _timm_input_size(ref) or int(flat.get("image_size") or DEFAULT_IMAGE_SIZE_PX)
    if not isinstance(data, str):  # the user's own Dataset or DataLoader (or a (train, test) pair of them)
        data, size, batch_sizes = _python_data(data, data_name, ref, image_size, num_classes, batch_sizes, flat)
    batch_sizes = list(batch_sizes or DEFAULT_BATCH_SIZES)
    flat["dataset"] = data
    flat["image_size"] = size
    if data == "synthetic":
        flat.setdefault("synthetic_classes", num_classes or probe_classes(ref, size))
        flat.setdefault("synthetic_samples", max(256, 4 * max(batch_sizes, default=1)))
    run_settings: RunSettings = settings_from_mapping(flat, "benchmark")
    configs = pair_configs(study, hardware, ref, batch_sizes, run_settings, variants=chosen)
    admitted = admission.admit(configs, admission.Names("benchmark", hardware="hardware"), settings=run_settings)
    if data != "synthetic":  # the data set is admitted: its class count can be read
        wanted = data_classes(run_settings)
        if (got := probe_classes(ref, size, wanted)) != wanted:
            raise ConfigError(f"model '{ref}' returns {got} logits; data set '{data}' has {wanted} classes; allowed: "
                              "a model with as many outputs, or a factory taking num_classes")
    return BenchmarkPlan(study, admitted.hardware[hardware], ref, tuple(batch_sizes), run_settings, tuple(chosen))


def run_benchmark(plan: BenchmarkPlan, results_dir: str | Path = "results/adhoc", *, resume: bool = False,
                  progress: ProgressFn | None = say) -> BenchmarkResults:
    """Measure and record a plan's configurations; the rows come back as a DataFrame (see :func:`benchmark`)."""
    rows = run_pair(plan.study, plan.device, plan.model, list(plan.batch_sizes), plan.settings, results_dir,
                    variants=list(plan.variants), resume=resume, progress=progress, supersede=False)
    ids = {str(r["run_id"]) for r in rows}
    frame = read_results([results_dir])
    mine = frame[frame["run_id"].isin(ids)].reset_index(drop=True)
    mine = mine[key_first(list(mine.columns))]  # the figures a reader asks for first, then every other column
    result = BenchmarkResults(mine)
    figure = save_figure(mine, ResultsLayout.of(results_dir)) if not mine.empty else None
    result.attrs["figure_path"] = str(figure[0]) if figure else ""
    result.attrs["figure_png"] = figure[1] if figure else b""  # the glance shows it, read from no file
    return result
