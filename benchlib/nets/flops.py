"""Work per sample: MACs (fvcore), FLOPs (torch's FlopCounterMode), parameters and bytes moved.

Why two counters: fvcore counts one multiply-accumulate as one unit (MACs), FlopCounterMode counts two
(FLOPs), and the published figures torchvision lists as "GFLOPS" are MACs. Keeping both, under their own
names, is what lets a reader check ``flops ~= 2 x macs`` instead of trusting one counter blindly.

Counting runs on CPU in float32 on a deep copy of the model (the caller's model is never touched), with a
random input ``[batch_size, 3, S, S]`` at the real batch size. FLOP counts do not depend on the dtype;
bytes are scaled by the requested dtype's element size.

Bytes moved, per batch of B samples, with W = bytes of parameters and floating-point buffers (BatchNorm's
running statistics are read in eval mode, so they are part of the weights) and A = sum over leaf-module
calls of (input + output activation bytes) at batch B:

* inference: ``W + A`` (weights read once per batch, every layer reads its input and writes its output);
* training:  ``6W + 3A`` = forward (W + A) + backward (weights read again W, saved activations read A,
  activation gradients written/read A, weight gradients written W) + optimizer update (read weights and
  gradients, write weights: 3W).

Per-sample figures divide by B, so weights amortize with batch size and arithmetic intensity
(FLOPs / bytes) rises with it, as it does on real hardware. A is a lower bound: elementwise work done in
container ``forward`` code (residual adds, ``torch.cat``, functional ReLU/pooling) belongs to no leaf module.
"""
from __future__ import annotations

import copy
import logging
import math
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, flop_registry

from .models import build_model

with warnings.catch_warnings():  # fvcore.nn scripts a loss at import: torch.jit.script's FutureWarning
    warnings.simplefilter("ignore", FutureWarning)
    from fvcore.nn import FlopCountAnalysis

# torchvision model docs ("GFLOPS" column, which are MACs), ImageNet weights, 224x224, 1000 classes;
# also in MEASUREMENT.md ("Work: FLOPs, MACs, bytes").
PUBLISHED_MACS: dict[str, float] = {
    "resnet18": 1.81e9,
    "resnet50": 4.09e9,
    "mobilenet_v2": 0.30e9,
    "squeezenet1_1": 0.35e9,
    "densenet121": 2.83e9,
}

LAYER_TABLE_COLUMNS: tuple[str, ...] = (
    "module", "type", "output_shape", "calls", "macs", "flops", "params", "activation_bytes",
)

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


@dataclass(frozen=True)
class Complexity:
    """Work and bytes of one model at one image size, batch size and dtype (see the module docstring)."""

    model: str
    image_size: int
    batch_size: int
    num_classes: int
    dtype: str
    macs_per_sample: float
    flops_per_sample: float
    train_flops_per_sample: float
    params: int
    model_size_bytes: int
    activation_bytes_per_sample: float
    bytes_per_sample: float
    train_bytes_per_sample: float
    arithmetic_intensity: float
    train_arithmetic_intensity: float
    uncounted_ops: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready dict (``uncounted_ops`` stays a dict of lists)."""
        return asdict(self)


@dataclass
class _ForwardCounts:
    """What one instrumented forward pass saw, per leaf module (names as in ``named_modules``)."""

    flops_total: int
    flops_by_module: dict[str, int]
    activation_numel_by_leaf: dict[str, int]
    output_shape_by_leaf: dict[str, tuple[int, ...]]
    calls_by_leaf: dict[str, int]
    ops_seen: set[str]
    num_outputs: int


# ----------------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------------
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_args(image_size: int, batch_size: int, dtype: torch.dtype) -> None:
    if image_size < 1 or batch_size < 1:
        raise ValueError(f"image_size and batch_size must be >= 1, got {image_size} and {batch_size}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")


def _counting_copy(model: nn.Module) -> nn.Module:
    """A float32 CPU copy in eval mode, so counting never changes the caller's mode, flags or device."""
    return copy.deepcopy(model).to(device=_COUNT_DEVICE, dtype=_COUNT_DTYPE).eval()


def _resolve_model(model: str | nn.Module, num_classes: int) -> tuple[nn.Module, str]:
    """Build a named model without consuming the caller's global RNG; copy a given one."""
    if isinstance(model, str):
        with torch.random.fork_rng(devices=[]):
            return _counting_copy(build_model(model, num_classes)), model
    return _counting_copy(model), type(model).__name__


def _random_input(batch_size: int, image_size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(_SEED)
    return torch.randn(batch_size, 3, image_size, image_size, generator=generator, dtype=_COUNT_DTYPE)


def _random_labels(batch_size: int, num_classes: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(_SEED + 1)
    return torch.randint(0, num_classes, (batch_size,), generator=generator)


def _leaf_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Modules without children: the layers that do the work (containers only route tensors)."""
    return {name: mod for name, mod in model.named_modules() if next(mod.children(), None) is None}


def _tensor_numel(obj: Any) -> int:
    return sum(t.numel() for t in tree_leaves(obj) if isinstance(t, torch.Tensor))


def _weight_numel(model: nn.Module) -> int:
    """Parameters plus floating-point buffers (BN running stats are read in eval too; int counters are not)."""
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    return params + buffers


def _per_sample(total: float, batch_size: int) -> float:
    return float(total) / batch_size


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


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


_FLOP_COUNTER_OVERRIDES: dict[Any, Any] = {torch.ops.aten.convolution_backward: _conv_backward_flop}
_COUNTED_PACKETS: frozenset[str] = frozenset(str(op) for op in (*flop_registry, *_FLOP_COUNTER_OVERRIDES))


class _OpNameCollector(TorchDispatchMode):
    """Records the packet name of every op that reaches the dispatcher (after FlopCounterMode's decompositions)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not getattr(func, "is_view", False):
            self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _uncounted_dispatch_ops(ops_seen: set[str]) -> list[str]:
    """Ops that ran but have no flop formula: zero in FlopCounterMode's total although they do arithmetic."""
    return sorted(op for op in ops_seen if op not in _COUNTED_PACKETS and op not in _NO_ARITHMETIC_OPS)


@contextmanager
def _flop_counting() -> Iterator[tuple[FlopCounterMode, _OpNameCollector]]:
    """FlopCounterMode on top of an op collector, so the collector sees exactly what the counter executed."""
    collector = _OpNameCollector()
    counter = FlopCounterMode(display=False, custom_mapping=_FLOP_COUNTER_OVERRIDES)
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


def _count_forward(model: nn.Module, x: torch.Tensor) -> _ForwardCounts:
    """One eval-mode forward under FlopCounterMode, the op collector and leaf activation hooks."""
    leaves = _leaf_modules(model)
    with _activation_hooks(leaves) as (numel, shapes, calls), _flop_counting() as (counter, collector):
        with torch.no_grad():
            out = model(x)
    return _ForwardCounts(
        flops_total=int(counter.get_total_flops()),
        flops_by_module=_flops_by_module(counter, model),
        activation_numel_by_leaf=dict(numel),
        output_shape_by_leaf=shapes,
        calls_by_leaf=dict(calls),
        ops_seen=collector.ops,
        num_outputs=int(out.reshape(out.shape[0], -1).shape[1]),
    )


def _count_train_per_sample(model: nn.Module, x: torch.Tensor, num_classes: int) -> tuple[float, set[str]]:
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
    labels = _random_labels(x.shape[0], num_classes)
    with torch.random.fork_rng(devices=[]), _flop_counting() as (counter, collector):  # dropout draws
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(x.shape[0], -1), labels)
        loss.backward()
    model.zero_grad(set_to_none=True)
    model.eval()
    return int(counter.get_total_flops()), collector.ops


class _StrictFlopCountAnalysis(FlopCountAnalysis):
    """fvcore's counter with arithmetic ops removed from its silent ignore list, so they get reported."""

    def __init__(self, model: nn.Module, inputs: Any) -> None:
        super().__init__(model, inputs)
        self._ignored_ops: set[str] = set(self._ignored_ops) - _FVCORE_ARITHMETIC_IGNORED


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


def _count_macs(model: nn.Module, x: torch.Tensor) -> tuple[int, dict[str, int], list[str]]:
    """fvcore MACs: (total, by module name, op names it did not count)."""
    with _quiet_fvcore(), torch.no_grad():
        analysis = (_StrictFlopCountAnalysis(model, x)
                    .unsupported_ops_warnings(False)
                    .uncalled_modules_warnings(False)
                    .tracer_warnings("none"))
        total = int(analysis.total())
        by_module = {name: int(v) for name, v in analysis.by_module().items()}
        skipped = sorted(analysis.unsupported_ops().keys())
    return total, by_module, skipped


# ----------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------
def complexity(model: str | nn.Module, image_size: int, *, batch_size: int = 1, num_classes: int = 1000,
               dtype: torch.dtype = torch.float32, name: str | None = None) -> Complexity:
    """Count MACs, forward and training FLOPs, parameters and bytes moved for one configuration.

    ``model`` is a name from ``benchlib.models.MODELS`` (built with ``num_classes`` outputs) or a module
    (copied; its class count is read from its output). FLOPs are counted at the real ``batch_size`` and
    divided by it (training at batch 1 falls back to batch 2 where BatchNorm cannot train on one sample);
    bytes follow the module docstring (inference W + A, training 6W + 3A per batch).
    ``uncounted_ops`` lists, per counter, ops that ran but got no count (for ``flop_counter``: forward and
    backward ops without a formula, e.g. batch norm, pooling, elementwise; views and copies are left out).
    """
    _check_args(image_size, batch_size, dtype)
    net, default_name = _resolve_model(model, num_classes)
    x = _random_input(batch_size, image_size)

    macs, _, fvcore_skipped = _count_macs(net, x)
    fwd = _count_forward(net, x)
    train_flops_ps, train_ops = _count_train_per_sample(net, x, fwd.num_outputs)

    elem_bytes = dtype.itemsize
    weight_bytes = _weight_numel(net) * elem_bytes
    activation_bytes = sum(fwd.activation_numel_by_leaf.values()) * elem_bytes
    infer_bytes = weight_bytes + activation_bytes
    train_bytes = 6 * weight_bytes + 3 * activation_bytes

    flops_ps = _per_sample(fwd.flops_total, batch_size)
    bytes_ps = _per_sample(infer_bytes, batch_size)
    train_bytes_ps = _per_sample(train_bytes, batch_size)
    return Complexity(
        model=name or default_name,
        image_size=image_size,
        batch_size=batch_size,
        num_classes=fwd.num_outputs,
        dtype=_dtype_name(dtype),
        macs_per_sample=_per_sample(macs, batch_size),
        flops_per_sample=flops_ps,
        train_flops_per_sample=train_flops_ps,
        params=sum(p.numel() for p in net.parameters()),
        model_size_bytes=weight_bytes,
        activation_bytes_per_sample=_per_sample(activation_bytes, batch_size),
        bytes_per_sample=bytes_ps,
        train_bytes_per_sample=train_bytes_ps,
        arithmetic_intensity=_ratio(flops_ps, bytes_ps),
        train_arithmetic_intensity=_ratio(train_flops_ps, train_bytes_ps),
        uncounted_ops={
            "fvcore": fvcore_skipped,
            "flop_counter": _uncounted_dispatch_ops(fwd.ops_seen | train_ops),
        },
    )


def layer_table(model: nn.Module, image_size: int, *, batch_size: int = 1,
                dtype: torch.dtype = torch.float32) -> pd.DataFrame:
    """One row per leaf module (containers have none), in ``named_modules`` order, per batch of ``batch_size``.

    ``macs`` (fvcore) and ``flops`` (FlopCounterMode) are summed over every call of the module (a ReLU reused
    in a block is called several times); ``activation_bytes`` = input + output bytes in ``dtype``;
    ``output_shape`` is that of the first call. Ops run in container code (residual adds, concatenations,
    functional pooling) are in no row, so column sums can fall slightly short of the model totals.
    """
    _check_args(image_size, batch_size, dtype)
    net = _counting_copy(model)
    x = _random_input(batch_size, image_size)
    _, macs_by_module, _ = _count_macs(net, x)
    fwd = _count_forward(net, x)
    rows = [
        {
            "module": name,
            "type": type(mod).__name__,
            "output_shape": fwd.output_shape_by_leaf.get(name, ()),
            "calls": fwd.calls_by_leaf.get(name, 0),
            "macs": macs_by_module.get(name, 0),
            "flops": fwd.flops_by_module.get(name, 0),
            "params": sum(p.numel() for p in mod.parameters()),
            "activation_bytes": fwd.activation_numel_by_leaf.get(name, 0) * dtype.itemsize,
        }
        for name, mod in _leaf_modules(net).items()
    ]
    return pd.DataFrame(rows, columns=list(LAYER_TABLE_COLUMNS))


def at_batch_size(c: Complexity, batch_size: int) -> Complexity:
    """The same model's figures at another batch size, without counting again.

    FLOPs and activation bytes per sample do not depend on the batch for these networks (every layer
    works per sample); only the weights' share of the bytes does (read once per batch). So bytes per
    sample become W/B + A (inference) and 6W/B + 3A (training). ``test_flops`` checks this against a
    count at the real batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    w, a = c.model_size_bytes, c.activation_bytes_per_sample
    bytes_ps = w / batch_size + a
    train_bytes_ps = 6 * w / batch_size + 3 * a
    return replace(c, batch_size=batch_size, bytes_per_sample=bytes_ps, train_bytes_per_sample=train_bytes_ps,
                   arithmetic_intensity=_ratio(c.flops_per_sample, bytes_ps),
                   train_arithmetic_intensity=_ratio(c.train_flops_per_sample, train_bytes_ps))


@lru_cache(maxsize=64)
def _counted_small_batch(model: str, image_size: int, num_classes: int, dtype: torch.dtype) -> Complexity:
    return complexity(model, image_size, batch_size=2, num_classes=num_classes, dtype=dtype)


def complexity_for_run(model: str, image_size: int, batch_size: int, num_classes: int,
                       dtype: torch.dtype = torch.float32) -> Complexity:
    """Complexity of a benchmark configuration: counted at batch 2 (seconds, cached) and scaled to ``batch_size``.

    Counting at a working batch of 64 at 224 px costs a minute of CPU per model; the per-sample counts
    are the same (see ``at_batch_size``).
    """
    return at_batch_size(_counted_small_batch(model, image_size, num_classes, dtype), batch_size)
