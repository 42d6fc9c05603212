"""Commands about one configuration or one model on this machine: run, profile, flops, roofline, calibrate, env."""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .. import log as messages
from ..errors import BenchlibError, ConfigError
from ..spec import yamlfile
from ..spec.vocab import ELEMENT_DTYPES, MODEL_FORMS, MODELS, did_you_mean, model_problem
from ..store.atomic import json_text
from .progress import Progress

if TYPE_CHECKING:
    from ..run.admission import Names
    from ..spec.settings import RunConfig, RunSettings

EXIT_FAILURES = 1
PROFILED_STEPS = 3  # ``benchlib profile``'s recorded steps when neither --steps nor --active says


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each value read as YAML (``--set lr=0.05``, ``--set models=[resnet18]``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set '{item}': expected KEY=VALUE, e.g. --set lr=0.05")
        try:
            out[key.strip()] = yamlfile.load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set '{item}': value is not valid YAML ({exc})") from exc
    return out


def refuse_unknown_model(model: str) -> None:
    """``--model`` checked before anything heavy loads (torch, the data sets): an unknown name is refused in one
    line, with the nearest known name where one is near."""
    if model_problem(model):
        raise ConfigError(f"command line: --model '{model}' is unknown{did_you_mean(model, MODELS)}; allowed: "
                          f"{MODEL_FORMS}")


def _config_from_args(args: argparse.Namespace, *, train_steps: int | None = None, processes: int = 1) -> RunConfig:
    """One configuration from ``run``/``profile``/``layers`` arguments, admitted here before any work (threads
    applied). ``processes`` > 1: the data-parallel processes about to be launched (each admits it again)."""
    from ..env.distributed import launched_world_size
    from ..env.threads import apply_threads
    from ..run.admission import admit
    from ..spec.settings import RunConfig, settings_from_mapping
    from ..spec.variants import apply_variant, parse_variant

    values: dict[str, Any] = {"dataset": args.data}
    for key in ("data_path", "image_size", "epochs", "lr", "optimizer", "seed", "threads", "num_workers"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if train_steps is not None:
        values["train_steps"] = train_steps
    values.update(parse_set(args.set))
    settings = settings_from_mapping(values, "command line")
    if args.variant:
        settings = apply_variant(settings, parse_variant(args.variant, "command line: --variant"))
    refuse_unknown_model(args.model)
    if args.batch_size < 1:
        raise ConfigError(f"command line: --batch-size {args.batch_size}; allowed: integers >= 1")
    world_size = processes if processes > 1 else launched_world_size()
    cfg = RunConfig(args.study, args.device, args.model, args.batch_size, settings, world_size=world_size)
    (admitted,) = admit([cfg], _names(args, settings), single=True, processes=processes).configs
    if processes == 1:
        apply_threads(settings.knobs.threads, settings.knobs.interop_threads)
    return admitted


def _names(args: argparse.Namespace, settings: RunSettings) -> Names:
    """The command line's names for what a refusal points at: ``--device``, ``--batch-size``, and for a knob
    the ``--set`` that gave it its value, else the ``--variant``."""
    from ..run.admission import Names
    from ..spec.knobs import Knobs

    knobs = {f.name for f in dataclasses.fields(Knobs)}
    given = {key: f"--set {item}" for item in args.set if (key := item.partition("=")[0].strip()) in knobs}
    chosen = parse_set(args.set)
    return Names("command line", hardware="--device", batch_sizes="--batch-size",
                 knobs={k: text for k, text in given.items() if settings.get(k) == chosen[k]},
                 variant=f"--variant {args.variant}" if args.variant else None)


def _relaunch_with_torchrun(nproc: int, argv: Sequence[str]) -> int:
    """``benchlib run --nproc-per-node N``: the same command under torchrun, N processes on this node."""
    rest = [a for i, a in enumerate(argv) if not (a.startswith("--nproc-per-node")
                                                   or (i > 0 and argv[i - 1] == "--nproc-per-node"))]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "benchlib", *rest]
    messages.info(f"launching {nproc} processes: {' '.join(cmd[1:])}")
    return subprocess.run(cmd).returncode


def cmd_run(args: argparse.Namespace) -> int:
    refuse_unknown_model(args.model)
    from ..env.distributed import launched_by_torchrun
    from ..run.columns import measured_row
    from ..run.measure import measure
    from ..run.record import record

    if args.nproc_per_node < 1:
        raise ConfigError(f"command line: --nproc-per-node {args.nproc_per_node}; allowed: integers >= 1")
    if args.nproc_per_node > 1 and args.device not in ("cuda", "cpu", "auto"):
        raise ConfigError(f"command line: --device {args.device} with --nproc-per-node {args.nproc_per_node}; "
                          "allowed: cuda (each process takes cuda:LOCAL_RANK; CUDA_VISIBLE_DEVICES picks the GPUs) "
                          "or cpu")
    if args.nproc_per_node > 1 and not launched_by_torchrun():
        _config_from_args(args, train_steps=args.steps, processes=args.nproc_per_node)  # refused before launch
        return _relaunch_with_torchrun(args.nproc_per_node, args.argv)
    cfg = _config_from_args(args, train_steps=args.steps)
    progress = Progress()
    progress.line(f"{cfg.run_id}: {cfg.model} on {cfg.hardware}, batch {cfg.batch_size}")
    try:
        if args.no_save:
            measured = measure(cfg, progress=progress.line, heartbeat=progress.heartbeat)
            row = measured_row(measured) if measured is not None else None
        else:
            row = record(cfg, Path(args.results_dir), progress=progress.line, heartbeat=progress.heartbeat)
    finally:
        progress.close()
    if launched_by_torchrun():
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    if row is None:  # data-parallel rank > 0: rank 0 reports
        return 0
    if row.get("interfered"):
        messages.warning(f"{row['run_id']} was measured while {row['interference']}: its numbers are not "
                         "trustworthy")
    elif row.get("machine_drifted"):
        messages.warning(f"{row['run_id']}: {row['machine_drift']}; a single run here is uncertain by about that "
                         "much: compare repeats (seeds)")
    if args.json:
        print(json_text(row))
    else:
        for key, text in row_summary(row):
            print(f"{key:>22}: {text}")
    if not args.no_save:
        from ..store.layout import ResultsLayout

        where = ResultsLayout.of(args.results_dir).row_path(str(row["machine"]), str(row["run_id"]))
        progress.line(f"row written to {where}; a report of the folder: benchlib report {args.results_dir}")
    return 0 if row["status"] == "ok" else EXIT_FAILURES


def row_summary(row: dict[str, Any]) -> list[tuple[str, str]]:
    """The row's headline figures as the report prints them (units, three significant digits, en dash)."""
    from ..report.words import fmt

    shown: list[tuple[str, str]] = [("status", str(row.get("status")))]
    if row.get("error"):
        shown.append(("error", str(row["error"])))
    def per_s(value: Any) -> str:
        return f"{fmt.significant(value)} samples/s"

    formats = (("device_name", fmt.value_text), ("train_samples_per_s", per_s),
               ("train_step_s_median", fmt.seconds_text), ("epoch_s", fmt.seconds_text),
               ("test_accuracy", fmt.percent_text), ("latency_ms_p50", fmt.ms_text),
               ("batch_latency_ms_p50", fmt.ms_text), ("infer_samples_per_s", per_s),
               ("peak_rss_bytes", fmt.bytes_text))
    for key, show in formats:
        if key.startswith(("latency_ms_", "batch_latency_ms_")):  # a refused percentile says why
            text = fmt.percentile_text(row.get(key), row.get(f"{key}_status"), low=row.get(f"{key}_ci_low"),
                                       high=row.get(f"{key}_ci_high"))
            shown.append((key, text))
            continue
        text = show(row.get(key))
        shown.append((key, fmt.MISSING if text.startswith(fmt.MISSING) else text))
    return shown


def cmd_profile(args: argparse.Namespace) -> int:
    refuse_unknown_model(args.model)
    from ..report.display import pages
    from ..run.profile import record_profile

    active = _profiled_steps(args)
    for flag, value, low in (("--wait", args.wait, 0), ("--warmup", args.warmup, 0)):
        if value < low:
            raise ConfigError(f"command line: {flag} {value}; allowed: integers >= {low}")
    cfg = _config_from_args(args)
    result, out = record_profile(cfg, Path(args.results_dir), wait=args.wait, warmup=args.warmup, active=active)
    device = not result.top_by_self_device.empty or cfg.hardware.startswith("cuda")
    print(pages.breakdown(result, device=device).drop(columns="what it covers").to_string(index=False))
    print()
    print(pages.operators(result.top_by_self_cpu.head(10), device=device).to_string(index=False))
    if not result.top_by_self_device.empty:
        print()
        print(pages.operators(result.top_by_self_device.head(10), device=True).to_string(index=False))
    print(f"\ntables, trace.json and TensorBoard logs: {out}  (tensorboard --logdir {result.tensorboard_dir})")
    return 0


def _profiled_steps(args: argparse.Namespace) -> int:
    """The training steps the profiler records: ``--steps`` (as ``run`` and ``layers`` count steps), or
    ``--active`` (the schedule's word for them), or the default."""
    if args.steps is not None and args.active is not None and args.steps != args.active:
        raise ConfigError(f"command line: --steps {args.steps} and --active {args.active}: both are the profiled "
                          "steps; allowed: one of them, or both the same")
    flag, steps = ("--steps", args.steps) if args.steps is not None else ("--active", args.active)
    if steps is None:
        return PROFILED_STEPS
    if steps < 1:
        raise ConfigError(f"command line: {flag} {steps}; allowed: integers >= 1")
    return int(steps)


def cmd_env(args: argparse.Namespace) -> int:
    from ..env.manifest import collect_manifest

    manifest = collect_manifest()
    if args.json:
        print(json_text(manifest))
    else:
        for k, v in manifest.items():
            print(f"{k:>28}: {v}")
    return 0


def cmd_flops(args: argparse.Namespace) -> int:
    refuse_unknown_model(args.model)
    import torch

    from ..nets.flops import complexity, layer_table
    from ..nets.models import build_model, smallest_image_size

    for flag, value, low in (("--image-size", args.image_size, 8), ("--batch-size", args.batch_size, 1),
                             ("--num-classes", args.num_classes, 2)):
        if value < low:
            raise ConfigError(f"command line: {flag} {value}; allowed: integers >= {low}")
    smallest = smallest_image_size(args.model)
    if args.image_size < smallest:
        raise ConfigError(f"command line: --image-size {args.image_size}: too small for {args.model} (its layers "
                          f"shrink it to nothing); allowed: --image-size >= {smallest} for {args.model}")
    dtype = getattr(torch, ELEMENT_DTYPES[args.dtype])
    c = complexity(args.model, args.image_size, batch_size=args.batch_size, num_classes=args.num_classes, dtype=dtype)
    if args.json:
        print(json_text(c.as_dict()))
    else:
        for key, value in c.as_dict().items():
            print(f"{key:>28}: {value}")
    if args.layers:
        table = layer_table(
            build_model(args.model, args.num_classes), args.image_size, batch_size=args.batch_size, dtype=dtype
        )
        print(table.to_string(index=False), file=sys.stderr if args.json else sys.stdout)
    return 0


def _device_argument(value: str) -> str:
    """``--device`` resolved to a present device, or the one line saying why not."""
    from ..env.devices import resolve_hardware

    try:
        return resolve_hardware(value)
    except BenchlibError as exc:
        raise ConfigError(f"command line: --device: {exc}") from exc


def cmd_roofline(args: argparse.Namespace) -> int:
    from ..roofline.cache import save_ceilings
    from ..roofline.ceilings import measure_ceilings

    device = _device_argument(args.device)
    if args.repeats < 3:
        raise ConfigError(f"command line: --repeats {args.repeats}; allowed: integers >= 3")
    keys = _shape_keys(args.shapes_of, args.results_dir, args.shapes_dtype or ()) if args.shapes_of else []
    if args.threads is not None:
        if not 1 <= args.threads <= 1024:
            raise ConfigError(f"command line: --threads {args.threads}; allowed: integers from 1")
        import torch

        torch.set_num_threads(args.threads)
    messages.info(f"measuring {device} ceilings ({args.repeats} repeats per figure)")
    ceilings = measure_ceilings(device, repeats=args.repeats)
    if args.results_dir:
        ceilings.path = str(save_ceilings(ceilings, Path(args.results_dir)))
    if args.json:
        print(json_text({**ceilings.to_json(), "path": ceilings.path}))
    else:
        for dtype, value in ceilings.peak_flops_per_s.items():
            print(f"peak {dtype:>5}: {value / 1e9:10.1f} GFLOP/s")
        print(f"bandwidth : {ceilings.bandwidth_bytes_per_s / 1e9:10.1f} GB/s (bytes read + written)")
        print("the roof of each kind of operation (a layer meets its own kind's):")
        for kind, per_dtype in ceilings.kind_flops_per_s.items():
            print(f"  {kind:>9}: " + ", ".join(f"{d} {v / 1e9:.1f} GFLOP/s" for d, v in per_dtype.items()))
        for kind, per_dtype in ceilings.kind_bandwidth_bytes_per_s.items():
            print(f"  {kind:>9}: " + ", ".join(f"{d} {v / 1e9:.1f} GB/s" for d, v in per_dtype.items()))
    if keys:
        from torch import device as torch_device

        from ..env.manifest import machine_name
        from ..roofline.shapes import save_shapes, time_shapes

        timed, left = time_shapes(keys, torch_device(device), progress=messages.info)
        path = save_shapes(Path(args.results_dir), machine_name(), ceilings.device, ceilings.threads, timed)
        messages.info(f"{len(timed)} shape(s) timed forward and backward -> {path}"
                      + (f"; {len(left)} left untimed (budget spent): their layers are carried by their roofs"
                         if left else ""))
    return 0


def _shape_keys(results: str, results_dir: str | None, also: Sequence[str] = ()) -> list[str]:
    """The shapes ``--shapes-of RESULTS`` asks for, checked before any measuring: one line where none can be had."""
    from ..report.readback.layers import load_layer_reports
    from ..roofline.shapes import wanted

    if not results_dir:
        raise ConfigError("command line: --shapes-of needs --results-dir DIR, where the shapes are kept beside the "
                          "ceilings (copy DIR/ceilings and DIR/shapes to the machine that predicts)")
    if not Path(results).is_dir():
        raise ConfigError(f"--shapes-of {results}: no such results folder; allowed: a folder with per-layer tables "
                          "(layers: true, or benchlib layers)")
    keys = wanted(load_layer_reports([results]), also)
    if not keys:
        raise ConfigError(f"--shapes-of {results}: its per-layer tables hold no layer shapes (measured before benchlib "
                          "kept them, or none at all); measure them with `benchlib layers --results-dir ...` or "
                          "`layers: true`")
    return keys


def cmd_calibrate(args: argparse.Namespace) -> int:
    """The noise floor measured in fresh processes, saved, and per metric what it lets a comparison of single
    runs claim."""
    from ..env.threads import usable_cpus
    from ..instruments.run_to_run import floor_pcts
    from ..pipeline.calibrate import measure_noise_floor, thread_counts
    from ..report.evidence import floors
    from ..store.machine_cache import machine_cache
    from ..store.noise_floor import save_noise_floor

    device = _device_argument(args.device)
    if args.runs < 3:
        raise ConfigError(f"command line: --runs {args.runs}; allowed: integers >= 3 (a spread needs three runs)")
    most = 2 * usable_cpus()
    for n in args.threads or ():
        if not 1 <= n <= most:
            raise ConfigError(f"command line: --threads {n}; allowed: 1..{most} (twice the CPUs this process may use)")
    counts = thread_counts(device, args.threads)
    floor = measure_noise_floor(device, runs=args.runs, threads=counts, progress=Progress().line)
    save_noise_floor(floor, machine_cache().root)  # every results folder of this machine finds it there
    path = save_noise_floor(floor, Path(args.results_dir))
    if args.json:
        print(json_text({**floor.to_json(), "floor_pct": floor_pcts(floor), "path": str(path)}))
        return 0
    print(f"noise floor of {floor.machine} ({floor.device}), {floor.runs} fresh runs per thread count, measured in "
          f"{floor.minutes:.1f} min ({floor.measured_utc}); saved to {path}")
    print(f"configuration: {floor.configuration} --threads N")
    print(floors.floor_sentence(floor))
    print(floors.noise_floor_table([floor]).drop(columns=["machine", "device"]).to_string(index=False))
    if floor.interfered:
        print(f"benchlib: warning: other work ran while it was measured ({floor.interference}): this floor is wider "
              "than the machine's quiet one; measure again on a quiet machine", file=sys.stderr)
    return 0
