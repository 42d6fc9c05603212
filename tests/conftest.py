"""Shared fixtures: tiny configurations that run in seconds on 2 CPU cores."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("BENCHLIB_MACHINE", "testmachine")

TINY = dict(dataset="digits", image_size=32, train_subset=128, test_subset=64, train_steps=3, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=5, latency_budget_s=0.5, epochs=1)


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
        slow_fixtures = SLOW_FIXTURES.get(item.path.name, set())
        if any(m in item.keywords for m in SLOW_MARKERS) or slow_fixtures & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for marker, here in present.items():
            if marker in item.keywords and not here:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))
