"""One training step: profiling and tuning train through the engine's step with the variant's knobs applied."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import benchlib.engine.knobs as engine_knobs
import benchlib.engine.setup as setup
from benchlib.run.profile import profile_training
from benchlib.spec.settings import RunConfig, RunSettings

TINY = dict(dataset="digits", image_size=32, train_subset=32, test_subset=16, epochs=1, warmup_steps=1,
            latency_repeats=3, infer_warmup_batches=1)


@pytest.fixture
def seen(monkeypatch):
    """What the first convolution saw while training: (output dtype, input in channels_last)."""
    records: list[tuple[torch.dtype, bool]] = []
    real_build = setup.build_model

    def build_and_watch(*args, **kwargs):
        model = real_build(*args, **kwargs)
        conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))

        def hook(module, inputs, output):
            if module.training:
                records.append((output.dtype, inputs[0].is_contiguous(memory_format=torch.channels_last)))
        conv.register_forward_hook(hook)
        return model

    monkeypatch.setattr(setup, "build_model", build_and_watch)
    monkeypatch.setattr(engine_knobs, "bf16_supported", lambda device_type: True)  # autocast runs emulated if need be
    return records


def _cfg(**knobs) -> RunConfig:
    return RunConfig("t", "cpu", "squeezenet1_1", 8, RunSettings.of(**TINY, **knobs))


@pytest.mark.parametrize("knobs, dtype, channels_last", [
    ({"precision": "amp_bf16"}, torch.bfloat16, False),
    ({"memory_format": "channels_last"}, torch.float32, True),
    ({}, torch.float32, False),
])
def test_a_profiled_configuration_trains_with_its_knobs(tmp_path, seen, knobs, dtype, channels_last):
    profile_training(_cfg(**knobs), tmp_path, wait=0, warmup=0, active=2)
    assert seen and all(r == (dtype, channels_last) for r in seen), seen


@pytest.mark.parametrize("knobs, dtype, channels_last", [
    ({"precision": "amp_bf16"}, torch.bfloat16, False),
    ({"memory_format": "channels_last"}, torch.float32, True),
])
def test_a_tuning_trial_trains_with_its_knobs(seen, knobs, dtype, channels_last):
    pytest.importorskip("optuna", reason="tuning is an extra (benchlib[tune]); make install includes it")
    from benchlib.run.tune import train_by_epoch

    report = train_by_epoch(_cfg(**knobs), 1, torch.device("cpu"), lambda r: None)
    assert report.epoch == 0 and 0.0 <= report.test_accuracy <= 1.0
    assert seen and all(r == (dtype, channels_last) for r in seen), seen
