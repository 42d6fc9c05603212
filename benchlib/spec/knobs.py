"""The knobs of a variant: how a model runs (precision, memory format, compilation, quantization, threads).

Knobs change how the same computation is carried out, not what is computed, so variants that differ only
in knobs are compared on the same weights, data and number of steps. They are declared once, here;
:class:`benchlib.spec.settings.RunSettings` holds a ``Knobs`` and :class:`benchlib.spec.variants.Variant`
names one.
"""
from __future__ import annotations

from dataclasses import dataclass

from .fields import setting
from .vocab import COMPILE_MODES, MEMORY_FORMATS, PRECISIONS, QUANTIZATIONS


@dataclass(frozen=True)
class Knobs:
    """One combination of knobs; the defaults are plain fp32 NCHW eager execution."""

    precision: str = setting("fp32", "numeric precision (amp_*: autocast; fp16 training with a gradient scaler)",
                             choices=PRECISIONS)
    tf32: bool = setting(False, "TF32 matmuls and convolutions on CUDA (false: strict fp32)")
    memory_format: str = setting("nchw", "memory format of weights and inputs", choices=MEMORY_FORMATS)
    compile: str = setting("off", "torch.compile mode (compile time is its own column, compile_s)",
                           choices=COMPILE_MODES)
    quantization: str = setting("none", "post-training quantization for CPU inference, on the trained fp32 weights",
                                choices=QUANTIZATIONS)
    cudnn_benchmark: bool = setting(False, "cuDNN autotuning of convolution algorithms")
    threads: int | None = setting(
        None, "torch intra-op threads (default: $SLURM_CPUS_PER_TASK, else the CPUs this process may use)",
        min=1, max=1024)
    interop_threads: int | None = setting(None, "torch inter-op threads", min=1, max=1024)

    @property
    def trains(self) -> bool:
        """Quantized variants are inference-only: they evaluate the weights of their training twin."""
        return self.quantization == "none"

    def over(self, base: Knobs) -> Knobs:
        """These knobs, keeping ``base``'s threads where these leave them unset."""
        return Knobs(self.precision, self.tf32, self.memory_format, self.compile, self.quantization,
                     self.cudnn_benchmark, self.threads if self.threads is not None else base.threads,
                     self.interop_threads if self.interop_threads is not None else base.interop_threads)
