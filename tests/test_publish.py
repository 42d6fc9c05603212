"""Publishing: page titles, the bar back to the index, the data beside the report, the index's content."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pandas as pd
import pytest

from benchlib.pipeline import publish
from benchlib.report.display import site
from benchlib.report.words import fmt
from benchlib.store.layout import ReportLayout, ResultsLayout

HREF = re.compile(r'href="([^"]+)"')


def _local_links_resolve(page: Path) -> list[str]:
    """Local links of ``page`` that point at no file (web links and in-page anchors left out)."""
    missing = []
    for href in HREF.findall(page.read_text(encoding="utf-8")):
        if "://" in href or href.startswith(("#", "mailto:")):
            continue
        target = page.parent / unquote(href.split("#")[0])
        if not target.exists():
            missing.append(href)
    return missing


def _executed_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A pair\nAs [the notes](../docs/measurement.md#warmup) say; "
                                              "[columns](../docs/columns.md)."),
                nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")])]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def test_a_page_gets_its_title_a_bar_back_and_working_doc_links(tmp_path):
    report = ReportLayout(tmp_path / "reports" / "s")
    out = publish.render_html(_executed_notebook(report.runs_dir / "cpu__resnet18.ipynb"),
                              publish.pair_title("measurements", "cpu", "resnet18", "s"), report)
    text = out.read_text(encoding="utf-8")
    assert "<title>resnet18 on cpu: measurements \u00b7 s</title>" in text
    assert 'href="../../index.html"' in text and 'href="../summary.html"' in text
    assert 'href="../../measurement.html#warmup"' in text and 'href="../../columns.html"' in text
    assert "docs/measurement.md" not in text and ">Notebook<" not in text


def _report_with_data(tmp_path: Path) -> tuple[Path, ReportLayout]:
    results = ResultsLayout(tmp_path / "results" / "s")
    (results.root / "manifests").mkdir(parents=True)
    (results.root / "ceilings").mkdir()
    base = {"study": "s", "machine": "m", "hardware": "cpu", "status": "ok", "variant": "default",
            "settings_json": json.dumps({"dataset": "digits", "image_size": 32, "optimizer": "sgd", "lr": 0.05,
                                         "momentum": 0.9, "weight_decay": 0.0005, "epochs": 8, "warmup_steps": 5})}
    pd.DataFrame([
        {**base, "model": "resnet18", "batch_size": 32, "train_samples_per_s": 100.0, "test_accuracy": 0.9,
         "latency_ms_p50": 4.0, "peak_rss_bytes": 2**30},
        {**base, "model": "resnet18", "batch_size": 64, "train_samples_per_s": 123.456, "test_accuracy": 0.8765,
         "latency_ms_p50": 5.25, "peak_rss_bytes": 1.75 * 2**30, "rss_baseline_bytes": 2**28},
        {**base, "model": "mobilenet_v2", "batch_size": 64, "status": "failed", "error": "boom"},
    ]).to_csv(results.results_csv, index=False)
    results.manifest_path("abc123").write_text("{}")
    results.ceilings_path("m", "cpu").write_text("{}")
    results.run_rules_path.write_text("{}")
    report = ReportLayout(tmp_path / "reports" / "s")
    publish.copy_data([results.root], report)
    publish.write_meta(report, "benchlib study: s", "CPU, digits at 32x32, two models", [results.root])
    for folder in (report.runs_dir, report.profiles_dir):
        _executed_notebook(folder / "cpu__resnet18.ipynb")
        publish.render_html(folder / "cpu__resnet18.ipynb", "t", report)
    _executed_notebook(report.analysis_notebook("summary"))
    publish.render_html(report.analysis_notebook("summary"), "benchlib study: s", report)
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": []}')
    publish.publish_trace(trace, report.profile_trace("cpu", "resnet18"))
    return results.root, report


def test_the_index_tells_the_study_and_links_every_page_and_the_data(tmp_path):
    _, report = _report_with_data(tmp_path)
    index = publish.write_index(report.reports_root)
    text = index.read_text(encoding="utf-8")
    assert "CPU, digits at 32x32, two models" in text, "the study's description"
    assert "123 samples/s" in text and "87.6%" in text and "5.25 ms" in text and "1.50 GiB" in text  # above baseline
    assert "100 samples/s" not in text, "the headline is the pair's best training throughput"
    assert "3 configuration(s) (2 ok, 1 failed)" in text
    assert "sgd lr 0.05 momentum 0.9" in text and "8 epoch(s) after 5 warmup step(s)" in text
    for href in ("s/summary.html", "s/runs/cpu__resnet18.html", "s/profile/cpu__resnet18.html",
                 "s/data/s/results.csv", "s/data/s/run_rules.json", "s/data/s/manifests/abc123.json",
                 "s/data/s/ceilings/m__cpu.json", "s/profile/cpu__resnet18.trace.json.gz", "columns.html",
                 "measurement.html"):
        assert f'href="{href}"' in text, href
    assert ">resnet18 on cpu: measurements<" in text and ">resnet18 on cpu: profile<" in text
    assert "Profiles and tuning" not in text and "None" not in text and "nan" not in text
    assert _local_links_resolve(index) == []
    for page in (report.reports_root / "columns.html", report.reports_root / "measurement.html",
                 report.runs_dir / "cpu__resnet18.html"):
        assert _local_links_resolve(page) == [], page.name


def test_the_data_copy_is_replaced_and_the_trace_gzipped(tmp_path):
    results, report = _report_with_data(tmp_path)
    (report.data_copy("s") / "stale.csv").write_text("old")
    publish.copy_data([results], report)
    assert not (report.data_copy("s") / "stale.csv").exists()
    assert (report.data_copy("s") / "results.csv").read_bytes() == (results / "results.csv").read_bytes()
    with gzip.open(report.profile_trace("cpu", "resnet18"), "rt") as f:
        assert json.load(f) == {"traceEvents": []}
    assert publish.publish_trace(tmp_path / "absent.json", tmp_path / "x.json.gz") is None


def test_two_results_folders_of_one_name_get_two_copies(tmp_path):
    for machine in ("a", "b"):
        folder = tmp_path / machine / "default"
        folder.mkdir(parents=True)
        (folder / "results.csv").write_text(f"study,machine\ndefault,{machine}\n")
    report = ReportLayout(tmp_path / "reports" / "merged")
    copies = publish.copy_data([tmp_path / "a" / "default", tmp_path / "b" / "default"], report)
    assert [c.name for c in copies] == ["default", "default-2"]
    assert (copies[1] / "results.csv").read_text().endswith("default,b\n")


@pytest.mark.parametrize("hardware, expected", [("cpu", 2**30 - 2**28), ("cuda", 5 * 2**20)])
def test_headline_memory_is_the_devices_own_peak_above_its_baseline(hardware, expected):
    """The index shows the summary's figure: what the configuration added, not the process's whole RSS."""
    rows = pd.DataFrame([{"machine": "m", "hardware": hardware, "model": "resnet18", "status": "ok",
                          "train_samples_per_s": 1.0, "peak_rss_bytes": 2**30, "rss_baseline_bytes": 2**28,
                          "peak_cuda_allocated_bytes": 5 * 2**20}])
    assert site.headline_rows(rows)["peak_memory"].tolist() == [expected]


def test_the_index_gives_the_summarys_training_throughput():
    """One figure under one name: the index (copied rows, no samples) and the summary's headline (samples) both give
    each run's samples over its summed timed steps, geometric mean over the runs: never the batch over the median
    step (a noisy run's mean step sits 17% above its median here) nor the luckiest seed's row."""
    import numpy as np

    from benchlib.report.readback.samples import SampleFiles
    from benchlib.report.tables import headline

    steps = {"c__seed0": [0.225, 0.25, 0.4], "c__seed1": [0.18, 0.2, 0.32], "c__seed2": [0.288, 0.32, 0.512]}
    rates = {run_id: 64 * len(s) / sum(s) for run_id, s in steps.items()}  # what the row's column holds
    rows = pd.DataFrame([{"machine": "m", "hardware": "cpu", "model": "resnet18", "status": "ok", "batch_size": 64,
                          "variant": "default", "run_id": run_id, "train_step_s_median": float(np.median(s)),
                          "train_samples_per_s": rates[run_id], "results_dir": "r"} for run_id, s in steps.items()])

    class Steps(SampleFiles):
        def __call__(self, row):
            return pd.DataFrame({"series": "train_step_s", "value": steps[row["run_id"]]})

    expected = float(np.exp(np.mean(np.log(list(rates.values())))))
    index = site.headline_rows(rows)
    assert len(index) == 1 and index["train_samples_per_s"].iloc[0] == pytest.approx(expected)
    summary = headline.headline_table(rows, reader=Steps()).table["train (samples/s)"].iloc[0]
    assert summary == fmt.significant(expected) and f">{fmt.samples_per_s_text(expected)}<" in site.headline_table(rows)
    by_median = float(np.exp(np.mean(np.log([64 / np.median(s) for s in steps.values()]))))
    assert fmt.significant(by_median) != summary, "the batch over the median step is another figure"


def test_an_empty_reports_folder_says_how_to_make_a_report(tmp_path):
    text = publish.write_index(tmp_path).read_text(encoding="utf-8")
    assert "make report" in text and (tmp_path / "columns.html").exists()


def test_the_index_headline_says_how_sure_each_figure_is():
    rows = pd.DataFrame([
        {"machine": "m", "hardware": "cpu", "model": "resnet18", "status": "ok", "batch_size": 64,
         "train_samples_per_s": 1.0, "machine_drifted": True, "train_step_noisy": True},
        {"machine": "m", "hardware": "cpu", "model": "squeezenet1_1", "status": "ok", "batch_size": 64,
         "train_samples_per_s": 2.0, "machine_drifted": False, "train_step_noisy": False}])
    text = site.headline_table(rows)
    assert "<th>how sure</th>" in text and "<td>machine drifted, noisy</td>" in text and "<td>no flag</td>" in text
    assert "– (not measured)" in text and "– (not evaluated)" in text, "a missing figure says why"
    refused = site.headline_table(rows.assign(latency_ms_p50=3.0,
                                              latency_ms_p50_status="too few samples (n=5, p50 needs 6)"))
    assert "– (n=5 &lt; 6)" in refused


def test_a_kernel_runs_without_warnings_in_the_users_terminal(tmp_path, capfd):
    """papermill passes a kernel's stderr through: ipykernel's TCP-without-encryption warning (and the
    debugger's frozen-modules one) must not reach the user; over IPC the first has no cause."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("print(n * 2)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "tiny.ipynb"
    nbformat.write(nb, str(source))
    assert publish.kernel_manager() is publish.IpcKernelManager, "Unix sockets on this machine"
    publish.execute(source, tmp_path / "out.ipynb", {"n": 21}, cwd=tmp_path, cell_timeout_s=120, progress=False)
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert out.cells[-1].outputs[0]["text"] == "42\n"
    err = capfd.readouterr().err
    assert "without encryption" not in err and "Debugging will proceed" not in err, err


def test_each_ipc_kernel_has_sockets_of_its_own():
    """jupyter_client names a kernel's IPC sockets ``kernel-ipc`` in the working folder when no connection file
    is named yet: two kernels started there at once would share them."""
    a, b = publish.IpcKernelManager(), publish.IpcKernelManager()
    assert a.transport == b.transport == "ipc"
    assert a.ip != b.ip and Path(a.ip).is_absolute() and Path(b.ip).is_absolute()


_ONE_KERNEL = """
import sys
from pathlib import Path
import nbformat
from benchlib.pipeline import publish
i = sys.argv[1]
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 0", metadata={"tags": ["parameters"]}),
                                     nbformat.v4.new_code_cell("import time; time.sleep(1); print('ran', x)")])
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
Path(f"in{i}.ipynb").write_text(nbformat.writes(nb))
publish.execute(Path(f"in{i}.ipynb"), Path(f"out{i}.ipynb"), {"x": int(i)}, cwd=Path("."), cell_timeout_s=120,
                progress=False)
"""


@pytest.mark.slow
def test_two_kernels_started_at_once_in_one_folder_each_run_their_own_notebook(tmp_path):
    """As a SLURM array's tasks on one node do: each process's kernel answers it, none the other's."""
    import subprocess
    import sys

    script = tmp_path / "one.py"
    script.write_text(_ONE_KERNEL)
    procs = [subprocess.Popen([sys.executable, str(script), str(i)], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in (1, 2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for i in (1, 2):
        executed = nbformat.read(tmp_path / f"out{i}.ipynb", as_version=4)
        assert f"ran {i}" in executed.cells[-1].outputs[0]["text"]
