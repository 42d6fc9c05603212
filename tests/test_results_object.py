"""`benchlib.Results`: a study's folders read once, each section of the report one method, nothing read twice."""
from __future__ import annotations

import pytest
from conftest import TINY


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from benchlib.run.record import record
    from benchlib.spec.settings import RunConfig, settings_from_mapping

    root = tmp_path_factory.mktemp("results") / "study"
    s = settings_from_mapping(TINY, "test")
    assert record(RunConfig("r", "cpu", "squeezenet1_1", 8, s), root, progress=None)["status"] == "ok"
    return root


@pytest.mark.slow
def test_every_section_is_a_method_and_each_kind_of_file_is_read_once(folder, tmp_path, monkeypatch):
    import benchlib
    from benchlib.report.display import layers, results, summary
    from benchlib.report.readback import samples

    counts: dict[str, int] = {}

    def counted(name, real):
        def read(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return real(*args, **kwargs)
        return read

    for name in ("load_layer_reports", "load_profiles", "page_ceilings", "manifest_table",
                 "load_predictions"):
        monkeypatch.setattr(results, name, counted(name, getattr(results, name)))
    for name in ("read_samples", "load_noise_floors", "read_layer_file"):  # a run's own files, for every section
        monkeypatch.setattr(samples, name, counted(name, getattr(samples, name)))
    shown: list = []
    for module in (summary, layers, summary.show):
        monkeypatch.setattr(module, "display", shown.append)
    r = benchlib.Results.load([folder], tmp_path / "figures")
    assert len(r.rows) == 1 and r.rows["status"].iloc[0] == "ok"
    assert "1 measured" in r.heading("t").data and "squeezenet1_1" in r.key_findings().data
    for section in ("results", "how_it_was_run", "metric_figures", "speedups", "variants", "device_scaling",
                    "repeats", "rooflines", "layers", "predictions", "profile_breakdowns", "telemetry", "failures",
                    "complexity", "environment"):
        getattr(r, section)()
    r.rooflines()
    r.how_it_was_run()
    r.results()
    r.key_findings()
    assert counts.get("read_samples") == 1 and counts.get("load_noise_floors") == 1, counts  # shared by sections
    assert counts and all(n == 1 for n in counts.values()), counts
    assert any("Rooflines" in str(getattr(x, "data", "")) for x in shown), "a section drew from what was read"
