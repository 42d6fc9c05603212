"""Per-layer pages: a configuration's training step layer by layer against the roofline (the figure, the layers
that lose the most time, the same by kind of layer, how it was made), in the summary and the profile notebook."""
from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from IPython.display import Markdown, display

from ..figures import layers as layer_figures
from ..findings.work import layer_sentences
from ..readback.layers import configurations, load_layer_reports, median_run
from ..tables import layers as layer_tables
from . import show

TOP_LAYERS = 12
ABOUT = ("Each layer of a training step (forward, backward, and the optimizer's step as one row) against this "
         "machine's measured roof: its time from `torch.profiler` (a range per layer, the backward matched by "
         "autograd's sequence numbers, no synchronize per layer), its FLOPs and bytes counted per operator, and the "
         "least time its roof allows. What no layer holds (the loss, residual adds, data) is a row of its own.")


def layer_page(report: Mapping[str, Any], figures_dir: str) -> None:
    """One per-layer report (``LayerReport.to_json()`` or as ``readback.layers`` loads it)."""
    r = dict(report)
    if "table" not in r:
        r["table"] = pd.DataFrame(r.get("layers", []))
    show.figure(layer_figures.layer_roofline(r, figures_dir))
    display(Markdown(f"The {TOP_LAYERS} layers of {r.get('model')} on {r.get('device')} (bs{r.get('batch_size')}) "
                     "that lose the most time against their roof (`lost_s`: measured less the roof's time; "
                     f"medians over {r.get('steps')} profiled steps):"))
    display(show.table(layer_tables.lost_time(r["table"]).head(TOP_LAYERS)))
    show.collapsed_table("The same by kind of layer and phase", layer_tables.by_kind(r["table"]))
    show.collapsed_table("Every layer", r["table"])
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in r.get("notes", []))
    display(show.collapsible("How this table was made", f"<ul>{notes}</ul>"))


def layers(results_dirs: Iterable[str], figures_dir: str) -> None:
    """The summary's section, only where a per-layer table was saved (``benchlib layers``, ``layers: true``)."""
    reports = load_layer_reports(results_dirs)
    if not reports:
        return
    show.heading("Layer by layer")
    display(Markdown(ABOUT))
    for line in layer_sentences(reports, groups=3):
        display(Markdown(line))
    for runs in configurations(reports):  # a configuration's repeats: its median run's page stands for them
        r = median_run(runs)
        if len(runs) > 1:
            title = f"{r.get('model')} on {r.get('device')} (bs{r.get('batch_size')}, {r.get('variant')})"
            display(Markdown(f"**{title}**: the run with the median measured step of {len(runs)} "
                             f"({r.get('run_id')}); every run's table is in the results folder's `layers/`."))
        layer_page(r, figures_dir)
