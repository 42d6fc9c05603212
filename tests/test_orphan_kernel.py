"""One writer, even for an orphan: a kernel whose driver was killed holds the folder's lock and writes nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchlib.errors import FolderLocked
from benchlib.store.lock import folder_lock

# The driver: holds the folder's lock as a study does and runs a notebook in a kernel. The kernel imports
# benchlib's writer while its driver lives, then waits for it to die and at once (well before ipykernel's own
# 1 s poll ends it) tries to write a row into the folder, and says what happened outside the folder.
_DRIVER = """
import sys
from pathlib import Path
import nbformat
from benchlib.pipeline import publish
from benchlib.store.lock import folder_lock
folder, said = Path(sys.argv[1]), Path(sys.argv[2])
cell = f'''
import fcntl, json, os, time
from pathlib import Path
from benchlib.errors import Orphaned
from benchlib.store.atomic import atomic_write_json
parent = os.getppid()
Path({str(said)!r} + ".ready").write_text(str(parent))
while os.getppid() == parent:
    time.sleep(0.005)
lock = Path({str(folder)!r}) / ".benchlib-study.lock"
fd = os.open(lock, os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held = False
except BlockingIOError:
    held = True
try:
    atomic_write_json(Path({str(folder)!r}) / "rows" / "late.json", {{"late": True}})
    outcome = "written"
except Orphaned as exc:
    outcome = str(exc)
Path({str(said)!r}).write_text(json.dumps({{"lock_held": held, "outcome": outcome}}))
'''
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 0", metadata={"tags": ["parameters"]}),
                                     nbformat.v4.new_code_cell(cell)])
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
(folder / "in.ipynb").write_text(nbformat.writes(nb))
with folder_lock(folder):
    publish.execute(folder / "in.ipynb", folder / "out.ipynb", {"x": 1}, cwd=folder, cell_timeout_s=120,
                    progress=False)
"""


def _wait_for(path: Path, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists() and path.stat().st_size:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.slow
def test_a_kernel_whose_driver_is_killed_holds_the_lock_and_writes_nothing(tmp_path):
    folder, said = tmp_path / "results", tmp_path / "said.json"
    folder.mkdir()
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(folder), str(said)])
    try:
        assert _wait_for(Path(f"{said}.ready"), 120), "the kernel never started"
        assert int(Path(f"{said}.ready").read_text()) == driver.pid, "the kernel is the driver's child"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        assert _wait_for(said, 30), "the kernel said nothing"
    finally:
        if driver.poll() is None:
            driver.kill()
    what = json.loads(said.read_text())
    assert what["lock_held"] is True, "the orphaned kernel still holds the folder (the driver's lock, inherited)"
    assert what["outcome"] == (f"not writing {folder / 'rows' / 'late.json'}: the study process {driver.pid} that "
                               "started this kernel is gone")
    assert not (folder / "rows" / "late.json").exists()
    assert not list((folder / "rows").glob(".*.tmp")), "its temporary file removed"
    # the kernel leaves within about a second (ipykernel's poll of its parent): then the folder is free
    end = time.monotonic() + 30
    while True:
        try:
            with pytest.warns(UserWarning, match=f"taking over a lock of process {driver.pid}"), folder_lock(folder):
                break
        except FolderLocked:
            assert time.monotonic() < end, "the orphan's lock outlived it"
            time.sleep(0.2)


def test_a_process_not_started_by_a_driver_is_never_an_orphan(monkeypatch):
    """``benchlib run`` from a shell, a notebook in JupyterLab: no driver named, nothing refused."""
    code = ("import os; from benchlib.store import driver; print(driver.orphaned_of(), driver._DRIVER)")
    env = {**os.environ, "BENCHLIB_DRIVER_PID": "1"}  # a variable that names another process than the parent
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None"]
