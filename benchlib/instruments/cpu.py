"""CPU figures for telemetry: system and per-core utilization, this process's CPU, RSS and threads.

On Linux they come from two ``pread`` calls per sample on /proc files kept open; elsewhere from psutil.
The pure parsers and rate helpers are separate so they can be tested on text.
"""
from __future__ import annotations

import math
import os
import time
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

CPU_SENSOR_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "soc_thermal")
_PACKAGE_LABELS = ("package", "tctl", "tdie", "cpu")

# ---------------------------------------------------------------- pure helpers

def cpu_busy_total_s(times: Any) -> tuple[float, float]:
    """(busy, total) time of one ``cpu_times`` entry (psutil's or ``CpuTimes``), counted the way psutil does.

    Idle and iowait are idle; guest time is already inside user time on Linux, so it is not added twice.
    """
    total = sum(times)
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


def cpu_util_pct(prev: Any, cur: Any) -> float | None:
    """Utilization in percent (0-100) of one CPU between two ``cpu_times`` readings; None without elapsed time.

    Computed from our own readings rather than ``psutil.cpu_percent`` because that keeps one module-wide
    previous reading, which any other caller in the process would silently move.
    """
    busy0, total0 = cpu_busy_total_s(prev)
    busy1, total1 = cpu_busy_total_s(cur)
    d_total = total1 - total0
    if d_total <= 0:
        return None
    return min(100.0, max(0.0, 100.0 * (busy1 - busy0) / d_total))


CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")


def parse_proc_stat(text: str) -> dict[int, CpuTimes] | None:
    """Per-core times (clock ticks) from the text of /proc/stat; None if it ends inside the cpu lines."""
    cores: dict[int, CpuTimes] = {}
    for line in text.split("\n")[:-1]:  # complete lines only
        head, _, rest = line.partition(" ")
        if not head.startswith("cpu"):
            return cores
        if head != "cpu":
            values = [int(v) for v in rest.split()][:10]
            cores[int(head[3:])] = CpuTimes(*values, *[0] * (10 - len(values)))
    return None


def parse_proc_pid_stat(text: str) -> tuple[int, int, int]:
    """(user + system clock ticks, threads, resident pages) from the text of /proc/<pid>/stat."""
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[11]) + int(fields[12]), int(fields[17]), int(fields[21])


def reaped_children_ticks(text: str) -> int:
    """User + system clock ticks of the children this process has waited for (cutime + cstime)."""
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[13]) + int(fields[14])


def minor_faults() -> int | None:
    """Minor page faults this process has taken so far, None where the OS does not count them.

    Each is a page mapped fresh and zeroed by the kernel on first touch (a few microseconds on a VM). A
    training step whose allocator hands its large buffers back to the OS and maps them again takes thousands
    a step, and how many depends on the process's allocation history: two fresh processes of identical
    work can differ by tens of megabytes faulted a step, and by several percent of step time.
    """
    try:
        import resource
    except ImportError:  # Windows
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def cpu_temp_c(sensors: Mapping[str, Sequence[Any]]) -> float | None:
    """Hottest CPU reading among known CPU sensor chips and package-like labels; None if there is none."""
    readings: list[float] = []
    for chip, entries in sensors.items():
        cpu_chip = chip.lower() in CPU_SENSOR_CHIPS
        for entry in entries:
            label = (getattr(entry, "label", "") or "").lower()
            if cpu_chip or label.startswith(_PACKAGE_LABELS):
                value = getattr(entry, "current", None)
                if value is not None and math.isfinite(value):
                    readings.append(float(value))
    return max(readings) if readings else None


# ---------------------------------------------------------------- sampler

class ProcfsCpu:
    """Linux: CPU figures from two ``pread`` calls per sample on /proc files kept open.

    A sampling thread gives the GIL away around every system call, and on a loaded machine each
    hand-off can keep the measured thread waiting for a scheduler slice; psutil spends about a dozen
    system calls on these figures, this two (a sample took ~0.07 ms instead of ~0.23 ms on a 2-core VM).
    """

    def __init__(self) -> None:
        self._stat_fd = os.open("/proc/stat", os.O_RDONLY)
        self._self_fd = os.open("/proc/self/stat", os.O_RDONLY)
        self._size = 256 * (os.cpu_count() or 1) + 4096
        self._clk_tck = os.sysconf("SC_CLK_TCK")
        self._page_bytes = os.sysconf("SC_PAGE_SIZE")
        self._children: list[int] = []  # live children whose CPU is this process's own
        self._prev = self._read()

    def set_children(self, pids: list[int]) -> None:
        """The process's children (DataLoader workers) whose CPU counts as this process's own.

        Their ticks are added live; once reaped they are in this process's own cutime/cstime, so the sum
        stays continuous. A child found late brings its CPU since birth into the window it was found in:
        per-sample rates then lag, but means over a phase are right.
        """
        self._children = list(pids)

    def _read(self) -> tuple[float, dict[int, CpuTimes], int, int, int]:
        t = time.monotonic()
        while (cores := parse_proc_stat(os.pread(self._stat_fd, self._size, 0).decode("ascii", "replace"))) is None:
            self._size *= 2
        text = os.pread(self._self_fd, 4096, 0).decode("utf-8", "replace")
        ticks, threads, rss_pages = parse_proc_pid_stat(text)
        ticks += reaped_children_ticks(text) + sum(_child_ticks(pid) or 0 for pid in self._children)
        return t, cores, ticks, threads, rss_pages

    def sample(self, rated: bool) -> dict[str, Any]:
        (t0, cores0, ticks0, _, _), now = self._prev, self._read()
        self._prev = now
        t1, cores1, ticks1, threads, rss_pages = now
        per_core = {i: cpu_util_pct(cores0[i], c) if rated and i in cores0 else None for i, c in cores1.items()}
        proc = 100.0 * (ticks1 - ticks0) / self._clk_tck / (t1 - t0) if rated and t1 > t0 else None
        return {"proc_cpu_util_pct": proc, "rss_bytes": rss_pages * self._page_bytes, "threads": threads,
                "steal_pct": steal_pct(cores0, cores1) if rated else None, **_per_core_columns(per_core)}

    def close(self) -> None:
        os.close(self._stat_fd)
        os.close(self._self_fd)


def _child_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return parse_proc_pid_stat(fh.read())[0]
    except (OSError, ValueError, IndexError):
        return None


def steal_pct(before: Mapping[int, CpuTimes], after: Mapping[int, CpuTimes]) -> float | None:
    """Share of all cores' time the hypervisor gave to other virtual machines between two readings (0-100).

    Steal is the interference no process list shows: on a shared cloud host it slows every figure.
    """
    steal = total = 0.0
    for i, cur in after.items():
        prev = before.get(i)
        if prev is None:
            continue
        steal += cur.steal - prev.steal
        total += sum(cur) - sum(prev) - (cur.guest + cur.guest_nice - prev.guest - prev.guest_nice)
    return 100.0 * steal / total if total > 0 else None


class PsutilCpu:
    """Elsewhere (no /proc): the same figures from psutil."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._proc.cpu_percent()  # primes this Process object's counter; the first call returns 0.0
        self._prev = psutil.cpu_times(percpu=True)

    def sample(self, rated: bool) -> dict[str, Any]:
        times = psutil.cpu_times(percpu=True)
        per_core = {i: cpu_util_pct(a, b) if rated else None for i, (a, b) in enumerate(zip(self._prev, times))}
        self._prev = times
        with self._proc.oneshot():
            proc = self._proc.cpu_percent()
            row = {"proc_cpu_util_pct": proc if rated else None, "rss_bytes": int(self._proc.memory_info().rss),
                   "threads": int(self._proc.num_threads()), "steal_pct": None}
        return {**row, **_per_core_columns(per_core)}

    def set_children(self, pids: list[int]) -> None:
        """Children are not followed without /proc: their CPU counts as other processes'."""

    def close(self) -> None:
        pass


def _per_core_columns(per_core: Mapping[int, float | None]) -> dict[str, Any]:
    """System utilization (mean over cores, as psutil reports it) and one column per core."""
    valid = [p for p in per_core.values() if p is not None]
    return {"cpu_util_pct": sum(valid) / len(valid) if valid else None,
            **{f"cpu{i}_util_pct": p for i, p in per_core.items()}}


def open_cpu_source() -> ProcfsCpu | PsutilCpu:
    try:
        return ProcfsCpu()
    except (OSError, ValueError, IndexError):
        return PsutilCpu()



CpuSource = ProcfsCpu | PsutilCpu
