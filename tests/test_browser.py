"""A tiny study's report opened in a real browser (headless Chromium): what a reader's browser shows.

Marked ``browser``; skipped where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``).
"""
from __future__ import annotations

import pytest
import yaml

from benchlib.cli import main
from benchlib.pipeline.browser import check_report, find_chromium

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(find_chromium() is None, reason="no chromium on this machine (apt install chromium)")]

TINY = {"study": "tiny", "description": "one tiny pair for the browser test", "hardware": ["cpu"],
        "models": ["squeezenet1_1"], "batch_sizes": [8], "dataset": "digits", "image_size": 32, "train_subset": 64,
        "test_subset": 32, "train_steps": 2, "warmup_steps": 1, "latency_repeats": 3, "infer_warmup_batches": 1,
        "profile": True, "calibrate": False}
PAGES = {"index.html": "benchlib reports", "tiny/summary.html": "benchlib study: tiny",
         "tiny/runs/cpu__squeezenet1_1.html": "squeezenet1_1 on cpu: measurements \u00b7 tiny",
         "tiny/profile/cpu__squeezenet1_1.html": "squeezenet1_1 on cpu: profile \u00b7 tiny"}


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    params = root / "tiny.yaml"
    params.write_text(yaml.safe_dump(TINY))
    reports = root / "reports"
    assert main(["study", str(params), "--results-root", str(root / "results"), "--reports-root", str(reports)]) == 0
    return reports, {c.page.relative_to(reports).as_posix(): c for c in check_report(reports, screenshots=root / "png")}


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
