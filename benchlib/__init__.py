"""benchlib: profile and benchmark CNN training and inference on CPUs and GPUs with PyTorch.

The public API, what the notebooks and scripts use. Names load on first use (PEP 562), so that
``import benchlib.spec`` stays torch-free and the command line starts quickly; the layers below are
described in ``docs/architecture.md``.

    import benchlib as bl
    df = bl.benchmark(my_net, batch_sizes=[32, 64])          # any nn.Module, timm:NAME or package.module:factory
    study = bl.load_study("params/default.yaml")            # validated, and checked against this machine
    rows = bl.run_pair(study.study, "cpu", "resnet18", [64], study.settings, "results/default")
    df = bl.read_results(["results/default"])
"""
from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._version import __version__

# In a Jupyter kernel without ipywidgets, tqdm (which optuna imports) warns that it cannot draw a notebook
# progress bar. No benchlib page draws one: the warning would only stand in a published page as noise.
warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")

_API: dict[str, str] = {
    # what to run
    "RunSettings": "benchlib.spec.settings", "RunConfig": "benchlib.spec.settings", "Knobs": "benchlib.spec.knobs",
    "StudyConfig": "benchlib.spec.study", "Variant": "benchlib.spec.variants", "PRESETS": "benchlib.spec.variants",
    "parse_variant": "benchlib.spec.variants", "parse_search_space": "benchlib.spec.tune",
    "load_study": "benchlib.run.admission", "settings_from_params": "benchlib.run.preflight",
    "check_parameters": "benchlib.spec.notebook_params",
    "from_project_root": "benchlib.store.layout",
    "run_study": "benchlib.pipeline.study",
    # the machine
    "apply_threads": "benchlib.env.threads", "collect_manifest": "benchlib.env.manifest",
    "page_line": "benchlib.log",
    # one call on any model
    "benchmark": "benchlib.pipeline.own_model", "compare": "benchlib.pipeline.compare",
    "register_model": "benchlib.nets.user_models",
    # a machine you do not have, from its ceilings
    "predict": "benchlib.pipeline.predict",
    # measure and record
    "measure": "benchlib.run.measure", "Measurement": "benchlib.run.measurement",
    "measured_row": "benchlib.run.columns", "record": "benchlib.run.record",
    "run_pair": "benchlib.run.record", "record_profile": "benchlib.run.profile", "tune_pair": "benchlib.run.tune",
    "measure_layers": "benchlib.run.layers", "record_layers": "benchlib.run.layers",
    "LayerReport": "benchlib.run.layers", "before_step": "benchlib.engine.hooks",
    "measure_ceilings": "benchlib.roofline.ceilings", "Ceilings": "benchlib.roofline.ceilings",
    # read results back
    "read_results": "benchlib.store.rows", "ResultsLayout": "benchlib.store.layout",
    "Results": "benchlib.report.display.results",
}
__all__ = [
    "PRESETS",
    "Ceilings",
    "Knobs",
    "LayerReport",
    "Measurement",
    "Results",
    "ResultsLayout",
    "RunConfig",
    "RunSettings",
    "StudyConfig",
    "Variant",
    "__version__",
    "apply_threads",
    "before_step",
    "benchmark",
    "check_parameters",
    "collect_manifest",
    "compare",
    "from_project_root",
    "load_study",
    "measure",
    "measure_ceilings",
    "measure_layers",
    "measured_row",
    "page_line",
    "parse_search_space",
    "parse_variant",
    "predict",
    "read_results",
    "record",
    "record_layers",
    "record_profile",
    "register_model",
    "run_pair",
    "run_study",
    "settings_from_params",
    "tune_pair",
]

if TYPE_CHECKING:
    from .engine.hooks import before_step
    from .env.manifest import collect_manifest
    from .env.threads import apply_threads
    from .log import page_line
    from .nets.user_models import register_model
    from .pipeline.compare import compare
    from .pipeline.own_model import benchmark
    from .pipeline.predict import predict
    from .pipeline.study import run_study
    from .report.display.results import Results
    from .roofline.ceilings import measure_ceilings
    from .roofline.measured import Ceilings
    from .run.admission import load_study
    from .run.columns import measured_row
    from .run.layers import LayerReport, measure_layers, record_layers
    from .run.measure import measure
    from .run.measurement import Measurement
    from .run.preflight import settings_from_params
    from .run.profile import record_profile
    from .run.record import record, run_pair
    from .run.tune import tune_pair
    from .spec.knobs import Knobs
    from .spec.notebook_params import check_parameters
    from .spec.settings import RunConfig, RunSettings
    from .spec.study import StudyConfig
    from .spec.tune import parse_search_space
    from .spec.variants import PRESETS, Variant, parse_variant
    from .store.layout import ResultsLayout, from_project_root
    from .store.rows import read_results


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'benchlib' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
