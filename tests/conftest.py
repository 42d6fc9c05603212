"""Shared fixtures: tiny configurations that run in seconds on 2 CPU cores."""
from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import psutil
import pytest
import torch

from benchlib.env.threads import usable_cpu_ids
from benchlib.instruments.cpu import cpu_busy_total_s
from benchlib.instruments.interference import DEFAULT_THRESHOLD_PCT

os.environ.setdefault("BENCHLIB_MACHINE", "testmachine")
# What is measured of the machine (ceilings, the noise floor) is kept in a machine cache (store/machine_cache.py):
# the tests, and the processes they start, keep theirs in a folder of this session's, never the user's.
os.environ["BENCHLIB_CACHE"] = tempfile.mkdtemp(prefix="benchlib-test-cache-")

# Tuning is an extra (benchlib[tune]): where optuna is missing (the torch floor's environment, a core install)
# its tests skip with the reason, and the rest of the suite runs.
NEEDS_OPTUNA = pytest.mark.skipif(importlib.util.find_spec("optuna") is None,
                                  reason="needs the tune extra (optuna): pip install 'benchlib[tune]'")

TINY = dict(dataset="digits", image_size=32, train_subset=128, test_subset=64, train_steps=3, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=6, latency_budget_s=0, epochs=1)


# The machine's ceilings (a few seconds of matmul and copy benchmarks, more when noisy) are measured once per
# test session and device, then handed to every results folder a test records into in this process, as a
# study hands its ceilings to its pairs. Measuring them per folder, as the product does, is what these
# modules test, so they measure for real:
REAL_CEILINGS_MODULES = ("test_ceilings_under_load.py", "test_roofline.py")
_SESSION_CEILINGS: dict[str, object] = {}


@pytest.fixture(autouse=True)
def _ceilings_once_per_session(request, monkeypatch):
    if request.node.path.name in REAL_CEILINGS_MODULES:
        return
    from benchlib.roofline import cache

    def once(real):
        def measured(device, *args, **kwargs):
            if args or kwargs:  # a particular measurement (fewer dtypes, another threshold): not shared
                return real(device, *args, **kwargs)
            key = f"{real.__name__}:{device}"
            if key not in _SESSION_CEILINGS:
                _SESSION_CEILINGS[key] = real(device)
            return _SESSION_CEILINGS[key]
        return measured

    monkeypatch.setattr(cache, "measure_ceilings_robust", once(cache.measure_ceilings_robust))
    monkeypatch.setattr(cache, "measure_watched", once(cache.measure_watched))


def seed_ceilings(results_dir) -> None:
    """Save this session's CPU ceilings (measured once) into a results folder that a process a test starts
    will record into, as a study hands its ceilings to its pairs: a fresh `benchlib run` or study would
    otherwise spend seconds measuring them for real (the ceilings modules above test that)."""
    from benchlib.roofline import cache, ceilings

    key = "measure_ceilings_robust:cpu"
    if key not in _SESSION_CEILINGS:
        _SESSION_CEILINGS[key] = ceilings.measure_ceilings_robust("cpu")
    cache.save_ceilings(_SESSION_CEILINGS[key], results_dir)


# One pair: what the notebook and browser tests check of a study (pages, figures, profile, rules) needs one
# model at two batch sizes; a second pair doubled the study's time and showed nothing more.
TINY_STUDY = {"study": "tiny", "description": "a tiny pair, two batch sizes, profiled", "hardware": ["cpu"],
              "models": ["squeezenet1_1"], "batch_sizes": [8, 16], "dataset": "digits", "image_size": 32,
              "train_subset": 64, "test_subset": 32, "train_steps": 2, "warmup_steps": 1, "latency_repeats": 6,
              "latency_budget_s": 0, "infer_warmup_batches": 1, "profile": True, "calibrate": False,
              "ceilings_at_end": False}


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory):
    """The quickstart notebook as a new user runs it (fewer steps): a user's model measured, two variants
    judged, then the tiny study above through papermill and published. Run once per session: the notebook
    test checks the notebook and the study, the browser test opens the same published pages."""
    from pathlib import Path
    from types import SimpleNamespace

    import yaml

    from benchlib.pipeline import publish

    root = tmp_path_factory.mktemp("quickstart")  # a project as a user clones it: params/ and notebooks/
    repo = Path(__file__).resolve().parents[1]
    (root / "params").mkdir()
    (root / "notebooks").mkdir()
    (root / "params" / "tiny.yaml").write_text(yaml.safe_dump(TINY_STUDY))
    run = SimpleNamespace(notebook=root / "notebooks" / "quickstart.ipynb", mine=root / "results" / "mine",
                          results=root / "results", reports=root / "reports")
    for folder in (run.mine, run.results / TINY_STUDY["study"]):  # the ceilings modules test measuring them
        seed_ceilings(folder)
    # run from notebooks/, JupyterLab's working folder, with the paths relative as its defaults are: the
    # notebook works from the project's root and its outputs land in its git-ignored results/ and reports/
    publish.execute(repo / "notebooks" / "quickstart.ipynb", run.notebook,
                    {"steps": 3, "settings": {"latency_budget_s": 0}, "results_dir": "results/mine",
                     "study_params": "params/tiny.yaml", "results_root": "results", "reports_root": "reports"},
                    cwd=root / "notebooks", cell_timeout_s=600, progress=False)
    assert not (root / "notebooks" / "results").exists() and not (root / "notebooks" / "reports").exists()
    return run


@pytest.fixture
def tiny_settings():
    from benchlib.spec.settings import RunSettings

    return RunSettings(**TINY)


# `make test-fast` leaves out what is marked slow: whole studies, notebooks, SLURM, the browser, several
# processes, and the tests that take over about 7 s here (marked one by one), or that use a module fixture
# that does (below).
SLOW_MARKERS = ("notebook", "slurm", "browser")
SLOW_FIXTURES = {"test_diff.py": {"folders", "fresh"}, "test_quantize.py": {"trained_resnet18"},
                 "test_tuning.py": {"accuracy_study"}, "test_variant_runs.py": {"rows"},
                 "test_hostile_input.py": {"earlier"}}


# ---------------------------------------------------------------- a quiet host
# Some checks only hold on a quiet machine: a run not flagged as interfered, percentiles narrow enough to
# publish, layer times that add up to a step. Where other processes keep the CPUs busy, benchlib says so, and
# such a check skips with the load measured as the reason, never fails:
# - a test marked `quiet` is skipped when, just before it, other processes used over HOST_BUSY_PCT (benchlib's
#   own line for a row's interfered flag) of the usable CPUs for QUIET_PROBE_S;
# - a check inside `with quiet_check(...)` that fails is skipped where benchlib measured the host busy (in its own
#   words), or, for what benchlib does not watch, where the test's own window (`host_load`) saw other processes
#   use over half that line: a burst that spoiled a short timed window is spread over the whole window.
# On a quiet machine nothing is skipped. `make test-any-host` runs the fast suite beside a CPU burner.
HOST_BUSY_PCT = DEFAULT_THRESHOLD_PCT
QUIET_PROBE_S = 0.5


def _own_tree_cpu_s() -> float:
    """CPU seconds of this process, its threads and every process it started (alive, or exited and reaped):
    what a test does itself, its hogs and workers included, is not load from elsewhere."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # gone between the listing and the reading
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


class HostLoad:
    """Other processes' CPU over a window, as a share of the CPUs this process may use: the usable cores' busy
    time less this process tree's and less the time the hypervisor stole (reported apart), as benchlib's
    interference figure counts it, but measured here, apart from benchlib's telemetry."""

    def __init__(self) -> None:
        self.usable = usable_cpu_ids()
        self.seconds = 0.0
        self.other_pct = 0.0
        self.steal_pct = 0.0
        self._t0, self._cores0, self._own0 = time.monotonic(), psutil.cpu_times(percpu=True), _own_tree_cpu_s()

    def stop(self) -> HostLoad:
        cores, own = psutil.cpu_times(percpu=True), _own_tree_cpu_s()
        self.seconds = time.monotonic() - self._t0
        busy = total = steal = 0.0
        for i in self.usable:
            if i < len(cores) and i < len(self._cores0):
                (b0, t0), (b1, t1) = cpu_busy_total_s(self._cores0[i]), cpu_busy_total_s(cores[i])
                busy, total = busy + b1 - b0, total + t1 - t0
                steal += getattr(cores[i], "steal", 0.0) - getattr(self._cores0[i], "steal", 0.0)
        if total > 0:
            self.other_pct = max(0.0, 100.0 * (busy - steal - (own - self._own0)) / total)
            self.steal_pct = max(0.0, 100.0 * steal / total)
        return self

    def busy(self, threshold_pct: float = HOST_BUSY_PCT) -> str | None:
        """The load in words where it is over ``threshold_pct``; None on a quiet host."""
        parts = []
        if self.other_pct > threshold_pct:
            parts.append(f"other processes used {self.other_pct:.0f}% of the {len(self.usable)} usable CPUs")
        if self.steal_pct > threshold_pct:
            parts.append(f"the hypervisor stole {self.steal_pct:.0f}% of the CPU time")
        return f"{'; '.join(parts)} over {self.seconds:.1f} s (threshold {threshold_pct:g}%)" if parts else None


def _skip(reason: str) -> None:
    """Skip, the summary naming the test's own line (as a skip mark does), not this file's."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


@contextmanager
def host_load() -> Iterator[HostLoad]:
    """Other processes' load over a block, measured apart from benchlib (read it after the block)."""
    window = HostLoad()
    try:
        yield window
    finally:
        window.stop()


@contextmanager
def quiet_check(window: HostLoad | None = None, *, interfered: bool | None = None,
                said: str | None = None) -> Iterator[None]:
    """Checks that hold only on a quiet machine: one that fails is skipped where the host was busy, else fails.

    ``interfered`` and ``said`` are what benchlib measured (a row's ``interfered`` and ``interference``): where
    it flagged the host, the skip gives its words. With a ``window`` too, the window must have seen load from
    elsewhere as well: benchlib flagging a host the window found quiet is a false alarm, and fails. Without a
    flag from benchlib (what it does not watch), the window alone decides."""
    try:
        yield
    except AssertionError:
        seen = window.busy(HOST_BUSY_PCT / 2) if window is not None else None
        if interfered and (window is None or seen):
            also = f" (this test's own window: {seen})" if seen else ""
            _skip(f"host not quiet: benchlib measured that {said}{also}; this check needs a quiet machine")
        if interfered is None and seen:
            _skip(f"host busy during the test: {seen}; this check needs a quiet machine")
        raise


def what_benchlib_saw(rows: object) -> dict[str, object]:
    """``quiet_check``'s ``interfered`` and ``said`` from result rows (one as a dict, or a DataFrame): flagged
    where benchlib found other processes on the host (``interfered``) or its speed drifting under the run
    (``machine_drifted``), with the words it recorded."""
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else [rows]
    flags = [bool(r.get(flag)) for r in records for flag in ("interfered", "machine_drifted")
             if isinstance(r.get(flag), (bool, np.bool_))]  # None or NaN: not measured
    words = [r[text] for r in records for text in ("interference", "machine_drift") if isinstance(r.get(text), str)]
    return {"interfered": any(flags), "said": "; ".join(dict.fromkeys(words)) or None}


def pytest_runtest_setup(item):
    if item.get_closest_marker("quiet") is None:
        return
    probe = HostLoad()
    time.sleep(QUIET_PROBE_S)
    busy = probe.stop().busy()
    if busy:
        _skip(f"host busy before the test: {busy}; this test needs a quiet machine")


def pytest_collection_modifyitems(config, items):
    mps = getattr(torch.backends, "mps", None)
    present = {"gpu": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    reasons = {"gpu": "needs a CUDA GPU", "mps": "needs an Apple MPS device"}
    for item in items:
        slow_fixtures = SLOW_FIXTURES.get(item.path.name, set()) | {"quickstart_run"}
        if any(m in item.keywords for m in SLOW_MARKERS) or slow_fixtures & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for marker, here in present.items():
            if marker in item.keywords and not here:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))
