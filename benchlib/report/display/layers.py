"""Per-layer pages: a configuration's training step layer by layer against the roofline (the figure, the layers
that lose the most time, the same by kind of layer, how it was made), in the summary and the profile notebook;
each variant's difference split layer by layer (``findings.explain``, ``figures.explain``); and the
predictions made from the per-layer tables on other machines."""
from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import pandas as pd
from IPython.display import Markdown, display

from ..evidence.diff import table_family
from ..evidence.samples import SampleReader
from ..figures import layers as layer_figures
from ..figures.explain import explained_parts
from ..findings.explain import explanation_lines
from ..findings.work import layer_sentences
from ..readback.layers import configurations, median_run
from ..tables import layers as layer_tables
from ..tables.explain_rows import explain_sides, variant_sides
from ..words import fmt
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


def layers(reports: list[dict[str, Any]], figures_dir: str) -> None:
    """The summary's section, only where a per-layer table was saved (``benchlib layers``, ``layers: true``;
    ``reports`` as ``readback.layers.load_layer_reports`` reads them)."""
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


def _interval(r: Mapping[str, Any]) -> str:
    return f"{fmt.significant(r['predicted'])} [{fmt.significant(r['low'])}, {fmt.significant(r['high'])}]"


def predictions(df: pd.DataFrame, predicted: pd.DataFrame) -> None:
    """The summary's section where the study names machines to predict on (``predict_on``; ``predicted`` as
    ``readback.layers.load_predictions`` reads them): each configuration's step, throughput and batch-1 latency
    there with its 90% interval, where each rests most on assumption, and, where the target was measured too,
    the prediction against that measurement."""
    if predicted.empty:
        return
    show.heading("Predicted on other machines")
    display(Markdown(
        "Each configuration measured layer by layer here, predicted on the machines the study names in "
        "`predict_on` from their ceilings (measured there by `benchlib roofline`; nothing was trained there), "
        f"with 90% intervals. Method: {predicted['method'].iloc[0]}. How it is made, its limits and how far it "
        "has missed: docs/prediction.md."))
    cells = pd.DataFrame({
        "target": predicted["target"], "model": predicted["model"], "hardware here": predicted["hardware"],
        "batch": predicted["batch_size"], "variant": predicted["variant"], "figure": predicted["figure"],
        "unit": predicted["unit"],
        "measured here": [f"{fmt.significant(v)} (median of {int(n)} run(s))"
                          for v, n in zip(predicted["measured"], predicted["runs"])],
        "predicted there [90%]": [_interval(r) for r in predicted.to_dict("records")],
        "there / here [90%]": [fmt.ratio_text(r["predicted"] / r["measured"], r["low"] / r["measured"],
                                              r["high"] / r["measured"]) if r["measured"] else fmt.MISSING
                               for r in predicted.to_dict("records")]})
    display(show.table(cells, text=True))
    weakest = predicted.drop_duplicates(["target", "model", "hardware", "batch_size", "variant"])
    show.collapsed_table("Where each prediction rests most on assumption", weakest[
        ["target", "model", "hardware", "batch_size", "variant", "weakest"]], text=True)
    notes = predicted.dropna(subset=["notes"]).drop_duplicates(["target", "notes"])
    said = [f"- {r['target']}: {r['notes']}" for r in notes.to_dict("records") if str(r["notes"]).strip()]
    if said:
        display(Markdown("\n".join(said)))
    checked = layer_tables.against_measured(predicted, df)
    if checked.empty:
        return
    show.heading("Predicted against measured", level=3)
    inside = int(checked["inside"].sum())
    error = (checked["predicted_over_measured"] - 1).abs().mean()
    display(Markdown(f"Where a target was measured too (its rows in these results folders): {inside} of "
                     f"{len(checked)} measurements inside their predicted 90% interval; mean absolute error "
                     f"{fmt.percent_text(error)}. The measurement is the median of the target's runs."))
    display(show.table(pd.DataFrame({
        "target": checked["target"], "model": checked["model"], "batch": checked["batch_size"],
        "variant": checked["variant"], "figure": checked["figure"], "unit": checked["unit"],
        "predicted [90%]": [_interval(r) for r in checked.to_dict("records")],
        "measured there": [f"{fmt.significant(v)} (median of {int(n)} run(s))"
                           for v, n in zip(checked["measured_there"], checked["runs_there"])],
        "predicted / measured": [fmt.ratio_text(v) for v in checked["predicted_over_measured"]],
        "inside": ["yes" if v else "no" for v in checked["inside"]]}), text=True))


EXPLAIN_NOTE = (
        "Each part is B (the variant) less A (its baseline), negative where the variant takes less time, with its "
        "95% interval (runs resampled, then steps); the parts are timed layer by layer (on a CPU by the host clock "
        "in hooks, on a GPU by the profiler's device timeline) and checked against the plain steps' difference, "
        "never forced to it. A difference the verdict does not claim is not split, and a part whose interval "
        "holds 0 is named no cause.")


def variant_explanations(rows: pd.DataFrame, table: pd.DataFrame, figures_dir: str | None,
                         reader: SampleReader | None = None) -> None:
    """Each variant comparison of ``table`` (``variant_speedups``) explained where either side has per-layer
    tables (``layers: true``), with the rows that lack one named; nothing where no side has any."""
    shown = False
    family = table_family(table)  # the variant table's: an explanation stands under its verdicts
    for label, base, variant in variant_sides(rows, table):
        x = explain_sides(label, base, variant, reader=reader, family=family)
        found = [e for e in (x.training, x.inference) if e is not None]
        if not found and len(x.missing) == len(base) + len(variant):
            continue
        if not shown:
            show.heading("Why each variant differs, layer by layer")
            display(Markdown(EXPLAIN_NOTE))
            shown = True
        lines = [*x.missing, *(line for e in found for line in explanation_lines(e))]
        display(Markdown(f"**{label}**\n\n" + "\n".join(f"- {line}" for line in lines)))
        for e in found:
            if figures_dir:
                show.figure(explained_parts(e, label, figures_dir, f"explain_{e.metric}_{label}"))
