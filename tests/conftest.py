"""Shared fixtures: tiny configurations that run in seconds on 2 CPU cores."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("BENCHLIB_MACHINE", "testmachine")

TINY = dict(dataset="digits", image_size=32, train_subset=128, test_subset=64, train_steps=3, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=5, latency_budget_s=0.5, epochs=1)


@pytest.fixture
def tiny_settings():
    from benchlib.spec.settings import RunSettings

    return RunSettings(**TINY)


def pytest_collection_modifyitems(config, items):
    mps = getattr(torch.backends, "mps", None)
    present = {"gpu": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    reasons = {"gpu": "needs a CUDA GPU", "mps": "needs an Apple MPS device"}
    for item in items:
        for marker, here in present.items():
            if marker in item.keywords and not here:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))
