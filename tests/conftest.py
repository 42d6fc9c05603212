"""Shared fixtures: tiny configurations that run in seconds on 2 CPU cores."""
from __future__ import annotations

import importlib.util
import os
import tempfile

import pytest
import torch

os.environ.setdefault("BENCHLIB_MACHINE", "testmachine")
# What is measured of the machine (ceilings, the noise floor) is kept in a machine cache (store/machine_cache.py):
# the tests, and the processes they start, keep theirs in a folder of this session's, never the user's.
os.environ["BENCHLIB_CACHE"] = tempfile.mkdtemp(prefix="benchlib-test-cache-")

# Tuning is an extra (benchlib[tune]): where optuna is missing (the torch floor's environment, a core install)
# its tests skip with the reason, and the rest of the suite runs.
NEEDS_OPTUNA = pytest.mark.skipif(importlib.util.find_spec("optuna") is None,
                                  reason="needs the tune extra (optuna): pip install 'benchlib[tune]'")

TINY = dict(dataset="digits", image_size=32, train_subset=128, test_subset=64, train_steps=3, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=6, latency_budget_s=0, epochs=1)


# The machine's ceilings (a few seconds of matmul and copy benchmarks, more when noisy) are measured once per
# test session and device, then handed to every results folder a test records into in this process, as a
# study hands its ceilings to its pairs. Measuring them per folder, as the product does, is what these
# modules test, so they measure for real:
REAL_CEILINGS_MODULES = ("test_ceilings_under_load.py", "test_roofline.py")
_SESSION_CEILINGS: dict[str, object] = {}


@pytest.fixture(autouse=True)
def _ceilings_once_per_session(request, monkeypatch):
    if request.node.path.name in REAL_CEILINGS_MODULES:
        return
    from benchlib.roofline import cache

    def once(real):
        def measured(device, *args, **kwargs):
            if args or kwargs:  # a particular measurement (fewer dtypes, another threshold): not shared
                return real(device, *args, **kwargs)
            key = f"{real.__name__}:{device}"
            if key not in _SESSION_CEILINGS:
                _SESSION_CEILINGS[key] = real(device)
            return _SESSION_CEILINGS[key]
        return measured

    monkeypatch.setattr(cache, "measure_ceilings_robust", once(cache.measure_ceilings_robust))
    monkeypatch.setattr(cache, "measure_watched", once(cache.measure_watched))


def seed_ceilings(results_dir) -> None:
    """Save this session's CPU ceilings (measured once) into a results folder that a process a test starts
    will record into, as a study hands its ceilings to its pairs: a fresh `benchlib run` or study would
    otherwise spend seconds measuring them for real (the ceilings modules above test that)."""
    from benchlib.roofline import cache, ceilings

    key = "measure_ceilings_robust:cpu"
    if key not in _SESSION_CEILINGS:
        _SESSION_CEILINGS[key] = ceilings.measure_ceilings_robust("cpu")
    cache.save_ceilings(_SESSION_CEILINGS[key], results_dir)


# One pair: what the notebook and browser tests check of a study (pages, figures, profile, rules) needs one
# model at two batch sizes; a second pair doubled the study's time and showed nothing more.
TINY_STUDY = {"study": "tiny", "description": "a tiny pair, two batch sizes, profiled", "hardware": ["cpu"],
              "models": ["squeezenet1_1"], "batch_sizes": [8, 16], "dataset": "digits", "image_size": 32,
              "train_subset": 64, "test_subset": 32, "train_steps": 2, "warmup_steps": 1, "latency_repeats": 6,
              "latency_budget_s": 0, "infer_warmup_batches": 1, "profile": True, "calibrate": False,
              "ceilings_at_end": False}


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory):
    """The quickstart notebook as a new user runs it (fewer steps): a user's model measured, two variants
    judged, then the tiny study above through papermill and published. Run once per session: the notebook
    test checks the notebook and the study, the browser test opens the same published pages."""
    from pathlib import Path
    from types import SimpleNamespace

    import yaml

    from benchlib.pipeline import publish

    root = tmp_path_factory.mktemp("quickstart")
    repo = Path(__file__).resolve().parents[1]
    params = root / "tiny.yaml"
    params.write_text(yaml.safe_dump(TINY_STUDY))
    run = SimpleNamespace(notebook=root / "quickstart.ipynb", mine=root / "mine", results=root / "results",
                          reports=root / "reports")
    for folder in (run.mine, run.results / TINY_STUDY["study"]):  # the ceilings modules test measuring them
        seed_ceilings(folder)
    publish.execute(repo / "notebooks" / "quickstart.ipynb", run.notebook,
                    {"steps": 3, "settings": {"latency_budget_s": 0}, "results_dir": str(run.mine),
                     "study_params": str(params), "results_root": str(run.results), "reports_root": str(run.reports)},
                    cwd=repo, cell_timeout_s=600, progress=False)
    return run


@pytest.fixture
def tiny_settings():
    from benchlib.spec.settings import RunSettings

    return RunSettings(**TINY)


# `make test-fast` leaves out what is marked slow: whole studies, notebooks, SLURM, the browser, several
# processes, and the tests that take over about 7 s here (marked one by one), or that use a module fixture
# that does (below).
SLOW_MARKERS = ("notebook", "slurm", "browser")
SLOW_FIXTURES = {"test_diff.py": {"folders", "fresh"}, "test_quantize.py": {"trained_resnet18"},
                 "test_tuning.py": {"accuracy_study"}, "test_variant_runs.py": {"rows"},
                 "test_hostile_input.py": {"earlier"}}


def pytest_collection_modifyitems(config, items):
    mps = getattr(torch.backends, "mps", None)
    present = {"gpu": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    reasons = {"gpu": "needs a CUDA GPU", "mps": "needs an Apple MPS device"}
    for item in items:
        slow_fixtures = SLOW_FIXTURES.get(item.path.name, set()) | {"quickstart_run"}
        if any(m in item.keywords for m in SLOW_MARKERS) or slow_fixtures & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for marker, here in present.items():
            if marker in item.keywords and not here:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))
