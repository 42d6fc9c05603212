"""The data dictionary: docs/columns.md is the schema's, one line per column with its unit and meaning."""
from __future__ import annotations

import re
from pathlib import Path

from benchlib.report.words import dictionary
from benchlib.store import schema

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_docs_columns_md_is_generated_from_the_schema():
    committed = (DOCS / "columns.md").read_text(encoding="utf-8")
    assert committed == dictionary.columns_markdown(), (
        f"docs/columns.md is out of step with the schema: run `{dictionary.REGENERATE}`")


def test_every_column_has_one_line_with_its_unit_and_meaning():
    lines = dictionary.columns_markdown().splitlines()
    for column in (*schema.COLUMNS.values(), *schema.READER_COLUMNS.values()):
        found = [ln for ln in lines if ln.startswith(f"| `{column.name}` |")]
        assert len(found) == 1, column.name
        _, unit, meaning = (cell.strip() for cell in found[0].strip("|").split(" | "))
        assert unit == dictionary.unit_text(column) and unit
        assert meaning and meaning == column.meaning.replace("|", "\\|")


def test_units_say_what_a_unitless_column_holds():
    assert dictionary.unit_text(schema.COLUMNS["train_step_s_median"]) == "s"
    assert dictionary.unit_text(schema.COLUMNS["interfered"]) == "true/false"
    assert dictionary.unit_text(schema.COLUMNS["lr"]) == "number"
    assert dictionary.unit_text(schema.COLUMNS["model"]) == "text"


def test_every_group_has_a_title_and_the_page_an_anchor_per_column():
    assert set(dictionary.GROUP_TITLES) == set(schema.GROUPS)
    body = dictionary.columns_html_body()
    anchors = re.findall(r'id="col-([^"]+)"', body)
    assert anchors == list(schema.COLUMN_NAMES)
    assert "<script" not in body
