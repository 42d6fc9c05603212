"""A tiny study's report opened in a real browser (headless Chromium): what a reader's browser shows.

Marked ``browser``; skipped where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``).
"""
from __future__ import annotations

import pytest

from benchlib.pipeline.page_check import check_report, find_chromium

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(find_chromium() is None, reason="no chromium on this machine (apt install chromium)")]

PAGES = {"index.html": "benchlib reports", "tiny/summary.html": "benchlib study: tiny",  # and each study's first pair
         "tiny/runs/cpu__squeezenet1_1.html": "squeezenet1_1 on cpu: measurements \u00b7 tiny",
         "tiny/profile/cpu__squeezenet1_1.html": "squeezenet1_1 on cpu: profile \u00b7 tiny"}


@pytest.fixture(scope="module")
def checks(quickstart_run, tmp_path_factory):
    """The pages of the study the quickstart published (tests/conftest.py), each opened and checked."""
    reports, shots = quickstart_run.reports, tmp_path_factory.mktemp("png")
    return reports, {c.page.relative_to(reports).as_posix(): c for c in check_report(reports, screenshots=shots)}


def test_the_pages_a_reader_opens_have_titles_loaded_images_and_working_links(checks):
    reports, found = checks
    assert set(found) == set(PAGES)
    for name, check in found.items():
        assert check.title == PAGES[name]
        assert check.screenshot is not None and check.screenshot.stat().st_size > 10_000, name
        assert all(image["loaded"] for image in check.facts["images"]), name
        assert not [p for p in check.problems if p.startswith("link to a missing file")], name
    assert found["tiny/summary.html"].facts["images"] and found["tiny/runs/cpu__squeezenet1_1.html"].facts["images"]
    index_links = found["index.html"].facts["links"]
    assert {"tiny/data/tiny/results.csv", "columns.html", "measurement.html",
            "tiny/profile/cpu__squeezenet1_1.trace.json.gz"} <= set(index_links)
    assert (reports / "tiny" / "profile" / "cpu__squeezenet1_1.trace.json.gz").stat().st_size > 100


@pytest.mark.parametrize("name", ["index.html", "tiny/runs/cpu__squeezenet1_1.html",
                                  "tiny/profile/cpu__squeezenet1_1.html"])
def test_the_index_pair_and_profile_pages_have_no_problem(checks, name):
    assert checks[1][name].problems == []


def test_the_summary_headline_fits_the_window_and_no_cell_shows_none(checks):
    summary = checks[1]["tiny/summary.html"]
    assert summary.facts["marker"], "the summary has no headline section (id='headline')"
    assert summary.facts["headline_widths"], "no table in the headline section"
    assert summary.problems == []


def test_check_pages_checks_the_published_report_from_the_command_line(quickstart_run, tmp_path, capsys):
    from benchlib.cli import main

    code = main(["check-pages", str(quickstart_run.reports), "--screenshots", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tiny/summary.html: ok - benchlib study: tiny" in out and len(list(tmp_path.glob("*.png"))) == len(PAGES)
