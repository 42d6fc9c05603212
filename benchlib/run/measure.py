"""Measure one configuration end to end and return what it measured; nothing here writes a file.

The pieces are the engine's (set-up, the one training step, evaluation, latency) and the instruments'
(memory, telemetry, energy); this module runs them in order, one short function a phase, and returns what they
measured as a frozen :class:`~benchlib.run.measurement.Measurement`. It names no column: the row is made of the
record by :mod:`benchlib.run.columns`, and :mod:`benchlib.run.record` writes it and the trained weights.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch import nn

from .. import log as messages
from ..data.loaders import Loaders
from ..engine.inference import (
    LATENCY_TARGET_SAMPLES,
    example_batch,
    latency_series,
    measure_latency,
    measure_throughput,
    throughput_series,
)
from ..engine.knobs import CompileReport, compile_report, precision_context
from ..engine.setup import build, check_runs, configuration, num_classes, wrap
from ..engine.step import Trainer, in_memory_format
from ..engine.train import EvalResult, TrainResult, evaluate, train
from ..engine.weights import WeightsPlan, load_weights
from ..env import distributed, harness
from ..env.devices import cuda_uuids, device_name, resolve_hardware
from ..env.manifest import machine_name
from ..env.rank_watch import RankWatch
from ..env.threads import usable_cpu_ids
from ..errors import RankFailed
from ..instruments import drift, interference
from ..instruments.cpu import minor_faults
from ..instruments.energy import NVML_MIN_WINDOW_S, EnergyMeter, EnergyReading
from ..instruments.memory import PeakMemory
from ..instruments.samples import Samples
from ..instruments.telemetry import NullSampler, Telemetry, TelemetrySampler
from ..log import ProgressFn, progress_of
from ..nets.flops import complexity_for_run
from ..nets.quantize import (
    count_quantized_modules,
    model_size_on_disk_bytes,
    quantized_copy,
    unserved_copy,
)
from ..roofline.measured import Ceilings
from ..spec.settings import RunConfig, RunSettings
from ..store.schema import BATCHES_PER_THROUGHPUT_REPEAT
from .columns import ACTIVATION_DTYPES, now_utc
from .faults import maybe_failing_loader, maybe_inject_setup
from .measurement import Inference, Measurement, Quantized, SetUp, Training
from .outcome import failure_status


def _quantized(model: nn.Module, loaders: Loaders, device: torch.device, s: RunSettings,
               fp32_test: EvalResult) -> tuple[nn.Module, EvalResult, Quantized]:
    """Quantize the trained fp32 model itself and evaluate it: accuracy is compared on the same weights.

    Static int8 is calibrated on training batches (real images: the activation ranges must be real).
    """
    model = model.eval()
    qmodel = quantized_copy(model, s.knobs.quantization, loaders.train)
    test = evaluate(qmodel, loaders.test, device)
    return qmodel, test, Quantized(fp32_model_size_bytes=model_size_on_disk_bytes(model),
                                   fp32_test_accuracy=None if loaders.synthetic else fp32_test.accuracy,
                                   quantized_modules=count_quantized_modules(qmodel))


def _loadavg_1m() -> float | None:
    """The one-minute load average now; None where the OS has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def _cores_all_busy(device: torch.device, peer_ranks: int) -> bool:
    """Whether the step's threads (over this machine's ranks) fill every CPU the run may use: there a
    telemetry sample displaces one of them, and costs the step more than its own CPU (``busy_cores``)."""
    return device.type == "cpu" and torch.get_num_threads() * (1 + peer_ranks) >= len(usable_cpu_ids())


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
    ``heartbeat`` how far a long phase got (the training step reached; the inference series, its samples of
    those it needs and its seconds), for a terminal's status line or a line now and then.

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
    say = progress_of(progress)
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
               meter: EnergyMeter, tick: ProgressFn | None = None
               ) -> tuple[Samples, Samples, Samples, EnergyReading, EnergyReading]:
    """Batch-1 latency, working-batch latency, and back-to-back throughput with an energy window around it;
    ``tick`` hears how far each series got.

    The throughput repeats go on, one at a time, until the energy window is long enough to trust a GPU
    energy counter.
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
                                  target=LATENCY_TARGET_SAMPLES, tick=tick)
                  for m, b in ((net_1, batch1), (net_n, batch_n)))
    e0 = meter.read()
    times = list(measure_throughput(net_n, batch_n, warmup=0, repeats=repeats, context=per_call,
                                    budget_s=s.latency_budget_s, tick=tick).values)
    while meter.counts_gpu and time.monotonic() - e0.t_s < NVML_MIN_WINDOW_S:
        times += measure_throughput(net_n, batch_n, warmup=0, repeats=1, context=per_call).values
    return lat1, latn, Samples.of(times), e0, meter.read()


def inference_plan(cfg: RunConfig) -> str:
    """What the inference phase times, in the words of its progress line: the warmup, each latency series and
    the throughput series, each with its counts and budget."""
    s = cfg.settings
    latency = latency_series(1, s.latency_repeats, s.latency_budget_s).plan()
    throughput = throughput_series(cfg.batch_size, s.latency_repeats, s.latency_budget_s).plan()
    return (f"timing inference: {s.infer_warmup_batches} warmup pass(es) at batch 1 and at {cfg.batch_size}; latency "
            f"at each: {latency}; throughput at {cfg.batch_size}: {throughput}")


@dataclass
class _Built:
    """What the set-up phase hands on: the record of it, and the live objects the later phases use."""

    setup: SetUp
    model: nn.Module
    train_net: nn.Module
    infer_net: nn.Module
    loaders: Loaders
    memory: PeakMemory


def _set_up(cfg: RunConfig, device: torch.device, dist_info: distributed.DistInfo | None,
            weights: WeightsPlan | None, say: ProgressFn) -> _Built:
    """Count the work, open the memory window, build data and model (or load another configuration's
    weights), wrap them as the variant asks."""
    s = cfg.settings
    local_batch = distributed.per_rank_batch(cfg.batch_size, dist_info)
    rank, world = (dist_info.rank, dist_info.world_size) if dist_info else (0, 1)
    dtype = ACTIVATION_DTYPES[s.knobs.precision]
    work = complexity_for_run(cfg.model, s.image_size, local_batch, num_classes(s), activation_dtype=dtype)
    memory = PeakMemory(device).start()  # opened after counting: the count's model copies are not the run's
    maybe_inject_setup(cfg.run_id, rank)
    built = build(cfg, device, local_batch, (rank, world))
    trained_by = load_weights(weights, built.model) if weights is not None and weights.load else None
    train_net, infer_net = wrap(built.model, s, device, dist_info)
    loaders = built.loaders
    setup = SetUp(
        device=device, hardware=str(device) if cfg.hardware == "auto" else cfg.hardware,
        device_name=device_name(device), work=work, local_batch=local_batch, world_size=world,
        distributed_backend=dist_info.backend if dist_info else None, batches_per_epoch=built.per_epoch,
        params=sum(p.numel() for p in built.model.parameters()),
        params_trainable=sum(p.numel() for p in built.model.parameters() if p.requires_grad),
        synthetic=loaders.synthetic, num_classes=loaders.num_classes, train_samples=loaders.train_samples,
        test_samples=loaders.test_samples, weights_trained_by=trained_by, loadavg_1m_before=_loadavg_1m())
    say(f"set up on {setup.device_name}: {cfg.model}, batch {cfg.batch_size}, " + (
        f"evaluating the weights {trained_by} trained" if trained_by else
        f"{built.per_epoch} batches/epoch, {s.warmup_steps} warmup step(s) untimed"))
    return _Built(setup, built.model, train_net, infer_net, loaders, memory)


def _train(b: _Built, cfg: RunConfig, meter: EnergyMeter, dist_info: distributed.DistInfo | None,
           progress: ProgressFn | None, heartbeat: ProgressFn | None
           ) -> tuple[TrainResult, EnergyReading, EnergyReading | None, float | None, int | None]:
    """The timed training loop; the energy readings at its first timed step and at its end, and what the
    timed steps took besides: the CPU benchlib's own threads charged, the process's minor page faults."""
    timed_start: list[tuple[EnergyReading, float, int | None]] = []
    trained = train(Trainer.of(b.train_net, b.model, cfg.settings, b.setup.device),
                    maybe_failing_loader(b.loaders.train, cfg.run_id, dist_info.rank if dist_info else 0),
                    cfg.settings, b.setup.batches_per_epoch, progress=progress, heartbeat=heartbeat,
                    at_timed_start=lambda: timed_start.append((meter.read(), harness.cpu_s(), minor_faults())))
    end, faults_end = meter.read(), minor_faults()
    if not timed_start:
        return trained, end, None, None, None
    reading, harness_before_s, faults_before = timed_start[0]
    faults = faults_end - faults_before if faults_end is not None and faults_before is not None else None
    return trained, end, reading, harness.cpu_s() - harness_before_s, faults


def _training(trained: TrainResult, meter: EnergyMeter, start: EnergyReading | None, end: EnergyReading,
              telemetry: Telemetry, dist_info: distributed.DistInfo | None, compiled: CompileReport | None,
              harness_cpu_s: float | None = None, h2d_bytes_per_step: int | None = None,
              faults: int | None = None) -> Training:
    """The training record: energy from the first timed step (warmup and compilation left out, as the step
    times leave them out) to the end, per sample the meter's GPUs (or this node's CPU package) processed:
    this node's ranks, not every node's."""
    local_ranks = distributed.local_world_size() if dist_info else 1
    energy = meter.between(start or end, end, telemetry=telemetry)
    samples = trained.timed_samples * local_ranks if start is not None else 0  # every step warmup: none timed
    return Training(result=trained, drift=drift.measure(trained.step_s), energy=energy, energy_samples=samples,
                    compiled=compiled, harness_cpu_s=harness_cpu_s, h2d_bytes_per_step=h2d_bytes_per_step,
                    minor_faults=faults)


def _evaluate(b: _Built, cfg: RunConfig, say: ProgressFn) -> tuple[nn.Module, EvalResult, int, Quantized | None]:
    """Test-set accuracy of the network as the variant evaluates it (the int8 copy for a quantized one)."""
    s = cfg.settings
    say(f"evaluating on the test split ({b.loaders.test_samples} samples)")
    test = evaluate(b.infer_net, b.loaders.test, b.setup.device, s.knobs)
    if s.knobs.trains:
        return b.infer_net, test, model_size_on_disk_bytes(b.model), None
    qnet, qtest, quantized = _quantized(b.model, b.loaders, b.setup.device, s, test)
    return qnet, qtest, model_size_on_disk_bytes(qnet), quantized


def _measure(cfg: RunConfig, device: torch.device, dist_info: distributed.DistInfo | None, *, machine: str | None,
             progress: ProgressFn | None, ceilings: Ceilings | None, weights: WeightsPlan | None,
             heartbeat: ProgressFn | None = None) -> Measurement | None:
    """The phases in order: set-up, training, evaluation, inference, under the telemetry sampler and the energy
    meters; then the record of them."""
    s = cfg.settings
    say = progress_of(progress)
    started_utc, t_start = now_utc(), time.perf_counter()
    b = _set_up(cfg, device, dist_info, weights, say)
    uuids = _gpu_uuids(device, dist_info)
    peers = distributed.local_peer_pids(dist_info)  # every rank, before any of them starts sampling
    sampler: TelemetrySampler | NullSampler = (TelemetrySampler(s.telemetry_interval_s, gpus=bool(uuids),
                                                                gpu_uuids=uuids, peer_pids=peers,
                                                                busy_cores=_cores_all_busy(device, len(peers)))
                                               if s.telemetry else NullSampler())
    meter = EnergyMeter(gpu_uuids=uuids)  # training: every local rank's GPU, each busy with its share
    infer_meter = meter  # inference runs on rank 0 alone: its GPU only (below), not the idle ones beside it
    trained, train_end, timed_start, compiled, harness_cpu_s, faults = None, None, None, None, None, None
    try:
        sampler.start()
        sampler.set_phase("train")
        if not b.setup.weights_trained_by:
            trained, train_end, timed_start, harness_cpu_s, faults = _train(b, cfg, meter, dist_info, progress,
                                                                             heartbeat)
        in_sync = distributed.weights_in_sync(b.model, dist_info)
        if dist_info is not None and not dist_info.is_main:
            b.memory.stop()
            distributed.barrier(dist_info)  # wait while rank 0 evaluates
            return None
        compiled = compile_report() if s.knobs.compile != "off" else None
        sampler.set_phase("eval")
        infer_net, test, model_bytes, quantized = _evaluate(b, cfg, say)
        if dist_info is not None and device.type == "cuda":
            infer_meter = EnergyMeter(gpu_uuids=_gpu_uuids(device, None))
        sampler.set_phase("latency")
        say(inference_plan(cfg))
        lat1, latn, thr, e_infer0, e_infer1 = _inference(infer_net, b.loaders, cfg, device, infer_meter, heartbeat)
    finally:
        if sampler.running:
            sampler.stop()
        meter.close()
        if infer_meter is not meter:
            infer_meter.close()
    telemetry = sampler.result
    assert telemetry is not None
    mem = b.memory.stop()
    distributed.barrier(dist_info)
    training = None
    if trained is not None and train_end is not None:
        training = _training(trained, meter, timed_start, train_end, telemetry, dist_info, compiled, harness_cpu_s,
                             b.loaders.h2d_bytes_per_batch(b.setup.device), faults)
    inference = Inference(latency=lat1, batch_latency=latn, throughput_repeat_s=thr,
                          samples=cfg.batch_size * BATCHES_PER_THROUGHPUT_REPEAT * thr.n,
                          energy=infer_meter.between(e_infer0, e_infer1, telemetry=telemetry))
    return Measurement(
        cfg=cfg, machine=machine or machine_name(), started_utc=started_utc, finished_utc=now_utc(),
        duration_s=time.perf_counter() - t_start, setup=b.setup, training=training, evaluation=test,
        model_size_bytes=model_bytes, quantized=quantized, inference=inference, memory=mem, telemetry=telemetry,
        interference=interference.measure(telemetry.frame, usable_cpu_ids(),
                                          threshold_pct=s.interference_threshold_pct,
                                          loadavg_1m_before=b.setup.loadavg_1m_before),
        threads=torch.get_num_threads(), ddp_weights_in_sync=in_sync, ceilings=ceilings,
        trained_model=b.model if training is not None else None)
