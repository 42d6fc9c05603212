"""A CPU step timed layer by layer by hooks (``instruments.hook_times``): every leaf's forward and backward, each
backward node credited to the leaf whose forward recorded it, and the rows adding up to the step."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from benchlib.instruments.hook_times import CallCost, HookTimer, probe_cost, recorded_nodes
from benchlib.nets.counters import leaf_modules


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.Flatten(),
                         nn.Linear(4 * 8 * 8, 5))


def test_each_leaf_has_its_forward_and_the_backward_of_the_nodes_it_recorded():
    net = _net()
    timer = HookTimer(leaf_modules(net))
    x = torch.randn(2, 3, 8, 8)
    with timer.attached():
        with timer.region("(optimizer)", "optimizer"):
            pass
        loss = net(x).sum()
        loss.backward()
    rows = timer.step_rows(1.0).set_index(["layer", "phase"])
    for name in ("0", "1", "2", "3", "4"):
        assert rows.loc[(name, "forward"), "calls"] == 1
    # the conv, the batch norm, the in-place ReLU (its node is its own, not the batch norm's), the flatten's
    # view and the linear's product each ran their backward; the loss's sum is in no leaf
    for name in ("0", "1", "2", "3", "4"):
        assert rows.loc[(name, "backward"), "calls"] >= 1, name
    assert rows.loc[("(optimizer)", "optimizer"), "calls"] == 1
    assert abs(rows["time_us"].sum() - 1e6) < 1e-3  # the rest of the whole is the timing and unattributed rows
    assert rows.loc[("(unattributed)", "other"), "time_us"] > 0
    assert rows.loc[("(timing)", "other"), "time_us"] > 0
    assert set(timer.step_rows(0.5)["layer"]) == {"(timing)", "(unattributed)"}  # cleared: the next step starts empty


def test_the_nodes_of_a_layer_stop_at_its_inputs_and_its_parameters():
    conv, bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
    h = conv(torch.randn(1, 3, 6, 6))
    out = bn(h)
    nodes = recorded_nodes(out, {h.grad_fn})
    assert [type(n).__name__ for n in nodes] == ["NativeBatchNormBackward0"]
    assert [type(n).__name__ for n in recorded_nodes(h, set())] == ["ConvolutionBackward0"]  # no AccumulateGrad


def test_a_batch_one_forward_without_grad_times_forwards_only():
    net = _net().eval()
    timer = HookTimer(leaf_modules(net))
    with timer.attached(), torch.inference_mode():
        net(torch.randn(1, 3, 8, 8))
    rows = timer.step_rows(0.01)
    assert set(rows["phase"]) == {"forward", "other"} and (rows["time_us"] >= 0).all()
    with torch.inference_mode():
        net(torch.randn(1, 3, 8, 8))  # detached: no hook left behind
    assert set(timer.step_rows(0.01)["layer"]) == {"(timing)", "(unattributed)"}


class _Ticks:
    """A clock that moves 1 s at each reading: every interval is a count of readings."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_the_hooks_own_cost_is_a_row_of_its_own_not_the_rest_of_the_step():
    """Their bodies timed in place (one tick each with this clock: a pre-hook's entry to its mark, a forward
    hook's mark to its exit) and their calls counted at the probe's cost: with the cost left in the rest, a
    fixed cost per step would tilt every per-sample split towards the small batch."""
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    ticks = _Ticks()
    timer = HookTimer(leaf_modules(net), clock=ticks, call_cost=CallCost(forward_s=10.0, backward_s=100.0))
    with timer.attached():
        net(torch.randn(2, 3)).sum().backward()
    rows = timer.step_rows(10_000.0).set_index(["layer", "phase"])
    backward = int(rows.xs("backward", level="phase")["calls"].sum())
    assert backward >= 3
    # 3 leaves: 2 ticks of body each, 3 forward calls at 10 s and the backward nodes at 100 s
    assert rows.loc[("(timing)", "other"), "time_us"] == pytest.approx((3 * 2 + 3 * 10 + backward * 100) * 1e6)
    assert rows["time_us"].sum() == pytest.approx(10_000.0 * 1e6)


def test_without_grad_the_calls_cost_the_inference_figure():
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    timer = HookTimer(leaf_modules(net), clock=_Ticks(), call_cost=CallCost(forward_s=10.0, inference_s=1.0))
    with timer.attached(), torch.inference_mode():
        net(torch.randn(1, 3))
    rows = timer.step_rows(1_000.0).set_index(["layer", "phase"])
    assert rows.loc[("(timing)", "other"), "time_us"] == pytest.approx((2 * 2 + 2 * 1) * 1e6)


def test_the_timing_row_never_holds_more_than_the_step_beside_its_layers():
    net = nn.Sequential(nn.Linear(3, 3))
    timer = HookTimer(leaf_modules(net), clock=_Ticks(), call_cost=CallCost(inference_s=1e6))
    with timer.attached(), torch.inference_mode():
        net(torch.randn(1, 3))
    rows = timer.step_rows(5.0).set_index(["layer", "phase"])
    assert rows.loc[("(timing)", "other"), "time_us"] == pytest.approx(4.0 * 1e6)  # 5 s less the layer's 1 s
    assert rows.loc[("(unattributed)", "other"), "time_us"] == 0.0


def test_the_probe_measures_a_small_finite_cost_per_call():
    cost = probe_cost(leaves=8, calls=5, rounds=3)
    for value in (cost.forward_s, cost.backward_s, cost.inference_s):
        assert 0.0 <= value < 1e-3  # microseconds a call, never negative, never a millisecond
