"""The explained difference as a figure: each part's time in A and in B as horizontal bars, the parts that
move the step the most on top, each labelled with its difference (``tables.explain``)."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ...store.atomic import safe_name
from ..tables.explain import WHAT, Explanation, part_name
from ..words import fmt
from .style import OKABE_ITO, legend_outside, save

MAX_PARTS = 12  # bars a reader can take in; the rest of the parts are summed into one bar


def explained_parts(e: Explanation, title: str, figures_dir: str | Path, name: str) -> plt.Figure | None:
    """A's and B's time of each part, sorted by its share of B's difference from A (largest on top), saved as
    ``<name>.png``; None where nothing is explained."""
    if not e.explained or e.parts.empty:
        return None
    parts = e.parts.sort_values("share", ascending=False)
    shown, rest = parts.head(MAX_PARTS), parts.iloc[MAX_PARTS:]
    labels = [part_name(r.layer, r.phase) + (f" (only in {r.only_in})" if r.only_in else "")
              for r in shown.itertuples()]
    a_ms, b_ms = list(shown["a_s"] * 1e3), list(shown["b_s"] * 1e3)
    deltas = list(shown["delta_s"])
    if not rest.empty:
        labels.append(f"{len(rest)} other parts")
        a_ms.append(float(rest["a_s"].sum()) * 1e3)
        b_ms.append(float(rest["b_s"].sum()) * 1e3)
        deltas.append(float(rest["delta_s"].sum()))
    y = np.arange(len(labels))[::-1]
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(labels) + 1.4))
    ax.barh(y + 0.2, a_ms, height=0.4, color=OKABE_ITO[0], label="A")
    ax.barh(y - 0.2, b_ms, height=0.4, color=OKABE_ITO[1], label="B")
    for yi, a, b, d in zip(y, a_ms, b_ms, deltas):
        ax.annotate(f"{fmt.seconds_text(d)}", (max(a, b), yi), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=7)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("time per step (ms), median of the runs' medians")
    what = WHAT.get(e.metric, e.metric)
    spread = fmt.percent_interval_text(e.coverage_low, e.coverage_high)
    ax.set_title(f"{title}\n{what}: B less A {fmt.seconds_text(e.delta_s)}, parts sum to "
                 f"{fmt.percent_text(e.coverage, 4)}{spread} of it", fontsize=9)
    ax.margins(x=0.15)
    fig.tight_layout()
    legend_outside(ax)
    save(fig, figures_dir, safe_name(name))
    return fig
