"""The two counters behind benchlib's work figures, instrumented to say what they did not count.

- fvcore (``count_macs``) counts multiply-accumulates by tracing the model; its operators outside
  convolutions and matrix products are kept apart (``non_mac_ops``).
- torch's ``FlopCounterMode`` (``count_forward``, ``count_train_per_sample``) counts FLOPs at the
  dispatcher, forward and backward, with a corrected formula for grouped convolutions' weight gradient.

Counting always runs on a float32 CPU copy (``counting_copy``); the caller's model is never touched.
"""
from __future__ import annotations

import copy
import logging
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, flop_registry

_COUNT_DEVICE = torch.device("cpu")
_COUNT_DTYPE = torch.float32
_SEED = 0

# Ops in fvcore's built-in ignore list that do arithmetic: fvcore would drop them silently, so they are
# taken off the list and show up in unsupported_ops() (a silent zero is a wrong number).
_FVCORE_ARITHMETIC_IGNORED: frozenset[str] = frozenset({
    "aten::relu", "aten::relu_", "aten::clamp", "aten::clamp_", "aten::dropout", "aten::max",
    "aten::eq", "aten::ge", "aten::gt", "aten::bitwise_not", "aten::__and__", "aten::floor",
    "aten::floor_divide", "aten::remainder", "aten::masked_fill",
})

# Dispatcher ops that move or allocate memory but do no arithmetic: not "uncounted", just zero work.
_NO_ARITHMETIC_OPS: frozenset[str] = frozenset({
    "aten.detach", "aten.clone", "aten.copy_", "aten._to_copy", "aten.empty", "aten.empty_like",
    "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided", "aten.zeros", "aten.zeros_like",
    "aten.ones_like", "aten.new_zeros", "aten.new_ones", "aten.full", "aten.full_like", "aten.fill_",
    "aten.zero_", "aten.cat", "aten.stack", "aten.lift_fresh", "aten.lift_fresh_copy",
    "aten._local_scalar_dense", "aten.set_", "aten.resize_", "aten.randint", "aten.random_",
})



@dataclass
class ForwardCounts:
    """What one instrumented forward pass saw, per leaf module (names as in ``named_modules``)."""

    flops_total: int
    flops_by_module: dict[str, int]
    activation_numel_by_leaf: dict[str, int]
    output_shape_by_leaf: dict[str, tuple[int, ...]]
    calls_by_leaf: dict[str, int]
    ops_seen: set[str]
    num_outputs: int


def counting_copy(model: nn.Module) -> nn.Module:
    """A float32 CPU copy in eval mode, so counting never changes the caller's mode, flags or device."""
    return copy.deepcopy(model).to(device=_COUNT_DEVICE, dtype=_COUNT_DTYPE).eval()


def random_input(batch_size: int, image_size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(_SEED)
    return torch.randn(batch_size, 3, image_size, image_size, generator=generator, dtype=_COUNT_DTYPE)


def random_labels(batch_size: int, num_classes: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(_SEED + 1)
    return torch.randint(0, num_classes, (batch_size,), generator=generator)


def leaf_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules without children: the layers that do the work (containers only route tensors)."""
    return {name: mod for name, mod in model.named_modules() if next(mod.children(), None) is None}


def _tensor_numel(obj: Any) -> int:
    return sum(t.numel() for t in tree_leaves(obj) if isinstance(t, torch.Tensor))


def weight_numel(model: nn.Module) -> int:
    """Parameters plus floating-point buffers (BN running stats are read in eval too; int counters are not)."""
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    return params + buffers


# ----------------------------------------------------------------------------------------------------------
# Counters
# ----------------------------------------------------------------------------------------------------------
def _conv_backward_flop(grad_out_shape: list[int], x_shape: list[int], w_shape: list[int], _bias: Any,
                        _stride: Any, _padding: Any, _dilation: Any, transposed: bool, _output_padding: Any,
                        _groups: int, output_mask: list[bool], out_shape: Any = None, **_: Any) -> int:
    """Each requested gradient (input, weight) of a convolution costs as many FLOPs as its forward.

    Replaces torch's formula, whose grad-weight term ignores ``groups`` and so counts a depthwise conv's
    weight gradient C times over (mobilenet_v2 training came out at ~20x forward; fixed upstream only in
    pytorch/pytorch#183405). The bias gradient is a reduction, left uncounted as matmul biases are.
    """
    forward_flops = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward_flops * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


FLOP_FORMULA_OVERRIDES: dict[Any, Any] = {torch.ops.aten.convolution_backward: _conv_backward_flop}
_COUNTED_PACKETS: frozenset[str] = frozenset(str(op) for op in (*flop_registry, *FLOP_FORMULA_OVERRIDES))


class _OpNameCollector(TorchDispatchMode):
    """Records the packet name of every op that reaches the dispatcher (after FlopCounterMode's decompositions)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not getattr(func, "is_view", False):
            self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def uncounted_dispatch_ops(ops_seen: set[str]) -> list[str]:
    """Ops that ran but have no flop formula: zero in FlopCounterMode's total although they do arithmetic."""
    return sorted(op for op in ops_seen if op not in _COUNTED_PACKETS and op not in _NO_ARITHMETIC_OPS)


@contextmanager
def _flop_counting() -> Iterator[tuple[FlopCounterMode, _OpNameCollector]]:
    """FlopCounterMode on top of an op collector, so the collector sees exactly what the counter executed."""
    collector = _OpNameCollector()
    counter = FlopCounterMode(display=False, custom_mapping=FLOP_FORMULA_OVERRIDES)
    with collector, counter:
        yield counter, collector


def _flops_by_module(counter: FlopCounterMode, root: nn.Module) -> dict[str, int]:
    """FlopCounterMode keys modules as 'ResNet.layer1.0.conv1'; map to ``named_modules`` names."""
    prefix = type(root).__name__ + "."
    out: dict[str, int] = {}
    for key, by_op in counter.get_flop_counts().items():
        if key.startswith(prefix):
            out[key.removeprefix(prefix)] = int(sum(by_op.values()))
    return out


@contextmanager
def _activation_hooks(leaves: dict[str, nn.Module]) -> Iterator[tuple[dict, dict, dict]]:
    """Forward hooks summing input + output numel per leaf call (in-place ops still read and write)."""
    numel: dict[str, int] = defaultdict(int)
    shapes: dict[str, tuple[int, ...]] = {}
    calls: dict[str, int] = defaultdict(int)

    def make_hook(name: str) -> Any:
        def hook(_module: nn.Module, inputs: Any, output: Any) -> None:
            numel[name] += _tensor_numel(inputs) + _tensor_numel(output)
            calls[name] += 1
            if name not in shapes:
                first = next((t for t in tree_leaves(output) if isinstance(t, torch.Tensor)), None)
                shapes[name] = tuple(first.shape) if first is not None else ()
        return hook

    handles = [mod.register_forward_hook(make_hook(name)) for name, mod in leaves.items()]
    try:
        yield numel, shapes, calls
    finally:
        for handle in handles:
            handle.remove()


def count_forward(model: nn.Module, x: torch.Tensor) -> ForwardCounts:
    """One eval-mode forward under FlopCounterMode, the op collector and leaf activation hooks."""
    leaves = leaf_modules(model)
    with _activation_hooks(leaves) as (numel, shapes, calls), _flop_counting() as (counter, collector):
        with torch.no_grad():
            out = model(x)
    return ForwardCounts(
        flops_total=int(counter.get_total_flops()),
        flops_by_module=_flops_by_module(counter, model),
        activation_numel_by_leaf=dict(numel),
        output_shape_by_leaf=shapes,
        calls_by_leaf=dict(calls),
        ops_seen=collector.ops,
        num_outputs=int(out.reshape(out.shape[0], -1).shape[1]),
    )


def count_train_per_sample(model: nn.Module, x: torch.Tensor, num_classes: int) -> tuple[float, set[str]]:
    """Training FLOPs per sample at the batch of ``x``.

    At batch 1 a BatchNorm over a 1x1 feature map cannot train ("Expected more than 1 value per channel");
    then the pass is counted at batch 2 and halved: conv/matmul FLOPs per sample do not depend on the batch.
    """
    try:
        flops, ops = _count_train(model, x, num_classes)
        return flops / x.shape[0], ops
    except ValueError:
        if x.shape[0] != 1:
            raise
    model.zero_grad(set_to_none=True)
    flops, ops = _count_train(model, x.expand(2, *x.shape[1:]).contiguous(), num_classes)
    return flops / 2, ops


def _count_train(model: nn.Module, x: torch.Tensor, num_classes: int) -> tuple[int, set[str]]:
    """FLOPs of forward + cross-entropy backward, counted (not assumed 3x), with every parameter trainable.

    The input does not require grad, so the first conv has no grad-input term: that is real work skipped.
    Mutates ``model`` (train mode, requires_grad, BN stats, .grad): only ever pass a counting copy.
    """
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    labels = random_labels(x.shape[0], num_classes)
    with torch.random.fork_rng(devices=[]), _flop_counting() as (counter, collector):  # dropout draws
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(x.shape[0], -1), labels)
        loss.backward()
    model.zero_grad(set_to_none=True)
    model.eval()
    return int(counter.get_total_flops()), collector.ops


@cache
def _strict_analysis() -> type:
    """fvcore's counter with arithmetic ops removed from its silent ignore list, so they get reported.

    fvcore is imported here, on the first count, not when benchlib is: it costs a second of start-up
    (it scripts a loss at import, under torch.jit.script's FutureWarning) and only MACs need it.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from fvcore.nn import FlopCountAnalysis

    class StrictFlopCountAnalysis(FlopCountAnalysis):
        def __init__(self, model: nn.Module, inputs: Any) -> None:
            super().__init__(model, inputs)
            self._ignored_ops: set[str] = set(self._ignored_ops) - _FVCORE_ARITHMETIC_IGNORED

    return StrictFlopCountAnalysis


@contextmanager
def _quiet_fvcore() -> Iterator[None]:
    """fvcore logs skipped ops and torch.jit warns while tracing; the skipped ops are returned instead."""
    logger = logging.getLogger("fvcore")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


# fvcore's operator names for the work FlopCounterMode counts too: multiply-accumulates.
MAC_OPERATORS = frozenset({"conv", "linear", "addmm", "matmul", "mm", "bmm", "einsum"})


@dataclass(frozen=True)
class FvcoreCounts:
    macs: int
    macs_by_module: dict[str, int]
    non_mac_ops: dict[str, int]  # fvcore's count per operator outside MAC_OPERATORS (normalization, pooling)
    skipped: list[str]


def count_macs(model: nn.Module, x: torch.Tensor) -> FvcoreCounts:
    """fvcore's counts: MACs of convolutions and matrix products, per module; the other operators apart."""
    with _quiet_fvcore(), torch.no_grad():
        analysis = (_strict_analysis()(model, x)
                    .unsupported_ops_warnings(False)
                    .uncalled_modules_warnings(False)
                    .tracer_warnings("none"))
        by_operator = {op: int(v) for op, v in analysis.by_operator().items()}
        by_module = {name: int(sum(v for op, v in ops.items() if op in MAC_OPERATORS))
                     for name, ops in analysis.by_module_and_operator().items()}
        skipped = sorted(analysis.unsupported_ops().keys())
    macs = sum(v for op, v in by_operator.items() if op in MAC_OPERATORS)
    other = {op: v for op, v in sorted(by_operator.items()) if op not in MAC_OPERATORS}
    return FvcoreCounts(macs, by_module, other, skipped)
