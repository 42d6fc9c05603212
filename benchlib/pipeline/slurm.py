"""SLURM job arrays: one array task per hardware/model pair of a study.

Each task runs ``benchlib study PARAMS --pair I --no-summary``; its threads follow the CPUs SLURM gives
it (the task's CPU affinity, and OMP/MKL variables set from ``SLURM_CPUS_PER_TASK``). After the array,
``benchlib report results/<study>`` builds the summary from every task's rows.
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..spec.study import StudyConfig
from ..store.atomic import atomic_write_text

_TIME_RE = re.compile(r"^(\d+-)?\d{1,2}:\d{2}(:\d{2})?$")
_MEM_RE = re.compile(r"^\d+[KMGT]?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


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


def array_script(cfg: StudyConfig, params_path: Path, res: SlurmResources, *, workdir: Path,
                 python: str = "python") -> str:
    """The sbatch script text: an array of one task per pair, in the order ``benchlib study`` runs them."""
    res.check()
    pairs = cfg.pairs()
    header = [
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name=benchlib-{cfg.study}",
        f"#SBATCH --array=0-{len(pairs) - 1}",
        f"#SBATCH --time={res.time}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={res.cpus_per_task}",
        f"#SBATCH --mem={res.mem}",
        f"#SBATCH --output={workdir}/slurm/{cfg.study}-%A_%a.out",
    ]
    if res.gpus_per_task:
        header.append(f"#SBATCH --gpus-per-task={res.gpus_per_task}")
    if res.partition:
        header.append(f"#SBATCH --partition={res.partition}")
    if res.account:
        header.append(f"#SBATCH --account={res.account}")
    listing = "\n".join(f"#   task {i}: {h} / {m}" for i, (h, m) in enumerate(pairs))
    body = f"""
# benchlib study '{cfg.study}': {len(pairs)} pair(s), one array task each.
{listing}
# When every task has finished: {python} -m benchlib report results/{cfg.study}
set -euo pipefail
cd {shlex.quote(str(workdir))}
export OMP_NUM_THREADS="${{SLURM_CPUS_PER_TASK:-1}}"
export MKL_NUM_THREADS="${{SLURM_CPUS_PER_TASK:-1}}"
export BENCHLIB_MACHINE="${{BENCHLIB_MACHINE:-$(hostname)}}"
{shlex.quote(python)} -m benchlib study {shlex.quote(str(params_path))} --pair "${{SLURM_ARRAY_TASK_ID}}" --no-summary
"""
    return "\n".join(header) + "\n" + body


def write_script(cfg: StudyConfig, params_path: Path, res: SlurmResources, out_dir: Path, *, workdir: Path,
                 python: str = "python") -> Path:
    path = out_dir / f"{cfg.study}.sbatch"
    atomic_write_text(path, array_script(cfg, params_path, res, workdir=workdir, python=python))
    path.chmod(0o755)
    (workdir / "slurm").mkdir(parents=True, exist_ok=True)
    return path


def submit(script: Path) -> str:
    """Submit with sbatch; returns its output (the job id line)."""
    if shutil.which("sbatch") is None:
        raise ConfigError(
            f"--submit: sbatch is not on PATH (no SLURM here); the script is at {script}, submit it on the cluster"
        )
    proc = subprocess.run(["sbatch", str(script)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ConfigError(
            f"--submit: sbatch refused {script}: "
            f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
        )
    return proc.stdout.strip()
