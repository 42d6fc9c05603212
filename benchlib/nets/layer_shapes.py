"""Each convolution's and linear layer's own shape in a model's forward, as text another machine can time alone.

A per-layer file keeps one signature per such layer (``layer_shapes``): the layer's settings and its input's
shape and memory format, e.g. ``conv2d in=32x64x8x8 cl=0 out=64 k=3x3 s=1x1 p=1x1 d=1x1 g=1 bias=0``.
``benchlib roofline --shapes-of`` rebuilds the layer from it (``module_of``) on the target and times it forward
and backward, with no model and no training: the distinct shapes of a CNN are few (resnet50 has 23 at one batch).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from .counters import leaf_modules


def _pair(value: Any) -> str:
    items = value if isinstance(value, tuple | list) else (value, value)
    return "x".join(str(int(v)) for v in items)


def signature(module: nn.Module, x: torch.Tensor) -> str | None:
    """The text that rebuilds ``module`` and its input ``x``; None for a layer of another kind (or padding given as
    a word, which the text does not hold)."""
    shape = "x".join(str(d) for d in x.shape)
    if isinstance(module, nn.Conv2d) and not isinstance(module.padding, str) and x.dim() == 4:
        cl = int(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        return (f"conv2d in={shape} cl={cl} out={module.out_channels} k={_pair(module.kernel_size)} "
                f"s={_pair(module.stride)} p={_pair(module.padding)} d={_pair(module.dilation)} g={module.groups} "
                f"bias={int(module.bias is not None)}")
    if isinstance(module, nn.Linear):
        return f"linear in={shape} out={module.out_features} bias={int(module.bias is not None)}"
    return None


@contextmanager
def _eval(model: nn.Module) -> Iterator[None]:
    was = model.training
    model.eval()  # batch norm in eval: the forward that reads shapes moves no running statistics
    try:
        yield
    finally:
        model.train(was)


def layer_shapes(model: nn.Module, x: torch.Tensor) -> dict[str, str]:
    """Each leaf convolution's and linear layer's signature as it runs on ``x`` (one forward, no gradient): the
    first call's where a layer runs twice."""
    found: dict[str, str] = {}

    def hook(name: str) -> Any:
        def record(module: nn.Module, args: tuple[Any, ...]) -> None:
            if name not in found and args and isinstance(args[0], torch.Tensor):
                if (text := signature(module, args[0])) is not None:
                    found[name] = text
        return record

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in leaf_modules(model).items()
               if isinstance(m, nn.Conv2d | nn.Linear)]
    try:
        with _eval(model), torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return found


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def _pair_of(text: str) -> tuple[int, int]:
    a, b = _ints(text)
    return a, b


def module_of(text: str) -> tuple[nn.Module, tuple[int, ...], bool]:
    """The layer a signature names, its input's shape and whether that input is channels_last. ValueError for
    text that is not a signature ``signature`` wrote."""
    op, *fields = text.split()
    try:
        f = dict(item.split("=", 1) for item in fields)
        shape = _ints(f["in"])
        if op == "conv2d":
            conv = nn.Conv2d(shape[1], int(f["out"]), _pair_of(f["k"]), stride=_pair_of(f["s"]),
                             padding=_pair_of(f["p"]), dilation=_pair_of(f["d"]), groups=int(f["g"]),
                             bias=f["bias"] == "1")
            return conv, shape, f["cl"] == "1"
        if op == "linear":
            return nn.Linear(shape[-1], int(f["out"]), bias=f["bias"] == "1"), shape, False
    except (KeyError, ValueError, IndexError) as exc:
        raise ValueError(f"not a layer signature: {text!r} ({exc})") from None
    raise ValueError(f"not a layer signature: {text!r} (allowed: conv2d, linear)")
