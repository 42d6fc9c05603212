"""A real one-node SLURM cluster for tests: munged, slurmctld and slurmd started in a temporary folder.

Everything lives in that folder (config, munge key and socket, state, spool, logs, pid files) on ports of
its own, reached at 127.0.0.1 (no name service needed), so it touches no system SLURM. The daemons are
stopped by their pid files when the block ends, also when starting them failed.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


def missing_reason() -> str | None:
    """Why a cluster cannot be started here (None when it can)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root: munged runs as the munge user and slurmd as root"
    missing = [c for c in (*DAEMONS, *CLIENTS) if shutil.which(c) is None and not Path("/usr/sbin", c).exists()]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing; Debian: apt-get install slurm-wlm munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (the munge package creates it)"
    return None


@dataclass(frozen=True)
class Cluster:
    root: Path
    conf: Path
    node: str
    cpus: int
    started_in_s: float

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _real_memory_mb() -> int:
    """What slurmd sees (``slurmd -C``): a node without RealMemory refuses every ``--mem`` request."""
    out = subprocess.run([_exe("slurmd"), "-C"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"RealMemory=(\d+)", out)
    return int(found.group(1)) if found else 1024


def _config(root: Path, node: str, cpus: int, memory_mb: int) -> str:
    return f"""ClusterName=benchlib-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerParameters=sched_interval=2
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _start_munge(root: Path) -> None:
    """munged as the munge user, with a key of its own; it insists on a folder only its owner can write."""
    munge = pwd.getpwnam("munge")
    folder = root / "munge"
    folder.mkdir(mode=0o755)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    for path in (folder, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    subprocess.run([_exe("munged"), f"--socket={folder}/munge.socket", f"--key-file={key}",
                    f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
                    f"--seed-file={folder}/munged.seed"],
                   user=munge.pw_uid, group=munge.pw_gid, extra_groups=[], check=True, timeout=30,
                   capture_output=True)


def _wait_idle(env: dict[str, str], deadline: float) -> bool:
    while time.monotonic() < deadline:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env, timeout=30)
        if proc.returncode == 0 and proc.stdout.strip() == "idle":
            return True
        time.sleep(0.2)
    return False


def _stop(pid_file: Path) -> None:
    """End one daemon by its pid file: TERM, then KILL when it has not gone in time."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _cancel_jobs(env: dict[str, str]) -> None:
    """Cancel what tests left queued or running, so no task outlives the cluster (bounded: the controller
    may be the thing that failed)."""
    try:
        proc = subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True, text=True, env=env, timeout=20)
        ids = sorted(set(proc.stdout.split())) if proc.returncode == 0 else []
        if ids:
            subprocess.run(["scancel", *ids], env=env, timeout=20, capture_output=True)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and subprocess.run(
                    ["squeue", "-h"], capture_output=True, text=True, env=env, timeout=20).stdout.strip():
                time.sleep(0.5)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _logs(root: Path) -> str:
    parts = []
    for log in (root / "munge" / "munged.log", root / "log" / "slurmctld.log", root / "log" / "slurmd.log"):
        if log.is_file():
            parts.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
    return "\n".join(parts)


@contextmanager
def one_node_cluster() -> Iterator[Cluster]:
    """Start the cluster, wait until its node is idle, yield it; stop every daemon afterwards."""
    root = Path(tempfile.mkdtemp(prefix="benchlib-slurm-"))  # under /tmp: the munge user must reach it
    root.chmod(0o755)
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    node = socket.gethostname().split(".")[0]
    cpus = len(os.sched_getaffinity(0))
    conf = root / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    t0 = time.monotonic()
    try:
        conf.write_text(_config(root, node, cpus, _real_memory_mb()))
        _start_munge(root)
        subprocess.run([_exe("slurmctld"), "-f", str(conf)], check=True, timeout=60, env=env, capture_output=True)
        subprocess.run([_exe("slurmd"), "-f", str(conf)], check=True, timeout=60, env=env, capture_output=True)
        if not _wait_idle(env, time.monotonic() + START_TIMEOUT_S):
            raise RuntimeError(f"the one-node SLURM did not become idle in {START_TIMEOUT_S:.0f} s\n{_logs(root)}")
        yield Cluster(root, conf, node, cpus, time.monotonic() - t0)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{exc.cmd[0]} did not start: {exc.stderr}\n{_logs(root)}") from exc
    finally:
        try:
            _cancel_jobs(env)
        finally:
            for pid_file in (root / "slurmd.pid", root / "slurmctld.pid", root / "munge" / "munged.pid"):
                _stop(pid_file)
            shutil.rmtree(root, ignore_errors=True)
