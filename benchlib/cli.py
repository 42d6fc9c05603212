"""The ``benchlib`` command: study, run, profile, report, flops, roofline, env.

Bad input gets one line on stderr naming the problem and what is allowed, exit code 2, and no
traceback unless ``--debug``.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .errors import BenchlibError, ConfigError

if TYPE_CHECKING:
    from .spec.settings import RunConfig

EXIT_BAD_INPUT = 2
EXIT_FAILURES = 1


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set '{item}': expected KEY=VALUE, e.g. --set lr=0.05")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set '{item}': value is not valid YAML ({exc})") from exc
    return out


def _cmd_study(args: argparse.Namespace) -> int:
    from .pipeline.study import run_study
    from .run.preflight import load_study

    cfg = load_study(args.params)
    if args.cell_timeout < 1:
        raise ConfigError(f"command line: --cell-timeout {args.cell_timeout}; allowed: seconds >= 1")
    pair = getattr(args, "pair", None)
    if pair is not None and not 0 <= pair < len(cfg.pairs()):
        raise ConfigError(
            f"command line: --pair {pair}; allowed: 0..{len(cfg.pairs()) - 1} "
            f"({len(cfg.pairs())} pairs in {args.params})"
        )
    outcome = run_study(cfg, results_root=Path(args.results_root), reports_root=Path(args.reports_root),
                        cell_timeout_s=args.cell_timeout, fresh=args.fresh, only_pair=pair,
                        summary=not getattr(args, "no_summary", False))
    return 0 if outcome.ok else EXIT_FAILURES


def _config_from_args(args: argparse.Namespace) -> RunConfig:
    """One validated configuration from ``run``/``profile`` arguments (threads applied)."""
    from .env.distributed import launched_world_size
    from .env.threads import apply_threads
    from .run.preflight import check_hardware, check_settings
    from .spec.settings import RunConfig, check_batch_sizes, settings_from_mapping
    from .spec.variants import apply_variant, parse_variant
    from .spec.vocab import MODELS

    values: dict[str, Any] = {"dataset": args.data}
    for key in ("data_path", "image_size", "epochs", "lr", "optimizer", "seed", "threads", "num_workers"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if getattr(args, "steps", None) is not None:
        values["train_steps"] = args.steps
    values.update(_parse_set(args.set))
    settings = settings_from_mapping(values, "command line")
    if getattr(args, "variant", None):
        settings = apply_variant(settings, parse_variant(args.variant, "command line: --variant"))
    if args.model not in MODELS:
        raise ConfigError(f"command line: --model '{args.model}' is unknown; allowed: {', '.join(MODELS)}")
    if args.batch_size < 1:
        raise ConfigError(f"command line: --batch-size {args.batch_size}; allowed: integers >= 1")
    check_batch_sizes([args.batch_size], settings, "command line")
    check_hardware([args.device], "command line", key="--device")
    check_settings(settings, [args.model], "command line")
    apply_threads(settings.knobs.threads, settings.knobs.interop_threads)
    return RunConfig(args.study, args.device, args.model, args.batch_size, settings, world_size=launched_world_size())


def _cmd_sweep(args: argparse.Namespace) -> int:
    """A study whose grid sweeps batch sizes (list or doubling range), threads or workers, then its analysis."""
    from .pipeline.study import summarize
    from .run.preflight import load_study

    code = _cmd_study(args)

    cfg = load_study(args.params)
    results = Path(args.results_root).resolve() / cfg.study
    summarize([results], Path(args.reports_root).resolve() / cfg.study, title=f"benchlib sweep: {cfg.study}",
              notebook="sweep", cell_timeout_s=args.cell_timeout)
    return code


def _cmd_slurm(args: argparse.Namespace) -> int:
    from .pipeline.slurm import SlurmResources, submit, write_script
    from .run.preflight import load_study

    cfg = load_study(args.params, check_devices=False)  # the cluster's nodes have the devices, not this one
    res = SlurmResources(args.time, args.cpus_per_task, args.mem, args.gpus_per_task, args.partition, args.account)
    script = write_script(cfg, Path(args.params), res, Path(args.out_dir), workdir=Path.cwd())
    print(script)
    if args.submit:
        print(submit(script))
    return 0


def _relaunch_with_torchrun(nproc: int, argv: Sequence[str]) -> int:
    """``benchlib run --nproc-per-node N``: the same command under torchrun, N processes on this node."""
    rest = [a for i, a in enumerate(argv) if not (a.startswith("--nproc-per-node")
                                                   or (i > 0 and argv[i - 1] == "--nproc-per-node"))]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "benchlib", *rest]
    print(f"[benchlib] launching {nproc} processes: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    return subprocess.run(cmd).returncode


def _cmd_compare(args: argparse.Namespace) -> int:
    """A study over optimization variants: every variant of every pair, then the summary's comparisons."""
    from .run.preflight import load_study

    cfg = load_study(args.params)
    if len(cfg.variants) < 2:
        raise ConfigError(f"{args.params}: key 'variants' lists {len(cfg.variants)} variant(s); allowed: two or more, "
                          "e.g. [cpu-default, cpu-quantized, cpu-compiled]")
    return _cmd_study(args)


def _cmd_tune(args: argparse.Namespace) -> int:
    from .pipeline.study import run_tuning
    from .run.preflight import load_study

    cfg = load_study(args.params)
    failed = run_tuning(cfg, results_root=Path(args.results_root), reports_root=Path(args.reports_root),
                        cell_timeout_s=args.cell_timeout)
    return EXIT_FAILURES if failed else 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .env.distributed import launched_by_torchrun
    from .run.measure import measure
    from .run.record import record

    if args.nproc_per_node < 1:
        raise ConfigError(f"command line: --nproc-per-node {args.nproc_per_node}; allowed: integers >= 1")
    if args.nproc_per_node > 1 and args.device not in ("cuda", "cpu", "auto"):
        raise ConfigError(f"command line: --device {args.device} with --nproc-per-node {args.nproc_per_node}; "
                          "allowed: cuda (each process takes cuda:LOCAL_RANK; CUDA_VISIBLE_DEVICES picks the GPUs) "
                          "or cpu")
    if args.nproc_per_node > 1 and not launched_by_torchrun():
        return _relaunch_with_torchrun(args.nproc_per_node, args.argv)
    cfg = _config_from_args(args)
    if args.no_save:
        measured = measure(cfg, progress=lambda m: print(f"[benchlib] {m}", file=sys.stderr, flush=True))
        row = measured.row if measured is not None else None
    else:
        row = record(cfg, Path(args.results_dir))
    if launched_by_torchrun():
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    if row is None:  # data-parallel rank > 0: rank 0 reports
        return 0
    if row.get("interfered"):
        print(f"benchlib: warning: {row['run_id']} was measured while {row['interference']}: its numbers are not "
              "trustworthy", file=sys.stderr)
    if args.json:
        print(
            json.dumps(row, default=str, allow_nan=False)
            if _finite(row)
            else json.dumps(_nan_to_none(row), default=str)
        )
    else:
        for key in ("status", "error", "device_name", "train_samples_per_s", "train_step_s_median", "epoch_s",
                    "test_accuracy", "latency_ms_p50", "batch_latency_ms_p50", "peak_rss_bytes"):
            print(f"{key:>22}: {row.get(key)}")
    return 0 if row["status"] == "ok" else EXIT_FAILURES


def _cmd_profile(args: argparse.Namespace) -> int:
    from .instruments.profiler import format_breakdown
    from .run.profile import record_profile

    cfg = _config_from_args(args)
    for flag, value, low in (("--wait", args.wait, 0), ("--warmup", args.warmup, 0), ("--active", args.active, 1)):
        if value < low:
            raise ConfigError(f"command line: {flag} {value}; allowed: integers >= {low}")
    result, out = record_profile(cfg, Path(args.results_dir), wait=args.wait, warmup=args.warmup, active=args.active)
    print(format_breakdown(result.breakdown))
    print(result.top_by_self_cpu.head(10).to_string(index=False))
    if not result.top_by_self_device.empty:
        print(result.top_by_self_device.head(10).to_string(index=False))
    print(f"tables, trace and TensorBoard logs: {out}  (tensorboard --logdir {result.tensorboard_dir})")
    return 0


def _finite(row: dict[str, Any]) -> bool:
    return not any(isinstance(v, float) and v != v for v in row.values())


def _nan_to_none(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))) else v)
        for k, v in row.items()
    }


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """numpy scalars as Python values, for JSON."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}


def _cmd_env(args: argparse.Namespace) -> int:
    from .env.manifest import collect_manifest

    manifest = collect_manifest()
    if args.json:
        print(json.dumps(manifest, default=str))
    else:
        for k, v in manifest.items():
            print(f"{k:>28}: {v}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .pipeline.study import summarize

    dirs = [Path(d) for d in args.results_dirs]
    for d in dirs:
        if not (d / "rows").is_dir():
            raise ConfigError(
                f"results folder '{d}' has no rows/ folder; give folders written by benchlib, e.g. results/default"
            )
    name = args.name or (dirs[0].name if len(dirs) == 1 else "merged")
    out = summarize(dirs, Path(args.reports_root) / name, title=f"benchlib report: {name}")
    print(out)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from .report import diff as d
    from .report.evidence import METRICS

    for flag, value in (("--threshold", args.threshold), ("--fail-on-regression", args.fail_on_regression)):
        if value is not None and not (math.isfinite(value) and 0 <= value < 100):
            raise ConfigError(f"command line: {flag} {value}; allowed: a percentage from 0 to under 100")
    metrics = args.metric or list(d.DEFAULT_METRICS)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ConfigError(f"command line: --metric {', '.join(unknown)}; allowed: {', '.join(METRICS)}")
    from .spec.settings import SETTING_RULES

    ignore = args.ignore or []
    allowed = sorted({*SETTING_RULES, "hardware", "batch_size", "world_size"} - {"seed"})
    if bad := [n for n in ignore if n not in allowed]:
        raise ConfigError(f"command line: --ignore {', '.join(bad)}; allowed: {', '.join(allowed)}")
    folders = []
    for side in (args.a, args.b):
        try:
            d.results_folders(Path(side))
        except FileNotFoundError as exc:
            raise ConfigError(f"{exc}; give folders written by benchlib, e.g. results/default") from None
        folders.append(Path(side))
    table = d.diff(folders[0], folders[1], metrics, threshold=args.threshold / 100, ignore=ignore)
    worse = d.regressions(table, args.fail_on_regression) if args.fail_on_regression is not None else None
    if args.json:
        payload = {"a": str(args.a), "b": str(args.b), "threshold_pct": args.threshold,
                   "fail_on_regression_pct": args.fail_on_regression,
                   "regressions": 0 if worse is None else len(worse),
                   "rows": [_nan_to_none(_plain(r)) for r in table.to_dict("records")]}
        print(json.dumps(payload, default=str, allow_nan=False))
    else:
        print(f"B = {args.b} against A = {args.a}: ratio > 1 means B is better (faster, smaller, more accurate); "
              f"95% bootstrap interval of the ratio of medians, Mann-Whitney p; same = interval holds 1 or the "
              f"change is under {args.threshold:g}%; of = what was resampled: runs (three or more repeats a side) or "
              "samples (the steps of one run a side: run-to-run drift not covered)")
        print(d.as_text(table))
    if worse is not None and not worse.empty:
        listed = "; ".join(f"{r['configuration']} {r['metric']} {r['ratio']:.3f}x [{r['ci_low']:.3f}, "
                           f"{r['ci_high']:.3f}]" for r in worse.to_dict("records"))
        print(f"benchlib: {len(worse)} regression(s) over {args.fail_on_regression:g}%: {listed}", file=sys.stderr)
        return 1
    return 0


_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _cmd_flops(args: argparse.Namespace) -> int:
    import torch

    from .nets.flops import complexity, layer_table
    from .nets.models import build_model, smallest_image_size
    from .spec.vocab import MODELS

    if args.model not in MODELS:
        raise ConfigError(f"command line: --model '{args.model}' is unknown; allowed: {', '.join(MODELS)}")
    for flag, value, low in (("--image-size", args.image_size, 8), ("--batch-size", args.batch_size, 1),
                             ("--num-classes", args.num_classes, 2)):
        if value < low:
            raise ConfigError(f"command line: {flag} {value}; allowed: integers >= {low}")
    smallest = smallest_image_size(args.model)
    if args.image_size < smallest:
        raise ConfigError(f"command line: --image-size {args.image_size}: too small for {args.model} (its layers "
                          f"shrink it to nothing); allowed: --image-size >= {smallest} for {args.model}")
    dtype = getattr(torch, _DTYPES[args.dtype])
    c = complexity(args.model, args.image_size, batch_size=args.batch_size, num_classes=args.num_classes, dtype=dtype)
    if args.json:
        print(json.dumps(c.as_dict()))
    else:
        for key, value in c.as_dict().items():
            print(f"{key:>28}: {value}")
    if args.layers:
        table = layer_table(
            build_model(args.model, args.num_classes), args.image_size, batch_size=args.batch_size, dtype=dtype
        )
        print(table.to_string(index=False), file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_roofline(args: argparse.Namespace) -> int:
    from .env.devices import resolve_hardware
    from .roofline.cache import save_ceilings
    from .roofline.ceilings import measure_ceilings

    try:
        device = resolve_hardware(args.device)
    except BenchlibError as exc:
        raise ConfigError(f"command line: --device: {exc}") from exc
    if args.repeats < 3:
        raise ConfigError(f"command line: --repeats {args.repeats}; allowed: integers >= 3")
    print(f"[benchlib] measuring {device} ceilings ({args.repeats} repeats per figure)", file=sys.stderr, flush=True)
    ceilings = measure_ceilings(device, repeats=args.repeats)
    if args.results_dir:
        ceilings.path = str(save_ceilings(ceilings, Path(args.results_dir)))
    if args.json:
        print(json.dumps({**ceilings.to_json(), "path": ceilings.path}, default=str))
    else:
        for dtype, value in ceilings.peak_flops_per_s.items():
            print(f"peak {dtype:>5}: {value / 1e9:10.1f} GFLOP/s")
        print(f"bandwidth : {ceilings.bandwidth_bytes_per_s / 1e9:10.1f} GB/s (bytes read + written)")
    return 0


def _add_study_args(p: argparse.ArgumentParser, *, fresh: bool = True) -> None:
    p.add_argument("params", help="study params file, e.g. params/default.yaml")
    p.add_argument("--results-root", default="results", help="results go to RESULTS_ROOT/<study>/")
    p.add_argument("--reports-root", default="reports", help="reports go to REPORTS_ROOT/<study>/")
    p.add_argument("--cell-timeout", type=int, default=3600, help="seconds a notebook cell may run")
    if fresh:
        p.add_argument("--fresh", action="store_true",
                       help="start over: move the study's old results and reports aside (nothing is deleted)")


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--data", default="digits", help="digits, synthetic, cifar10, tinyimagenet, imagefolder")
    p.add_argument("--data-path", dest="data_path")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps, auto")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int)
    p.add_argument("--image-size", dest="image_size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--optimizer")
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int)
    p.add_argument("--num-workers", dest="num_workers", type=int)
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any run setting, e.g. --set pretrained=true"
    )
    p.add_argument("--study", default="adhoc", help="study name the row is tagged with")
    p.add_argument(
        "--variant",
        help="a variant preset: cpu-default, cpu-quantized, cpu-compiled, cpu-tuned, gpu-default, "
        "gpu-amp, gpu-bf16, gpu-channels-last, gpu-compiled, gpu-tuned",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchlib", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("study", help="run every hardware/model pair of a params file, then the summary and HTML")
    _add_study_args(p)
    p.add_argument("--pair", type=int, help="run only pair number PAIR (0-based; what a SLURM array task does)")
    p.add_argument("--no-summary", action="store_true", help="skip the summary (build it later with benchlib report)")
    p.set_defaults(func=_cmd_study)

    p = sub.add_parser("slurm", help="write (and with --submit, submit) a SLURM job array: one task per pair")
    p.add_argument("params")
    p.add_argument("--time", default="02:00:00")
    p.add_argument("--cpus-per-task", type=int, default=4)
    p.add_argument("--mem", default="16G")
    p.add_argument("--gpus-per-task", type=int, default=0)
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--out-dir", default="slurm", help="where the .sbatch script is written")
    p.add_argument("--submit", action="store_true", help="submit it with sbatch")
    p.set_defaults(func=_cmd_slurm)

    p = sub.add_parser("sweep", help="run a sweep study (batch sizes, threads, workers) and its sweep analysis")
    _add_study_args(p)
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("compare", help="compare optimization variants (the params file's variants:) per pair")
    _add_study_args(p)
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("tune", help="one Optuna study per hardware/model pair (the params file's tune: section)")
    _add_study_args(p, fresh=False)
    p.set_defaults(func=_cmd_tune)

    p = sub.add_parser("run", help="measure one configuration")
    _add_config_args(p)
    p.add_argument("--steps", type=int, help="timed training steps (after warmup)")
    p.add_argument("--results-dir", default="results/adhoc")
    p.add_argument("--no-save", action="store_true", help="print only, write no results files")
    p.add_argument("--json", action="store_true", help="print the row as one JSON object")
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        help="data-parallel processes (DDP through torchrun; gloo on CPU, NCCL on GPUs); the batch is global",
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("profile", help="profile training steps of one configuration with torch.profiler")
    _add_config_args(p)
    p.add_argument("--wait", type=int, default=1, help="profiler schedule: steps skipped")
    p.add_argument("--warmup", type=int, default=1, help="profiler schedule: steps traced and discarded")
    p.add_argument("--active", type=int, default=3, help="profiler schedule: steps recorded")
    p.add_argument("--results-dir", default="results/adhoc", help="profiles go to RESULTS_DIR/profiles/")
    p.set_defaults(func=_cmd_profile)


    p = sub.add_parser("flops", help="count MACs, FLOPs (forward and training), bytes moved and intensity of a model")
    p.add_argument("--model", required=True)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--dtype", choices=sorted(_DTYPES), default="fp32", help="element size used for bytes moved")
    p.add_argument("--layers", action="store_true", help="also print the per-layer table")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_flops)

    p = sub.add_parser("roofline", help="measure this machine's compute and bandwidth ceilings")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps, auto")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--results-dir", help="save the ceilings under RESULTS_DIR/ceilings/ for the summary")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_roofline)

    p = sub.add_parser("diff", help="compare two results folders configuration by configuration, with intervals")
    p.add_argument("a", help="reference results folder (a study folder or a results root), e.g. the last commit's")
    p.add_argument("b", help="candidate results folder")
    p.add_argument("--metric", action="append", help="metric to compare (repeatable; default: throughput, step "
                   "time, latency, peak memory, energy, accuracy)")
    p.add_argument("--json", action="store_true", help="print one JSON object with a rows list")
    p.add_argument("--ignore", action="append", metavar="SETTING",
                   help="leave a setting out of the match, to compare what differs in it (e.g. threads, hardware)")
    p.add_argument("--threshold", type=float, default=2.0, metavar="PCT",
                   help="changes under PCT%% are judged same (default 2)")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="exit 1 when B is slower (or worse) than A by more than PCT%% with an interval excluding 1")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("env", help="print the environment manifest")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_env)

    p = sub.add_parser("report", help="summary and HTML from existing results folders (several machines merge)")
    p.add_argument("results_dirs", nargs="+")
    p.add_argument("--name", help="report name (default: the folder's name, or 'merged')")
    p.add_argument("--reports-root", default="reports")
    p.set_defaults(func=_cmd_report)
    return parser


def _one_line_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ANN001
    return f"benchlib: warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return int(args.func(args))
    except BenchlibError as exc:
        if args.debug:
            raise
        print(f"benchlib: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("benchlib: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except OSError as exc:  # the environment failed: a full disk, a read-only or vanished folder
        if args.debug or exc.errno not in _ENVIRONMENT_ERRNOS:
            raise
        what = "disk full" if exc.errno == errno.ENOSPC else "cannot write"
        print(f"benchlib: error: {what}: {exc.filename or ''}: {exc.strerror}; complete rows are kept: fix it and "
              "run the same command again to resume", file=sys.stderr)
        return 1


_ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.ENAMETOOLONG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
