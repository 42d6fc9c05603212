"""Commands that run a params file: study, sweep, compare, tune (``slurm`` is in ``cli/cluster.py``)."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..spec.repeats import parse_repeats
from ..spec.study import StudyConfig

EXIT_FAILURES = 1


def with_repeats(cfg: StudyConfig, repeats: str | None) -> StudyConfig:
    """The study with ``--repeats N|auto`` in place of its file's repeats (unchanged without the flag)."""
    if repeats is None:
        return cfg
    value: object = int(repeats) if repeats.strip().lstrip("-").isdigit() else repeats.strip()
    rounds, auto = parse_repeats(value, "command line: --repeats")
    return dataclasses.replace(cfg, repeats=rounds, auto_repeats=auto)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs (values read as YAML) that replace the params file's keys."""
    from .single import parse_set

    return parse_set(getattr(args, "set", None) or [])


def checked_first(args: argparse.Namespace) -> None:
    """The params file read and validated before torch and papermill load (a second, not a minute, on a busy
    machine): a missing file, bad YAML, an unknown key or model is refused in one line."""
    from ..spec.study import study_from_file

    study_from_file(args.params, overrides(args))


def cmd_study(args: argparse.Namespace) -> int:
    checked_first(args)
    from ..pipeline.study import run_study
    from ..run.admission import load_study

    cfg = with_repeats(load_study(args.params, overrides=overrides(args)), getattr(args, "repeats", None))
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


def cmd_sweep(args: argparse.Namespace) -> int:
    """A study whose grid sweeps batch sizes (list or doubling range), threads or workers, then its analysis."""
    code = cmd_study(args)
    from ..pipeline.study import summarize
    from ..run.admission import load_study

    cfg = load_study(args.params, overrides=overrides(args))
    results = Path(args.results_root).resolve() / cfg.study
    summarize([results], Path(args.reports_root).resolve() / cfg.study, title=f"benchlib sweep: {cfg.study}",
              notebook="sweep", cell_timeout_s=args.cell_timeout, reuse=True)
    return code


def cmd_compare(args: argparse.Namespace) -> int:
    """A study over optimization variants: every variant of every pair, then the summary's comparisons."""
    checked_first(args)
    from ..run.admission import load_study

    cfg = load_study(args.params, overrides=overrides(args))
    if len(cfg.variants) < 2:
        raise ConfigError(f"{args.params}: key 'variants' lists {len(cfg.variants)} variant(s); allowed: two or more, "
                          "e.g. [cpu-default, cpu-quantized, cpu-compiled]")
    return cmd_study(args)


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune here (one process per pair, through the notebook), or with N workers on SLURM (``--slurm N`` or the
    file's ``tune.workers``); ``--worker`` and ``--finish`` are what those SLURM tasks run."""
    checked_first(args)
    from ..pipeline.tuning import run_tuning, run_worker, tune_spec
    from ..run.admission import load_study

    if args.cell_timeout < 1:
        raise ConfigError(f"command line: --cell-timeout {args.cell_timeout}; allowed: seconds >= 1")
    if args.slurm is not None and args.slurm < 1:
        raise ConfigError(f"command line: --slurm {args.slurm}; allowed: integers >= 1 (workers)")
    if args.worker is not None and args.finish:
        raise ConfigError("command line: --worker with --finish; allowed: one of them (what two different SLURM "
                          "jobs run)")
    cfg = load_study(args.params, check_devices=False)
    workers = args.slurm or tune_spec(cfg).workers
    if args.wait and (workers == 1 and args.slurm is None or args.worker is not None or args.finish):
        raise ConfigError("command line: --wait without SLURM workers; allowed: --wait with --slurm N (or the file's "
                          "tune.workers above 1)")
    if args.worker is not None or args.finish or (args.slurm is None and workers == 1):
        cfg = load_study(args.params)  # it runs here: the devices must be here
    if args.worker is not None:
        return EXIT_FAILURES if run_worker(cfg, args.worker, workers, results_root=Path(args.results_root)) else 0
    if args.finish or workers == 1 and args.slurm is None:
        failed = run_tuning(cfg, results_root=Path(args.results_root), reports_root=Path(args.reports_root),
                            cell_timeout_s=args.cell_timeout, n_trials=0 if args.finish else None)
        return EXIT_FAILURES if failed else 0
    from .cluster import submit_tuning

    return submit_tuning(args, cfg, workers)
