"""The data dictionary: every column of a result row with its unit and meaning, generated from the schema.

``docs/columns.md`` is this module's Markdown, committed (a test regenerates it and compares), and each
report carries the same list as an HTML page. Regenerate the file after changing ``store/schema.py``::

    python -m benchlib.report.words.dictionary > docs/columns.md
"""
from __future__ import annotations

import html
import sys

from ...store import schema

# Each group of the schema under a heading a reader can scan, with what the group is about (data: the
# entries look alike by design).
GROUP_TITLES: dict[str, tuple[str, str]] = {
    "identity": ("Identity and outcome", "which configuration a row is, where and when it ran, and how it ended"),
    "settings": ("Settings", "run settings and variant knobs that shape the computation"),
    "data": ("Data", "the data set as the configuration loaded it"),
    "training": ("Training", "timed training steps and epochs (warmup steps left out)"),
    "evaluation": ("Evaluation", "one pass over the test split"),
    "latency": ("Inference latency and throughput", "forward passes of inputs already on the device"),
    "memory": ("Memory", "peaks of the process and of the device allocator"),
    "model": ("Model", "the network's size, and for quantized variants what they were made from"),
    "work": ("Work: MACs, FLOPs and bytes", "counted per sample; a multiply-accumulate is two FLOPs"),
    "roofline": ("Roofline", "where the configuration sits under the ceilings measured on its machine"),
    "telemetry": ("Telemetry", "sampled in a background thread while the configuration trained"),
    "interference": ("Interference", "other work on the machine while the configuration was timed"),
    "energy": ("Energy", "device energy of the training loop and of the inference repeats"),
}
SOURCE = "benchlib/store/schema.py"
REGENERATE = "python -m benchlib.report.words.dictionary > docs/columns.md"


def unit_text(column: schema.Column) -> str:
    """The unit as a reader needs it: the physical unit, else what kind of value the column holds."""
    if column.unit:
        return column.unit
    return {"bool": "true/false", "number": "number", "text": "text"}[column.kind]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def columns_markdown() -> str:
    """``docs/columns.md``: one table per group, one line per column with its unit and meaning."""
    lines = [
        "# Columns of a result row",
        "",
        f"Generated from `{SOURCE}` (regenerate with `{REGENERATE}`; a test keeps the two in step).",
        "",
        "One row of `results.csv` is one measured configuration. A column's name ends with its unit where it "
        "has one (`_s`, `_ms`, `_bytes`, `_flops`, `_j`, `_w`, `_pct`); an empty cell means not measured "
        "or not applicable, with the reason in a column beside it where there is one (`error`, "
        "`telemetry_missing`, `*_energy_unmeasurable`), never a 0. How each figure is measured: "
        "[how benchlib measures](measurement.md).",
        "",
        "Statuses (`status`):",
        "",
    ]
    lines += [f"- `{status}`: {meaning}" for status, meaning in schema.STATUS_MEANINGS.items()]
    for key, group in schema.GROUPS.items():
        title, about = GROUP_TITLES[key]
        lines += ["", f"## {title}", "", f"{about[0].upper()}{about[1:]}.", "", "| column | unit | meaning |",
                  "|---|---|---|"]
        lines += [f"| `{c.name}` | {_cell(unit_text(c))} | {_cell(c.meaning)} |" for c in group]
    reader = schema.READER_COLUMNS
    lines += ["", "## Added when read", "", "Not stored in a row file: added by `benchlib.read_results`.", "",
              "| column | unit | meaning |", "|---|---|---|"]
    lines += [f"| `{c.name}` | {_cell(unit_text(c))} | {_cell(c.meaning)} |" for c in reader.values()]
    return "\n".join(lines) + "\n"


def columns_html_body() -> str:
    """The same dictionary as HTML (the report's page), with an anchor per column (``#col-<name>``)."""
    parts = [
        "<h1>Columns of a result row</h1>",
        f"<p>Generated from <code>{SOURCE}</code>. One row of <code>results.csv</code> is one measured "
        "configuration; a column's name ends with its unit where it has one. An empty cell means not measured "
        "or not applicable, with the reason in a column beside it where there is one, never a 0.</p>",
        "<p>Statuses:</p><ul>",
    ]
    parts += [f"<li><code>{html.escape(s)}</code>: {html.escape(m)}</li>" for s, m in schema.STATUS_MEANINGS.items()]
    parts.append("</ul>")
    toc = " · ".join(f'<a href="#group-{key}">{html.escape(GROUP_TITLES[key][0])}</a>' for key in schema.GROUPS)
    parts.append(f"<p>{toc}</p>")
    for key, group in schema.GROUPS.items():
        title, about = GROUP_TITLES[key]
        rows = "".join(
            f'<tr id="col-{html.escape(c.name)}"><td><code>{html.escape(c.name)}</code></td>'
            f"<td>{html.escape(unit_text(c))}</td><td>{html.escape(c.meaning)}</td></tr>" for c in group)
        parts.append(f'<h2 id="group-{key}">{html.escape(title)}</h2><p>{html.escape(about[0].upper() + about[1:])}.'
                     "</p><table><thead><tr><th>column</th><th>unit</th><th>meaning</th></tr></thead>"
                     f"<tbody>{rows}</tbody></table>")
    return "".join(parts)


def main() -> int:
    sys.stdout.write(columns_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
