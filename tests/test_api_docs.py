"""docs/api.md's examples run as written: every ```python block, in order, in one fresh process."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import seed_ceilings

API_DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


@pytest.mark.slow
def test_the_api_page_examples_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", API_DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4, "the page shows the one call, compare, a factory from a package and registration"
    script = tmp_path / "examples.py"
    script.write_text("\n\n".join(blocks))
    seed_ceilings(tmp_path / "results" / "mine")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SmallCNN" in proc.stdout, "the first example prints its table"
    from benchlib.store.rows import read_results

    rows = read_results([tmp_path / "results" / "mine"])
    assert set(rows["model"]) == {"SmallCNN", "Sequential", "mynets:make_net", "Probe"}, "every example recorded"
    assert (rows["status"] == "ok").all()
