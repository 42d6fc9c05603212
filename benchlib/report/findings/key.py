"""The key findings of a study: the claims in order, the caveats before them, rendered as Markdown with the
note on how the ratios were made.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..evidence import stats
from ..evidence.samples import SampleReader
from ..readback.samples import SampleFiles
from .caveats import failures, measured_rows, not_run, warnings
from .claims import batch_sizes, devices, models, unsupported
from .precisions import precision_sentences
from .variants import scaling, variants
from .work import layer_sentences, roofline_sentences, time_sentences

RANKED = (devices, models, batch_sizes)  # sections whose comparisons no table corrects: each a family of its own


@dataclass
class Findings:
    """Warnings first, then one titled list of sentences per question the data answers."""

    warnings: list[str] = field(default_factory=list)
    sections: list[tuple[str, list[str]]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    def section(self, title: str) -> list[str]:
        """The sentences of ``title`` (empty when the section was left out)."""
        return next((lines for t, lines in self.sections if t == title), [])

    def add(self, title: str, lines: list[str]) -> None:
        if lines:
            self.sections.append((title, lines))


def key_findings(df: pd.DataFrame, profiles: Sequence[Mapping[str, Any]] = (),
                 reader: SampleReader | None = None, layers: Sequence[Mapping[str, Any]] = ()) -> Findings:
    """Every finding the rows (and saved profiles and per-layer tables) support; sections without data are
    left out."""
    out = Findings(warnings=warnings(df) if not df.empty else [])
    if df.empty:
        out.not_run = ["no configuration was measured"]
        return out
    reader = reader or SampleFiles()
    good = measured_rows(df)
    for title, claims in (("Devices", devices), ("Models", models), ("Optimization variants", variants),
                          ("bf16 against fp16", precision_sentences), ("Batch size", batch_sizes),
                          ("Scaling", scaling)):
        lines = claims(df, reader)
        if claims in RANKED and len(lines) > 1:  # a section's comparisons, corrected together: counted, then made
            lines = claims(df, reader, family=len(lines))
        out.add(title, _supported(lines, out))
    out.add("Roofline", roofline_sentences(good))
    out.add("Where the time goes", time_sentences(profiles, bool(good["machine"].nunique() > 1))
            + layer_sentences(layers))
    out.add("Failed and skipped", failures(df))
    out.not_run = not_run(df, profiles)
    return out


def _supported(lines: list[str], out: Findings) -> list[str]:
    """The sentences whose evidence supports their words (``claims.unsupported``); one that does not is
    withheld, and a warning says so (a defect in benchlib's wording, never a finding)."""
    kept = []
    for line in lines:
        why = unsupported(line)
        if why is None:
            kept.append(line)
        else:
            out.warnings.append(f"a finding was withheld because {why}: {line}")
    return kept


INTERVAL_NOTE = ("Ratios: median against median with the 95% interval in brackets and, in parentheses, the evidence "
                 "the verdict rests on: runs (two or more fresh processes a side, compared run by run), floor (one "
                 "run a side, claimed only beyond this machine's measured run-to-run noise), steps (one process's "
                 f"steps). {stats.VERDICT_RULE}.")


def as_markdown(found: Findings) -> str:
    """The findings as a Markdown block: warnings in bold first, then the sections, then what was not run."""
    parts = ["## Key findings"]
    parts += [f"> **Warning:** {w}" for w in found.warnings]
    for title, lines in found.sections:
        parts.append(f"**{title}**\n\n" + "\n".join(f"- {line}" for line in lines))
    if any(title in ("Devices", "Models", "Optimization variants", "Batch size", "Scaling")
           for title, _ in found.sections):
        parts.append(f"*{INTERVAL_NOTE}*")
    if found.not_run:
        parts.append(f"*Not in this study: {', '.join(found.not_run)}.*")
    return "\n\n".join(parts)
