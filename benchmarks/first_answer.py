"""How long a new user waits for a first answer (issue 36), each figure from fresh processes, with the machine.

    python benchmarks/first_answer.py [--skip-study] [--quiet-load 0.5] [--wait-quiet 600] [--json out.json]

Four figures, each timed as a user meets it (wall clock of a fresh process, interpreter start and imports
included) and printed beside its target:

1. ``make report`` on a fresh clone with the environment built: ``benchlib study params/default.yaml`` into
   empty results and reports folders, with an empty machine cache (so the ceilings, and a noise floor where
   the study needs one, are measured): at most 3 minutes;
2. the same command again, every row complete: at most 30 s;
3. ``benchlib.benchmark(<a small nn.Module>, batch_sizes=[16, 32], image_size=32)`` in a fresh process, the
   machine's ceilings already measured (by 1): at most 20 s. The module: two 3x3 convolutions (3 -> 16, a max
   pool, 16 -> 32), batch norm, ReLUs, global pooling and a linear head, 5.5k parameters, as ``SMALL_MODULE``;
4. refusals that need no torch: an unknown model on the command line and in a study file, a params file that
   is missing: under 2 s each, one line, exit 2, with a "did you mean" for the near name.

Targets are for a quiet machine. Every figure is printed with the load average before and after it, and
``--wait-quiet S`` waits up to S seconds before each for the 1-minute load to fall under ``--quiet-load`` (on
a shared host other people's work is the largest term). Nothing here asserts: it prints what it measured.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"fresh_study": 180.0, "complete_study": 30.0, "benchmark": 20.0, "refusal": 2.0}

SMALL_MODULE = """
import sys, time
t0 = time.perf_counter()
from torch import nn
import benchlib
net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                    nn.Linear(32, 10))
rows = benchlib.benchmark(net, name="small", batch_sizes=[16, 32], image_size=32, results_dir=sys.argv[1])
assert len(rows) == 2 and (rows["status"] == "ok").all(), rows[["run_id", "status", "error"]]
print(f"in-process {time.perf_counter() - t0:.1f} s", file=sys.stderr)
"""


def machine() -> dict[str, object]:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {"host": socket.gethostname(), "cpu": model, "usable_cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "torch": torch.__version__, "date_utc":
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def load() -> float:
    return os.getloadavg()[0]


def wait_quiet(threshold: float, seconds: float) -> float:
    """Wait up to ``seconds`` for the 1-minute load to fall under ``threshold``; the load when done waiting."""
    deadline = time.monotonic() + seconds
    while load() >= threshold and time.monotonic() < deadline:
        time.sleep(10)
    return load()


def timed(cmd: list[str], env: dict[str, str], cwd: Path = REPO) -> dict[str, Any]:
    before = load()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "exit": done.returncode, "load_before": round(before, 2),
            "load_after": round(load(), 2), "stderr_tail": done.stderr.strip().splitlines()[-12:]}


def say(what: str, got: dict[str, Any], target: float) -> None:
    wall = float(got["wall_s"])
    verdict = "within" if wall <= target else "OVER"
    print(f"{what}: {wall:.1f} s (target {target:g} s: {verdict}; exit {got['exit']}; load {got['load_before']} "
          f"-> {got['load_after']})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-study", action="store_true", help="leave out figures 1 and 2 (minutes)")
    ap.add_argument("--quiet-load", type=float, default=0.5, help="the 1-minute load counted as quiet")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S", help="wait up to S s for quiet before each")
    ap.add_argument("--work", type=Path, help="keep the folders here (default: a temporary folder)")
    ap.add_argument("--json", type=Path, help="write every figure as JSON here")
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="benchlib-first-answer-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "machine-cache"
    env = {**os.environ, "BENCHLIB_CACHE": str(cache), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    benchlib = [sys.executable, "-m", "benchlib"]
    facts = machine()
    print(f"machine: {facts['host']}, {facts['cpu']}, {facts['usable_cpus']} usable CPUs; python "
          f"{facts['python']}, torch {facts['torch']}; {facts['date_utc']}; work folder {work}", flush=True)
    figures: dict[str, Any] = {"machine": facts}

    study = [*benchlib, "study", "params/default.yaml", "--results-root", str(work / "results"), "--reports-root",
             str(work / "reports")]
    if not args.skip_study:
        wait_quiet(args.quiet_load, args.wait_quiet)
        figures["fresh_study"] = got = timed(study, env)
        say("1. make report, fresh results, reports and machine cache", got, TARGETS_S["fresh_study"])
        wait_quiet(args.quiet_load, args.wait_quiet)
        figures["complete_study"] = got = timed(study, env)
        say("2. make report again, every row complete", got, TARGETS_S["complete_study"])
    else:  # the ceilings measured once, as figure 1 would have
        subprocess.run([sys.executable, "-c", "import sys; from benchlib.roofline.cache import ensure_ceilings; "
                        "ensure_ceilings(sys.argv[1], 'cpu')", str(work / "seed")], env=env, check=True)

    script = work / "small_module.py"
    script.write_text(SMALL_MODULE)
    wait_quiet(args.quiet_load, args.wait_quiet)
    figures["benchmark"] = got = timed([sys.executable, str(script), str(work / "adhoc")], env)
    say("3. benchlib.benchmark(small module, batch_sizes=[16, 32], image_size=32), fresh process", got,
        TARGETS_S["benchmark"])

    bad = work / "typo.yaml"
    bad.write_text("study: typo\nhardware: [cpu]\nmodels: [resnet81]\nbatch_sizes: [8]\n")
    refusals = {"run --model resnet81": ["run", "--model", "resnet81", "--data", "synthetic"],
                "study with models: [resnet81]": ["study", str(bad)],
                "study nope.yaml": ["study", str(work / "nope.yaml")]}
    for name, argv in refusals.items():
        got = timed([*benchlib, *argv], env)
        lines = got["stderr_tail"]
        got["one_line"] = len(lines) == 1
        got["did_you_mean"] = any("did you mean 'resnet18'" in line for line in lines)
        figures[f"refusal: {name}"] = got
        say(f"4. refusal, {name}", got, TARGETS_S["refusal"])
        print(f"   {' | '.join(lines)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
