"""A CPU step timed layer by layer by hooks (``instruments.hook_times``): every leaf's forward and backward, each
backward node credited to the leaf whose forward recorded it, and the rows adding up to the step."""
from __future__ import annotations

import torch
from torch import nn

from benchlib.instruments.hook_times import HookTimer, recorded_nodes
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
    assert abs(rows["time_us"].sum() - 1e6) < 1e-3  # the rest of the whole is the unattributed row
    assert rows.loc[("(unattributed)", "other"), "time_us"] > 0
    assert timer.step_rows(0.5).shape[0] == 1  # cleared: the next step starts empty


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
    assert timer.step_rows(0.01).shape[0] == 1
