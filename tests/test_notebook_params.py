"""Notebook parameters of the wrong type are refused in one line before any work: through papermill (the CLI, as a
user runs it), and the validator the notebooks call (``spec.notebook_params.check_parameters``) on its own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

import nbformat
import pytest

from benchlib.errors import ConfigError
from benchlib.spec.notebook_params import check_parameters
from benchlib.spec.study import parse_study

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# (papermill -p NAME VALUE, words the one line holds): each as papermill's CLI passes it (-p reads True, False,
# None, integers and floats; anything else is text)
BAD = [
    (("batch_size", "abc"), "unknown parameter 'batch_size' (given 'abc') (did you mean 'batch_sizes'?)"),
    (("batch_sizes", "[8, 16]"), "parameter 'batch_sizes' is '[8, 16]' (str); allowed: a list, e.g. -y"),
    (("threads", "abc"), "parameter 'threads' is 'abc' (str); allowed: an integer >= 1"),
    (("threads", -2), "parameter 'threads' is -2; allowed: an integer >= 1"),
    (("model", 123), "parameter 'model' is 123 (int); allowed: a torchvision name"),
    (("variants", "cpu-quantized"), "parameter 'variants' is 'cpu-quantized' (str); allowed: a list"),
    (("repeats", "abc"), "parameter 'repeats' is 'abc' (str); allowed: an integer"),
    (("resume", "false"), "parameter 'resume' is 'false' (str); allowed: True or False"),
]


def _cell_source(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))


def _namespace(notebook: str = "benchmark.ipynb", **injected) -> dict:
    """The kernel's globals after the parameters cell and papermill's injected assignments."""
    ns: dict = {"In": [""], "Out": {}}
    exec(_cell_source(notebook), ns)  # plain typed assignments: __annotations__ holds the declarations
    ns.update(injected)
    return ns


@pytest.mark.parametrize("given, words", BAD, ids=[f"{n}={v}" for (n, v), _ in BAD])
def test_each_bad_parameter_is_one_line_naming_it_its_value_and_what_is_allowed(given, words):
    name, value = given
    with pytest.raises(ConfigError) as exc:
        check_parameters(_namespace(**{name: value}))
    message = str(exc.value)
    assert message.startswith("notebook parameters: ") and words in message and "\n" not in message, message


@pytest.mark.parametrize("notebook", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_each_notebooks_defaults_pass_and_its_cell_after_the_injected_one_checks_them(notebook):
    check_parameters(_namespace(notebook))
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    after = cells[next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])) + 1]
    assert "check_parameters(globals())" in after.source.split("apply_threads")[0], "checked before any work"


def test_good_values_pass_and_the_kernels_own_globals_are_no_parameters():
    import os

    check_parameters(_namespace(batch_sizes=[8, 16], threads=2, resume=False, variants=["cpu-quantized"],
                                sweep={"threads": [1, 2]}, repeats=3, lr=0.1, data_path=None, os=os,
                                benchlib_spec="/wheel.whl", _i1="x", here=Path(".")))


@pytest.mark.parametrize("name, value, words", [
    ("lr", "0.1", "key 'lr' is '0.1' (str); allowed: a number > 0.0 and <= 10.0 (a number, not text"),
    ("models", "resnet18", "key 'models' is 'resnet18' (str); allowed: list of model references"),
    ("hardware", "cpu", "key 'hardware' is 'cpu' (str); allowed: list of"),
    ("batch_sizes", 8, "key 'batch_sizes' is 8 (int); allowed: list of integers"),
])
def test_a_study_file_value_of_the_wrong_type_is_refused(name, value, words):
    raw = {"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8], name: value}
    with pytest.raises(ConfigError) as exc:
        parse_study(raw, "s.yaml")
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_number_written_as_yaml_1_2_writes_it_is_a_number():
    from benchlib.spec import yamlfile

    assert yamlfile.load("lr: 1e-3\nw: 5E-4\nq: '0.1'\nn: 1e3x") == {"lr": 1e-3, "w": 5e-4, "q": "0.1", "n": "1e3x"}


@pytest.mark.parametrize("value", ["abc", "-2", "0", "1.5"])
def test_a_cell_timeout_that_is_no_number_of_seconds_is_one_line(value, capsys):
    from benchlib.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["study", "params/smoke.yaml", "--cell-timeout", value])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"benchlib: error: command line: --cell-timeout '{value}'; allowed: a whole number of "
                             "seconds >= 1"), err[0]


_ = Optional  # the parameters cells say Optional[...]: exec'd above with their own import


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("given, words", BAD, ids=[f"{n}={v}" for (n, v), _ in BAD])
def test_papermill_refuses_each_bad_parameter_before_any_work(tmp_path, given, words):
    """The papermill CLI, as a user runs it: the notebook stops at the cell after the injected one, its error one
    line, and nothing was measured (no results folder)."""
    name, value = given
    out, results = tmp_path / "out.ipynb", tmp_path / "results"
    cmd = [sys.executable, "-m", "papermill", str(NOTEBOOKS / "benchmark.ipynb"), str(out), "-k", "python3",
           "-p", "results_dir", str(results), "-p", name, str(value)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0
    executed = nbformat.read(out, as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ConfigError", errors
    assert words in errors[0]["evalue"] and "\n" not in errors[0]["evalue"], errors[0]["evalue"]
    failing = next(c for c in executed.cells if any(o.get("output_type") == "error" for o in c.get("outputs", [])))
    assert "check_parameters(globals())" in failing.source
    assert not results.exists(), "nothing measured, nothing written"
