"""How a table or figure appears in a notebook (and so in the published HTML): one place for it.

Tables are shown as text cells in their units (``cells.readable``), numbers right-aligned, without the
index; wide ones scroll inside their own box rather than stretching the page, and long ones can sit
behind a ``<details>`` element the reader opens.
"""
from __future__ import annotations

import html
import re
from typing import Any

import pandas as pd
from IPython.display import HTML, Markdown, display

from ..words import fmt
from ..words.cells import numeric_columns, readable

TABLE_STYLE = [
    {"selector": "th", "props": "text-align: left; padding: 2px 8px; font-weight: 600;"},
    {"selector": "td", "props": "padding: 2px 8px; white-space: nowrap; text-align: left;"},
]


WIDE_STYLE = "color: #888;"  # a figure given with a wide interval (``fmt.WIDE``)
_NUMBER_TEXT = re.compile(r"^(-?[\d.,]+(\s\S+)?(\s\[.*)?|\u2013)$")


def _number_columns(cells: pd.DataFrame) -> list[str]:
    """Text columns whose every cell reads as a number (with or without its unit), or is missing."""
    return [str(c) for c in cells.columns
            if len(cells) and all(_NUMBER_TEXT.match(str(v)) for v in cells[c]) and not (cells[c] == "\u2013").all()]


def styled(df: pd.DataFrame, *, text: bool = False) -> Any:
    """A pandas Styler of ``df`` in readable units (``text``: its cells are text already), numbers right-aligned."""
    cells = df.map(fmt.value_text) if text else readable(df)
    right = sorted(set(numeric_columns(df)) | set(_number_columns(cells)), key=list(cells.columns).index)
    styler = cells.style.hide(axis="index").set_table_styles(TABLE_STYLE)
    if right:
        styler = styler.set_properties(subset=right, **{"text-align": "right !important"})
    # a busy host's figure is given, marked and greyed: less sure than a quiet host's, never withheld
    return styler.map(lambda v: WIDE_STYLE if f"({fmt.WIDE})" in str(v) else "")


def table_html(df: pd.DataFrame, *, text: bool = False) -> str:
    """The table's HTML inside a box that scrolls sideways when the table is wider than the page."""
    return f'<div style="overflow-x: auto; max-width: 100%;">{styled(df, text=text).to_html()}</div>'


def table(df: pd.DataFrame, empty_message: str = "", *, text: bool = False) -> Any:
    """A notebook output for ``df``: the table, or ``empty_message`` in italics when it has no rows."""
    if df.empty:
        return Markdown(f"*{empty_message}*") if empty_message else Markdown("")
    return HTML(table_html(df, text=text))


def collapsible(summary: str, body_html: str) -> HTML:
    """A ``<details>`` block: ``summary`` shown, ``body_html`` behind a click."""
    return HTML(f"<details><summary>{html.escape(summary)}</summary>{body_html}</details>")


def collapsed_table(summary: str, df: pd.DataFrame, *, text: bool = False) -> None:
    """A table behind a click (the full configurations table, the roof table), nothing when it is empty."""
    if not df.empty:
        display(collapsible(summary, table_html(df, text=text)))


def heading(text: str, level: int = 2, anchor: str | None = None) -> None:
    """A section heading; ``anchor`` gives it a fixed id (links and checks find it), not one made from its text."""
    if anchor is None:
        display(Markdown(f"{'#' * level} {text}"))
    else:
        display(HTML(f'<h{level} id="{html.escape(anchor)}">{html.escape(text)}</h{level}>'))


def _title(fig: Any) -> str:
    """What a figure shows, for its alt text: its suptitle, else its first titled axes."""
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_text():
        return str(suptitle.get_text())
    return next((str(ax.get_title()) for ax in fig.axes if ax.get_title()), "figure")


def figures(figs: list[Any]) -> int:
    """Several figures side by side, wrapping at the page's width (each already saved as PNG); how many."""
    import base64
    import io

    import matplotlib.pyplot as plt

    images = []
    for fig in figs:
        if fig is None:
            continue
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        images.append(f'<img style="max-width: 100%;" alt="{html.escape(_title(fig))}" '
                      f'src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">')
    if images:
        display(HTML('<div style="display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start;">'
                     + "".join(images) + "</div>"))
    return len(images)


def figure(fig: Any) -> bool:
    """Show a figure (already saved as PNG by ``report.figures``) and free it; False when there was none."""
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    display(fig)
    plt.close(fig)
    return True
