"""The pages around the notebooks: the reports index, the bar that links every page back, page framing.

Pure text from what ``readback.published`` found in the report folders (``report.json``, the data copied under
``data/``, the published pages) and nothing else, so a report folder can be moved and still links.
Numbers are formatted by :mod:`benchlib.report.words.fmt`.
"""
from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...store.identity import settings_of
from ...store.layout import ReportLayout, reports_index, reports_page
from ..evidence.selection import column_median, config_key
from ..readback.published import PAIR_PAGES, StudyReport, published_shared
from ..tables.headline import flags, memory_above_baseline
from ..words import fmt

SHARED_PAGES = {"columns": "Columns explained", "measurement": "How benchlib measures"}
STYLE = ("body{font-family:system-ui,sans-serif;max-width:72em;margin:1.5em auto;padding:0 1em;line-height:1.45}"
         "table{border-collapse:collapse;margin:.5em 0}th,td{border-bottom:1px solid #ddd;padding:.25em .6em;"
         "text-align:left;vertical-align:top}td.num{text-align:right;font-variant-numeric:tabular-nums}"
         "section{border-top:1px solid #ccc;margin-top:2em}code{background:#f4f4f4;padding:0 .2em}"
         ".note{color:#555;font-size:.92em}.description{font-size:1.05em}"
         "a.anchor-link{visibility:hidden;text-decoration:none;margin-left:.3em}"
         "h1:hover a.anchor-link,h2:hover a.anchor-link,h3:hover a.anchor-link{visibility:visible}")
NAV_STYLE = ("nav.benchlib-nav{font-family:system-ui,sans-serif;font-size:14px;padding:.5em 1em;"
             "border-bottom:1px solid #ddd;background:#fafafa}nav.benchlib-nav a,nav.benchlib-nav .here"
             "{margin-right:1.2em}")


def rel(target: Path, from_dir: Path) -> str:
    """``target`` as a link from a page in ``from_dir`` (forward slashes, escaped for an attribute)."""
    return html.escape(Path(os.path.relpath(target, from_dir)).as_posix(), quote=True)


def link(target: Path, from_dir: Path, text: str) -> str:
    return f'<a href="{rel(target, from_dir)}">{html.escape(text)}</a>'


def nav_bar(page_dir: Path, reports_root: Path, study_root: Path | None = None, title: str = "") -> str:
    """Links from a page back to the index, its study's summary and the shared pages; ``title`` says where it is."""
    items = [f'<strong class="here">{html.escape(title)}</strong>'] if title else []
    items.append(link(reports_index(reports_root), page_dir, "\u2190 All reports"))
    if study_root is not None:
        summary = ReportLayout(study_root).analysis_notebook("summary").with_suffix(".html")
        items.append(link(summary, page_dir, f"{study_root.name}: summary"))
    items += [link(reports_page(reports_root, name), page_dir, text) for name, text in SHARED_PAGES.items()]
    return f'<style>{NAV_STYLE}</style><nav class="benchlib-nav">{"".join(items)}</nav>'


def page(title: str, body: str, nav: str = "") -> str:
    """A standalone page with benchlib's style."""
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{STYLE}</style></head>"
            f"<body>{nav}{body}</body></html>\n")


def _summary_line(rows: pd.DataFrame) -> str:
    if rows.empty or "status" not in rows:
        return ""
    status = ", ".join(f"{n} {s}" for s, n in rows["status"].value_counts().items())
    machines = ", ".join(sorted(map(str, rows["machine"].dropna().unique()))) if "machine" in rows else ""
    line = f"{len(rows)} configuration(s) ({status})" + (f" measured on {machines}" if machines else "")
    return f"<p>{html.escape(line)}.</p>"


def _settings(rows: pd.DataFrame) -> list[dict[str, Any]]:
    texts = rows["settings_json"].dropna().unique() if "settings_json" in rows else []
    return [value for text in texts if (value := settings_of(text))]


def _each(settings: list[dict[str, Any]], key: str) -> str:
    """The values ``key`` takes across the study's settings, as written in a params file (``0.05``, ``sgd``)."""
    values = sorted({json.dumps(s.get(key)) for s in settings if s.get(key) is not None})
    return ", ".join(v.strip('"') for v in values)


def settings_line(rows: pd.DataFrame) -> str:
    """The study's training settings in one line, from its rows: data, size, optimizer, lr, length, batches."""
    settings = _settings(rows)
    if not settings:
        return ""
    parts = [f"{_each(settings, 'dataset')} at {_each(settings, 'image_size')} px"]
    if subset := _each(settings, "train_subset"):
        parts[-1] += f" ({subset} training images)"
    if _each(settings, "pretrained") == "true":
        parts.append("from ImageNet weights" + (", head only" if _each(settings, "freeze_backbone") == "true" else ""))
    optimizer = f"{_each(settings, 'optimizer')} lr {_each(settings, 'lr')}"
    if _each(settings, "optimizer") == "sgd":
        optimizer += f" momentum {_each(settings, 'momentum')}"
    parts.append(f"{optimizer}, weight decay {_each(settings, 'weight_decay')}")
    steps = _each(settings, "train_steps")
    parts.append(f"{steps} timed step(s)" if steps else f"{_each(settings, 'epochs')} epoch(s)")
    parts[-1] += f" after {_each(settings, 'warmup_steps')} warmup step(s)"
    if "batch_size" in rows:
        parts.append("batch " + ", ".join(str(int(b)) for b in sorted(rows["batch_size"].dropna().unique())))
    return f"<p>Settings: {html.escape('; '.join(parts))}.</p>"


def _said(text: str, why: str) -> str:
    """A figure's text, or the en dash with why it is missing (a page never shows a bare dash)."""
    return f"{fmt.MISSING} ({why})" if text == fmt.MISSING else text


def _latency(r: pd.Series) -> str:
    return _said(fmt.percentile_text(r.get("latency_ms_p50"), r.get("latency_ms_p50_status")), "not measured")


HEADLINE: tuple[tuple[str, Callable[[pd.Series], str]], ...] = (
    ("training", lambda r: _said(fmt.samples_per_s_text(r.get("train_samples_per_s")),
                                 "not trained: an evaluation-only variant")),
    ("test accuracy", lambda r: _said(fmt.percent_text(r.get("test_accuracy")), "not evaluated")),
    ("latency, batch 1 (median)", _latency),
    ("peak memory above baseline", lambda r: _said(fmt.bytes_text(r.get("peak_memory")), "not read")))


def _per_configuration(ok: pd.DataFrame) -> pd.DataFrame:
    """One line per configuration, its figures as the summary's headline takes them over its runs: the throughput's
    geometric mean, the median of the rest, the flags of every run (never the luckiest seed alone)."""
    config = config_key(ok["run_id"].astype(str)) if "run_id" in ok else pd.Series(range(len(ok)), index=ok.index)
    lines = []
    for _, runs in ok.groupby(config, sort=False):
        line = runs.iloc[0].copy()
        speed = pd.to_numeric(runs["train_samples_per_s"], errors="coerce") if "train_samples_per_s" in runs else None
        speed = speed[speed > 0] if speed is not None else pd.Series(dtype=float)
        line["train_samples_per_s"] = float(np.exp(np.log(speed).mean())) if len(speed) else math.nan
        for column in ("test_accuracy", "latency_ms_p50", "peak_memory"):
            line[column] = column_median(runs, column)
        line["_flags"] = flags(runs)
        lines.append(line)
    return pd.DataFrame(lines)


def headline_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Per machine, hardware and model: the measured configuration with the highest training throughput, its
    figures over its runs as the summary's headline gives them."""
    if rows.empty or "status" not in rows:
        return pd.DataFrame()
    ok = rows[rows["status"] == "ok"].copy()
    if ok.empty:
        return ok
    ok["peak_memory"] = memory_above_baseline(ok)  # the summary's figure, so the two pages agree
    ok = _per_configuration(ok)
    speed = pd.to_numeric(ok.get("train_samples_per_s"), errors="coerce")
    ok["_speed"] = speed.fillna(-1.0) if speed is not None else -1.0
    keys = [k for k in ("machine", "hardware", "model") if k in ok]
    best = ok.sort_values("_speed", ascending=False).groupby(keys, sort=True, as_index=False).head(1)
    return best.sort_values(keys).drop(columns="_speed")


def headline_table(rows: pd.DataFrame) -> str:
    best = headline_rows(rows)
    if best.empty:
        return "<p><em>No configuration produced a measurement.</em></p>"
    ids = [c for c in ("machine", "hardware", "model", "batch_size", "variant") if c in best
           and (c in ("hardware", "model", "batch_size") or best[c].nunique() > 1)]
    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in ids)
    head += "".join(f"<th>{html.escape(label)}</th>" for label, _ in HEADLINE) + "<th>how sure</th>"
    body = []
    for _, r in best.iterrows():
        cells = "".join(f"<td>{html.escape(fmt.value_text(r.get(c)))}</td>" for c in ids)
        cells += "".join(f'<td class="num">{html.escape(show(r))}</td>' for _, show in HEADLINE)
        cells += f"<td>{html.escape(r['_flags'] or 'no flag')}</td>"
        body.append(f"<tr>{cells}</tr>")
    return (f'<table class="headline"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            '<p class="note">Per hardware and model, the configuration with the highest training throughput: '
            "each run's samples over its summed timed steps, geometric mean over its runs (the summary's figure); "
            "the rest median over its runs."
            " Peak memory above baseline: the CUDA allocator's peak on GPUs, resident memory (RSS) above the "
            "pre-model baseline on CPUs. How sure: the row's flags (interfered, machine drifted, noisy, above roof; "
            "see the summary's warnings). Every configuration, with spreads and intervals, is in the summary.</p>")


# ---------------------------------------------------------------- the index

def _page_label(p: Path) -> str:
    hardware, _, model = p.stem.partition("__")
    return f"{model} on {hardware}" if model else p.stem


def _pages_table(study: StudyReport, reports_root: Path) -> str:
    stems = study.pair_pages
    if not stems:
        return ""
    shown = [k for k in PAIR_PAGES if any(k in pages for pages in stems.values())]
    head = "<th>pair</th>" + "".join(f"<th>{k}</th>" for k in shown)
    body = []
    for stem in sorted(stems):
        cells = "".join(
            f"<td>{link(stems[stem][k], reports_root, f'{_page_label(stems[stem][k])}: {k}')}</td>"
            if k in stems[stem] else f"<td>{fmt.MISSING}</td>" for k in shown)
        body.append(f"<tr><td>{html.escape(_page_label(Path(stem)))}</td>{cells}</tr>")
    return f"<h3>Pages per pair</h3><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _data_list(study: StudyReport, reports_root: Path) -> str:
    items = []
    for copy in study.data:
        label = f" ({html.escape(copy.name)})" if study.several_copies else ""
        if copy.results_csv is not None:
            columns = link(reports_page(reports_root, "columns"), reports_root, "every column explained")
            items.append(f"<li>{link(copy.results_csv, reports_root, 'results.csv')}{label}: one row per "
                         f"configuration ({columns})</li>")
        if copy.run_rules is not None:
            items.append(f"<li>{link(copy.run_rules, reports_root, 'run_rules.json')}{label}: repeats, "
                         "seeds, warmup and every run that did not count</li>")
        for files, what in ((copy.manifests, "Environment manifests"), (copy.ceilings, "Measured ceilings")):
            if files:
                links = ", ".join(link(f, reports_root, f.stem) for f in files)
                items.append(f"<li>{what}{label}: {links}</li>")
    if study.traces:
        links = ", ".join(link(t, reports_root, f"{_page_label(Path(t.name.split('.')[0]))} trace")
                          for t in study.traces)
        items.append(f"<li>Profiler traces (gzipped Chrome trace JSON; open in ui.perfetto.dev or "
                     f"chrome://tracing): {links}</li>")
    return f"<h3>Data</h3><ul>{''.join(items)}</ul>" if items else ""


ANALYSIS_TITLES = {"sweep": "Sweep analysis", "tune": "Tuning analysis"}


def study_section(folder: Path, reports_root: Path) -> str | None:
    """One study's part of the index, or None when the folder has no published page yet."""
    study = StudyReport.read(folder)
    pages = _pages_table(study, reports_root)
    if study.summary is None and not pages:
        return None
    description = str(study.meta.get("description") or "")
    links = [f"<li>{link(study.summary, reports_root, 'Summary')}: every table and figure of the study</li>"
             if study.summary is not None else "<li>No summary yet.</li>"]
    links += [f"<li>{link(p, reports_root, ANALYSIS_TITLES[n])}</li>" for n, p in study.analyses.items()]
    fig_items = "".join(f"<li>{link(f, reports_root, f.name)}</li>" for f in study.figures)
    return (f'<section id="study-{html.escape(study.name)}"><h2>{html.escape(study.name)}</h2>'
            + (f'<p class="description">{html.escape(description)}</p>' if description else "")
            + _summary_line(study.rows) + settings_line(study.rows)
            + ("<h3>Headline numbers</h3>" + headline_table(study.rows) if not study.rows.empty else "")
            + f"<h3>Pages</h3><ul>{''.join(links)}</ul>" + pages + _data_list(study, reports_root)
            + (f"<details><summary>Figures ({len(study.figures)})</summary><ul>{fig_items}</ul></details>"
               if study.figures else "")
            + "</section>")


def index_page(reports_root: Path, study_folders: Iterable[Path], stamp: str) -> str:
    """``reports/index.html``: what benchlib is, then every study with its headline numbers, pages and data."""
    sections = [s for s in (study_section(f, reports_root) for f in study_folders) if s]
    shared = " · ".join(link(reports_page(reports_root, n), reports_root, SHARED_PAGES[n])
                        for n in published_shared(reports_root, SHARED_PAGES))
    body = ("<h1>benchlib reports</h1>"
            "<p>Each study trains and times CNNs on the devices it names, one row per configuration; its summary "
            "compares them, each pair has a page of its own measurements and, where profiled, where the time of a "
            f"training step went. Updated {html.escape(stamp)}.</p>"
            + (f"<p>{shared}</p>" if shared else "")
            + ("".join(sections) or "<p>No study has been reported yet: run <code>make report</code>.</p>"))
    return page("benchlib reports", body)


def shared_page(title: str, body_html: str, page_path: Path, reports_root: Path) -> str:
    """A page every study shares (columns, measurement), with the bar back to the index."""
    return page(title, body_html, nav_bar(page_path.parent, reports_root))


__all__: Sequence[str] = ("index_page", "nav_bar", "page", "headline_table", "settings_line", "shared_page")
