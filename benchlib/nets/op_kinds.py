"""Which kind of operation each layer of a model is, so each is judged against the roof of its own kind.

A 3x3 convolution, a pointwise one, a depthwise one and a matrix product reach different fractions of a
machine's peak (a depthwise convolution does 9 multiply-adds per element it reads: it is bandwidth-bound on
any machine), so one roof for all of them places some layers too high and others too low. The kinds are
``spec.vocab.OP_KINDS``; what a kind's roof is, is measured by ``roofline.ceilings``.
"""
from __future__ import annotations

from torch import nn


def op_kind(module: nn.Module) -> str:
    """``conv3x3`` (any dense kxk convolution, k > 1), ``conv1x1``, ``depthwise``, ``matmul`` (a linear layer)
    or ``elementwise`` (everything else: batch norm, activations, pooling, dropout)."""
    if isinstance(module, nn.modules.conv._ConvNd) or hasattr(module, "groups") and hasattr(module, "kernel_size"):
        groups, channels = int(getattr(module, "groups", 1)), int(getattr(module, "in_channels", 0))
        if groups > 1 and groups == channels:
            return "depthwise"
        kernel = getattr(module, "kernel_size", 1)
        kernel = tuple(kernel) if isinstance(kernel, (tuple, list)) else (kernel,)
        return "conv1x1" if all(int(k) == 1 for k in kernel) else "conv3x3"
    if isinstance(module, nn.Linear) or type(module).__name__ in ("Linear", "LinearReLU"):
        return "matmul"
    return "elementwise"


def op_kinds(modules: dict[str, nn.Module]) -> dict[str, str]:
    """Each named module's kind (``op_kind``)."""
    return {name: op_kind(m) for name, m in modules.items()}
