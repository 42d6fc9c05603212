"""Work per sample: MACs (fvcore), FLOPs (torch's FlopCounterMode), parameters and bytes moved.

Why two counters: fvcore counts one multiply-accumulate as one unit (MACs), FlopCounterMode counts two
(FLOPs), and the published figures torchvision lists as "GFLOPS" are MACs. Both are kept over the same
operators, convolutions and matrix products, so ``flops == 2 x macs`` holds exactly and a reader can check
one counter against the other. fvcore also counts normalization and pooling layers (element-wise work,
in its own units): that is ``non_mac_ops``, a figure of its own, never added to the MACs.

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

import math
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import pandas as pd
import torch
from torch import nn

from .counters import (
    count_forward,
    count_macs,
    count_train_per_sample,
    counting_copy,
    leaf_modules,
    random_input,
    uncounted_dispatch_ops,
    weight_numel,
)
from .models import build_model
from .user_models import generation

# torchvision model docs ("GFLOPS" column, which are MACs), ImageNet weights, 224x224, 1000 classes
# (docs/measurement.md, "Work: MACs, FLOPs and bytes", says why MACs and FLOPs never share a name).
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
    non_mac_ops_per_sample: float
    non_mac_ops: dict[str, float]
    train_flops_per_sample: float
    params: int
    model_size_bytes: int
    activation_bytes_per_sample: float
    bytes_per_sample: float
    train_bytes_per_sample: float
    arithmetic_intensity: float
    train_arithmetic_intensity: float
    uncounted_ops: dict[str, list[str]] = field(default_factory=dict)
    activation_dtype: str = "float32"

    def as_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready dict (``uncounted_ops`` stays a dict of lists)."""
        return asdict(self)



def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_args(image_size: int, batch_size: int, dtype: torch.dtype) -> None:
    if image_size < 1 or batch_size < 1:
        raise ValueError(f"image_size and batch_size must be >= 1, got {image_size} and {batch_size}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")


def _resolve_model(model: str | nn.Module, num_classes: int) -> tuple[nn.Module, str]:
    """Build a named model without consuming the caller's global RNG; copy a given one."""
    if isinstance(model, str):
        with torch.random.fork_rng(devices=[]):
            return counting_copy(build_model(model, num_classes)), model
    return counting_copy(model), type(model).__name__



def _per_sample(total: float, batch_size: int) -> float:
    return float(total) / batch_size


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


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
    x = random_input(batch_size, image_size)

    fv = count_macs(net, x)
    fwd = count_forward(net, x)
    train_flops_ps, train_ops = count_train_per_sample(net, x, fwd.num_outputs)

    elem_bytes = dtype.itemsize
    weight_bytes = weight_numel(net) * elem_bytes
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
        macs_per_sample=_per_sample(fv.macs, batch_size),
        flops_per_sample=flops_ps,
        non_mac_ops_per_sample=_per_sample(sum(fv.non_mac_ops.values()), batch_size),
        non_mac_ops={op: _per_sample(v, batch_size) for op, v in fv.non_mac_ops.items()},
        train_flops_per_sample=train_flops_ps,
        params=sum(p.numel() for p in net.parameters()),
        model_size_bytes=weight_bytes,
        activation_bytes_per_sample=_per_sample(activation_bytes, batch_size),
        bytes_per_sample=bytes_ps,
        train_bytes_per_sample=train_bytes_ps,
        arithmetic_intensity=_ratio(flops_ps, bytes_ps),
        train_arithmetic_intensity=_ratio(train_flops_ps, train_bytes_ps),
        activation_dtype=_dtype_name(dtype),
        uncounted_ops={
            "fvcore": fv.skipped,
            "flop_counter": uncounted_dispatch_ops(fwd.ops_seen | train_ops),
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
    net = counting_copy(model)
    x = random_input(batch_size, image_size)
    macs_by_module = count_macs(net, x).macs_by_module
    fwd = count_forward(net, x)
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
        for name, mod in leaf_modules(net).items()
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


def with_activation_dtype(c: Complexity, dtype: torch.dtype) -> Complexity:
    """The same figures with activations moved in ``dtype`` (autocast): weights stay in their stored dtype.

    Under autocast to fp16/bf16 every layer reads and writes half-width activations while the weights
    stay fp32 in memory, so only the activation bytes change, and the intensity rises with them.
    """
    counted_itemsize = getattr(torch, c.activation_dtype).itemsize
    a = c.activation_bytes_per_sample * dtype.itemsize / counted_itemsize
    moved = replace(c, activation_bytes_per_sample=a, activation_dtype=_dtype_name(dtype))
    return at_batch_size(moved, c.batch_size)


@lru_cache(maxsize=64)
def _counted_small_batch(model: str, image_size: int, num_classes: int, dtype: torch.dtype,
                         _generation: int) -> Complexity:  # a model registered again is counted again
    return complexity(model, image_size, batch_size=2, num_classes=num_classes, dtype=dtype)


def complexity_for_run(model: str, image_size: int, batch_size: int, num_classes: int,
                       activation_dtype: torch.dtype = torch.float32) -> Complexity:
    """Complexity of a benchmark configuration: counted at batch 2 (seconds, cached) and scaled to ``batch_size``.

    Counting at a working batch of 64 at 224 px costs a minute of CPU per model; the per-sample counts
    are the same (see ``at_batch_size``). ``activation_dtype`` is the dtype autocast computes in.
    """
    counted = at_batch_size(_counted_small_batch(model, image_size, num_classes, torch.float32, generation(model)),
                            batch_size)
    return counted if activation_dtype == torch.float32 else with_activation_dtype(counted, activation_dtype)
