"""SLURM jobs submitted, watched and judged with the client commands every cluster has.

``sbatch --parsable`` gives the job id; ``squeue -r -j ID`` lists the tasks still queued or running (one
line each); when none is left, each task's exit status is the file its script wrote last
(:func:`benchlib.pipeline.slurm.exit_path`). No ``sacct``: it needs an accounting database daemon that
many small clusters lack. ``scontrol show job`` adds SLURM's word for a killed task while it still
remembers the job (``MinJobAge``, five minutes by default).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ClusterError, ConfigError
from ..log import ProgressFn
from .slurm import exit_path, log_path

POLL_S = 3.0
PROGRESS_EVERY_S = 60.0  # a progress line when the counts change, else at most once a minute
_SQUEUE_FAILURES_ALLOWED = 20  # consecutive failed polls (about a minute) before giving up
_JOB_ID_RE = re.compile(r"^\d+$")


@dataclass(frozen=True)
class Job:
    """A submitted job: its id, the script name its files carry, its logs folder and its task ids."""

    job_id: str
    name: str
    logs: Path
    tasks: tuple[int, ...]
    array: bool = True

    def out_file(self, task: int) -> Path:
        return log_path(self.logs, self.name, self.job_id, task if self.array else None)


@dataclass(frozen=True)
class TaskFailure:
    job: Job
    task: int
    reason: str

    def text(self) -> str:
        return f"task {self.task} of job {self.job.job_id}: {self.reason} (log: {self.job.out_file(self.task)})"


def require(command: str, script: Path | None = None) -> None:
    """Refuse in one line when a SLURM client command is missing (this is no cluster's login node)."""
    if shutil.which(command) is None:
        where = f"; the script is at {script}: submit it on the cluster" if script else ""
        raise ConfigError(f"{command} is not on PATH (no SLURM here){where}")


def submit(script: Path, *, tasks: Sequence[int] | None = None, after: str | None = None) -> str:
    """Submit ``script`` with sbatch (only array ``tasks`` when given; after job ``after`` ends); its job id."""
    require("sbatch", script)
    cmd = ["sbatch", "--parsable"]
    if tasks:
        cmd.append("--array=" + ",".join(str(t) for t in tasks))
    if after:
        cmd.append(f"--dependency=afterany:{after}")
    proc = subprocess.run([*cmd, str(script)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise ConfigError(f"--submit: sbatch refused {script}: {why}")
    job_id = proc.stdout.strip().split(";")[0]
    if not _JOB_ID_RE.match(job_id):
        raise ClusterError(f"--submit: sbatch answered {proc.stdout.strip()!r} for {script}; expected a job id")
    return job_id


def queued(job_ids: Sequence[str]) -> dict[str, str] | None:
    """Each task still queued or running (``ID_TASK`` or ``ID``) with its state; None when squeue failed.

    A job SLURM has already forgotten makes squeue answer "Invalid job id": it is done.
    """
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i %T"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return {} if "invalid job id" in proc.stderr.lower() else None
    states = {}
    for line in proc.stdout.splitlines():
        if line.strip():
            task, _, state = line.strip().partition(" ")
            states[task] = state
    return states


def _counts_text(states: dict[str, str], total: int) -> str:
    counts = Counter(s.lower() for s in states.values())
    listed = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return f"{listed or 'none queued'}; {total - len(states)} of {total} task(s) ended"


def wait(jobs: Sequence[Job], *, say: ProgressFn, poll_s: float = POLL_S,
         progress_every_s: float = PROGRESS_EVERY_S) -> float:
    """Block until no task of ``jobs`` is queued or running; returns the seconds waited.

    Says a line when the counts of tasks per state change, and at least every ``progress_every_s``.

    Raises:
        ClusterError: squeue failed on every poll for about a minute (the controller is unreachable).
    """
    require("squeue")
    ids = [j.job_id for j in jobs]
    total = sum(len(j.tasks) for j in jobs)
    t0 = last_said = time.monotonic()
    last_text, failures = "", 0
    while True:
        states = queued(ids)
        if states is None:
            failures += 1
            if failures > _SQUEUE_FAILURES_ALLOWED:
                raise ClusterError(f"squeue failed {failures} times in a row for job(s) {', '.join(ids)}; the jobs "
                                   "may still run: wait again later with the same command and --job")
        else:
            failures = 0
            text = _counts_text(states, total)
            now = time.monotonic()
            if text != last_text or now - last_said >= progress_every_s:
                say(f"job {', '.join(ids)}: {text} ({now - t0:.0f} s)")
                last_text, last_said = text, now
            if not states:
                return now - t0
        time.sleep(poll_s)


def _slurm_state(job: Job, task: int) -> str | None:
    """SLURM's state of a task (TIMEOUT, OUT_OF_MEMORY, PREEMPTED, ...) while it still remembers it."""
    if shutil.which("scontrol") is None:
        return None
    label = f"{job.job_id}_{task}" if job.array else job.job_id
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", label], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"\bJobState=(\S+)", proc.stdout)
    return found.group(1) if proc.returncode == 0 and found else None


def failures(job: Job) -> list[TaskFailure]:
    """The tasks of an ended job that did not exit 0, each with why."""
    out = []
    for task in job.tasks:
        path = exit_path(job.logs, job.name, job.job_id, task)
        text = path.read_text().strip() if path.is_file() else None
        if text == "0":
            continue
        if text is None:
            state = _slurm_state(job, task)
            reason = ("no exit status: killed before its end (time limit, preemption, memory or node failure)"
                      + (f"; SLURM says {state}" if state else ""))
        else:
            reason = f"exit status {text}"
        out.append(TaskFailure(job, task, reason))
    return out
