"""What the benchmark scripts share, once: lockstep, the bare step, the interval of paired rounds.

Scripts import it as ``import kit`` (they run from ``benchmarks/``) and use benchlib's public names only
(tests/test_architecture.py holds them to it).

**Lockstep.** Run several processes in lockstep: one training step each, in turn, the others stopped while it
runs. Processes run one after another see the machine at different moments, and on a shared host its speed
moves by a quarter within seconds (machine_speed.py). Running them at the same time makes them share the cores.
Lockstep does neither: every process starts fresh and sets itself up, then each timed step runs alone,
between a step of each of the others, so a slow stretch of the host lands on every side alike, and the
comparison's unit stays the process.

A child takes part through a gate it calls before each step, outside its timer (:data:`GATE_CODE`; benchlib's
own runs call it from ``benchlib.before_step``): it writes one byte to say it is at the gate, then waits for
one byte back. The parent stops every child at its gate with SIGSTOP (its OpenMP threads, which spin for a
while after a parallel region, and its sampler threads with it, so nothing of a waiting process runs beside
another's step) and continues the next in turn. A child that exits leaves the rotation; the others go on.

Only the child process itself is stopped: processes it starts (DataLoader workers) run on, and a forked one
holds the gate's pipe open after the child exits. Lockstep is for synthetic data, as overhead.py uses.
"""
from __future__ import annotations

import inspect
import os
import select
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

GATE_ENV = "LOCKSTEP_GATE_FDS"

# Python for a child's gate: ``lockstep_turn()`` before each step. Without the variable (the process is not
# run by this module), the gate is open and costs nothing.
GATE_CODE = r"""
import os as _os
_GATE = _os.environ.get("LOCKSTEP_GATE_FDS")
_READY, _GO = (int(v) for v in _GATE.split(",")) if _GATE else (-1, -1)

def lockstep_turn():
    if _READY < 0:
        return
    _os.write(_READY, b"r")
    if not _os.read(_GO, 1):
        raise SystemExit("lockstep: the parent went away")
"""

# `benchlib ...` with the gate before each training step, outside its data wait and timer: benchlib's public
# per-step hook (`benchlib.before_step`), nothing of its private parts.
BENCHLIB_CODE = GATE_CODE + r"""
import sys
import benchlib
benchlib.before_step(lambda kind: lockstep_turn() if kind == "train" else None)
from benchlib.cli import main
sys.exit(main(sys.argv[1:]))
"""

# `benchlib layers` with the gate before each timed step and each batch-1 forward, outside their timers (a
# step's data wait is a part of its own there, so the gate comes before the wait starts).
LAYERS_CODE = GATE_CODE + r"""
import sys
import benchlib
benchlib.before_step(lambda kind: lockstep_turn())
from benchlib.cli import main
sys.exit(main(sys.argv[1:]))
"""

def bare_step(model: Any, opt: Any, loss_fn: Any, x: Any, y: Any) -> None:
    """The bare training step every harness-cost script sets benchlib's against: nothing of benchlib, the
    same work (zero_grad, forward, loss, backward, step), timed by its caller as benchlib times a CPU step."""
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()


BARE_STEP_CODE = inspect.getsource(bare_step)  # the same function for a child process's code


def interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Per-round ratios' geometric mean with its 95% interval, through the report's own statistics."""
    from benchlib.report.evidence.stats import geometric_mean

    return geometric_mean(ratios)


@dataclass
class _Child:
    name: str
    process: subprocess.Popen
    ready: int  # the parent reads "at the gate" here; end of file when the child has exited
    go: int  # the parent writes "your turn" here
    out: IO[bytes]
    err: IO[bytes]
    turns: int = 0
    done: bool = field(default=False)

    def at_gate(self, timeout_s: float) -> bool:
        """Wait for the child's next gate (True) or its exit (False)."""
        readable, _, _ = select.select([self.ready], [], [], timeout_s)
        if not readable:
            self.process.kill()
            raise TimeoutError(f"lockstep: {self.name} neither reached its gate nor exited in {timeout_s:.0f} s")
        if os.read(self.ready, 1):
            return True
        self.done = True
        return False

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)


@dataclass(frozen=True)
class Finished:
    name: str
    returncode: int
    stdout: str
    stderr: str
    turns: int  # turns given: the steps it ran in lockstep


def run(commands: Mapping[str, Sequence[str]], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
        timeout_s: float = 900.0) -> dict[str, Finished]:
    """Start every command, let each set itself up to its first gate, then give them one step each in turn
    (in the mapping's order) until all have exited."""
    children: list[_Child] = []
    try:
        for name, cmd in commands.items():
            ready_r, ready_w = os.pipe()
            go_r, go_w = os.pipe()
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            child_env = {**(env if env is not None else os.environ), GATE_ENV: f"{ready_w},{go_r}"}
            process = subprocess.Popen(list(cmd), stdout=out, stderr=err, pass_fds=(ready_w, go_r), env=child_env,
                                       cwd=cwd)
            os.close(ready_w)
            os.close(go_r)
            children.append(_Child(name, process, ready_r, go_w, out, err))
        for child in children:  # set-ups overlap: none is timed; each is stopped once at its first gate
            if child.at_gate(timeout_s):
                child.signal(signal.SIGSTOP)
        live = [c for c in children if not c.done]
        while live:
            for child in list(live):
                child.signal(signal.SIGCONT)
                os.write(child.go, b"g")
                child.turns += 1
                if not child.at_gate(timeout_s):
                    live.remove(child)
                elif len(live) > 1:
                    child.signal(signal.SIGSTOP)
        return {c.name: _finish(c, timeout_s) for c in children}
    finally:
        for child in children:
            if child.process.poll() is None:
                child.signal(signal.SIGCONT)
                child.process.kill()
                child.process.wait()
            for fd in (child.ready, child.go):
                try:
                    os.close(fd)
                except OSError:
                    pass


def _finish(child: _Child, timeout_s: float) -> Finished:
    returncode = child.process.wait(timeout=timeout_s)
    child.out.seek(0)
    child.err.seek(0)
    return Finished(child.name, returncode, child.out.read().decode(errors="replace"),
                    child.err.read().decode(errors="replace"), child.turns)
