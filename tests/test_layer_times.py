"""Per-layer time of a training step from one profile: forward by range, backward by sequence number."""
from __future__ import annotations

import pytest
import torch
import torchvision

from benchlib.instruments.layer_times import (
    LAYER_TIME_COLUMNS,
    UNATTRIBUTED,
    layer_ranges,
    layer_times,
    phase_time_us,
    with_unattributed,
)
from benchlib.instruments.profiler import step_spans
from benchlib.nets.counters import leaf_modules


def _profiled_resnet18(steps: int = 3, batch: int = 8, image_size: int = 32):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 3, image_size, image_size), torch.randint(0, 10, (batch,))
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
    cycles: list = []  # the events of the active steps, handed over as the cycle ends (as run/profile.py takes them)
    with layer_ranges(leaf_modules(model)) as names, torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
            on_trace_ready=lambda p: cycles.append(p.events())) as prof:
        for _ in range(steps + 1):
            with torch.autograd.profiler.record_function("forward"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with torch.autograd.profiler.record_function("backward"):
                loss.backward()
            with torch.autograd.profiler.record_function("optimizer_step"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            prof.step()
    (events,) = cycles
    return model, names, events, step_spans(events)


@pytest.fixture(scope="module")
def profiled():
    return _profiled_resnet18()


def test_every_leaf_has_a_forward_and_the_parametrized_ones_a_backward(profiled):
    model, names, events, spans = profiled
    assert len(spans) == 3
    times = layer_times(events, spans)
    assert list(times.columns) == list(LAYER_TIME_COLUMNS)
    forward = set(times.loc[times["phase"] == "forward", "layer"])
    assert forward == set(names) == set(leaf_modules(model))
    backward = set(times.loc[times["phase"] == "backward", "layer"])
    with_weights = {n for n, m in leaf_modules(model).items() if any(p.requires_grad for p in m.parameters())}
    assert with_weights <= backward, sorted(with_weights - backward)
    # the downsample branch's 1x1 convolution is credited with its own backward, not the main branch's
    calls = times.set_index(["layer", "phase"])["calls"]
    assert calls[("layer2.0.downsample.0", "backward")] == calls[("layer2.0.conv2", "backward")] == len(spans)
    relu = times[(times["layer"] == "layer1.0.relu") & (times["phase"] == "forward")]
    assert int(relu["calls"].iloc[0]) == 2 * 3, "a ReLU reused in a block: two ranges per step"


def test_layers_cover_the_passes_and_the_rest_is_a_row_of_its_own(profiled):
    _, _, events, spans = profiled
    times = layer_times(events, spans)
    for phase in ("forward", "backward"):
        layers_us = times.loc[times["phase"] == phase, "time_us"].sum()
        region_us = phase_time_us(spans, phase)
        assert 0.8 * region_us <= layers_us <= region_us * 1.001, (phase, layers_us, region_us)
    table, coverage = with_unattributed(times, spans)
    assert table["time_us"].sum() == pytest.approx(sum(s.step_time_us for s in spans))
    assert table["share"].sum() == pytest.approx(1.0)
    assert table.iloc[-1]["layer"] == UNATTRIBUTED and 0.7 < coverage < 1.0


def test_the_hooks_go_when_the_block_ends():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    with layer_ranges(leaf_modules(model)) as names:
        assert names == ["0", "1"] and model[0]._forward_pre_hooks
    assert not model[0]._forward_pre_hooks and not model[0]._forward_hooks


def _event(name, start, end, *, device_us=0.0, seq=-1, thread=1, fwd_thread=None):
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    return SimpleNamespace(name=name, device_type=DeviceType.CPU, is_async=False, thread=thread, sequence_nr=seq,
                           fwd_thread=fwd_thread, time_range=SimpleNamespace(start=start, end=end),
                           device_time_total=device_us)


def test_on_a_gpu_a_layer_takes_the_kernels_launched_under_its_range_not_the_launch_time():
    """A GPU step as torch.profiler reports it (faked: no GPU here): each range's host time is the launch, its
    ``device_time_total`` the kernels it launched; the backward's kernels sit under the evaluate_function event
    whose sequence number the forward op recorded."""
    from benchlib.instruments.layer_times import BACKWARD_PREFIX, region_device_us
    from benchlib.instruments.profiler import StepSpans

    events = [
        _event("ProfilerStep#1", 0, 1000),
        _event("layer::conv", 10, 20, device_us=300.0), _event("aten::conv2d", 11, 19, seq=7),
        _event("layer::fc", 30, 35, device_us=40.0), _event("aten::addmm", 31, 34, seq=9),
        _event(BACKWARD_PREFIX + "AddmmBackward0", 50, 55, device_us=80.0, seq=9, thread=2, fwd_thread=1),
        _event(BACKWARD_PREFIX + "ConvolutionBackward0", 60, 70, device_us=600.0, seq=7, thread=2, fwd_thread=1),
        _event("optimizer_step", 80, 90, device_us=120.0),
    ]
    spans = [StepSpans(1, 0, 1000)]
    on_device = layer_times(events, spans, device=True).set_index(["layer", "phase"])["time_us"]
    assert on_device.to_dict() == {("conv", "forward"): 300.0, ("fc", "forward"): 40.0, ("fc", "backward"): 80.0,
                                   ("conv", "backward"): 600.0}
    on_host = layer_times(events, spans).set_index(["layer", "phase"])["time_us"]
    assert on_host[("conv", "forward")] == 10.0 and on_host[("conv", "backward")] == 10.0  # the launches only
    assert region_device_us(events, spans, "optimizer_step") == 120.0


def test_each_layer_names_the_kernels_launched_under_it_forward_and_backward():
    """The kernels under a layer are what tells a Winograd convolution (which may beat the nominal roof) from
    a TF32 leak into strict fp32: each layer and phase names its own, the children's included."""
    from types import SimpleNamespace

    from benchlib.instruments.layer_times import BACKWARD_PREFIX, layer_kernels
    from benchlib.instruments.profiler import StepSpans

    def kernels(*names):
        return [SimpleNamespace(name=n) for n in names]

    conv_op = _event("aten::conv2d", 11, 19, seq=7)
    conv_op.cpu_children = [_event("aten::cudnn_convolution", 12, 18)]
    conv_op.cpu_children[0].kernels = kernels("sm80_xmma_fprop_winograd_f32f32", "nchwToNhwcKernel")
    conv_range = _event("layer::conv", 10, 20)
    conv_range.cpu_children = [conv_op]
    backward = _event(BACKWARD_PREFIX + "ConvolutionBackward0", 60, 70, seq=7, thread=2, fwd_thread=1)
    backward.kernels = kernels("sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32", "sm80_xmma_wgrad_f32")
    events = [_event("ProfilerStep#1", 0, 1000), conv_range, conv_op, backward]
    found = layer_kernels(events, [StepSpans(1, 0, 1000)])
    assert found == {("conv", "forward"): ["nchwToNhwcKernel", "sm80_xmma_fprop_winograd_f32f32"],
                     ("conv", "backward"): ["sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32",
                                            "sm80_xmma_wgrad_f32"]}
