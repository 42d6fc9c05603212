"""Whether the files benchlib keeps across studies stay bounded under use, and what memory a study takes (issue 51).

    python benchmarks/kept_bounded.py grown [--mb 931]
    python benchmarks/kept_bounded.py studies [--studies 30] [--params params/smoke.yaml] [--retry-s 5] [--quiet]
    python benchmarks/kept_bounded.py memory [--params params/default.yaml]

``grown``: a ceilings file of the kind an older benchlib grew (its attempt lists the same three attempts
millions of times, written as that version wrote them), put in a fresh machine cache; then, each in a fresh
process, ``read_ceilings`` of it (wall time, peak RSS, the warnings) and ``ensure_ceilings`` of a new results
folder (which cuts the cache's file back): the file's size after, and each roof's highest figure before and after.

``studies``: that many studies of ``--params`` in a row, each in a fresh results folder, all sharing one machine
cache, with a CPU burner on every usable CPU (unless ``--quiet``) and the retry window of an interfered roof
shortened to ``--retry-s`` (``BENCHLIB_RETRY_INTERFERED_S``), so each study meets the busy case: its roofs
interfered and old. After each study: the cache's ceilings file size, the study's wall time, the driver's peak
RSS and the peak of the driver and its kernels together (sampled every 0.2 s).

``memory``: one study of ``--params`` in fresh folders and an empty machine cache (so the ceilings are measured
too), the same RSS figures. Nothing here asserts: it prints what it measured, with the host's load.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30


def _tree_rss(proc: psutil.Process) -> tuple[int, int]:
    """(the process's RSS, its own and every descendant's together)."""
    try:
        own = proc.memory_info().rss
        kids = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0
    total = own
    for kid in kids:
        try:
            total += kid.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return own, total


def run_watched(cmd: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``cmd`` to its end, sampling its RSS and its tree's every 0.2 s."""
    start = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        proc, peak_own, peak_tree = psutil.Process(child.pid), 0, 0
        while child.poll() is None:
            own, tree = _tree_rss(proc)
            peak_own, peak_tree = max(peak_own, own), max(peak_tree, tree)
            time.sleep(0.2)
    return {"rc": child.returncode, "wall_s": time.perf_counter() - start, "driver_peak_rss_bytes": peak_own,
            "tree_peak_rss_bytes": peak_tree}


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "BENCHLIB_CACHE": str(cache), **extra}
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    return env


def _ceilings_file(cache: Path) -> Path | None:
    return next(iter(sorted((cache / "ceilings").glob("*__cpu.json"))), None)


def write_grown(path: Path, base: dict[str, Any], target_bytes: int) -> int:
    """An older benchlib's grown file: ``base``'s figures, its attempt lists three attempts repeated until the
    file is ``target_bytes``; streamed to disk, never whole in memory. Returns the attempts it claims."""
    peaks = [{k: v * f for k, v in base["peak_flops_per_s"].items()} for f in (1.0, 0.8, 0.6)]
    bandwidths = [base["bandwidth_bytes_per_s"] * f for f in (1.0, 0.8, 0.6)]
    blocks = {"attempt_peaks_flops_per_s": ", ".join(json.dumps(p) for p in peaks),
              "attempt_bandwidths_bytes_per_s": ", ".join(json.dumps(b) for b in bandwidths),
              "attempt_interference_cpu_pct": "61.5, 48.0, null"}
    head = {k: v for k, v in base.items() if k not in ("history", "earlier", "attempts", *blocks)}
    copies = max(1, target_bytes // (sum(len(b) + 2 for b in blocks.values())))
    head["attempts"] = 3 * copies
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(head)[:-1])
        for key, block in blocks.items():
            out.write(f', "{key}": [')
            chunk = ", ".join([block] * 10_000)
            for done in range(0, copies, 10_000):
                n = min(10_000, copies - done)
                out.write(chunk if n == 10_000 else ", ".join([block] * n))
                if done + n < copies:
                    out.write(", ")
            out.write("]")
        out.write("}")
    return 3 * copies


READ = """
import json, resource, sys, time, warnings
from pathlib import Path
t0 = time.perf_counter()
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    from benchlib.roofline.measured import read_ceilings
    t1 = time.perf_counter()
    c = read_ceilings(Path(sys.argv[1]))
t2 = time.perf_counter()
print(json.dumps({"read_s": t2 - t1, "process_s": t2 - t0, "warnings": [str(w.message) for w in said],
                  "peak_flops_per_s": c.peak_flops_per_s, "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""
ENSURE = ("import sys; from benchlib.roofline.cache import ensure_ceilings; "
          "ensure_ceilings(sys.argv[1], 'cpu')")


def grown(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="kept-grown-"))
    seed_cache = work / "seed-cache"
    subprocess.run([sys.executable, "-c", ENSURE, str(work / "seed")], env=_env(seed_cache), check=True, cwd=REPO)
    seeded = _ceilings_file(seed_cache)
    assert seeded is not None
    base = json.loads(seeded.read_text())
    cache = work / "cache"
    path = cache / "ceilings" / seeded.name
    path.parent.mkdir(parents=True)
    t0 = time.perf_counter()
    claimed = write_grown(path, base, int(args.mb * 2**20))
    print(f"wrote {path.stat().st_size / 2**20:.0f} MB claiming {claimed} attempts in {time.perf_counter() - t0:.0f} s")
    out = subprocess.run([sys.executable, "-c", READ, str(path)], env=_env(cache), cwd=REPO, check=True,
                         capture_output=True, text=True)
    read = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"read_ceilings: {read['read_s']:.2f} s (process {read['process_s']:.2f} s with imports), peak RSS "
          f"{read['peak_rss_bytes'] / 2**20:.0f} MiB, {len(read['warnings'])} warning(s):")
    for line in read["warnings"]:
        print(f"  {line}")
    same = read["peak_flops_per_s"] == base["peak_flops_per_s"] and \
        read["bandwidth_bytes_per_s"] == base["bandwidth_bytes_per_s"]
    print(f"  roofs as written: {same} ({read['peak_flops_per_s']}, {read['bandwidth_bytes_per_s']:.3g} B/s)")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-W", "always", "-c", ENSURE, str(work / "study")], env=_env(cache), cwd=REPO,
                   check=True)
    after = json.loads(path.read_text())
    print(f"ensure_ceilings of a new folder: {time.perf_counter() - t0:.1f} s; the cache's file is now "
          f"{path.stat().st_size / 1e3:.1f} kB, {after['attempts']} attempt(s) counted, roofs kept: "
          f"{after['peak_flops_per_s'] == base['peak_flops_per_s']}")


def _burner() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(REPO / "tests" / "cpu_burner.py"), "--max-seconds", "14400"])


def studies(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="kept-studies-"))
    cache = work / "cache"
    env = _env(cache, BENCHLIB_RETRY_INTERFERED_S=str(args.retry_s))
    burner = None if args.quiet else _burner()
    print(f"{args.studies} studies of {args.params}, one machine cache ({cache}), "
          f"{'quiet host' if args.quiet else 'a CPU burner on every usable CPU'}, retry window {args.retry_s} s")
    print("study  rc  wall_s  cache_kB  attempts  driver_MiB  tree_MiB  load1")
    try:
        for i in range(1, args.studies + 1):
            folder = work / f"s{i:02d}"
            figures = run_watched([sys.executable, "-m", "benchlib", "study", args.params, "--results-root",
                                   str(folder / "results"), "--reports-root", str(folder / "reports")],
                                  env, folder.with_suffix(".log"))
            kept = _ceilings_file(cache)
            size_kb = kept.stat().st_size / 1e3 if kept else float("nan")
            attempts = json.loads(kept.read_text()).get("attempts") if kept else None
            print(f"{i:5d} {figures['rc']:3d} {figures['wall_s']:7.1f} {size_kb:9.1f} {attempts!s:>9} "
                  f"{figures['driver_peak_rss_bytes'] / 2**20:11.0f} {figures['tree_peak_rss_bytes'] / 2**20:9.0f} "
                  f"{os.getloadavg()[0]:6.2f}", flush=True)
    finally:
        if burner is not None:
            burner.terminate()
            burner.wait()


def memory(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="kept-memory-"))
    figures = run_watched([sys.executable, "-m", "benchlib", "study", args.params, "--results-root",
                           str(work / "results"), "--reports-root", str(work / "reports")],
                          _env(work / "cache"), work / "study.log")
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(f"{args.params}: rc {figures['rc']}, {figures['wall_s']:.0f} s; driver peak RSS "
          f"{figures['driver_peak_rss_bytes'] / 2**20:.0f} MiB; driver and kernels together "
          f"{figures['tree_peak_rss_bytes'] / 2**20:.0f} MiB at most (0.2 s samples); the largest single process "
          f"{largest / 2**20:.0f} MiB (getrusage); load {os.getloadavg()[0]:.2f}; log {work / 'study.log'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    g = sub.add_parser("grown")
    g.add_argument("--mb", type=float, default=931.0)
    s = sub.add_parser("studies")
    s.add_argument("--studies", type=int, default=30)
    s.add_argument("--params", default="params/smoke.yaml")
    s.add_argument("--retry-s", type=float, default=5.0)
    s.add_argument("--quiet", action="store_true", help="no CPU burner")
    m = sub.add_parser("memory")
    m.add_argument("--params", default="params/default.yaml")
    args = parser.parse_args()
    {"grown": grown, "studies": studies, "memory": memory}[args.what](args)


if __name__ == "__main__":
    main()
