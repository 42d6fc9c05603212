"""Measure one configuration end to end and return what it measured; nothing here writes a file.

The pieces are the engine's (set-up, the one training step, evaluation, latency) and the instruments'
(memory, telemetry, energy); this module decides their order and turns what they return into a row.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch
from torch import nn

from .. import log as messages
from ..data.loaders import Loaders
from ..engine.inference import (
    LATENCY_TARGET_SAMPLES,
    example_batch,
    measure_latency,
    measure_throughput,
)
from ..engine.knobs import compile_report, compile_seconds, precision_context
from ..engine.setup import build, check_runs, configuration, num_classes, wrap
from ..engine.step import Trainer, in_memory_format
from ..engine.train import EvalResult, TrainResult, evaluate, train
from ..engine.weights import WeightsPlan, load_weights, save_weights
from ..env import distributed
from ..env.devices import cuda_uuids, device_name, resolve_hardware
from ..env.manifest import machine_name
from ..env.rank_watch import RankWatch
from ..env.threads import usable_cpu_ids
from ..errors import RankFailed
from ..instruments import interference
from ..instruments.energy import NVML_MIN_WINDOW_S, EnergyMeter, EnergyReading
from ..instruments.memory import PeakMemory
from ..instruments.samples import Samples
from ..instruments.telemetry import NullSampler, Telemetry, TelemetrySampler
from ..nets.quantize import (
    count_quantized_modules,
    model_size_on_disk_bytes,
    quantize_dynamic_linear,
    quantize_static_int8,
    unserved_copy,
)
from ..roofline.measured import Ceilings
from ..spec.settings import RunConfig, RunSettings
from ..store.schema import BATCHES_PER_THROUGHPUT_REPEAT
from .columns import (
    Row,
    accuracy_columns,
    base_row,
    energy_columns,
    latency_columns,
    memory_columns,
    now_utc,
    roof_columns,
    training_columns,
    work_columns,
)
from .faults import maybe_failing_loader, maybe_inject_setup
from .outcome import failure_status

ProgressFn = Callable[[str], None]
_CALIBRATION_BATCHES = 8


@dataclass
class Measurement:
    """What one configuration measured: its row, the raw samples behind it, and the telemetry time series."""

    row: Row
    samples: dict[str, list[float]] = field(default_factory=dict)
    telemetry: Telemetry | None = None


def _quantized(model: nn.Module, loaders: Loaders, device: torch.device, s: RunSettings, fp32_test: EvalResult,
               trained_by: str | None) -> tuple[nn.Module, EvalResult, Row]:
    """Quantize the trained fp32 model itself and evaluate it: accuracy is compared on the same weights.

    Static int8 is calibrated on training batches (real images: the activation ranges must be real).
    """
    model = model.eval()
    if s.knobs.quantization == "static_int8":
        calibration = [x for x, _ in itertools.islice(iter(loaders.train), _CALIBRATION_BATCHES)]
        qmodel = quantize_static_int8(model, calibration, calibration[0])
    else:
        qmodel = quantize_dynamic_linear(model)
    test = evaluate(qmodel, loaders.test, device)
    drop = (fp32_test.accuracy - test.accuracy) * 100 if not loaders.synthetic else None
    return qmodel, test, {
        "model_size_bytes": model_size_on_disk_bytes(qmodel), "fp32_model_size_bytes": model_size_on_disk_bytes(model),
        "fp32_test_accuracy": None if loaders.synthetic else fp32_test.accuracy, "accuracy_drop_pts": drop,
        "quantized_modules": json.dumps(count_quantized_modules(qmodel), sort_keys=True),
        "weights_trained_by": trained_by,
        "weights": (f"the fp32 weights {trained_by} trained, quantized after training" if trained_by
                    else "the fp32 weights trained in this configuration, quantized after training"),
    }


def _loadavg_1m() -> float | None:
    """The one-minute load average now; None where the OS has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def _gpu_uuids(device: torch.device, dist_info: distributed.DistInfo | None) -> list[str]:
    """The run's GPUs as NVML must find them: this device, or every local rank's device under torchrun; none
    for a CPU or MPS row (on a GPU machine the GPUs beside it are not its own: no telemetry, no energy)."""
    if device.type != "cuda":
        return []
    indices = list(range(distributed.local_world_size())) if dist_info else [device.index or 0]
    return cuda_uuids(indices)


def measure(cfg: RunConfig, *, machine: str | None = None, progress: ProgressFn | None = None,
            ceilings: Ceilings | None = None, weights: WeightsPlan | None = None,
            heartbeat: ProgressFn | None = None,
            on_peer_failure: Callable[[RankFailed], None] | None = None) -> Measurement | None:
    """Train, evaluate and time one configuration.

    With ``ceilings`` (this machine's measured roofline) the row also says where it sits under its roof.
    Telemetry of the run's own devices is sampled in the background from the first training step to the
    last inference repeat, and energy is read around the training loop and around the back-to-back
    inference batches. Under torchrun the model trains data-parallel on every rank and only rank 0
    gets a measurement (others: None).

    With a ``weights`` plan, an inference-only variant (quantized) evaluates the weights its training
    configuration saved instead of training (its training columns are then empty, and
    ``weights_trained_by`` names that configuration); a training configuration saves them for it.

    ``progress`` gets one line per phase (set-up, each epoch, evaluation, inference timing) and
    ``heartbeat`` the training step reached, for a terminal's status line.

    Under torchrun a rank that fails tells the others through :class:`RankWatch`: they stop at once, and
    rank 0 calls ``on_peer_failure`` with the failure (to record it) before its process ends.

    Raises:
        SkippedConfiguration: the variant cannot run on this device.
    """
    device = torch.device(resolve_hardware(cfg.hardware))
    check_runs(cfg.settings, str(device))
    dist_info = distributed.init(device)
    device = distributed.rank_device(device, dist_info)
    messages.debug(f"{cfg.run_id}: on {device}, {dist_info or 'one process'}, settings {cfg.settings.flat()}")
    say = progress or (lambda _msg: None)
    watch = RankWatch.launched(on_peer_failure or (lambda failure: say(f"{cfg.run_id}: stopping: {failure}")))
    try:
        if watch is not None:
            watch.start()
        with configuration(device, cfg.settings):
            return _measure(cfg, device, dist_info, machine=machine, progress=progress, ceilings=ceilings,
                            weights=weights, heartbeat=heartbeat)
    except Exception as exc:
        if watch is not None:
            _tell_the_other_ranks(watch, exc)
        raise
    finally:
        if watch is not None:
            watch.stop()


def _tell_the_other_ranks(watch: RankWatch, exc: Exception) -> None:
    """This rank failed: the others stop at once (rank 0 first records the failure, or is told to by rank k).

    An error that followed another rank's failure (a collective whose peer went away) is not a cause: that
    rank's failure is handled instead, and this call does not return.
    """
    try:
        earlier = watch.peer_failure()
        if earlier is not None:
            watch.handle(earlier)
        watch.post(exc, failure_status(exc))
    except RuntimeError:  # the store is gone (torchrun is ending the job): this rank's own error stands
        return
    if watch.rank != 0:
        watch.wait_recorded()  # rank 0 writes the row naming this rank before torchrun ends the job


def _inference(net: nn.Module, loaders: Loaders, cfg: RunConfig, device: torch.device,
               meter: EnergyMeter) -> tuple[Samples, Samples, Samples, EnergyReading, EnergyReading]:
    """Batch-1 latency, working-batch latency, and back-to-back throughput with an energy window around it.

    The throughput repeats go on until the energy window is long enough to trust a GPU energy counter.
    """
    s = cfg.settings

    def per_call() -> AbstractContextManager[object]:
        return precision_context(s.knobs, device)

    batch1 = in_memory_format(example_batch(loaders.test, 1, device), s.knobs)
    batch_n = in_memory_format(example_batch(loaders.test, cfg.batch_size, device), s.knobs)
    warm, repeats = s.infer_warmup_batches, s.latency_repeats
    # A quantized model is timed at each batch on a copy first called at that batch, as a served model is
    # (nets.quantize.unserved_copy: its kernels keep the first shape they see on a fast path).
    served = unserved_copy if s.knobs.quantization != "none" else (lambda m: m)
    net_1, net_n = served(net), served(net)
    lat1, latn = (measure_latency(m, b, warmup=warm, repeats=repeats, context=per_call, budget_s=s.latency_budget_s,
                                  target=LATENCY_TARGET_SAMPLES) for m, b in ((net_1, batch1), (net_n, batch_n)))
    e0 = meter.read()
    times = list(measure_throughput(net_n, batch_n, warmup=0, repeats=repeats, context=per_call).values)
    while meter.counts_gpu and time.monotonic() - e0.t_s < NVML_MIN_WINDOW_S:
        times += measure_throughput(net_n, batch_n, warmup=0, repeats=repeats, context=per_call).values
    return lat1, latn, Samples.of(times), e0, meter.read()


def _training_energy(meter: EnergyMeter, timed_start: list[EnergyReading], end: EnergyReading,
                     telemetry: Telemetry, trained: TrainResult, device: torch.device,
                     dist_info: distributed.DistInfo | None) -> Row:
    """Energy columns of the timed training steps: from the first timed step (warmup and compilation left
    out, as the step times leave them out) to the end, per sample the meter's GPUs (or this node's CPU
    package) processed: this node's ranks, not every node's."""
    if not timed_start:  # every step was warmup: nothing timed, no energy per timed sample
        return energy_columns("train", meter.between(end, end, telemetry=telemetry), 0, device.type)
    local_ranks = distributed.local_world_size() if dist_info else 1
    return energy_columns("train", meter.between(timed_start[0], end, telemetry=telemetry),
                          trained.timed_samples * local_ranks, device.type)


def _measure(cfg: RunConfig, device: torch.device, dist_info: distributed.DistInfo | None, *, machine: str | None,
             progress: ProgressFn | None, ceilings: Ceilings | None, weights: WeightsPlan | None,
             heartbeat: ProgressFn | None = None) -> Measurement | None:
    s = cfg.settings
    say = progress or (lambda _msg: None)
    local_batch = distributed.per_rank_batch(cfg.batch_size, dist_info)
    world = dist_info.world_size if dist_info else 1
    row = base_row(cfg, machine or machine_name(), device)
    row["hardware"] = str(device) if cfg.hardware == "auto" else cfg.hardware
    row["device_name"] = device_name(device)
    t_start = time.perf_counter()
    row.update(work_columns(cfg, num_classes(s), local_batch))  # counted before the memory window opens
    memory = PeakMemory(device).start()
    maybe_inject_setup(cfg.run_id, dist_info.rank if dist_info else 0)
    built = build(cfg, device, local_batch, (dist_info.rank, world) if dist_info else (0, 1))
    model, loaders, per_epoch = built.model, built.loaders, built.per_epoch
    trained_by = load_weights(weights, model) if weights is not None and weights.load else None
    train_net, infer_net = wrap(model, s, device, dist_info)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    say(f"set up on {row['device_name']}: {cfg.model}, batch {cfg.batch_size}, " + (
        f"evaluating the weights {trained_by} trained" if trained_by else
        f"{per_epoch} batches/epoch, {s.warmup_steps} warmup step(s) untimed"))
    uuids = _gpu_uuids(device, dist_info)
    peers = distributed.local_peer_pids(dist_info)  # every rank, before any of them starts sampling
    sampler: TelemetrySampler | NullSampler = (TelemetrySampler(s.telemetry_interval_s, gpus=bool(uuids),
                                                                gpu_uuids=uuids, peer_pids=peers)
                                               if s.telemetry else NullSampler())
    meter = EnergyMeter(gpu_uuids=uuids)  # training: every local rank's GPU, each busy with its share
    infer_meter = meter  # inference runs on rank 0 alone: its GPU only (below), not the idle ones beside it
    loadavg_1m = _loadavg_1m()
    timed_start: list[EnergyReading] = []
    try:
        sampler.start()
        sampler.set_phase("train")
        trained = None
        if not trained_by:
            trained = train(Trainer.of(train_net, model, s, device),
                            maybe_failing_loader(loaders.train, cfg.run_id, dist_info.rank if dist_info else 0),
                            s, per_epoch, progress=progress, heartbeat=heartbeat,
                            at_timed_start=lambda: timed_start.append(meter.read()))
        e_train1 = meter.read()
        in_sync = distributed.weights_in_sync(model, dist_info)
        if dist_info is not None and not dist_info.is_main:
            memory.stop()
            distributed.barrier(dist_info)  # wait while rank 0 evaluates
            return None
        compiled = compile_report() if s.knobs.compile != "off" else None
        if trained is not None and weights is not None and weights.save:
            save_weights(weights, model, cfg.run_id)
        sampler.set_phase("eval")
        say(f"evaluating on the test split ({loaders.test_samples} samples)")
        test = evaluate(infer_net, loaders.test, device, s.knobs)
        quant: Row = {"model_size_bytes": model_size_on_disk_bytes(model)}
        if not s.knobs.trains:
            infer_net, test, quant = _quantized(model, loaders, device, s, test, trained_by)
        if dist_info is not None and device.type == "cuda":
            infer_meter = EnergyMeter(gpu_uuids=_gpu_uuids(device, None))
        sampler.set_phase("latency")
        say(f"timing inference at batch 1 and {cfg.batch_size}: {s.latency_repeats} repeats each, up to "
            f"{LATENCY_TARGET_SAMPLES} within {s.latency_budget_s:g} s, after {s.infer_warmup_batches} warmup "
            "batch(es)")
        lat1, latn, thr, e_infer0, e_infer1 = _inference(infer_net, loaders, cfg, device, infer_meter)
    finally:
        if sampler.running:
            sampler.stop()
        meter.close()
        if infer_meter is not meter:
            infer_meter.close()
    telemetry = sampler.result
    assert telemetry is not None
    mem = memory.stop()
    distributed.barrier(dist_info)

    synthetic = loaders.synthetic
    infer_samples = cfg.batch_size * BATCHES_PER_THROUGHPUT_REPEAT * thr.n
    if trained is not None:  # an evaluate-only row has no training figures of its own
        row.update({
            **training_columns(trained, per_epoch, world),
            "train_accuracy": None if synthetic else trained.train_accuracy,
            **telemetry.summary("train"),
            **_training_energy(meter, timed_start, e_train1, telemetry, trained, device, dist_info),
        })
        if compiled is not None:
            row.update(compile_s=compile_seconds(trained.warmup_step_s, Samples.of(trained.step_s).median),
                       compile_graphs=compiled.graphs, compile_graph_breaks=compiled.graph_breaks,
                       compile_fell_back=compiled.fell_back, compile_fallback_reason=compiled.reason)
    row.update({
        "synthetic": synthetic, "num_classes": loaders.num_classes, "train_samples": loaders.train_samples,
        "test_samples": loaders.test_samples, "world_size": world, "per_rank_batch_size": local_batch,
        "distributed_backend": dist_info.backend if dist_info else None, "ddp_weights_in_sync": in_sync,
        "val_samples_per_s": test.samples_per_s, "val_s": test.seconds,
        **accuracy_columns(None if synthetic else test.accuracy, test.samples),
        **latency_columns(lat1, latn, thr, infer_samples),
        **memory_columns(mem),
        "params": params, "params_trainable": trainable, **quant,
        **energy_columns("infer", infer_meter.between(e_infer0, e_infer1, telemetry=telemetry), infer_samples,
                         device.type),
        "threads": torch.get_num_threads(), "duration_s": time.perf_counter() - t_start, "finished_utc": now_utc(),
    })
    row.update(interference.measure(telemetry.frame, usable_cpu_ids(), threshold_pct=s.interference_threshold_pct,
                                    loadavg_1m_before=loadavg_1m).columns())
    row.update(roof_columns(row, ceilings, device.type, world))
    samples = {"latency_s": list(lat1.values), "batch_latency_s": list(latn.values),
               "infer_repeat_s": list(thr.values)}
    if trained is not None:
        samples.update({"train_step_s": trained.step_s, "warmup_step_s": trained.warmup_step_s,
                        "data_wait_s": trained.data_wait_s, "epoch_s": trained.epoch_s,
                        "loss": trained.loss_per_step})
    return Measurement(row, samples, telemetry)
