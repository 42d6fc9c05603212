"""What one configuration measured, as a value: what ran and its raw samples, frozen, in no row's words.

:func:`benchlib.run.measure.measure` builds it phase by phase (set-up, training, evaluation, inference) and
returns it; :mod:`benchlib.run.columns` turns it into a row and :mod:`benchlib.run.record` writes it. Keeping
the record apart from the row means the measuring code never names a column, and a new column is a new
function of the record, not another line in the middle of a measurement.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..engine.knobs import CompileReport
from ..engine.train import EvalResult, TrainResult
from ..instruments.drift import Drift
from ..instruments.energy import EnergyResult
from ..instruments.interference import Interference
from ..instruments.memory import MemoryReport
from ..instruments.samples import Samples
from ..instruments.telemetry import Telemetry
from ..roofline.measured import Ceilings
from ..spec.settings import RunConfig

if TYPE_CHECKING:  # counting work imports torchvision: a study's driver, which reads rows, never counts
    from ..nets.flops import Complexity


@dataclass(frozen=True)
class SetUp:
    """Where and on what the configuration ran, known once the model and data were built."""

    device: torch.device
    hardware: str  # as the row names it: the configured name, ``auto`` resolved to the device
    device_name: str
    work: Complexity  # counted on the CPU before the memory window opened
    local_batch: int  # the batch one device processes (the per-rank share under data parallelism)
    world_size: int
    distributed_backend: str | None
    batches_per_epoch: int
    params: int
    params_trainable: int
    synthetic: bool
    num_classes: int
    train_samples: int
    test_samples: int
    weights_trained_by: str | None  # an evaluate-only variant: the configuration whose weights it evaluates
    loadavg_1m_before: float | None


@dataclass(frozen=True)
class Training:
    """The timed training loop: its raw samples, the drift of its steps, its energy, and what dynamo did."""

    result: TrainResult
    drift: Drift
    energy: EnergyResult
    energy_samples: int  # the samples the energy window's devices processed (this node's ranks)
    compiled: CompileReport | None
    harness_cpu_s: float | None = None  # CPU benchlib's own threads charged during the timed steps (env.harness)
    h2d_bytes_per_step: int | None = None  # host-to-device bytes of one step's batch (None: a CPU, no copy)
    minor_faults: int | None = None  # the process's minor page faults over the timed steps (instruments.cpu)


@dataclass(frozen=True)
class Quantized:
    """An int8 variant: the quantized copy's size, and the fp32 model it came from."""

    fp32_model_size_bytes: int
    fp32_test_accuracy: float | None  # None on synthetic data (no accuracy to lose)
    quantized_modules: dict[str, int]


@dataclass(frozen=True)
class Inference:
    """Batch-1 and working-batch latency, back-to-back throughput, and the energy of the throughput window."""

    latency: Samples
    batch_latency: Samples
    throughput_repeat_s: Samples
    samples: int  # samples processed by the throughput repeats
    energy: EnergyResult


@dataclass(frozen=True)
class Measurement:
    """One configuration, measured: every figure a row is made of, and the raw samples behind them."""

    cfg: RunConfig
    machine: str
    started_utc: str
    finished_utc: str
    duration_s: float
    setup: SetUp
    training: Training | None  # None: an evaluate-only row (the weights of another configuration)
    evaluation: EvalResult
    model_size_bytes: int  # of the model as evaluated (the quantized copy for an int8 variant)
    quantized: Quantized | None
    inference: Inference
    memory: MemoryReport
    telemetry: Telemetry
    interference: Interference
    threads: int  # torch's intra-op threads at the end
    ddp_weights_in_sync: bool | None
    ceilings: Ceilings | None  # this machine's measured roof, when the caller gave one
    trained_model: nn.Module | None = field(default=None, compare=False, repr=False)  # for record to save

    @property
    def samples(self) -> dict[str, list[float]]:
        """The raw series saved beside the row (``samples/``), by name."""
        out = {"latency_s": list(self.inference.latency.values),
               "batch_latency_s": list(self.inference.batch_latency.values),
               "infer_repeat_s": list(self.inference.throughput_repeat_s.values)}
        if self.training is not None:
            t = self.training.result
            out.update({"train_step_s": list(t.step_s), "warmup_step_s": list(t.warmup_step_s),
                        "data_wait_s": list(t.data_wait_s), "epoch_s": list(t.epoch_s), "loss": list(t.loss_per_step)})
        return out
