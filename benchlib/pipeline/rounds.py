"""Rounds of a study's repeats: each round in fresh processes, and when ``repeats: auto`` has enough.

The unit of a comparison is the run (a fresh process), so round ``r`` of a study's repeats (seed
``seed + r`` of every configuration) runs in kernels of its own, all pairs of a round before the next
round: the sides of every comparison alternate round by round and slow drift lands on each. With
``repeats: auto`` the rounds go on until every configuration's figure and every ratio within a pair is
known within the target (``report.evidence.precision``), or the budget of runs or minutes is spent; what it reached
and why it stopped goes to ``run_rules.json`` and the summary.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..report.evidence.precision import Precision, study_precision
from ..report.readback.samples import SampleFiles
from ..spec.repeats import AutoRepeats
from ..store.layout import ResultsLayout
from ..store.rows import read_results


@dataclass
class RoundKeeper:
    """Counts the rounds of a study and decides, under ``repeats: auto``, whether another is worth running."""

    auto: AutoRepeats | None
    rounds: int  # the rounds the study may run (its repeats, or auto's max_runs)
    t0: float = field(default_factory=time.perf_counter)
    done: int = 0
    precision: Precision | None = None
    stopped: str = ""

    def another(self, results: ResultsLayout, study: str, machine: str) -> bool:
        """Whether to run round ``done`` (0-based); under auto, judged on the rows recorded so far."""
        if self.done >= self.rounds:
            if self.auto is not None:
                self.precision = measured_precision(results, study, machine)
                self.stopped = f"the budget of {self.rounds} runs was spent" + self._short()
            return False
        if self.auto is None or self.done < 2:
            return True
        self.precision = measured_precision(results, study, machine)
        elapsed_min = (time.perf_counter() - self.t0) / 60
        per_round = elapsed_min / self.done
        target = self.auto.target_change_pct
        if target is not None and math.isfinite(self.precision.can_tell_pct) and self.precision.can_tell_pct <= target:
            self.stopped = (f"target reached: every comparison can tell a {target:g}% change (the least sure, "
                            f"{self.precision.can_tell_worst}, {self.precision.can_tell_pct:.1f}%) after {self.done} "
                            "runs")
            return False
        if target is None and math.isfinite(self.precision.worst_pct) and self.precision.worst_pct <= \
                self.auto.until_pct:
            self.stopped = (f"every figure and ratio within ±{self.precision.worst_pct:.1f}% "
                            f"(target ±{self.auto.until_pct:g}%) after {self.done} runs")
            return False
        if elapsed_min + per_round > self.auto.max_minutes:
            self.stopped = (f"the budget of {self.auto.max_minutes:g} min would be spent by another round "
                            f"({elapsed_min:.1f} min so far, {per_round:.1f} min a round)" + self._short())
            return False
        return True

    def _short(self) -> str:
        """What the target still lacked when the budget stopped it."""
        p, target = self.precision, self.auto.target_change_pct if self.auto else None
        if target is None or p is None:
            return ""
        said = f"{p.can_tell_pct:.1f}%" if math.isfinite(p.can_tell_pct) else "unknown (fewer than 2 runs)"
        return f"; target not reached: the least sure comparison can tell {said}, not {target:g}%"

    def record(self) -> dict[str, Any]:
        """What ``run_rules.json`` keeps of the rounds."""
        out: dict[str, Any] = {"rounds_run": self.done, "each_round": "fresh processes (one kernel per pair)"}
        if self.auto is not None:
            p = self.precision
            out.update(mode="auto", until_pct=self.auto.until_pct, target_change_pct=self.auto.target_change_pct,
                       can_tell_pct=(None if p is None or not math.isfinite(p.can_tell_pct)
                                     else round(p.can_tell_pct, 2)),
                       max_runs=self.auto.max_runs,
                       max_minutes=self.auto.max_minutes, stopped=self.stopped,
                       precision_pct=None if p is None or not math.isfinite(p.worst_pct) else round(p.worst_pct, 2),
                       least_precise=None if p is None else p.worst,
                       precision_by_item={k: (round(v, 2) if math.isfinite(v) else None)
                                          for k, v in (p.per_item if p else {}).items()})
        return out


def measured_precision(results: ResultsLayout, study: str, machine: str) -> Precision:
    """The precision of this machine's rows of ``study`` in ``results``."""
    rows = read_results([results.root])
    mine = rows[(rows["study"] == study) & (rows["machine"] == machine)] if not rows.empty else rows
    return study_precision(mine, SampleFiles())
