"""SLURM job scripts: a job array of one task per pair, tuning workers, and a multi-node data-parallel job.

Study arrays: each task runs ``benchlib study PARAMS --pair I --no-summary``; its threads follow the CPUs
SLURM gives it (``SLURM_CPUS_PER_TASK``, see :mod:`benchlib.env.threads`). Tuning: N tasks share each
pair's Optuna study (a journal file: SQLite locks up under concurrent writers on a shared filesystem), and
one job that starts when they have all ended exports the best trials and builds the tuning report.
Data-parallel: one ``torchrun`` per node under ``srun``, meeting at the job's first node.

Every script ends by writing its task's exit status beside its log (``<name>-<job>_<task>.exit``): a task
without one was killed (time limit, preemption, memory, node failure). That is how ``--wait`` tells a
failed task without ``sacct``, whose database daemon many small clusters do not run.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..spec.settings import RunConfig, RunSettings
from ..spec.study import StudyConfig
from ..store.atomic import atomic_write_text

_TIME_RE = re.compile(r"^(\d+-)?\d{1,2}:\d{2}(:\d{2})?$")
_MEM_RE = re.compile(r"^\d+[KMGT]?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
DDP_HARDWARE = ("cpu", "cuda", "auto")  # each process takes cuda:LOCAL_RANK; a fixed cuda:N cannot be shared


@dataclass(frozen=True)
class SlurmResources:
    time: str = "02:00:00"
    cpus_per_task: int = 4
    mem: str = "16G"
    gpus_per_task: int = 0
    partition: str | None = None
    account: str | None = None

    def check(self) -> None:
        """Refuse values sbatch would reject, naming the option and its form."""
        if not _TIME_RE.match(self.time):
            raise ConfigError(f"--time '{self.time}'; allowed: [D-]HH:MM[:SS], e.g. 02:00:00")
        if self.cpus_per_task < 1:
            raise ConfigError(f"--cpus-per-task {self.cpus_per_task}; allowed: integers >= 1")
        if self.gpus_per_task < 0:
            raise ConfigError(f"--gpus-per-task {self.gpus_per_task}; allowed: integers >= 0")
        if not _MEM_RE.match(self.mem):
            raise ConfigError(f"--mem '{self.mem}'; allowed: a number with an optional K, M, G or T suffix, e.g. 16G")
        for flag, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None and not _NAME_RE.match(value):
                raise ConfigError(f"{flag} '{value}'; allowed: letters, digits, '.', '_' and '-'")


@dataclass(frozen=True)
class JobPlace:
    """Where a job runs and writes: the folder it starts in, its logs folder, the python that runs benchlib,
    and the results and reports roots its tasks pass on."""

    workdir: Path
    logs: Path
    python: str = "python"
    results_root: Path = Path("results")
    reports_root: Path = Path("reports")
    cell_timeout_s: int = 3600

    def roots(self) -> str:
        return (f"--results-root {shlex.quote(str(self.results_root))} "
                f"--reports-root {shlex.quote(str(self.reports_root))}")

    def benchlib(self) -> str:
        return f"{shlex.quote(self.python)} -m benchlib"


def log_path(logs: Path, name: str, job_id: str, task: int | None) -> Path:
    """A task's SLURM output file (``task`` None: a job that is no array)."""
    return logs / (f"{name}-{job_id}_{task}.out" if task is not None else f"{name}-{job_id}.out")


def exit_path(logs: Path, name: str, job_id: str, task: int) -> Path:
    """The file a task writes its exit status to as its last act (task 0 for a job that is no array)."""
    return logs / f"{name}-{job_id}_{task}.exit"


def _header(name: str, res: SlurmResources, place: JobPlace, *, array: int | None = None,
            nodes: int | None = None) -> list[str]:
    res.check()
    out = place.logs / (f"{name}-%A_%a.out" if array is not None else f"{name}-%j.out")
    lines = ["#!/usr/bin/env bash", f"#SBATCH --job-name=benchlib-{name}"]
    if array is not None:
        lines.append(f"#SBATCH --array=0-{array - 1}")
    lines.append(f"#SBATCH --time={res.time}")
    if nodes is not None:
        lines += [f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"]
    else:
        lines.append("#SBATCH --ntasks=1")
    lines += [f"#SBATCH --cpus-per-task={res.cpus_per_task}", f"#SBATCH --mem={res.mem}", f"#SBATCH --output={out}"]
    if res.gpus_per_task:
        lines.append(f"#SBATCH --gpus-per-{'node' if nodes is not None else 'task'}={res.gpus_per_task}")
    if res.partition:
        lines.append(f"#SBATCH --partition={res.partition}")
    if res.account:
        lines.append(f"#SBATCH --account={res.account}")
    return lines


def _prologue(place: JobPlace, machine: str = '"${BENCHLIB_MACHINE:-$(hostname)}"') -> str:
    return f"""set -euo pipefail
cd {shlex.quote(str(place.workdir))}
export OMP_NUM_THREADS="${{SLURM_CPUS_PER_TASK:-1}}"
export MKL_NUM_THREADS="${{SLURM_CPUS_PER_TASK:-1}}"
export BENCHLIB_MACHINE={machine}
status=0"""


def _epilogue(place: JobPlace, name: str) -> str:
    task = '"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}_${SLURM_ARRAY_TASK_ID:-0}"'
    target = f"{shlex.quote(str(place.logs / name))}-{task}.exit"
    return f"""echo "$status" > {target}
exit "$status"
"""


def array_script(cfg: StudyConfig, params_path: Path, res: SlurmResources, place: JobPlace) -> str:
    """The sbatch script text: an array of one task per pair, in the order ``benchlib study`` runs them."""
    pairs = cfg.pairs()
    listing = "\n".join(f"#   task {i}: {h} / {m}" for i, (h, m) in enumerate(pairs))
    body = f"""
# benchlib study '{cfg.study}': {len(pairs)} pair(s), one array task each.
{listing}
# When every task has finished: {place.benchlib()} report {place.results_root / cfg.study}
{_prologue(place)}
{place.benchlib()} study {shlex.quote(str(params_path))} --pair "${{SLURM_ARRAY_TASK_ID}}" --no-summary \\
  {place.roots()} --cell-timeout {place.cell_timeout_s} || status=$?
{_epilogue(place, cfg.study)}"""
    return "\n".join(_header(cfg.study, res, place, array=len(pairs))) + "\n" + body


# The name every tuning task of one array gives its machine, so they all open the same study: the
# nodes of one partition share it (a tuned setting belongs to the hardware, not to one node's name).
TUNE_MACHINE = '"${BENCHLIB_MACHINE:-${SLURM_CLUSTER_NAME:-slurm}-${SLURM_JOB_PARTITION:-default}}"'


def tune_scripts(cfg: StudyConfig, params_path: Path, res: SlurmResources, place: JobPlace,
                 workers: int) -> tuple[str, str]:
    """(worker array, finishing job): N workers add their share of trials to each pair's shared study;
    the finishing job (submitted to start after them) exports the best trials and builds the report."""
    n_trials = cfg.tune.n_trials if cfg.tune else 0
    workers_text = f"""
# benchlib tune '{cfg.study}': {workers} worker(s) share each pair's Optuna study ({n_trials} trial(s) in all
# per pair, split among them) in {place.results_root / cfg.study / 'tuning'}; then {cfg.study}-tune-finish.
{_prologue(place, TUNE_MACHINE)}
{place.benchlib()} tune {shlex.quote(str(params_path))} --worker "${{SLURM_ARRAY_TASK_ID}}" --slurm {workers} \\
  {place.roots()} || status=$?
{_epilogue(place, f"{cfg.study}-tune")}"""
    finish_text = f"""
# benchlib tune '{cfg.study}': after its workers, export each pair's best trial and build the tuning report.
{_prologue(place, TUNE_MACHINE)}
{place.benchlib()} tune {shlex.quote(str(params_path))} --finish {place.roots()} \\
  --cell-timeout {place.cell_timeout_s} || status=$?
{_epilogue(place, f"{cfg.study}-tune-finish")}"""
    worker_script = "\n".join(_header(f"{cfg.study}-tune", res, place, array=workers)) + "\n" + workers_text
    finish = "\n".join(_header(f"{cfg.study}-tune-finish", res, place)) + "\n" + finish_text
    return worker_script, finish


def _set_flags(s: RunSettings) -> list[str]:
    """``--set KEY=VALUE`` for every setting that differs from the default (values as YAML)."""
    default = RunSettings().flat()
    out = []
    for key, value in s.flat().items():
        if value != default[key]:
            text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
            out.append(f"--set {shlex.quote(f'{key}={text}')}")
    return out


def _run_line(c: RunConfig, place: JobPlace, study: str) -> str:
    return " ".join([f"--model {c.model} --device {c.hardware} --batch-size {c.batch_size} --study {study}",
                     f"--results-dir {shlex.quote(str(place.results_root / study))}", *_set_flags(c.settings)])


def ddp_script(cfg: StudyConfig, res: SlurmResources, place: JobPlace, *, nodes: int, nproc_per_node: int) -> str:
    """One job of ``nodes`` nodes: every configuration of the study data-parallel over nodes x processes.

    ``srun`` starts one ``torchrun`` per node (``--cpus-per-task`` given again: srun does not inherit
    sbatch's since SLURM 22.05); they meet at the first node of ``SLURM_JOB_NODELIST`` (c10d rendezvous,
    a port of their own per configuration). Each process runs ``benchlib run``; rank 0 writes the row.
    """
    if nodes < 1:
        raise ConfigError(f"--nodes {nodes}; allowed: integers >= 1")
    if nproc_per_node < 1:
        raise ConfigError(f"--nproc-per-node {nproc_per_node}; allowed: integers >= 1")
    bad = sorted({h for h, _ in cfg.pairs() if h not in DDP_HARDWARE})
    if bad:
        raise ConfigError(f"{cfg.source}: hardware {', '.join(bad)} with --nodes; allowed: {', '.join(DDP_HARDWARE)} "
                          "(each process takes cuda:LOCAL_RANK)")
    configs = cfg.all_configs()
    name = ddp_name(cfg.study, nodes, nproc_per_node)
    launch = (f'srun --ntasks-per-node=1 --cpus-per-task={res.cpus_per_task} --kill-on-bad-exit=1 '
              f'{shlex.quote(place.python)} -m torch.distributed.run --nnodes="$SLURM_JOB_NUM_NODES" '
              f'--nproc-per-node={nproc_per_node} --rdzv-backend=c10d --rdzv-endpoint="$head:$((port + i))" '
              f'--rdzv-id="$SLURM_JOB_ID-$i" -m benchlib run "$@"')
    ranks = nodes * nproc_per_node
    runs = "\n".join(f"i={i}; launch {_run_line(c, place, cfg.study)} || status=1" for i, c in enumerate(configs))
    body = f"""
# benchlib study '{cfg.study}' data-parallel: {nodes} node(s) x {nproc_per_node} process(es) = {ranks} rank(s),
# {len(configs)} configuration(s) one after another (the batch size is global; run ids end __ddp{ranks}).
# When it has finished: {place.benchlib()} report {place.results_root / cfg.study}
{_prologue(place)}
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$((20000 + SLURM_JOB_ID % 20000))
launch() {{
  {launch}
}}
{runs}
{_epilogue(place, name)}"""
    return "\n".join(_header(name, res, place, nodes=nodes)) + "\n" + body


def ddp_name(study: str, nodes: int, nproc_per_node: int) -> str:
    return f"{study}-ddp{nodes}x{nproc_per_node}"


def write_script(text: str, path: Path, place: JobPlace) -> Path:
    """Write an executable job script and create its logs folder."""
    atomic_write_text(path, text)
    path.chmod(0o755)
    place.logs.mkdir(parents=True, exist_ok=True)
    return path
