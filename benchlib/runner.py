"""Measure one configuration end to end and return its row; the pair runner records rows to files.

``measure`` is pure measurement (it never touches files); ``run_pair`` is the I/O around it that the
benchmark notebook and ``benchlib run`` call.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import itertools
import json
import math
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from torch.nn.parallel import DistributedDataParallel

from . import __version__, distributed
from .config import RunConfig, RunSettings, expand_variants, setting_names, settings_from_mapping
from .datasets import num_classes_of
from .devices import device_name, resolve_hardware
from .faults import maybe_inject
from .flops import complexity_for_run
from .inference import example_batch, measure_latency
from .loaders import batches_per_epoch, build_loaders
from .manifest import collect_manifest, machine_name, manifest_id
from .energy import EnergyMeter, EnergyResult, per_sample
from .memory import MemoryReport, PeakMemory
from .models import build_model, count_parameters
from .results import row_key, safe_name, write_manifest, write_row
from .shared_weights import WeightsPlan, load_weights, plan_weights, save_weights, training_first
from .roofline import ensure_ceilings, place_on_roof, roof_dtype
from .quantize import count_quantized_modules, model_size_on_disk_bytes, quantize_dynamic_linear, quantize_static_int8
from .timing import Samples
from .variants import (Variant, apply_memory_format, backend_flags, compile_model, compile_seconds, parse_variant,
                       precision_context, unsupported_reason, variant_of)
from .telemetry import NullSampler, TelemetrySampler, write_telemetry_csv
from .train import MemoryCeilingError, NonFiniteLossError, TrainResult, evaluate, train

ProgressFn = Callable[[str], None]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def base_row(cfg: RunConfig, machine: str) -> dict[str, Any]:
    """The identifying columns of a row, known before anything runs (failure rows use them too)."""
    s = cfg.settings
    return {
        "study": cfg.study, "run_id": cfg.run_id, "machine": machine, "hardware": cfg.hardware,
        "device_name": None, "model": cfg.model, "dataset": s.dataset, "image_size": s.image_size,
        "batch_size": cfg.batch_size, "variant": s.variant, "precision": s.precision,
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "seed": s.seed, "world_size": cfg.world_size, "status": "ok", "error": None, "optimizer": s.optimizer, "lr": s.lr,
        "epochs": s.epochs, "pretrained": s.pretrained, "freeze_backbone": s.freeze_backbone,
        "num_workers": s.num_workers, "tf32": s.tf32, "cudnn_benchmark": s.cudnn_benchmark,
        "benchlib_version": __version__, "started_utc": _now(),
        "memory_format": s.memory_format, "compile": s.compile, "quantization": s.quantization,
        **{c: None for c in ("train_steps", "train_step_s_median", "train_step_s_iqr", "train_samples_per_s",
                             "epoch_s", "val_samples_per_s", "train_accuracy", "test_accuracy", "latency_ms_p50",
                             "latency_ms_p90", "latency_ms_p99", "batch_latency_ms_p50", "infer_samples_per_s",
                             "peak_rss_bytes", "peak_cuda_allocated_bytes", "params", *WORK_COLUMNS)},
    }


WORK_COLUMNS = (
    "macs_per_sample", "flops_per_sample", "train_flops_per_sample", "weight_bytes", "model_size_bytes",
    "activation_bytes_per_sample", "bytes_per_sample", "train_bytes_per_sample", "arithmetic_intensity",
    "train_arithmetic_intensity", "uncounted_ops", "achieved_train_flops_per_s", "achieved_infer_flops_per_s",
    "roof_dtype", "roof_peak_flops_per_s", "roof_bandwidth_bytes_per_s", "train_roof_flops_per_s", "roof_fraction",
    "infer_roof_flops_per_s", "infer_roof_fraction", "above_roof",
)


def _num_classes(s: RunSettings) -> int:
    return s.synthetic_classes if s.dataset == "synthetic" else num_classes_of(s.dataset, s.data_path)


def work_columns(cfg: RunConfig, num_classes: int) -> dict[str, Any]:
    """Counted work and bytes of the configuration (MACs and FLOPs under their own names)."""
    c = complexity_for_run(cfg.model, cfg.settings.image_size, cfg.batch_size, num_classes)
    return {
        "macs_per_sample": c.macs_per_sample, "flops_per_sample": c.flops_per_sample,
        "train_flops_per_sample": c.train_flops_per_sample, "weight_bytes": c.model_size_bytes,
        "activation_bytes_per_sample": c.activation_bytes_per_sample, "bytes_per_sample": c.bytes_per_sample,
        "train_bytes_per_sample": c.train_bytes_per_sample, "arithmetic_intensity": c.arithmetic_intensity,
        "train_arithmetic_intensity": c.train_arithmetic_intensity,
        "uncounted_ops": "; ".join(f"{k}: {', '.join(v)}" for k, v in c.uncounted_ops.items() if v) or None,
    }


def roof_columns(row: Mapping[str, Any], ceilings: Mapping[str, Any] | None, device_type: str) -> dict[str, Any]:
    """Achieved FLOP/s and where they sit under this machine's measured roof."""
    def product(a: Any, b: Any) -> float | None:
        return a * b if a is not None and b is not None and math.isfinite(a * b) else None

    train_fps = product(row["train_flops_per_sample"], row["train_samples_per_s"])
    infer_fps = product(row["flops_per_sample"], row["infer_samples_per_s"])
    out: dict[str, Any] = {"achieved_train_flops_per_s": train_fps, "achieved_infer_flops_per_s": infer_fps}
    if not ceilings:
        return out
    quantized = row.get("quantization") not in (None, "none")
    dtype = "int8" if quantized else roof_dtype(row["precision"], device_type, bool(row.get("tf32")))  # no int8 ceiling
    train = place_on_roof(train_fps, row["train_arithmetic_intensity"], ceilings, dtype)
    infer = place_on_roof(infer_fps, row["arithmetic_intensity"], ceilings, dtype)
    flags = [f for f in (train["above"], infer["above"]) if f is not None]
    out.update({
        "roof_dtype": dtype, "roof_peak_flops_per_s": ceilings["peak_flops_per_s"].get(dtype),
        "roof_bandwidth_bytes_per_s": ceilings["bandwidth_bytes_per_s"],
        "train_roof_flops_per_s": train["roof_flops_per_s"], "roof_fraction": train["fraction"],
        "infer_roof_flops_per_s": infer["roof_flops_per_s"], "infer_roof_fraction": infer["fraction"],
        "above_roof": any(flags) if flags else None,
    })
    return out


def _as_format(x: torch.Tensor, variant: Variant) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if variant.memory_format == "channels_last" else x


def _quantized(model: torch.nn.Module, loaders: Any, device: torch.device, s: RunSettings,
               fp32_test: Any, trained_by: str | None) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """Quantize the trained fp32 model itself and evaluate it: accuracy is compared on the same weights.

    Static int8 is calibrated on training batches (real images: the activation ranges must be real).
    """
    model = model.eval()
    if s.quantization == "static_int8":
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


_CALIBRATION_BATCHES = 8


def _energy_columns(prefix: str, result: EnergyResult, samples: int, device_type: str) -> dict[str, Any]:
    """Energy of one region: GPU (NVML) and CPU package (RAPL) joules, per sample, and why any is missing.

    ``<prefix>_energy_j`` is the device's own figure: the GPU's on CUDA, the CPU package's on CPU.
    """
    main_j = result.gpu_j if device_type == "cuda" else result.cpu_package_j
    reasons = "; ".join(f"{k}: {v}" for k, v in result.unmeasurable.items()) or None
    return {
        f"{prefix}_energy_window_s": result.seconds, f"{prefix}_gpu_energy_j": result.gpu_j,
        f"{prefix}_cpu_package_energy_j": result.cpu_package_j, f"{prefix}_energy_j": main_j,
        f"{prefix}_energy_j_per_sample": per_sample(main_j, samples),
        f"{prefix}_energy_method": result.gpu_method if device_type == "cuda" else result.cpu_method,
        f"{prefix}_energy_unmeasurable": reasons,
    }


def _training_columns(trained: TrainResult, per_epoch: int, world: int) -> dict[str, Any]:
    steps, epochs, waits = Samples.of(trained.step_s), Samples.of(trained.epoch_s), Samples.of(trained.data_wait_s)
    return {
        "batches_per_epoch": per_epoch, "train_steps": steps.n, "train_steps_total": trained.total_steps,
        "train_step_s_median": steps.median, "train_step_s_iqr": steps.iqr, "train_step_noisy": steps.noisy,
        "train_samples_per_s": trained.timed_samples * world / steps.total if steps.total > 0 else math.nan,
        "data_wait_s_total": waits.total,
        "data_wait_fraction": waits.total / (waits.total + steps.total) if steps.total > 0 else math.nan,
        "epoch_s": epochs.median, "epoch_s_iqr": epochs.iqr, "epochs_timed": epochs.n,
        "final_loss": trained.final_loss,
        "step_sync": "per-step" if trained.sync_per_step else "region",
    }


def _latency_columns(lat1: Samples, latn: Samples, batch_size: int) -> dict[str, Any]:
    return {
        "latency_ms_p50": _ms(lat1.median), "latency_ms_p90": _ms(lat1.percentile(90)),
        "latency_ms_p99": _ms(lat1.percentile(99)), "latency_n": lat1.n, "latency_noisy": lat1.noisy,
        "batch_latency_ms_p50": _ms(latn.median), "batch_latency_ms_p90": _ms(latn.percentile(90)),
        "batch_latency_ms_p99": _ms(latn.percentile(99)), "batch_latency_noisy": latn.noisy,
        "infer_samples_per_s": batch_size / latn.median if latn.median > 0 else math.nan,
    }


def _memory_columns(mem: MemoryReport) -> dict[str, Any]:
    return {
        "rss_baseline_bytes": mem.rss_baseline_bytes, "peak_rss_bytes": mem.peak_rss_bytes,
        "peak_rss_above_baseline_bytes": mem.peak_rss_above_baseline_bytes, "peak_rss_source": mem.peak_rss_source,
        "peak_cuda_allocated_bytes": mem.peak_cuda_allocated_bytes,
        "peak_cuda_reserved_bytes": mem.peak_cuda_reserved_bytes,
        "mps_allocated_bytes": mem.mps_allocated_bytes, "mps_driver_allocated_bytes": mem.mps_driver_allocated_bytes,
    }


def measure(cfg: RunConfig, *, machine: str | None = None, progress: ProgressFn | None = None,
            ceilings: Mapping[str, Any] | None = None, sampler: TelemetrySampler | None = None,
            weights: WeightsPlan | None = None) -> tuple[dict[str, Any] | None, dict[str, list[float]]]:
    """Train, evaluate and time one configuration; return (row, raw samples by series).

    With ``ceilings`` (this machine's measured roofline) the row also says where it sits under its roof.
    Telemetry is sampled in the background from the first training step to the last latency repeat
    (``sampler``, or one made here; its ``result`` holds the time series), and energy is read around
    the training loop and around the working-batch latency repeats. Under torchrun the model trains
    data-parallel on every rank and only rank 0 gets a row (others: None).

    With a ``weights`` plan, an inference-only variant (quantized) evaluates the weights its training
    configuration saved instead of training (its training columns are then empty, and
    ``weights_trained_by`` names that configuration); a training configuration saves them for it.
    """
    s = cfg.settings
    device = torch.device(resolve_hardware(cfg.hardware))
    variant = variant_of(s)
    reason = unsupported_reason(dataclasses.replace(variant, quantization="none"), device.type, training=True)
    if reason is None and variant.quantization != "none":
        reason = unsupported_reason(variant, device.type, training=False)
    if reason is not None:
        raise SkippedConfiguration(reason)
    with backend_flags(variant):
        return _measure(cfg, device, variant, machine=machine, progress=progress, ceilings=ceilings, sampler=sampler,
                        weights=weights)


def _measure(cfg: RunConfig, device: torch.device, variant: Variant, *, machine: str | None, progress: ProgressFn | None,
             ceilings: Mapping[str, Any] | None, sampler: TelemetrySampler | None,
             weights: WeightsPlan | None) -> tuple[dict[str, Any] | None, dict[str, list[float]]]:
    s = cfg.settings
    dist_info = distributed.init(device.type)
    device = distributed.rank_device(device, dist_info)
    local_batch = distributed.per_rank_batch(cfg.batch_size, dist_info)
    world = dist_info.world_size if dist_info else 1
    row = base_row(cfg, machine or machine_name())
    row["hardware"] = str(device) if cfg.hardware == "auto" else cfg.hardware
    row["device_name"] = device_name(device)
    t_start = time.perf_counter()
    row.update(work_columns(cfg, _num_classes(s)))  # counted before the memory window opens
    seed_everything(s.seed)
    memory = PeakMemory(device).start()
    loaders = build_loaders(s, local_batch, device, (dist_info.rank, world) if dist_info else (0, 1))
    model = build_model(cfg.model, loaders.num_classes, pretrained=s.pretrained,
                        freeze_backbone=s.freeze_backbone, weights_path=s.weights_path).to(device)
    model, _ = apply_memory_format(model, None, variant)
    trained_by = load_weights(weights, model) if weights is not None and weights.load else None
    net = (DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
           if dist_info else model)
    net, _ = compile_model(net, variant)  # compiles lazily, inside the warmup steps (compile_s)
    params, trainable = count_parameters(model)
    per_epoch = batches_per_epoch(loaders.train, s.max_train_batches)
    if per_epoch < 1:
        raise ValueError(f"batch size {cfg.batch_size} leaves no full training batch in {loaders.train_samples} samples")
    if progress:
        progress(f"{cfg.run_id}: evaluates the weights {trained_by} trained" if trained_by
                 else f"{cfg.run_id}: {per_epoch} batches/epoch on {row['device_name']}")
    if not s.telemetry:
        sampler = NullSampler()
    sampler = sampler or TelemetrySampler(s.telemetry_interval_s)
    meter = EnergyMeter()
    try:
        sampler.start()
        sampler.set_phase("train")
        e_train0 = meter.read()
        trained = None if trained_by else train(net, loaders.train, device, s, per_epoch, progress=progress)
        e_train1 = meter.read()
        in_sync = distributed.weights_in_sync(model, dist_info)
        if dist_info is not None and not dist_info.is_main:
            memory.stop()
            distributed.barrier(dist_info)  # wait while rank 0 evaluates
            return None, {}
        if trained is not None and weights is not None and weights.save:
            save_weights(weights, model, cfg.run_id)
        sampler.set_phase("eval")
        infer_model = net.module if dist_info else net
        test = evaluate(infer_model, loaders.test, device, s)
        quant: dict[str, Any] = {"model_size_bytes": model_size_on_disk_bytes(model)}
        if variant.quantization != "none":
            infer_model, test, quant = _quantized(model, loaders, device, s, test, trained_by)
        sampler.set_phase("latency")
        batch1 = _as_format(example_batch(loaders.test, 1, device), variant)
        batch_n = _as_format(example_batch(loaders.test, cfg.batch_size, device), variant)
        with precision_context(variant, device):
            lat1 = measure_latency(infer_model, batch1, warmup=s.infer_warmup_batches, repeats=s.latency_repeats)
            e_infer0 = meter.read()
            latn = measure_latency(infer_model, batch_n, warmup=s.infer_warmup_batches, repeats=s.latency_repeats)
            e_infer1 = meter.read()
    finally:
        if sampler.running:
            sampler.stop()
        meter.close()
    telemetry = sampler.result
    mem = memory.stop()
    distributed.barrier(dist_info)

    synthetic = loaders.synthetic
    infer_samples = cfg.batch_size * (s.infer_warmup_batches + s.latency_repeats)
    if trained is not None:  # an evaluate-only row has no training figures of its own
        row.update({
            **_training_columns(trained, per_epoch, world),
            "train_accuracy": None if synthetic else trained.train_accuracy,
            "compile_s": compile_seconds(trained.warmup_step_s, Samples.of(trained.step_s).median)
            if variant.compile != "off" else None,
            **telemetry.summary("train"),
            **_energy_columns("train", meter.between(e_train0, e_train1, telemetry=telemetry),
                              trained.total_samples * world, device.type),
        })
    row.update({
        "synthetic": synthetic, "num_classes": loaders.num_classes, "train_samples": loaders.train_samples,
        "test_samples": loaders.test_samples, "warmup_steps": s.warmup_steps,
        "world_size": world, "per_rank_batch_size": local_batch,
        "distributed_backend": dist_info.backend if dist_info else None, "ddp_weights_in_sync": in_sync,
        "val_samples_per_s": test.samples_per_s, "val_s": test.seconds,
        "test_accuracy": None if synthetic else test.accuracy,
        **_latency_columns(lat1, latn, cfg.batch_size),
        **_memory_columns(mem),
        "params": params, "params_trainable": trainable, **quant,
        **_energy_columns("infer", meter.between(e_infer0, e_infer1, telemetry=telemetry), infer_samples, device.type),
        "threads": torch.get_num_threads(), "duration_s": time.perf_counter() - t_start, "finished_utc": _now(),
    })
    row.update(roof_columns(row, ceilings, device.type))
    samples = {"latency_s": list(lat1.values), "batch_latency_s": list(latn.values)}
    if trained is not None:
        samples.update({"train_step_s": trained.step_s, "warmup_step_s": trained.warmup_step_s,
                        "data_wait_s": trained.data_wait_s, "epoch_s": trained.epoch_s,
                        "loss": trained.loss_per_step})
    return row, samples


def error_text(exc: BaseException) -> str:
    """One line naming the error: the notebook's own exception for a failed cell, else the first line."""
    if isinstance(exc, SkippedConfiguration):
        return str(exc)
    if hasattr(exc, "ename") and hasattr(exc, "evalue"):  # papermill: the cell's exception
        detail = f"{exc.ename}: {exc.evalue}"
    else:
        detail = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    return f"{type(exc).__name__}: {detail}"[:500]


class SkippedConfiguration(RuntimeError):
    """The variant cannot run on this device (fp16 training on CPU, quantized inference on CUDA, ...)."""


def failure_status(exc: BaseException) -> str:
    """How a configuration ended that produced no measurement: skipped, oom, unstable, or failed."""
    if isinstance(exc, SkippedConfiguration):
        return "skipped"
    if isinstance(exc, (torch.OutOfMemoryError, MemoryCeilingError, MemoryError)):
        return "oom"
    if isinstance(exc, NonFiniteLossError):
        return "unstable"
    return "failed"


def failure_row(cfg: RunConfig, exc: BaseException, machine: str | None = None) -> dict[str, Any]:
    """A row that records why a configuration produced no measurement."""
    row = base_row(cfg, machine or machine_name())
    row["status"] = failure_status(exc)
    row["error"] = error_text(exc)
    row["finished_utc"] = _now()
    return row


def _print_progress(msg: str) -> None:
    print(f"[benchlib] {msg}", file=sys.stderr, flush=True)


def record(cfg: RunConfig, results_dir: Path, *, progress: ProgressFn | None = _print_progress,
           weights: WeightsPlan | None = None) -> dict[str, Any] | None:
    """Measure ``cfg`` and write its row; a failing configuration writes a failure row instead.

    Under torchrun only rank 0 records the manifest, measures the ceilings and writes the row.
    """
    main_rank = os.environ.get("RANK", "0") == "0"
    manifest = collect_manifest()
    mid = manifest_id(manifest)
    if main_rank:
        write_manifest(results_dir, manifest, mid)
    if cfg.settings.threads:
        torch.set_num_threads(cfg.settings.threads)
    try:
        ceilings = ensure_ceilings(results_dir, resolve_hardware(cfg.hardware)) if main_rank else None
        sampler = TelemetrySampler(cfg.settings.telemetry_interval_s) if cfg.settings.telemetry else NullSampler()
        row, samples = measure(cfg, machine=manifest["machine"], progress=progress, ceilings=ceilings, sampler=sampler,
                               weights=weights)
        if row is None:  # a data-parallel rank other than 0: rank 0 writes the row
            return None
    except Exception as exc:  # a failed configuration is data: record it and let the study go on
        row, samples = failure_row(cfg, exc, manifest["machine"]), {}
        if progress:
            progress(f"{cfg.run_id}: {row['status']}: {type(exc).__name__}: {exc}")
            if row["status"] == "failed":
                traceback.print_exc(file=sys.stderr)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if not main_rank:
        return None
    row["manifest_id"] = mid
    if samples and sampler.result is not None and not sampler.result.frame.empty:
        write_telemetry_csv(sampler.result, results_dir / "telemetry" / f"{row_key(row)}.csv")
    write_row(results_dir, row, samples)
    return row


def settings_from_namespace(namespace: Mapping[str, Any], where: str = "notebook parameters") -> RunSettings:
    """RunSettings from the variables a papermill ``parameters`` cell defined (validated)."""
    return settings_from_mapping({k: namespace[k] for k in setting_names() if k in namespace}, where)


COMPLETE_STATUSES = ("ok", "skipped", "oom", "unstable")


def completed_row(results_dir: Path, cfg: RunConfig, machine: str) -> dict[str, Any] | None:
    """The row this machine already wrote for ``cfg`` if it is complete (a ``failed`` one is retried)."""
    path = Path(results_dir) / "rows" / f"{safe_name(machine + '__' + cfg.run_id)}.json"
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and row.get("status") in COMPLETE_STATUSES else None


def run_pair(study: str, hardware: str, model: str, batch_sizes: list[int], settings: RunSettings,
             results_dir: str | Path, *, sweep: Mapping[str, list[Any]] | None = None, repeats: int = 1,
             resume: bool = True, variants: Sequence[Mapping[str, Any] | str] = ()) -> list[dict[str, Any]]:
    """Measure every configuration of one hardware/model pair, recording each row as it finishes.

    With ``resume``, configurations whose complete row already exists are skipped (their row is
    returned as it was), so a killed study loses at most the configuration that was running.
    Each training variant trains once: the inference-only variants (quantized) run after it and
    evaluate the weights it saved.
    """
    out = Path(results_dir)
    machine = machine_name()
    parsed = [parse_variant(v, "notebook parameters: variants") for v in variants]
    configs = training_first(expand_variants(study, hardware, model, batch_sizes, settings, sweep, repeats, parsed))
    plans = plan_weights(out, machine, configs)
    rows = []
    for i, cfg in enumerate(configs, 1):
        done = completed_row(out, cfg, machine) if resume else None
        if done is not None:
            _print_progress(f"{hardware}/{model}: configuration {i}/{len(configs)} {cfg.run_id}: row exists, skipped")
            rows.append(done)
            continue
        _print_progress(f"{hardware}/{model}: configuration {i}/{len(configs)} {cfg.run_id}")
        maybe_inject(cfg.run_id)
        rows.append(record(cfg, out, weights=plans.get(cfg.run_id)))
    return rows
