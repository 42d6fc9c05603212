"""Peak memory is the RSS high-water mark over the configuration, above a pre-model baseline."""
from __future__ import annotations

import pytest
import torch

from benchlib.instruments.memory import PeakMemory, current_rss_bytes


def test_peak_rss_sees_a_transient_tensor():
    mem = PeakMemory(torch.device("cpu")).start()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    block += 1
    del block
    report = mem.stop()
    assert report.peak_rss_bytes > report.rss_baseline_bytes
    assert report.peak_rss_above_baseline_bytes >= 48 * 2**20
    assert report.peak_rss_bytes >= current_rss_bytes() * 0.5
    assert report.peak_rss_source in ("VmHWM", "psutil-sampled")
    assert report.peak_cuda_allocated_bytes is None


def test_sampler_fallback_when_hwm_cannot_reset(monkeypatch):
    import benchlib.instruments.memory as memory

    monkeypatch.setattr(memory, "_reset_vm_hwm", lambda: False)
    mem = PeakMemory(torch.device("cpu"), sample_interval_s=0.005).start()
    block = torch.ones(64 * 2**20 // 4)
    block += 1
    import time

    time.sleep(0.05)
    del block
    report = mem.stop()
    assert report.peak_rss_source == "psutil-sampled"
    assert report.peak_rss_above_baseline_bytes >= 48 * 2**20


def test_second_configuration_does_not_inherit_first_peak():
    mem = PeakMemory(torch.device("cpu")).start()
    big = torch.ones(128 * 2**20 // 4)
    big += 1
    del big
    first = mem.stop()
    second = PeakMemory(torch.device("cpu")).start().stop()
    if first.peak_rss_source != "VmHWM":
        pytest.skip(f"the peak is reset per configuration only where Linux's VmHWM is read ({first.peak_rss_source})")
    assert second.peak_rss_bytes < first.peak_rss_bytes
