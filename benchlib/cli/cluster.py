"""Commands that run a study on a SLURM cluster: ``slurm`` (pairs as an array, or one data-parallel job)
and ``tune --slurm N`` (workers sharing each pair's study). With ``--wait`` they watch the jobs, then
report; without, they print the exact commands that do."""
from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import log as messages
from ..errors import ConfigError, one_line
from ..store.layout import ResultsLayout

if TYPE_CHECKING:
    from ..pipeline.slurm import JobPlace, SlurmResources
    from ..pipeline.slurm_jobs import Job
    from ..spec.study import StudyConfig

EXIT_FAILURES = 1


def _say(msg: str) -> None:
    messages.info(msg)


def _benchlib() -> str:
    return f"{shlex.quote(sys.executable)} -m benchlib"


def _resources(args: argparse.Namespace, *, gpus: int) -> SlurmResources:
    from ..pipeline.slurm import SlurmResources

    return SlurmResources(args.time, args.cpus_per_task, args.mem, gpus, args.partition, args.account)


def _place(args: argparse.Namespace) -> JobPlace:
    from ..pipeline.slurm import JobPlace

    if args.cell_timeout < 1:
        raise ConfigError(f"command line: --cell-timeout {args.cell_timeout}; allowed: seconds >= 1")
    return JobPlace(workdir=Path.cwd(), logs=Path(args.out_dir).resolve(), python=sys.executable,
                    results_root=Path(args.results_root), reports_root=Path(args.reports_root),
                    cell_timeout_s=args.cell_timeout)


def _same_place_flags(args: argparse.Namespace) -> str:
    """The options a later command needs to find the same files (only those not at their default)."""
    flags = []
    for flag, value, default in (("--out-dir", args.out_dir, "slurm"), ("--results-root", args.results_root, "results"),
                                 ("--reports-root", args.reports_root, "reports")):
        if value != default:
            flags.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(flags)


def _report(results: Path, reports_root: Path, study: str) -> bool:
    """The summary and HTML of a study's rows (``benchlib report``); False when there was nothing to report."""
    from ..pipeline.study import PAIR_FAILURES, summarize

    if not ResultsLayout.of(results).holds_rows:
        _say(f"no rows in {results}: no report")
        return False
    try:
        out = summarize([results], reports_root / study, title=f"benchlib study: {study}")
    except PAIR_FAILURES as exc:
        _say(f"the summary of {results} failed: {one_line(exc)}")
        return False
    print(out)
    return True


def _judge(jobs: Sequence[Job], again: Callable[[list[int]], str]) -> int:
    """Exit 0 when every task exited 0, else name each failed task and the command that runs them again."""
    from ..pipeline.slurm_jobs import failures

    failed = [f for job in jobs for f in failures(job)]
    for f in failed:
        print(f"benchlib: {f.text()}", file=sys.stderr)
    if failed:
        ids = sorted({f.task for f in failed if f.job.array})
        print(f"benchlib: {len(failed)} task(s) failed; run them again with: {again(ids)}", file=sys.stderr)
        return EXIT_FAILURES
    return 0


def cmd_slurm(args: argparse.Namespace) -> int:
    from ..spec.study import study_from_file

    study_from_file(args.params)  # refused before torch loads
    from ..pipeline import slurm, slurm_jobs
    from ..run.admission import load_study

    cfg = load_study(args.params, check_devices=False)  # the cluster's nodes have the devices, not this one
    place = _place(args)
    n_pairs = len(cfg.pairs())
    pairs = sorted(set(args.pair or []))
    if bad := [p for p in pairs if not 0 <= p < n_pairs]:
        raise ConfigError(f"command line: --pair {bad[0]}; allowed: 0..{n_pairs - 1} ({n_pairs} pairs in "
                          f"{args.params})")
    if args.nodes is not None:
        if pairs:
            raise ConfigError("command line: --pair with --nodes; allowed: --pair for the job array of pairs only "
                              "(a data-parallel job runs every configuration)")
        nproc = args.nproc_per_node or args.gpus_per_node or 1
        name = slurm.ddp_name(cfg.study, args.nodes, nproc)
        text = slurm.ddp_script(cfg, _resources(args, gpus=args.gpus_per_node), place, nodes=args.nodes,
                                nproc_per_node=nproc)
    else:
        if args.nproc_per_node is not None or args.gpus_per_node:
            raise ConfigError("command line: --nproc-per-node/--gpus-per-node without --nodes; allowed: with "
                              "--nodes N (a data-parallel job); a job array takes --gpus-per-task")
        name = cfg.study
        text = slurm.array_script(cfg, Path(args.params), _resources(args, gpus=args.gpus_per_task), place)
    if args.submit and args.job:
        raise ConfigError("command line: --submit with --job; allowed: one of them (--job waits for a job already "
                          "submitted)")
    if args.wait and not (args.submit or args.job):
        raise ConfigError("command line: --wait without --submit; allowed: --submit --wait, or --job ID")
    if args.job is not None and not args.job.isdigit():
        raise ConfigError(f"command line: --job {args.job!r}; allowed: a SLURM job id (digits), as sbatch printed it")
    script = slurm.write_script(text, Path(args.out_dir) / f"{name}.sbatch", place)
    print(script)
    if not (args.submit or args.job):
        return 0
    job_id = args.job or slurm_jobs.submit(script, tasks=pairs or None)
    if args.submit:
        print(f"Submitted batch job {job_id}")
    tasks = tuple(pairs or range(n_pairs)) if args.nodes is None else (0,)
    job = slurm_jobs.Job(job_id, name, place.logs, tasks, array=args.nodes is None)
    same = _same_place_flags(args)
    nodes = f" --nodes {args.nodes} --nproc-per-node {nproc}" if args.nodes is not None else ""
    picked = "".join(f" --pair {p}" for p in pairs)
    results = place.results_root / cfg.study
    if not (args.wait or args.job):
        print(f"wait and report: {_benchlib()} slurm {shlex.quote(args.params)} --job {job_id}{picked}{nodes}"
              + (f" {same}" if same else ""))
        print(f"or watch with:   squeue -j {job_id}; then report: {_benchlib()} report {shlex.quote(str(results))}")
        return 0
    waited_s = slurm_jobs.wait([job], say=_say)
    _say(f"job {job_id} ended after {waited_s:.0f} s of waiting")
    reported = _report(results, place.reports_root, cfg.study)
    code = _judge([job], lambda ids: " ".join([f"{_benchlib()} slurm {shlex.quote(args.params)} --submit --wait",
                                               *(f"--pair {i}" for i in ids), nodes.strip(), same]).strip())
    return code or (0 if reported else EXIT_FAILURES)


def submit_tuning(args: argparse.Namespace, cfg: StudyConfig, workers: int) -> int:
    """``benchlib tune --slurm N``: the worker array, then the job that exports and reports after them."""
    from ..pipeline import slurm, slurm_jobs
    from ..pipeline.tuning import check_workers
    from ..store.layout import ResultsLayout
    from ..store.tuning_storage import move_to_journal

    check_workers(cfg, workers, "--slurm" if args.slurm else f"{args.params}: key 'tune.workers' is")
    place = _place(args)
    worker_text, finish_text = slurm.tune_scripts(cfg, Path(args.params), _resources(args, gpus=args.gpus_per_task),
                                                  place, workers)
    worker_script = slurm.write_script(worker_text, Path(args.out_dir) / f"{cfg.study}-tune.sbatch", place)
    finish_script = slurm.write_script(finish_text, Path(args.out_dir) / f"{cfg.study}-tune-finish.sbatch", place)
    print(worker_script)
    print(finish_script)
    slurm_jobs.require("sbatch", worker_script)  # before the storage changes
    results = place.results_root.resolve() / cfg.study
    if workers > 1 and (moved := move_to_journal(results)):
        _say(f"{len(moved)} study(ies) copied from SQLite into {ResultsLayout.of(results).tuning_journal}, which "
             "parallel workers share")
    array_id = slurm_jobs.submit(worker_script)
    finish_id = slurm_jobs.submit(finish_script, after=array_id)
    print(f"Submitted batch job {array_id} ({workers} worker(s)) and {finish_id} (export and report, after them)")
    jobs = [slurm_jobs.Job(array_id, f"{cfg.study}-tune", place.logs, tuple(range(workers))),
            slurm_jobs.Job(finish_id, f"{cfg.study}-tune-finish", place.logs, (0,), array=False)]
    if not args.wait:
        print(f"watch with: squeue -j {array_id},{finish_id}; the report is {place.reports_root / cfg.study}/tune/ "
              f"once job {finish_id} has ended (its log: {jobs[1].out_file(0)})")
        return 0
    waited_s = slurm_jobs.wait(jobs, say=_say)
    _say(f"jobs {array_id}, {finish_id} ended after {waited_s:.0f} s of waiting")
    return _judge(jobs, lambda _ids: f"{_benchlib()} tune {shlex.quote(args.params)} --slurm {workers} --wait "
                  "(the trials stored so far are kept; n_trials more are added)")
