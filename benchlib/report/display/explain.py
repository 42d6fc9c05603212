"""Why each variant is faster, in the summary: under the variant table, each comparison whose rows have
per-layer tables split layer by layer, in words and as a figure (``findings.explain``, ``figures.explain``)."""
from __future__ import annotations

import pandas as pd
from IPython.display import Markdown, display

from ..evidence.diff import table_family
from ..figures.explain import explained_parts
from ..findings.explain import explanation_lines
from ..tables.explain_rows import explain_sides, variant_sides
from . import show

NOTE = ("Each part is B (the variant) less A (its baseline), negative where the variant takes less time, with its "
        "95% interval (runs resampled, then steps); the parts are timed layer by layer (on a CPU by the host clock "
        "in hooks, on a GPU by the profiler's device timeline) and checked against the plain steps' difference, "
        "never forced to it. A difference the verdict does not claim is not split, and a part whose interval "
        "holds 0 is named no cause.")


def variant_explanations(rows: pd.DataFrame, table: pd.DataFrame, figures_dir: str | None) -> None:
    """Each variant comparison of ``table`` (``variant_speedups``) explained where either side has per-layer
    tables (``layers: true``), with the rows that lack one named; nothing where no side has any."""
    shown = False
    family = table_family(table)  # the variant table's: an explanation stands under its verdicts
    for label, base, variant in variant_sides(rows, table):
        x = explain_sides(label, base, variant, family=family)
        found = [e for e in (x.training, x.inference) if e is not None]
        if not found and len(x.missing) == len(base) + len(variant):
            continue
        if not shown:
            show.heading("Why each variant differs, layer by layer")
            display(Markdown(NOTE))
            shown = True
        lines = [*x.missing, *(line for e in found for line in explanation_lines(e))]
        display(Markdown(f"**{label}**\n\n" + "\n".join(f"- {line}" for line in lines)))
        for e in found:
            if figures_dir:
                show.figure(explained_parts(e, label, figures_dir, f"explain_{e.metric}_{label}"))
