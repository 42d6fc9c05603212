"""The row schema: every column a result row may hold, in groups, each with its unit and meaning.

One row is one measured configuration (tidy data: one row per measurement, units in column names). A
column's name ends with its unit where it has one (``_s``, ``_ms``, ``_bytes``, ``_flops``, ``_j``,
``_w``, ``_pct``...). This module is the single list of them: writers check rows against it and the
report's data dictionary is generated from it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# The row format: raised when a column changes meaning or a row must be read differently. Rows without the
# column were written before it existed (format 1); ``store.rows.migrate`` brings every older row to this one.
FORMAT_VERSION = 2
# A per-layer file's format (``layers/<machine>__<run_id>.json``): 2 keeps every step's time of each (layer, phase),
# the plain steps and their data wait, and the batch-1 forward; files without the key are format 1 (medians only),
# read through ``report.readback.layers.migrate_layers``.
LAYERS_FORMAT_VERSION = 2
# How a configuration ended. ``ok``: measured. The others produced no measurement, and say why:
STATUSES: tuple[str, ...] = ("ok", "failed", "skipped", "oom", "unstable")
STATUS_MEANINGS: dict[str, str] = {
    "ok": "measured",
    "failed": "an error stopped it (the error column says which); a study retries it on resume",
    "skipped": "the variant cannot run on this device (the error column says why)",
    "oom": "it ran out of memory (CUDA OOM, or the CPU memory_limit_bytes ceiling)",
    "unstable": "the training loss became NaN or infinite",
}
# Rows that a resumed study keeps (a ``failed`` one is measured again).
COMPLETE_STATUSES: tuple[str, ...] = ("ok", "skipped", "oom", "unstable")


@dataclass(frozen=True)
class Column:
    name: str
    unit: str  # "" where the value has no unit (names, flags, counts of things named in the meaning)
    meaning: str

    @property
    def kind(self) -> str:
        """What a value of the column is: ``number``, ``bool`` or ``text`` (None is always allowed)."""
        if self.name in _BOOLS:
            return "bool"
        if self.unit or self.name in _UNITLESS_NUMBERS:
            return "number"
        return "text"


_BOOLS = frozenset({
    "pretrained", "freeze_backbone", "tf32", "cudnn_benchmark", "synthetic", "ddp_weights_in_sync", "train_step_noisy",
    "latency_noisy", "batch_latency_noisy", "infer_noisy", "above_roof", "compile_fell_back",
    "interfered",
})
_UNITLESS_NUMBERS = frozenset({
    "lr", "epochs", "threads", "interop_threads", "seed", "num_workers", "num_classes", "data_wait_fraction",
    "final_loss", "train_accuracy", "test_accuracy", "fp32_test_accuracy", "roof_fraction", "infer_roof_fraction",
    "test_accuracy_ci_low", "test_accuracy_ci_high",
})


def _group(*columns: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*c) for c in columns)


# The column groups below are data: (name, unit, meaning) triples that look alike by design.
IDENTITY = _group(
    ("study", "", "name of the study the row belongs to"),
    ("run_id", "", "the configuration: hardware, model, batch, variant, precision, swept settings, a digest of "
                   "every other setting, process count and seed"),
    ("settings_digest", "", "hash of every run setting except the seed (part of run_id)"),
    ("settings_json", "", "every run setting of the configuration, as JSON"),
    ("machine", "", "machine name ($BENCHLIB_MACHINE or the host name)"),
    ("hardware", "", "device as configured: cpu, cuda, cuda:N, mps"),
    ("device_name", "", "the device's own name (GPU model or CPU model)"),
    ("model", "", "torchvision model"),
    ("dataset", "", "data set"),
    ("image_size", "px", "square input size"),
    ("batch_size", "samples", "global batch size"),
    ("variant", "", "name of the optimization variant"),
    ("precision", "", "fp32, amp_fp16 or amp_bf16"),
    ("threads", "", "torch intra-op threads in force"),
    ("threads_source", "", "what decided the threads, first that applies: setting (an explicit threads "
                           "setting), slurm (SLURM_CPUS_PER_TASK, the CPUs SLURM gave the task), affinity "
                           "(the CPUs the process may run on)"),
    ("interop_threads", "", "torch inter-op threads in force"),
    ("seed", "", "random seed of weights, data order and subsets"),
    ("world_size", "processes", "data-parallel processes (1 without torchrun)"),
    ("status", "", "how the configuration ended: " + "; ".join(f"{k}: {v}" for k, v in STATUS_MEANINGS.items())),
    ("error", "", "one line saying why a configuration produced no measurement"),
    ("manifest_id", "", "the environment manifest (manifests/<id>.json) the row was measured in"),
    ("process_uid", "", "the process that measured the row (host:pid:start); rows of one process can be compared "
                        "step by step, rows of different processes only beyond the machine's run-to-run noise"),
    ("benchlib_version", "", "benchlib version that measured the row"),
    ("format_version", "", "version of the row format the row was written in (rows of older formats are read through "
                           "store.rows.migrate; a newer one is refused)"),
    ("started_utc", "", "when the configuration started (ISO 8601, UTC)"),
    ("finished_utc", "", "when it finished (ISO 8601, UTC)"),
    ("duration_s", "s", "wall time of the whole configuration (set-up, training, evaluation, latency)"),
)
SETTINGS = _group(
    ("optimizer", "", "sgd or adam"),
    ("optimizer_impl", "", "the optimizer's kernels: fused, foreach, for_loop, or default (torch's own choice); "
                           "auto resolved (fused on CUDA)"),
    ("lr", "", "learning rate"),
    ("epochs", "", "training epochs asked for"),
    ("pretrained", "", "started from ImageNet weights (transfer learning)"),
    ("freeze_backbone", "", "only the new classifier head trained"),
    ("num_workers", "", "DataLoader worker processes"),
    ("tf32", "", "TF32 matmuls and convolutions allowed (CUDA; false elsewhere, where it does not apply)"),
    ("cudnn_benchmark", "", "cuDNN autotuning on (CUDA; false elsewhere, where it does not apply)"),
    ("memory_format", "", "nchw or channels_last"),
    ("compile", "", "torch.compile mode, or off"),
    ("quantization", "", "none, dynamic or static_int8"),
    ("warmup_steps", "steps", "training steps run before timing starts"),
)
DATA = _group(
    ("synthetic", "", "random tensors on the device (measures the model, not the input pipeline)"),
    ("num_classes", "", "classes of the data set"),
    ("train_samples", "samples", "training samples per epoch"),
    ("test_samples", "samples", "test samples evaluated"),
    ("per_rank_batch_size", "samples", "batch each data-parallel process trains on"),
    ("distributed_backend", "", "gloo or nccl under torchrun, else empty"),
    ("ddp_weights_in_sync", "", "every data-parallel rank held the same weights after training"),
)
TRAINING = _group(
    ("batches_per_epoch", "batches", "training batches per epoch"),
    ("train_steps", "steps", "timed training steps (warmup left out)"),
    ("train_steps_total", "steps", "training steps run, warmup included"),
    ("train_step_s_median", "s", "median time of a timed training step"),
    ("train_step_s_iqr", "s", "interquartile range of the timed step times"),
    ("train_step_noisy", "", "step times spread too much to trust: IQR/median > 10%"),
    ("train_samples_per_s", "samples/s", "training throughput: samples over the summed timed step times"),
    ("data_wait_s_total", "s", "time the timed steps waited for their batch"),
    ("h2d_per_step_bytes", "bytes", "bytes one step's batch moves from host to device: images and labels (on a "
                                    "GPU, image files travel as uint8 and are normalised there; 0 for synthetic "
                                    "batches made on the device; empty on a CPU)"),
    ("data_wait_fraction", "", "share of the timed training region's wall time (host clock, from the first "
                               "timed step to the synchronized end) spent waiting for data"),
    ("epoch_s", "s", "median time of a full epoch, data pipeline included (a compiled variant's first epoch, which "
                     "compiles, is left out)"),
    ("epoch_s_iqr", "s", "interquartile range of the epoch times"),
    ("epochs_timed", "epochs", "full epochs behind epoch_s"),
    ("final_loss", "", "mean training loss of the last epoch"),
    ("step_sync", "", "how steps were timed: region (events, one synchronize) or per-step"),
    ("train_accuracy", "", "running top-1 accuracy over the last epoch's (augmented) batches"),
    ("compile_s", "s", "torch.compile time, taken out of the warmup steps (never inside a step or epoch time)"),
    ("compile_graphs", "graphs", "graphs dynamo compiled in the configuration"),
    ("compile_graph_breaks", "breaks", "graph breaks dynamo met (each runs eager in between)"),
    ("compile_fell_back", "", "dynamo gave up (recompile limit) and the model ran eager: the row is not a compiled "
                              "figure"),
    ("compile_fallback_reason", "", "why dynamo fell back to eager"),
)
EVALUATION = _group(
    ("val_samples_per_s", "samples/s", "evaluation throughput over the test split with its DataLoader"),
    ("val_s", "s", "wall time of the evaluation pass"),
    ("test_accuracy", "", "top-1 accuracy on the test split"),
    ("test_accuracy_ci_low", "", "lower end of the 95% Wilson score interval of test_accuracy over test_samples "
                                 "images: how far the figure could move on another test set of that size"),
    ("test_accuracy_ci_high", "", "upper end of that interval"),
)
# A percentile is published only when its distribution-free 95% interval exists (p50 needs 6 samples, p90 29,
# p99 299) and spans at most this share of its value (instruments.samples.MAX_RELATIVE_WIDTH).
PERCENTILE_MAX_WIDTH_TEXT = "50%"


def _percentiles(prefix: str, where: str) -> tuple[Column, ...]:
    """Each published percentile of a latency series, its 95% interval and why it is missing when it is."""
    out: list[tuple[str, str, str]] = []
    for q, word in ((50, "median"), (90, "90th percentile"), (99, "99th percentile")):
        name = f"{prefix}_p{q}"
        out += [
            (name, "ms", f"inference latency {where}, {word} of the timed repeats; empty when {name}_status says too "
                         "few samples"),
            (f"{name}_ci_low", "ms", f"lower end of the distribution-free 95% interval of p{q} (an order statistic of "
                                     "the repeats: the binomial count of repeats below the percentile sets its rank)"),
            (f"{name}_ci_high", "ms", f"upper end of that interval of p{q}"),
            (f"{name}_status", "", f"ok; too few samples (n, and the samples a 95% interval needs: p{q} is not "
                                   f"published); or wide interval (over {PERCENTILE_MAX_WIDTH_TEXT} of the value, as "
                                   f"on a busy host: p{q} is given with it, marked)"),
        ]
    return _group(*out)


# Each repeat of the inference throughput (a sample of the saved series infer_repeat_s) times this many
# back-to-back batches: what a sample covers, for the row (run.measure) and for comparisons read back later.
BATCHES_PER_THROUGHPUT_REPEAT = 5
LATENCY = _percentiles("latency_ms", "at batch 1") + _group(
    ("latency_n", "repeats", "timed repeats behind the batch-1 latency percentiles"),
    ("latency_noisy", "", "batch-1 latencies spread too much to trust: IQR/median > 10%"),
) + _percentiles("batch_latency_ms", "of one forward pass at the working batch") + _group(
    ("batch_latency_n", "repeats", "timed repeats behind the working-batch latency percentiles"),
    ("batch_latency_noisy", "", "working-batch latencies spread too much to trust: IQR/median > 10%"),
    ("infer_samples_per_s", "samples/s", "inference throughput at the working batch: samples over the summed time of "
                                         "repeats of back-to-back batches, one synchronize per repeat"),
    ("infer_repeats", "repeats", "timed repeats behind infer_samples_per_s (each of several batches)"),
    ("infer_noisy", "", "throughput repeats spread too much to trust: IQR/median > 10%"),
)
MEMORY = _group(
    ("rss_baseline_bytes", "bytes", "resident memory of the process before the model was built"),
    ("peak_rss_bytes", "bytes", "peak resident memory of the process over the configuration"),
    ("peak_rss_above_baseline_bytes", "bytes", "peak resident memory above the baseline: what the configuration added"),
    ("peak_rss_source", "", "how the peak was read: VmHWM (kernel high-water mark) or psutil-sampled"),
    ("peak_cuda_allocated_bytes", "bytes", "CUDA allocator peak of allocated memory (reset per configuration)"),
    ("peak_cuda_reserved_bytes", "bytes", "CUDA allocator peak of reserved memory (reset per configuration)"),
    ("mps_allocated_bytes", "bytes", "MPS memory allocated by tensors, peak of samples every 50 ms"),
    ("mps_driver_allocated_bytes", "bytes", "MPS memory the Metal driver holds at the end"),
    ("process_peak_rss_bytes", "bytes", "the process's own resident peak before this configuration reset the "
                                        "high-water mark (what /usr/bin/time would report, up to this point)"),
)
MODEL = _group(
    ("params", "parameters", "parameters of the model"),
    ("params_trainable", "parameters", "parameters that were trained"),
    ("model_size_bytes", "bytes", "size of the saved state_dict (int8 weights as int8)"),
    ("fp32_model_size_bytes", "bytes", "size of the float model a quantized variant came from"),
    ("fp32_test_accuracy", "", "test accuracy of the float weights a quantized variant quantized"),
    ("accuracy_drop_pts", "points", "fp32_test_accuracy minus test_accuracy, in percentage points"),
    ("quantized_modules", "", "convolutions and linears in int8 and in float (JSON)"),
    ("weights_trained_by", "", "run_id of the configuration whose trained weights this row evaluated"),
    ("weights", "", "which weights the row evaluated"),
)
WORK = _group(
    ("macs_per_sample", "MAC", "multiply-accumulates of one forward pass per sample (fvcore)"),
    ("flops_per_sample", "FLOP", "floating-point operations of one forward pass per sample (FlopCounterMode), over "
                                 "the same operators as macs_per_sample: exactly twice it"),
    ("non_mac_ops_per_sample", "op", "fvcore's count of the work in normalization and pooling layers per sample "
                                     "(element-wise, in fvcore's units); in neither macs nor flops"),
    ("non_mac_ops", "", "non_mac_ops_per_sample by operator"),
    ("activation_dtype", "", "dtype the activations move in (bfloat16 or float16 under autocast)"),
    ("train_flops_per_sample", "FLOP", "FLOPs of forward and backward per sample, counted"),
    ("weight_bytes", "bytes", "bytes of parameters and floating-point buffers"),
    ("activation_bytes_per_sample", "bytes", "input and output activation bytes of every layer per sample, in "
                                             "activation_dtype"),
    ("bytes_per_sample", "bytes", "bytes moved per inference sample: weights once per batch plus activations, at "
                                  "the batch one device processes"),
    ("train_bytes_per_sample", "bytes", "bytes moved per training sample: weights, activations and gradients"),
    ("arithmetic_intensity", "FLOP/byte", "inference FLOPs over bytes moved"),
    ("train_arithmetic_intensity", "FLOP/byte", "training FLOPs over bytes moved"),
    ("uncounted_ops", "", "operators a counter ran but could not count (never a silent zero)"),
)
ROOF = _group(
    ("achieved_train_flops_per_s", "FLOP/s", "training FLOPs per sample times training throughput, per device "
                                             "(divided by world_size under data parallelism)"),
    ("achieved_infer_flops_per_s", "FLOP/s", "forward FLOPs per sample times inference throughput"),
    ("roof_dtype", "", "the ceiling the configuration runs under: fp32, tf32, fp16, bf16 or int8"),
    ("roof_peak_flops_per_s", "FLOP/s", "measured compute ceiling of that dtype on this machine"),
    ("roof_bandwidth_bytes_per_s", "bytes/s", "measured memory bandwidth of this machine (read + written)"),
    ("train_roof_flops_per_s", "FLOP/s", "the roof at the training point's intensity"),
    ("roof_fraction", "", "achieved training FLOP/s over the roof at its intensity"),
    ("infer_roof_flops_per_s", "FLOP/s", "the roof at the inference point's intensity"),
    ("infer_roof_fraction", "", "achieved inference FLOP/s over the roof at its intensity"),
    ("above_roof", "", "a point lies above its roof: a measurement error, not a finding"),
)
TELEMETRY = _group(
    ("cpu_util_pct_mean", "%", "system CPU utilization while training, mean over cores and samples"),
    ("cpu_util_pct_p95", "%", "system CPU utilization while training, 95th percentile"),
    ("proc_cpu_util_pct_mean", "%", "this process's CPU use while training (100% = one core)"),
    ("gpu_util_pct_mean", "%", "GPU utilization while training (NVML), mean"),
    ("gpu_util_pct_p95", "%", "GPU utilization while training, 95th percentile"),
    ("gpu_mem_util_pct_mean", "%", "GPU memory-controller utilization while training, mean"),
    ("gpu_mem_used_bytes_max", "bytes", "GPU memory in use (NVML, all processes), maximum"),
    ("gpu_power_w_mean", "W", "GPU board power while training, mean"),
    ("gpu_temp_c_max", "°C", "GPU temperature while training, maximum"),
    ("gpu_sm_clock_mhz_mean", "MHz", "GPU SM clock while training, mean"),
    ("cpu_temp_c_max", "°C", "CPU temperature while training, maximum (where the OS exposes it)"),
    ("rss_bytes_max", "bytes", "resident memory of the process while training, maximum sample"),
    ("threads_max", "threads", "threads of the process while training, maximum"),
    ("processes_max", "processes", "processes on the machine while training, maximum"),
    ("telemetry_samples", "samples", "telemetry samples taken while training"),
    ("telemetry_interval_s", "s", "seconds between telemetry samples"),
    ("telemetry_interval_note", "", "why the sampler sampled less often than telemetry_interval_s asked (a sample's "
                                    "CPU, and its cost to work that keeps the cores busy), where it did"),
    ("telemetry_missing", "", "telemetry sources that could not be read, with the reason"),
)

INTERFERENCE = _group(
    ("interfered", "", "other work shared the machine while the configuration was timed: its figures measure "
                       "the contention (see interference)"),
    ("interference", "", "what interfered, in words, with the threshold it was judged by"),
    ("interference_cpu_pct", "%", "CPU other processes used during the timed phases, % of the cores the run "
                                  "may use (this process and its DataLoader workers left out)"),
    ("steal_pct", "%", "CPU time the hypervisor gave other virtual machines during the timed phases, % of all "
                       "cores (/proc/stat steal)"),
    ("harness_cpu_pct", "%", "CPU benchlib's own threads (telemetry, memory sampler, rank watch) used during the "
                             "timed training steps, % of the CPUs the run may use: what the harness took from "
                             "the work it measured (where the step's threads fill every CPU, its cost to the "
                             "step is about three times this: see docs/measurement.md, Telemetry)"),
    ("train_minor_faults_per_step", "faults", "minor page faults the process took per timed training step: "
                                              "pages its allocator mapped fresh (zeroed on first touch); two "
                                              "runs of identical work that differ here differ in step time"),
    ("loadavg_1m_before", "tasks", "one-minute load average just before the configuration started"),
    ("cpu_freq_mhz_mean", "MHz", "CPU clock during the timed phases, mean (where the OS exposes it)"),
    ("gpu_other_processes_max", "processes", "processes other than this one holding the run's GPU, maximum"),
    ("interference_threshold_pct", "%", "the share of the usable CPUs above which a row is flagged interfered"),
    ("machine_drifted", "", "the machine's own speed changed while the run trained: its identical steps were "
                            "serially correlated (p < 0.01) and drifted by at least machine_drift_threshold_pct"),
    ("machine_drift", "", "the drift in words, with its size and test"),
    ("train_step_drift_pct", "%", "range of the medians of 5 consecutive blocks of timed steps, % of the median "
                                  "step"),
    ("train_step_autocorr", "", "lag-1 autocorrelation of the timed steps in the order they ran"),
    ("train_step_drift_p", "", "permutation-test p value of that autocorrelation (the steps shuffled, seeded)"),
    ("machine_drift_threshold_pct", "%", "the drift at or above which a serially correlated run is flagged"),
)


def _energy(prefix: str, region: str) -> tuple[Column, ...]:
    return _group(
        (f"{prefix}_energy_window_s", "s", f"length of the {region} energy window"),
        (f"{prefix}_gpu_energy_j", "J", f"GPU energy of the {region} (NVML counter, or power x time)"),
        (f"{prefix}_cpu_package_energy_j", "J", f"CPU package energy of the {region} (RAPL)"),
        (f"{prefix}_energy_j", "J", f"energy of the {region} on the configuration's device"),
        (f"{prefix}_energy_j_per_sample", "J", f"{prefix}_energy_j per sample processed"),
        (f"{prefix}_energy_method", "", "how the device's energy was obtained"),
        (f"{prefix}_energy_unmeasurable", "", f"why a part of the {region} energy could not be measured"),
    )


ENERGY = _energy("train", "training loop") + _energy("infer", "working-batch latency repeats")

GROUPS: dict[str, tuple[Column, ...]] = {
    "identity": IDENTITY, "settings": SETTINGS, "data": DATA, "training": TRAINING, "evaluation": EVALUATION,
    "latency": LATENCY, "memory": MEMORY, "model": MODEL, "work": WORK, "roofline": ROOF, "telemetry": TELEMETRY,
    "interference": INTERFERENCE, "energy": ENERGY,
}
COLUMNS: dict[str, Column] = {c.name: c for group in GROUPS.values() for c in group}
COLUMN_NAMES: tuple[str, ...] = tuple(COLUMNS)
# Columns every row has, a failure row included: what identifies a configuration and how it ended.
REQUIRED_COLUMNS: tuple[str, ...] = tuple(c.name for c in IDENTITY if c.name not in (
    "device_name", "error", "manifest_id", "finished_utc", "duration_s"))
# Columns a reader adds beside the stored ones (never written to a row file).
READER_COLUMNS: dict[str, Column] = {"results_dir": Column("results_dir", "", "results folder the row was read from")}


# What a reader of a result frame looks for first (``benchlib.benchmark``): which configuration, whether it ran, and
# its headline figures; every other column follows in the schema's order.
KEY_COLUMNS: tuple[str, ...] = ("model", "hardware", "batch_size", "variant", "status", "train_samples_per_s",
                                "train_step_s_median", "latency_ms_p50", "latency_ms_p99", "test_accuracy",
                                "peak_rss_above_baseline_bytes", "peak_cuda_allocated_bytes", "run_id")


def key_first(columns: list[str] | tuple[str, ...]) -> list[str]:
    """``columns`` with ``KEY_COLUMNS`` (those present) moved to the front, the rest in their order."""
    return [c for c in KEY_COLUMNS if c in columns] + [c for c in columns if c not in KEY_COLUMNS]


def names(group: tuple[Column, ...]) -> tuple[str, ...]:
    return tuple(c.name for c in group)


def unknown_columns(row_keys: list[str] | tuple[str, ...] | set[str]) -> list[str]:
    """Keys of a row that the schema does not list (a writer's bug, or a hand-edited file)."""
    return sorted(k for k in row_keys if k not in COLUMNS)


def _is_kind(value: object, kind: str) -> bool:
    if value is None or kind == "text":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_float(value: object) -> float | None:
    """A cell as a finite float: None for what is missing, not a number, NaN or infinite."""
    try:
        out = float(value)  # type: ignore[arg-type]  # whatever a cell holds: float() decides
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def row_problem(row: Mapping[str, object]) -> str | None:
    """Why a row read from disk cannot be reported (None when it can): a missing column, an unknown status,
    a value of the wrong kind. Columns the schema does not list are left alone (older or newer benchlib)."""
    missing = [c for c in ("study", "run_id", "machine", "status") if c not in row]
    if missing:
        return f"no {', '.join(missing)}"
    if row["status"] not in STATUSES:
        return f"status {row['status']!r} is not one of: {', '.join(STATUSES)}"
    for name, value in row.items():
        column = COLUMNS.get(name)
        if column is not None and not _is_kind(value, column.kind):
            return f"{name} {value!r} is not {'a number' if column.kind == 'number' else 'true or false'}"
    return None
