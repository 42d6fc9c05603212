"""Notebooks: committed clean, parameters in step with the config, and a tiny study through papermill."""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import nbformat
import papermill
import pytest

from benchlib.spec.settings import setting_defaults
from benchlib.store.rows import read_results

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK_NAMES = ("benchmark.ipynb", "summary.ipynb", "profile.ipynb", "sweep.ipynb", "tune.ipynb", "quickstart.ipynb")


@pytest.mark.parametrize("name", ["benchmark.ipynb", "summary.ipynb", "profile.ipynb", "sweep.ipynb", "tune.ipynb",
                                  "quickstart.ipynb"])
def test_committed_notebooks_have_no_outputs_and_one_parameters_cell(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1


PAIR_PARAMETERS = {"study", "hardware", "model", "results_dir", "figures_dir"}
NOTEBOOK_PARAMETERS = {
    "benchmark.ipynb": PAIR_PARAMETERS | {"batch_sizes", "sweep", "repeats", "only_round", "resume", "variants",
                                          "interleave"},
    "profile.ipynb": PAIR_PARAMETERS | {"batch_size", "profile_wait", "profile_warmup", "profile_active",
                                        "torch_profile", "layers", "layer_steps"},
    "tune.ipynb": PAIR_PARAMETERS | {"batch_sizes", "n_trials", "objective", "pruning", "epochs_per_trial", "tune_seed",
                                     "search_space"},
}


@pytest.mark.parametrize("name", sorted(NOTEBOOK_PARAMETERS))
def test_pair_notebook_parameters_match_the_run_settings(name):
    """Every run setting (knobs included) is a parameter with the spec's default; nothing else but the pair's own."""
    declared = papermill.inspect_notebook(str(NOTEBOOKS / name))
    settings = setting_defaults()
    assert set(declared) == set(settings) | NOTEBOOK_PARAMETERS[name]
    for key, default in settings.items():
        assert declared[key]["default"] == repr(default), f"{name}: {key}"


def test_notebook_cells_stay_thin():
    """Every code cell is a few lines that call benchlib: no logic lives only in a notebook."""
    for name in NOTEBOOK_NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        for cell in nb.cells[1:]:  # the install cell apart (the same in every notebook, tested below)
            if cell.cell_type == "code" and "parameters" not in cell.metadata.get("tags", []):
                lines = [ln for ln in cell.source.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
                assert len(lines) <= 6, cell.source
                assert not any(ln.lstrip().startswith(("def ", "class ", "for ", "while ")) for ln in lines)


def _ratios_divide_out(page: str) -> int:
    """Every 'X samples/s, R.RRx [..] ... (Y samples/s)' on a page divides out: X / Y is R to the digits shown (3
    significant digits a throughput, 2 decimals a ratio). Returns how many were checked."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    found = re.findall(r"([\d,]+(?:\.\d+)?) samples/s(?: at bs\d+)?, (\d+\.\d+)x \[[^\]]*\][^;]*?\(([\d,]+(?:\.\d+)?) "
                       r"samples/s", text)
    number = r"([\d,]+(?:\.\d+)?)"
    found += [(x, r, y) for x, y, r in re.findall(rf"{number} samples/s(?: at bs\d+)? against {number} samples/s"
                                                   rf"(?: at bs\d+)?, (\d+\.\d+)x \[", text)]
    for x, ratio, y in found:
        a, b, r = float(x.replace(",", "")), float(y.replace(",", "")), float(ratio)
        slack = r * sum(0.5 * 10 ** (math.floor(math.log10(v)) - 2) / v for v in (a, b)) + 0.005
        assert abs(a / b - r) <= slack, (x, ratio, y)
    return len(found)


def _check_tiny_study(results: Path, reports: Path) -> None:
    """What a tiny study (one pair, two batch sizes, a profile) run through papermill leaves behind."""
    df = read_results([results / "tiny"])
    assert len(df) == 2
    assert set(zip(df["model"], df["batch_size"])) == {("squeezenet1_1", 8), ("squeezenet1_1", 16)}
    assert (df["status"] == "ok").all()
    assert (df["train_steps"] == 2).all()
    assert (results / "tiny" / "results.csv").exists()
    runs = reports / "tiny" / "runs"
    assert {p.name for p in runs.glob("*.ipynb")} == {"cpu__squeezenet1_1.ipynb"}
    assert len(list(runs.glob("*.html"))) == 1
    summary = (reports / "tiny" / "summary.html").read_text()
    index = (reports / "index.html").read_text()
    assert "Key findings" in summary and "squeezenet1_1" in summary
    assert _ratios_divide_out(summary) >= 1, "the findings compare the two batch sizes"
    assert summary.index('id="Key-findings"') < summary.index('id="headline"') < summary.index('id="How-it-was-run"')
    assert "Cross-device speedup" not in summary and "Optimization variants" not in summary, "no empty sections"
    assert "Not in this study: a second device, optimization variants" in summary
    assert "views.pair_table" not in summary, "published HTML hides the code"
    assert (reports / "tiny" / "figures" / "train_samples_per_s.png").stat().st_size > 1000
    assert 'href="tiny/summary.html"' in index and 'href="tiny/runs/cpu__squeezenet1_1.html"' in index
    for executed_path in (runs / "cpu__squeezenet1_1.ipynb", reports / "tiny" / "summary.ipynb"):
        executed = nbformat.read(executed_path, as_version=4)
        assert not any(o.get("output_type") == "error" for c in executed.cells for o in c.get("outputs", []))
    assert (reports / "tiny" / "figures" / "roofline__testmachine__cpu.png").exists()
    assert not (reports / "tiny" / "figures" / "roofline_model__squeezenet1_1.png").exists(), "one device: no 'across'"
    assert (reports / "tiny" / "figures" / "roofline_batch_effect.png").exists()
    assert "No point lies above its roof" in summary
    profiles = sorted((results / "tiny" / "profiles").glob("*/breakdown.csv"))
    assert len(profiles) == 1, "one profile per pair, at its first batch size"
    assert (reports / "tiny" / "figures" / "profile_step_breakdown.png").exists()
    assert 'href="tiny/profile/cpu__squeezenet1_1.html"' in index
    assert (df["above_roof"] == False).all()  # noqa: E712  (a point above its roof is a measurement bug)
    assert (df["flops_per_sample"] > 0).all() and (df["roof_fraction"] > 0).all()
    rules = json.loads((results / "tiny" / "run_rules.json").read_text())
    assert rules["interleave"] is True and rules["studies"]["tiny"]["rows"] == 2
    assert rules["studies"]["tiny"]["rules"]["warmup_steps"] == [1] and rules["studies"]["tiny"]["seeds"] == [0]
    assert "How it was run" in summary and "2 configuration(s) x 1 repeat(s)" in summary
    assert "interfered" in summary, "the configurations table shows the interference flag"
    for page in (runs / "cpu__squeezenet1_1.html", reports / "tiny" / "profile" / "cpu__squeezenet1_1.html"):
        text = page.read_text()
        assert str(results.resolve()) not in text and str(reports.resolve()) not in text, f"a local path in {page}"
        assert "warnings.warn(" not in text and "Warning: " not in text.replace("benchlib: warning: ", ""), page


@pytest.mark.notebook
def test_the_quickstart_runs_a_users_model_then_a_small_study(quickstart_run):
    """The quickstart as a new user runs it (fewer steps, a tiny study): a user's module measured and shown at a
    glance, two variants judged, a study through papermill published (checked in full: one study serves both,
    and the browser test opens its pages)."""
    nb = nbformat.read(str(quickstart_run.notebook), as_version=4)
    shown = "\n".join(o.get("data", {}).get("text/html", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.outputs)
    assert "<b>my_net</b> on <b>cpu</b>" in shown and "share of roof (train)" in shown, "the glance"
    mine = read_results([quickstart_run.mine])
    assert set(mine["variant"]) >= {"cpu-default", "channels-last"} and (mine["status"] == "ok").all()
    assert (mine["flops_per_sample"] > 0).all()
    assert "StudyOutcome(pairs_run=1, pairs_skipped=0, pairs_failed=0, configs_failed=0" in "\n".join(
        o.get("data", {}).get("text/plain", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    _check_tiny_study(quickstart_run.results, quickstart_run.reports)  # the study part, checked in full


# ---------------------------------------------------------------- the Kaggle / Colab install cell

SERVICE_VARS = ("KAGGLE_KERNEL_RUN_TYPE", "COLAB_RELEASE_TAG", "BENCHLIB_PIP_SPEC")


def _install_cell(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return next(c for c in nb.cells if c.cell_type == "code").source


def test_every_notebook_starts_with_the_same_install_cell():
    assert len({_install_cell(n) for n in NOTEBOOK_NAMES}) == 1
    assert "KAGGLE_KERNEL_RUN_TYPE" in _install_cell("benchmark.ipynb")


def _run_install_cell(monkeypatch, cwd: Path, **env: str) -> tuple[list, dict]:
    """Execute the cell as IPython would (magics transformed), with benchlib absent and a recording %pip."""
    import importlib.util

    from IPython.core.inputtransformer2 import TransformerManager

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "benchlib" else real_find_spec(n, *a))
    for k in SERVICE_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(cwd)
    calls: list = []

    class Shell:
        def run_line_magic(self, magic: str, line: str) -> None:
            calls.append((magic, line))

    namespace = {"get_ipython": Shell}
    exec(TransformerManager().transform_cell(_install_cell("benchmark.ipynb")), namespace)
    return calls, namespace


def _checkout(root: Path) -> Path:
    (root / "benchlib").mkdir(parents=True)
    (root / "benchlib" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text("[project]\nname = 'benchlib'\n")
    (root / "notebooks").mkdir()
    return root


def test_install_cell_does_nothing_off_the_services(monkeypatch, tmp_path):
    assert _run_install_cell(monkeypatch, tmp_path)[0] == []


def test_install_cell_installs_the_spec_it_is_given(monkeypatch, tmp_path):
    calls, ns = _run_install_cell(monkeypatch, tmp_path, KAGGLE_KERNEL_RUN_TYPE="Interactive",
                                  BENCHLIB_PIP_SPEC="/kaggle/input/wheels/benchlib-0.1.0-py3-none-any.whl")
    assert calls == [("pip", "install -q {benchlib_spec}")]
    assert ns["benchlib_spec"] == "/kaggle/input/wheels/benchlib-0.1.0-py3-none-any.whl"


def test_install_cell_finds_a_checkout_it_runs_in_or_that_was_cloned_beside_it(monkeypatch, tmp_path):
    repo = _checkout(tmp_path / "clone" / "benchlib")
    _, ns = _run_install_cell(monkeypatch, repo / "notebooks", COLAB_RELEASE_TAG="release-colab")
    assert ns["benchlib_spec"] == str(repo)
    _, ns = _run_install_cell(monkeypatch, tmp_path / "clone", COLAB_RELEASE_TAG="release-colab")
    assert ns["benchlib_spec"] == str(repo), "a clone into the working folder (/content/benchlib)"


def test_install_cell_without_anything_to_install_says_what_to_set(monkeypatch, tmp_path):
    with pytest.raises(RuntimeError, match="set BENCHLIB_PIP_SPEC"):
        _run_install_cell(monkeypatch, tmp_path, KAGGLE_KERNEL_RUN_TYPE="Batch")
