"""Image batches copied to a GPU as uint8 on a side stream and normalised there, one batch ahead of the step.

A batch of fp32 images is four times the bytes of the images it came from (resnet50, batch 128 at 224 px:
77 MB against 19 MB), and copied on the compute stream it holds the step up for its whole transfer: 6-12% of
an H200's resnet50 step. As timm's prefetching loader does, the loader's workers stop at the images' bytes
(``DatasetSplits.normalize``), the bytes leave pinned memory on a stream of their own while the previous
step runs, and the mean and standard deviation are applied on the device; the compute stream waits for
that stream only when it takes the batch. Off CUDA there is no copy to hide, and the same arithmetic runs
where the batch is (a CPU test checks it against torchvision's ``ToTensor`` and ``Normalize``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

Stats = tuple[tuple[float, float, float], tuple[float, float, float]]


class DeviceFeed:
    """Wraps a loader of ``(uint8 [N,3,H,W], labels)`` batches; yields ``(float32 normalised, labels)`` on
    ``device`` in ``memory_format``, copying the next batch while the caller uses the current one."""

    def __init__(self, loader: Iterable[Any], device: torch.device, normalize: Stats,
                 memory_format: torch.memory_format = torch.contiguous_format) -> None:
        self.loader, self.device, self.memory_format = loader, device, memory_format
        mean, std = normalize
        # ToTensor divides by 255 before Normalize: (x / 255 - mean) / std = (x - 255 mean) / (255 std)
        self._mean = torch.tensor([255.0 * m for m in mean]).view(1, 3, 1, 1)
        self._std = torch.tensor([255.0 * s for s in std]).view(1, 3, 1, 1)
        self.h2d_bytes_per_batch: int | None = None  # what a full batch moved to the device (images + labels)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]  # a DataLoader: sized

    def __getattr__(self, name: str) -> Any:
        """The loader's own attributes (``dataset``, ``batch_size``, ``drop_last``, the ``sampler`` whose
        ``set_epoch`` reshuffles each epoch), as callers of a DataLoader read them."""
        if name == "loader":  # not set yet (a copy being built): no loader to ask
            raise AttributeError(name)
        return getattr(self.loader, name)

    def _ready(self, x: torch.Tensor, y: torch.Tensor, mean: torch.Tensor,
               std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        moved = x.numel() * x.element_size() + y.numel() * y.element_size()
        self.h2d_bytes_per_batch = max(self.h2d_bytes_per_batch or 0, moved)  # a full batch, not a last short one
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        x = x.contiguous(memory_format=self.memory_format).float().sub_(mean).div_(std)
        return x, y

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        cuda = self.device.type == "cuda"
        side = torch.cuda.Stream(device=self.device) if cuda else None
        mean, std = self._mean.to(self.device), self._std.to(self.device)
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(self.device))  # the statistics are on the device first
        pending: tuple[torch.Tensor, torch.Tensor] | None = None
        for x, y in self.loader:
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                ready = self._ready(x, y, mean, std)
            if pending is not None:
                yield pending
            if side is not None:
                compute = torch.cuda.current_stream(self.device)
                compute.wait_stream(side)  # the step takes the batch only once its copy and arithmetic are done
                for t in ready:
                    t.record_stream(compute)  # its memory is not reused while the compute stream still reads it
            pending = ready
        if pending is not None:
            yield pending
