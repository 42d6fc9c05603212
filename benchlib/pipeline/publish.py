"""Executing notebooks with papermill and publishing them as HTML, plus the reports index page."""
from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
import papermill
from nbconvert import HTMLExporter

from ..errors import ConfigError
from ..store.atomic import atomic_write_text
from ..store.layout import ReportLayout, reports_index

KERNEL_NAME = "python3"


def notebooks_dir() -> Path:
    """The repository's ``notebooks/`` folder (next to the package in a checkout)."""
    here = Path(__file__).resolve().parents[2] / "notebooks"
    return here if here.is_dir() else Path.cwd() / "notebooks"


def check_parameters(notebook: Path, params: Mapping[str, Any]) -> None:
    """Refuse parameters the notebook does not declare (papermill itself only logs them)."""
    declared = papermill.inspect_notebook(str(notebook))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigError(f"{notebook}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(declared)}")


def execute(notebook: Path, output: Path, params: Mapping[str, Any], *, cwd: Path,
            cell_timeout_s: int | None, progress: bool = True) -> None:
    """Run ``notebook`` into ``output`` with ``params``; raises PapermillExecutionError on a failing cell.

    The executed notebook is written even when a cell fails, with the failing cell marked.
    """
    check_parameters(notebook, params)
    output.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(notebook), str(output), parameters=dict(params), kernel_name=KERNEL_NAME, cwd=str(cwd),
        execution_timeout=cell_timeout_s, progress_bar=progress, log_output=False, request_save_on_cell_execute=True,
    )


def render_html(ipynb: Path) -> Path:
    """Render an executed notebook to HTML without code cells (``nbconvert --no-input``)."""
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(str(ipynb), as_version=4))
    out = ipynb.with_suffix(".html")
    atomic_write_text(out, body)
    return out


def write_index(reports_root: Path) -> Path:
    """``reports/index.html``: every study with its summary and every executed pair notebook."""
    sections = []
    for study_dir in sorted(p for p in reports_root.iterdir() if p.is_dir()):
        report = ReportLayout(study_dir)
        summary = report.analysis_notebook("summary").with_suffix(".html")
        runs = sorted(report.runs_dir.glob("*.html"))
        profiles = sorted(report.profiles_dir.glob("*.html")) + sorted(report.tune_dir.glob("*.html"))
        extras = [
            p for p in (report.analysis_notebook(n).with_suffix(".html") for n in ("sweep", "tune")) if p.exists()
        ]
        if not summary.exists() and not runs and not profiles:
            continue
        items = "".join(f'<li><a href="{html.escape(str(r.relative_to(reports_root)))}">{html.escape(r.stem)}</a></li>'
                        for r in runs)
        link = (f'<a href="{html.escape(str(summary.relative_to(reports_root)))}">summary</a>'
                if summary.exists() else "no summary yet")
        link += "".join(f' · <a href="{html.escape(str(p.relative_to(reports_root)))}">{p.stem}</a>' for p in extras)
        prof_items = "".join(
            f'<li><a href="{html.escape(str(r.relative_to(reports_root)))}">{html.escape(r.stem)}</a></li>'
            for r in profiles
        )
        figures = sorted(report.figures_dir.glob("*.png"))
        fig_items = "".join(
            f'<li><a href="{html.escape(str(f.relative_to(reports_root)))}">{html.escape(f.name)}</a></li>'
            for f in figures
        )
        sections.append(
            f"<section><h2>{html.escape(study_dir.name)}</h2><p>{link}</p>"
            f"<h3>Pair notebooks</h3><ul>{items or '<li>none</li>'}</ul>"
            + (f"<h3>Profiles and tuning</h3><ul>{prof_items}</ul>" if profiles else "")
            + (f"<details><summary>Figures ({len(figures)})</summary><ul>{fig_items}</ul></details>" if figures else "")
            + "</section>")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>benchlib reports</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
            "section{border-top:1px solid #ccc;margin-top:1.5em}</style></head><body>"
            f"<h1>benchlib reports</h1><p>Updated {stamp}.</p>"
            + ("".join(sections) or "<p>No study has been reported yet: run <code>make report</code>.</p>")
            + "</body></html>\n")
    out = reports_index(reports_root)
    atomic_write_text(out, page)
    return out
