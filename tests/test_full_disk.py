"""A full disk tears nothing benchlib writes (issue 37): executed notebooks, pages, figures, the data copied
beside them and the published traces are each whole or absent, with no temporary file left."""
from __future__ import annotations

import errno
import functools
import gzip
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import papermill  # noqa: E402
import pytest  # noqa: E402
from full_disk import FullDisk  # noqa: E402
from papermill.exceptions import PapermillExecutionError  # noqa: E402
from PIL import Image  # noqa: E402

from benchlib.pipeline import publish  # noqa: E402
from benchlib.report.figures.style import save  # noqa: E402
from benchlib.store.atomic import remove_stale_temp_files  # noqa: E402
from benchlib.store.layout import ReportLayout, ResultsLayout  # noqa: E402
from benchlib.store.lock import folder_lock  # noqa: E402

SUMMARY = publish.notebooks_dir() / "summary.ipynb"
# No room at all, a few bytes, a part of each file, and room for everything (the checks themselves checked).
BUDGETS = [0, 7, 2_000, 20_000, 10**9]


def _source_data(tmp_path: Path) -> ResultsLayout:
    """A results folder on a disk with room: the files a report copies, and a profile's trace."""
    results = ResultsLayout(tmp_path / "results" / "s")
    (results.root / "manifests").mkdir(parents=True)
    rows = "".join(f"s,m,cpu,resnet18,{b},default,ok,{b * 1.5}\n" for b in range(1, 1000))
    header = "study,machine,hardware,model,batch_size,variant,status,train_samples_per_s\n"
    results.results_csv.write_text(header + rows)
    results.run_rules_path.write_text(json.dumps({"repeats": 1, "notes": ["x" * 50] * 200}))
    (results.root / "manifests" / "m.json").write_text(json.dumps({"python": "3", "pad": "y" * 5000}))
    trace = results.root / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"name": f"op{i}", "ts": i, "dur": 1} for i in range(3000)]}))
    return results


def _executed(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A pair\n" + "words " * 3000),
                nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n" * 500)])]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def _figure() -> plt.Figure:
    fig, ax = plt.subplots()
    ax.plot(range(100), [i * i for i in range(100)])
    return fig


def _torn(path: Path, sources: dict[str, bytes]) -> str | None:
    """Why ``path`` is not a whole file of its kind (None when it is)."""
    try:
        if path.suffix == ".ipynb":
            nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        elif path.suffix == ".html":
            assert path.read_text(encoding="utf-8").rstrip().endswith("</html>")
        elif path.suffix == ".png":
            with Image.open(path) as image:
                image.load()
        elif path.name.endswith(".gz"):
            gzip.decompress(path.read_bytes())
        elif path.name in sources:
            assert path.read_bytes() == sources[path.name]
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 (any failure to read it whole is the finding)
        return f"{path}: {type(exc).__name__}: {exc}"
    return None


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_full_disk_tears_no_notebook_page_figure_or_copy(tmp_path, monkeypatch, budget):
    results = _source_data(tmp_path)
    sources = {p.name: p.read_bytes() for p in results.root.rglob("*") if p.is_file()}
    report = ReportLayout(tmp_path / "reports" / "s")
    executed = _executed(tmp_path / "elsewhere" / "cpu__resnet18.ipynb")
    # papermill as a study runs it, less the kernel: the notebook parameterized and saved by papermill's writer
    monkeypatch.setattr(papermill, "execute_notebook", functools.partial(papermill.execute_notebook, prepare_only=True))
    disk = FullDisk(tmp_path / "reports", budget)
    page = report.runs_dir / "cpu__resnet18.ipynb"
    steps = {
        "notebook": lambda: publish.execute(SUMMARY, report.analysis_notebook("summary"), {"title": "t"},
                                            cwd=tmp_path, cell_timeout_s=60, progress=False),
        "page": lambda: publish.render_html(page, "a page", report),
        "figure": lambda: save(_figure(), report.figures_dir, "throughput"),
        "data": lambda: publish.copy_data([results.root], report),
        "trace": lambda: publish.publish_trace(results.root / "trace.json", report.profile_trace("cpu", "resnet18")),
        "index": lambda: publish.write_index(report.reports_root),
    }
    page.parent.mkdir(parents=True)
    page.write_bytes(executed.read_bytes())  # the executed notebook the page is made from, on the disk with room
    disk.install(monkeypatch)
    failed = []
    for name, step in steps.items():
        disk.left = budget  # each writer meets the disk filling at the same point
        try:
            step()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            failed.append(name)
    monkeypatch.undo()
    plt.close("all")
    files = [p for p in report.reports_root.rglob("*") if p.is_file()]
    assert [why for p in files if (why := _torn(p, sources))] == []
    assert [p.name for p in files if ".tmp" in p.name] == [], "a temporary file was left behind"
    assert (failed == []) == (budget == BUDGETS[-1]), failed
    if budget == BUDGETS[-1]:
        names = {p.name for p in files}
        assert {"summary.ipynb", "cpu__resnet18.html", "throughput.png", "results.csv", "index.html",
                "cpu__resnet18.trace.json.gz"} <= names, names


def test_a_full_disk_leaves_no_lock_behind(tmp_path, monkeypatch):
    """The holder cannot be recorded in the lock file (no space): the lock holds all the same, and is gone once
    the study ends in a full disk."""
    FullDisk(tmp_path / "r", 0).install(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        with folder_lock(tmp_path / "r"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list((tmp_path / "r").iterdir()) == []


# ---------------------------------------------------------------- what a failed run keeps of its notebook

def _papermill_that(saves: str | None, then: BaseException):
    """A papermill that saves ``saves`` (text) as the notebook it runs, then raises ``then``."""
    def run(_notebook, output, **_kwargs):
        if saves is not None:
            Path(output).write_text(saves, encoding="utf-8")
        raise then
    return run


def test_a_failed_run_keeps_its_notebook_when_it_is_whole(tmp_path, monkeypatch):
    out = tmp_path / "runs" / "cpu__resnet18.ipynb"
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"output_path": "somewhere/.x.tmp.ipynb"}})
    nb.cells = [nbformat.v4.new_code_cell("1/0")]
    monkeypatch.setattr(papermill, "execute_notebook",
                        _papermill_that(nbformat.writes(nb), PapermillExecutionError(0, 1, "1/0", "ZeroDivisionError",
                                                                                     "division by zero", [])))
    with pytest.raises(PapermillExecutionError):
        publish.execute(SUMMARY, out, {"title": "t"}, cwd=tmp_path, cell_timeout_s=60, progress=False)
    kept = nbformat.read(str(out), as_version=4)
    assert kept.cells[0].source == "1/0" and kept.metadata.papermill.output_path == str(out)
    assert [p.name for p in out.parent.iterdir()] == [out.name]


@pytest.mark.parametrize("then", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")])
def test_a_run_that_tore_its_notebook_keeps_the_earlier_one(tmp_path, monkeypatch, then):
    out = _executed(tmp_path / "runs" / "cpu__resnet18.ipynb")
    before = out.read_bytes()
    monkeypatch.setattr(papermill, "execute_notebook", _papermill_that('{"cells": [{"cell_type": "co', then))
    with pytest.raises(type(then)):
        publish.execute(SUMMARY, out, {"title": "t"}, cwd=tmp_path, cell_timeout_s=60, progress=False)
    assert out.read_bytes() == before and [p.name for p in out.parent.iterdir()] == [out.name]


def test_temporary_notebooks_a_killed_run_left_are_removed(tmp_path):
    import os
    import time

    left = tmp_path / "runs" / ".cpu__resnet18.ipynb.abc123.tmp.ipynb"
    left.parent.mkdir()
    left.write_text("{")
    old = time.time() - 3600
    os.utime(left, (old, old))
    assert remove_stale_temp_files(tmp_path) == 1 and not left.exists()


def test_a_figure_is_drawn_whole_before_it_is_written(tmp_path, monkeypatch):
    """savefig into memory: a failure while drawing leaves the earlier figure as it was."""
    path = save(_figure(), tmp_path, "f")
    before = path.read_bytes()

    def fails(self, target, **kwargs):
        target.write(b"\x89PNG partial") if isinstance(target, io.IOBase) else Path(target).write_bytes(b"\x89PN")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(plt.Figure, "savefig", fails)
    with pytest.raises(OSError):
        save(_figure(), tmp_path, "f")
    plt.close("all")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["f.png"]


# ---------------------------------------------------------------- what the user is told

def test_a_full_disk_names_the_file_being_written_not_its_temporary_one(tmp_path, monkeypatch):
    """The atomic writer's error names the file it was writing, not the hidden temporary file (gone by then)."""
    target = tmp_path / "reports" / "s" / "summary.html"
    FullDisk(tmp_path / "reports", 7).install(monkeypatch)
    with pytest.raises(OSError) as raised:
        publish.atomic_write_text(target, "<html>" + "x" * 100 + "</html>")
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
    assert list(target.parent.iterdir()) == []


def test_papermill_meeting_a_full_disk_names_the_notebook(tmp_path, monkeypatch):
    """papermill saves the notebook it runs with a plain write(), whose error on a real full disk names no file
    (the soak's tmpfs met it as "disk full: : No space left on device"): the notebook's path is given."""
    out = tmp_path / "runs" / "cpu__resnet18.ipynb"
    monkeypatch.setattr(papermill, "execute_notebook",
                        _papermill_that('{"cells": [', OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError) as raised:
        publish.execute(SUMMARY, out, {"title": "t"}, cwd=tmp_path, cell_timeout_s=60, progress=False)
    assert raised.value.filename == str(out) and not out.exists()


@pytest.mark.parametrize("filename, said", [
    (None, "benchlib: error: disk full: No space left on device; complete rows are kept"),
    ("/r/rows/x.json", "benchlib: error: disk full: /r/rows/x.json: No space left on device; complete rows are kept"),
])
def test_the_command_says_a_full_disk_in_one_line_with_the_file_where_known(tmp_path, monkeypatch, capsys, filename,
                                                                             said):
    from benchlib.cli import main, studies

    def full(_args):
        raise OSError(errno.ENOSPC, "No space left on device", *([filename] if filename else []))

    monkeypatch.setattr(studies, "cmd_study", full)
    assert main(["study", str(tmp_path / "s.yaml")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), lines
