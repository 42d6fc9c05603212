"""Every file benchlib keeps across studies is bounded (docs/architecture.md says by what): set-aside folders,
manifests no row points to, a set-aside configuration's layer table and profile, a killed driver's relay file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from benchlib.pipeline.progress import RELAY_PREFIX, remove_left_relays
from benchlib.store.layout import ResultsLayout
from benchlib.store.rows import (
    ORPHAN_MANIFEST_AGE_S,
    SUPERSEDED_KEPT,
    prune_manifests,
    set_aside,
    write_table,
)


def _files_of(layout: ResultsLayout, machine: str, run_id: str, manifest: str = "m1") -> None:
    layout.row_path(machine, run_id).parent.mkdir(parents=True, exist_ok=True)
    layout.row_path(machine, run_id).write_text(json.dumps({"machine": machine, "run_id": run_id,
                                                            "manifest_id": manifest}))
    layout.layers_path(machine, run_id).parent.mkdir(parents=True, exist_ok=True)
    layout.layers_path(machine, run_id).write_text("{}")
    layout.profile_dir(machine, run_id).mkdir(parents=True, exist_ok=True)
    (layout.profile_dir(machine, run_id) / "profile.json").write_text("{}")


def test_a_set_aside_configuration_takes_its_layers_and_profile_and_only_the_newest_folders_stay(tmp_path):
    layout = ResultsLayout.of(tmp_path)
    for i in range(SUPERSEDED_KEPT + 5):
        _files_of(layout, "vm", f"r{i}")
        target = set_aside(layout, [{"machine": "vm", "run_id": f"r{i}"}], f"20260101-{i:06d}")
        assert target is not None and (target / "layers" / f"vm__r{i}.json").exists()
        assert (target / "profiles" / f"vm__r{i}" / "profile.json").exists()
        assert not layout.layers_path("vm", f"r{i}").exists() and not layout.profile_dir("vm", f"r{i}").exists()
    kept = sorted(p.name for p in (tmp_path / "superseded").iterdir())
    assert kept == [f"20260101-{i:06d}" for i in range(5, SUPERSEDED_KEPT + 5)], "the newest, by stamp"


def test_manifests_no_row_points_to_are_let_go_once_old(tmp_path):
    layout = ResultsLayout.of(tmp_path)
    _files_of(layout, "vm", "live", manifest="used")
    _files_of(layout, "vm", "aside", manifest="aside")
    set_aside(layout, [{"machine": "vm", "run_id": "aside"}], "20260101-000000")
    for name in ("used", "aside", "old-orphan", "new-orphan"):
        layout.manifest_path(name).parent.mkdir(parents=True, exist_ok=True)
        layout.manifest_path(name).write_text("{}")
    old = time.time() - ORPHAN_MANIFEST_AGE_S - 60
    for name in ("used", "aside", "old-orphan"):
        os.utime(layout.manifest_path(name), (old, old))
    gone = prune_manifests(layout)
    assert [p.stem for p in gone] == ["old-orphan"]
    assert sorted(p.stem for p in layout.manifest_files()) == ["aside", "new-orphan", "used"]
    layout.row_path("vm", "broken").write_text("{not json")
    os.utime(layout.manifest_path("new-orphan"), (old, old))
    assert prune_manifests(layout) == [], "an unreadable row may point to any manifest: none deleted"


def test_write_table_lets_orphan_manifests_go(tmp_path):
    layout = ResultsLayout.of(tmp_path)
    layout.manifest_path("orphan").parent.mkdir(parents=True)
    layout.manifest_path("orphan").write_text("{}")
    old = time.time() - ORPHAN_MANIFEST_AGE_S - 60
    os.utime(layout.manifest_path("orphan"), (old, old))
    write_table(layout)
    assert layout.manifest_files() == []


def test_a_killed_drivers_relay_file_is_removed_by_the_next_and_a_live_ones_kept(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{RELAY_PREFIX}{gone.stdout.strip()}-abc.log"
    live = tmp_path / f"{RELAY_PREFIX}{os.getppid()}-def.log"
    other = tmp_path / f"{RELAY_PREFIX}notapid.log"
    for path in (dead, live, other):
        path.write_text("line\n")
    assert remove_left_relays(tmp_path) == 1
    assert not dead.exists() and live.exists() and other.exists()
