"""Row columns built from what one configuration measured: pure functions from results to flat mappings.

The one author of a row: every column name a row holds is written here (``tests/test_architecture.py`` fails
on a column written into a row anywhere else), each a column of :mod:`benchlib.store.schema`. The measuring
code returns a :class:`~benchlib.run.measurement.Measurement` and :func:`measured_row` turns it into a row;
a configuration that measured nothing gets :func:`failure_row`.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from .._version import __version__
from ..engine.knobs import compile_seconds
from ..engine.step import optimizer_impl
from ..engine.train import TrainResult
from ..env.gpu import tf32_in_effect
from ..env.manifest import process_uid
from ..env.threads import choose_threads, usable_cpus
from ..instruments.accuracy import wilson_interval
from ..instruments.drift import Drift
from ..instruments.energy import EnergyResult, per_sample
from ..instruments.interference import Interference
from ..instruments.memory import MemoryReport
from ..instruments.samples import Samples
from ..instruments.telemetry import TelemetrySummary
from ..roofline.measured import Ceilings
from ..roofline.model import place_workload, roof_dtype
from ..spec.settings import RunConfig, settings_digest
from ..store import schema
from ..store.rows import Row
from .measurement import Measurement, Quantized

if TYPE_CHECKING:  # counting work imports torchvision: a study's driver, which reads rows, never counts
    from ..nets.flops import Complexity


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def base_row(cfg: RunConfig, machine: str, device: torch.device | None = None, started_utc: str | None = None) -> Row:
    """The identifying columns of a row, known before anything runs (failure rows use them too).

    ``device``: where it runs (``--device auto`` resolved); without it, what the configuration names.
    """
    s = cfg.settings
    k = s.knobs
    # TF32 and cuDNN flags act on CUDA only, and TF32 on capability 8.0+ only: recorded as in effect
    cuda = device.type == "cuda" if device is not None else cfg.hardware.startswith("cuda")
    tf32 = k.tf32 and cuda and (device is None or tf32_in_effect(device))
    threads = choose_threads(k.threads)  # what the configuration runs with (engine.knobs.backend_flags sets it)
    row: Row = {
        "study": cfg.study, "run_id": cfg.run_id, "settings_digest": settings_digest(s),
        "settings_json": json.dumps(s.flat(), sort_keys=True), "machine": machine, "hardware": cfg.hardware,
        "device_name": None, "model": cfg.model, "dataset": s.dataset, "image_size": s.image_size,
        "batch_size": cfg.batch_size, "variant": s.variant, "precision": k.precision,
        "threads": threads.threads, "threads_source": threads.source,
        "interop_threads": torch.get_num_interop_threads(),
        "seed": s.seed, "world_size": cfg.world_size, "status": "ok", "error": None,
        "benchlib_version": __version__, "format_version": schema.FORMAT_VERSION,
        "started_utc": started_utc or now_utc(), "process_uid": process_uid(),
        "optimizer": s.optimizer, "lr": s.lr,
        "optimizer_impl": optimizer_impl(s, device) if device is not None else s.optimizer_impl,
        "epochs": s.epochs, "pretrained": s.pretrained,
        "freeze_backbone": s.freeze_backbone, "num_workers": s.num_workers, "tf32": tf32,
        "cudnn_benchmark": k.cudnn_benchmark and cuda, "memory_format": k.memory_format, "compile": k.compile,
        "quantization": k.quantization, "warmup_steps": s.warmup_steps,
    }
    for column in ("train_steps", "train_step_s_median", "train_step_s_iqr", "train_samples_per_s", "epoch_s",
                   "val_samples_per_s", "train_accuracy", "test_accuracy", "latency_ms_p50", "latency_ms_p90",
                   "latency_ms_p99", "batch_latency_ms_p50", "infer_samples_per_s", "peak_rss_bytes",
                   "peak_cuda_allocated_bytes", "params", *schema.names(schema.WORK), *schema.names(schema.ROOF)):
        row[column] = None
    return row


# The dtype activations move in under each precision (weights stay as stored: fp32).
ACTIVATION_DTYPES = {"fp32": torch.float32, "amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}


def work_columns(c: Complexity) -> Row:
    """Counted work and bytes of the configuration (MACs and FLOPs under their own names), as counted at the
    batch one device processes, with activations in the dtype the variant computes in."""
    return {
        "macs_per_sample": c.macs_per_sample, "flops_per_sample": c.flops_per_sample,
        "non_mac_ops_per_sample": c.non_mac_ops_per_sample,
        "non_mac_ops": "; ".join(f"{op}: {v:.6g}" for op, v in c.non_mac_ops.items()) or None,
        "activation_dtype": c.activation_dtype,
        "train_flops_per_sample": c.train_flops_per_sample, "weight_bytes": c.model_size_bytes,
        "activation_bytes_per_sample": c.activation_bytes_per_sample, "bytes_per_sample": c.bytes_per_sample,
        "train_bytes_per_sample": c.train_bytes_per_sample, "arithmetic_intensity": c.arithmetic_intensity,
        "train_arithmetic_intensity": c.train_arithmetic_intensity,
        "uncounted_ops": "; ".join(f"{k}: {', '.join(v)}" for k, v in c.uncounted_ops.items() if v) or None,
    }


def _product(a: Any, b: Any) -> float | None:
    return float(a * b) if a is not None and b is not None and math.isfinite(a * b) else None


def roof_columns(row: Mapping[str, Any], ceilings: Ceilings | None, device_type: str, world_size: int = 1) -> Row:
    """Achieved FLOP/s per device and where they sit under that device's measured roof.

    Under data parallelism the training throughput is global: each of the ``world_size`` devices
    achieves its share, and that share is what one device's roof bounds.
    """
    train_fps = _product(row["train_flops_per_sample"], row["train_samples_per_s"])
    train_fps = None if train_fps is None else train_fps / world_size
    infer_fps = _product(row["flops_per_sample"], row["infer_samples_per_s"])
    out: Row = {"achieved_train_flops_per_s": train_fps, "achieved_infer_flops_per_s": infer_fps}
    if ceilings is None:
        return out
    dtype = roof_dtype(row["precision"], device_type, bool(row.get("tf32")), row.get("quantization"))
    placed = place_workload(ceilings.peak_flops_per_s, ceilings.bandwidth_bytes_per_s, dtype,
                            train_flops_per_s=train_fps, train_intensity=row["train_arithmetic_intensity"],
                            infer_flops_per_s=infer_fps, infer_intensity=row["arithmetic_intensity"])
    out.update({
        "roof_dtype": placed.dtype, "roof_peak_flops_per_s": placed.peak_flops_per_s,
        "roof_bandwidth_bytes_per_s": placed.bandwidth_bytes_per_s,
        "train_roof_flops_per_s": placed.train.roof_flops_per_s, "roof_fraction": placed.train.fraction,
        "infer_roof_flops_per_s": placed.infer.roof_flops_per_s, "infer_roof_fraction": placed.infer.fraction,
        "above_roof": placed.above,
    })
    return out


def training_columns(trained: TrainResult, per_epoch: int, world: int) -> Row:
    steps, epochs, waits = Samples.of(trained.step_s), Samples.of(trained.epoch_s), Samples.of(trained.data_wait_s)
    return {
        "batches_per_epoch": per_epoch, "train_steps": steps.n, "train_steps_total": trained.total_steps,
        "train_step_s_median": steps.median, "train_step_s_iqr": steps.iqr, "train_step_noisy": steps.noisy,
        "train_samples_per_s": trained.samples_per_s * world,  # every rank's samples in the same timed steps
        "data_wait_s_total": waits.total,
        "data_wait_fraction": (waits.total / trained.timed_wall_s if trained.timed_wall_s > 0
                               else waits.total / (waits.total + steps.total) if steps.total > 0 else math.nan),
        "epoch_s": epochs.median, "epoch_s_iqr": epochs.iqr, "epochs_timed": epochs.n,
        "final_loss": trained.final_loss,
        "step_sync": "per-step" if trained.sync_per_step else "region",
    }


def harness_columns(harness_cpu_s: float | None, timed_wall_s: float, cpus: int) -> Row:
    """What benchlib's own threads took from the timed steps, as a share of the CPUs the run may use."""
    share = (100.0 * harness_cpu_s / (timed_wall_s * cpus)
             if harness_cpu_s is not None and timed_wall_s > 0 and cpus > 0 else None)
    return {"harness_cpu_pct": share}


def fault_columns(faults: int | None, timed_steps: int) -> Row:
    """Minor page faults per timed step: memory the step's allocator mapped fresh, a cause of run-to-run spread."""
    return {"train_minor_faults_per_step": faults / timed_steps if faults is not None and timed_steps > 0 else None}


def drift_columns(d: Drift) -> Row:
    """Whether the machine's own speed moved under the timed steps (``instruments.drift``)."""
    return {"train_step_drift_pct": d.drift_pct, "train_step_autocorr": d.autocorr, "train_step_drift_p": d.p_value,
            "machine_drifted": d.drifted, "machine_drift": d.describe(),
            "machine_drift_threshold_pct": d.threshold_pct}


def interference_columns(i: Interference) -> Row:
    """Other work on the machine during the timed phases (``instruments.interference``)."""
    return {"interference_cpu_pct": i.cpu_pct, "steal_pct": i.steal_pct, "loadavg_1m_before": i.loadavg_1m_before,
            "cpu_freq_mhz_mean": i.cpu_freq_mhz_mean, "gpu_other_processes_max": i.gpu_other_processes_max,
            "interfered": i.interfered, "interference": i.describe(),
            "interference_threshold_pct": i.threshold_pct}


def telemetry_columns(t: TelemetrySummary) -> Row:
    """The telemetry of one phase, summarized (``instruments.telemetry``); None where nothing was measured."""
    return {
        "cpu_util_pct_mean": t.cpu_util_pct_mean, "cpu_util_pct_p95": t.cpu_util_pct_p95,
        "proc_cpu_util_pct_mean": t.proc_cpu_util_pct_mean, "gpu_util_pct_mean": t.gpu_util_pct_mean,
        "gpu_util_pct_p95": t.gpu_util_pct_p95, "gpu_mem_util_pct_mean": t.gpu_mem_util_pct_mean,
        "gpu_mem_used_bytes_max": t.gpu_mem_used_bytes_max, "gpu_power_w_mean": t.gpu_power_w_mean,
        "gpu_temp_c_max": t.gpu_temp_c_max, "gpu_sm_clock_mhz_mean": t.gpu_sm_clock_mhz_mean,
        "cpu_temp_c_max": t.cpu_temp_c_max, "rss_bytes_max": t.rss_bytes_max, "threads_max": t.threads_max,
        "processes_max": t.processes_max, "telemetry_samples": t.samples, "telemetry_interval_s": t.interval_s,
        "telemetry_interval_note": t.interval_note, "telemetry_missing": t.missing,
    }


LATENCY_PERCENTILES = (50, 90, 99)


def percentile_columns(prefix: str, latency: Samples) -> Row:
    """p50/p90/p99 in ms with their 95% intervals; a percentile without enough samples or with too wide an
    interval is NaN, and its ``_status`` column says why (the raw samples are kept in the samples file)."""
    out: Row = {}
    for q in LATENCY_PERCENTILES:
        p = latency.judged_percentile(q)
        name = f"{prefix}_p{q}"
        out.update({name: _ms(p.value), f"{name}_ci_low": _ms(p.low), f"{name}_ci_high": _ms(p.high),
                    f"{name}_status": p.status})
    return out


def latency_columns(lat1: Samples, latn: Samples, throughput: Samples, throughput_samples: int) -> Row:
    """Latency percentiles per call, and throughput as samples over the summed back-to-back repeat times."""
    return {
        **percentile_columns("latency_ms", lat1), "latency_n": lat1.n, "latency_noisy": lat1.noisy,
        **percentile_columns("batch_latency_ms", latn), "batch_latency_n": latn.n, "batch_latency_noisy": latn.noisy,
        "infer_samples_per_s": throughput_samples / throughput.total if throughput.total > 0 else math.nan,
        "infer_repeats": throughput.n, "infer_noisy": throughput.noisy,
    }


def accuracy_columns(accuracy: float | None, samples: int) -> Row:
    """Test accuracy with its 95% Wilson interval over the ``samples`` images it was counted on."""
    low, high = wilson_interval(accuracy, samples)
    known = accuracy is not None
    return {"test_accuracy": accuracy, "test_accuracy_ci_low": low if known else None,
            "test_accuracy_ci_high": high if known else None}


def memory_columns(mem: MemoryReport) -> Row:
    return {
        "rss_baseline_bytes": mem.rss_baseline_bytes, "peak_rss_bytes": mem.peak_rss_bytes,
        "peak_rss_above_baseline_bytes": mem.peak_rss_above_baseline_bytes, "peak_rss_source": mem.peak_rss_source,
        "peak_cuda_allocated_bytes": mem.peak_cuda_allocated_bytes,
        "peak_cuda_reserved_bytes": mem.peak_cuda_reserved_bytes,
        "mps_allocated_bytes": mem.mps_allocated_bytes, "mps_driver_allocated_bytes": mem.mps_driver_allocated_bytes,
        "process_peak_rss_bytes": mem.process_peak_rss_bytes,
    }


def energy_columns(prefix: str, result: EnergyResult, samples: int, device_type: str) -> Row:
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


def quantized_columns(q: Quantized | None, model_size_bytes: int, test_accuracy: float | None,
                      trained_by: str | None) -> Row:
    """The evaluated model's size and, for an int8 variant, the fp32 model it came from and what it lost."""
    if q is None:
        return {"model_size_bytes": model_size_bytes}
    fp32 = q.fp32_test_accuracy
    drop = (fp32 - test_accuracy) * 100 if fp32 is not None and test_accuracy is not None else None
    return {
        "model_size_bytes": model_size_bytes, "fp32_model_size_bytes": q.fp32_model_size_bytes,
        "fp32_test_accuracy": q.fp32_test_accuracy, "accuracy_drop_pts": drop,
        "quantized_modules": json.dumps(q.quantized_modules, sort_keys=True), "weights_trained_by": trained_by,
        "weights": (f"the fp32 weights {trained_by} trained, quantized after training" if trained_by
                    else "the fp32 weights trained in this configuration, quantized after training"),
    }


def _training_row(m: Measurement) -> Row:
    """Every training column of a row that trained: steps, drift, telemetry and energy of the loop, compile."""
    t = m.training
    if t is None:  # an evaluate-only row has no training figures of its own
        return {}
    trained = t.result
    row: Row = {
        **training_columns(trained, m.setup.batches_per_epoch, m.setup.world_size), **drift_columns(t.drift),
        "train_accuracy": None if m.setup.synthetic else trained.train_accuracy,
        **telemetry_columns(m.telemetry.summary("train")),
        **harness_columns(t.harness_cpu_s, trained.timed_wall_s, usable_cpus()),
        **fault_columns(t.minor_faults, len(trained.step_s)),
        "h2d_per_step_bytes": t.h2d_bytes_per_step,
        **energy_columns("train", t.energy, t.energy_samples, m.setup.device.type),
    }
    if t.compiled is not None:
        row.update({"compile_s": compile_seconds(trained.warmup_step_s, Samples.of(trained.step_s).median),
                    "compile_graphs": t.compiled.graphs, "compile_graph_breaks": t.compiled.graph_breaks,
                    "compile_fell_back": t.compiled.fell_back, "compile_fallback_reason": t.compiled.reason})
    return row


def measured_row(m: Measurement) -> Row:
    """The row of one measured configuration, placed under ``m.ceilings`` where the measurement had them."""
    st, test, infer = m.setup, m.evaluation, m.inference
    accuracy = None if st.synthetic else test.accuracy
    row = base_row(m.cfg, m.machine, st.device, m.started_utc)
    row.update({"hardware": st.hardware, "device_name": st.device_name, **work_columns(st.work), **_training_row(m)})
    row.update({
        "synthetic": st.synthetic, "num_classes": st.num_classes, "train_samples": st.train_samples,
        "test_samples": st.test_samples, "world_size": st.world_size, "per_rank_batch_size": st.local_batch,
        "distributed_backend": st.distributed_backend, "ddp_weights_in_sync": m.ddp_weights_in_sync,
        "val_samples_per_s": test.samples_per_s, "val_s": test.seconds,
        **accuracy_columns(accuracy, test.samples),
        **latency_columns(infer.latency, infer.batch_latency, infer.throughput_repeat_s, infer.samples),
        **memory_columns(m.memory),
        "params": st.params, "params_trainable": st.params_trainable,
        **quantized_columns(m.quantized, m.model_size_bytes, accuracy, st.weights_trained_by),
        **energy_columns("infer", infer.energy, infer.samples, st.device.type),
        "threads": m.threads, "duration_s": m.duration_s, "finished_utc": m.finished_utc,
        **interference_columns(m.interference),
    })
    row.update(roof_columns(row, m.ceilings, st.device.type, st.world_size))
    return row


def unmeasured_row(cfg: RunConfig, status: str, error: str, machine: str) -> Row:
    """A row that records why a configuration produced no measurement (``run.outcome`` words the two)."""
    return {**base_row(cfg, machine), "status": status, "error": error, "finished_utc": now_utc()}


def with_manifest(row: Row, manifest_id: str) -> Row:
    """The row with the environment manifest it was measured in (``manifests/<id>.json``)."""
    return {**row, "manifest_id": manifest_id}
