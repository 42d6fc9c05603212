"""Shared fixtures: tiny configurations that run in seconds on 2 CPU cores."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("BENCHLIB_MACHINE", "testmachine")

TINY = dict(dataset="digits", image_size=32, train_subset=128, test_subset=64, train_steps=3, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=5, epochs=1)


@pytest.fixture
def tiny_settings():
    from benchlib.config import RunSettings

    return RunSettings(**TINY)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
