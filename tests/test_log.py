"""One message channel: benchlib's logger, -v/-q on the command line, lines relayed from child processes."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from benchlib import log
from benchlib.cli import main
from benchlib.pipeline import progress

RUN = ["run", "--model", "squeezenet1_1", "--data", "digits", "--device", "cpu", "--batch-size", "16", "--steps", "2",
       "--set", "train_subset=64", "--set", "test_subset=32", "--set", "warmup_steps=1", "--set", "latency_repeats=3",
       "--set", "infer_warmup_batches=1", "--no-save"]


@pytest.fixture(autouse=True)
def _default_level(monkeypatch):
    monkeypatch.delenv(log.LEVEL_ENV, raising=False)
    yield
    log.configure(logging.INFO)
    monkeypatch.delenv(log.LEVEL_ENV, raising=False)


def test_quiet_and_verbose_set_what_reaches_stderr_and_child_processes(capsys, tmp_path):
    assert main(["-q", *RUN, "--results-dir", str(tmp_path / "q")]) == 0
    quiet = capsys.readouterr()
    assert "[benchlib]" not in quiet.err and "status: ok" in quiet.out, "results still print"
    assert log.os.environ[log.LEVEL_ENV] == "WARNING", "kernels and ranks started now inherit it"
    assert main([*RUN, "-v", "--results-dir", str(tmp_path / "v")]) == 0  # after the command works too
    loud = capsys.readouterr().err.splitlines()
    assert any(ln.startswith("[benchlib] benchlib.") and "settings {" in ln for ln in loud), "debug names its module"
    assert any(ln.startswith("[benchlib] set up on ") for ln in loud)
    with pytest.raises(SystemExit):
        main(["-q", "-v", *RUN])


def test_from_python_lines_go_to_stderr_unless_the_application_takes_the_logger(capsys, caplog):
    log.info("hello")
    assert capsys.readouterr().err == "[benchlib] hello\n"
    for handler in list(log.logger.handlers):  # a fresh process whose user quieted benchlib before its first line
        log.logger.removeHandler(handler)
    log.logger.setLevel(logging.WARNING)
    log.info("progress")
    log.warning("careful")
    assert capsys.readouterr().err == "benchlib: warning: careful\n", "the level set by hand stays"
    log.use_application_logging()
    with caplog.at_level(logging.INFO, logger="benchlib"):
        log.info("to the application")
    assert "to the application" in caplog.text and capsys.readouterr().err == ""


def test_a_childs_lines_are_relayed_as_they_come_with_the_label(capfd):
    """A kernel's stderr goes into its notebook (here: a pipe); its benchlib lines reach the user through the
    relay file, prefixed with the pair; the parent's own lines are never written into it."""
    child = "from benchlib import log; log.info('epoch 1/1 done'); log.warning('machine drifted')"
    with progress.relay("pair 1/2 (cpu / resnet18)", every_s=0.05):
        log.info("the parent's own line")
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert "[benchlib] epoch 1/1 done" in done.stderr, "the child's own stderr (the notebook) keeps them too"
    err = capfd.readouterr().err.splitlines()
    assert "[benchlib] pair 1/2 (cpu / resnet18): epoch 1/1 done" in err
    assert "benchlib: warning: pair 1/2 (cpu / resnet18): machine drifted" in err
    assert err.count("[benchlib] the parent's own line") == 1, "not relayed back to itself"
    assert log.PROGRESS_FILE_ENV not in log.os.environ, "the relay's file is the block's only"
