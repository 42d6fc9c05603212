"""Tampered rows are not believed: a row is checked against its own identity and its raw samples on every read;
one that fails is listed with why, never drawn, and a resume measures it again (its file kept aside)."""
from __future__ import annotations

import json
import shutil
import time
import warnings

import numpy as np
import pytest

from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.store.layout import ResultsLayout
from benchlib.store.rows import complete_row, invalid_rows, read_results, read_samples, write_row
from benchlib.store.samples_file import parse_samples, samples_text
from benchlib.store.schema import FORMAT_VERSION, REQUIRED_COLUMNS

STEPS = [0.10, 0.12, 0.11, 0.13, 0.09, 0.10]
LATENCY = [0.004, 0.005, 0.0045, 0.0042, 0.0048, 0.0044, 0.0041, 0.0046]


def _config(batch: int = 8, **settings) -> RunConfig:
    return RunConfig("s", "cpu", "resnet18", batch, RunSettings.of(train_steps=6, **settings))


def _row(cfg: RunConfig) -> dict:
    """A row as benchlib writes one, its figures those of STEPS and LATENCY (numbers worked out by hand)."""
    s = cfg.settings
    row = {**dict.fromkeys(REQUIRED_COLUMNS), "format_version": FORMAT_VERSION}
    row.update(study=cfg.study, run_id=cfg.run_id, settings_digest=cfg.run_id.split("__")[-2],
               settings_json=json.dumps(s.flat(), sort_keys=True), machine="m", hardware="cpu", model=cfg.model,
               batch_size=cfg.batch_size, variant=s.variant, precision=s.knobs.precision, seed=s.seed,
               world_size=1, status="ok", per_rank_batch_size=cfg.batch_size, lr=s.lr, image_size=s.image_size,
               dataset=s.dataset, finished_utc="2026-01-01T00:00:00",
               train_steps=6, train_step_s_median=0.105, train_samples_per_s=cfg.batch_size * 6 / 0.65,
               latency_n=8, latency_ms_p50=4.45)
    return row


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "r"
    for batch in (8, 16):
        write_row(out, _row(_config(batch)), {"train_step_s": STEPS, "latency_s": LATENCY})
    return out


def _file(folder, batch: int = 8):
    return ResultsLayout.of(folder).row_path("m", _config(batch).run_id)


def _edit(folder, batch: int = 8, **change) -> None:
    path = _file(folder, batch)
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


def test_rows_that_are_what_they_say_are_read_without_a_word(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = read_results([folder])
        assert len(df) == 2 and invalid_rows([folder]).empty
    assert complete_row(folder, "m", _config().run_id) is not None


def _refused(folder, words: str, batch: int = 8) -> None:
    """The row is out of every table, listed with why, warned about in one line naming its file, and not kept on
    resume."""
    name = _file(folder, batch).name
    with pytest.warns(UserWarning) as caught:
        df = read_results([folder])
    said = [str(w.message) for w in caught if name in str(w.message)]
    assert len(said) == 1 and words in said[0] and "\n" not in said[0], said
    assert _config(batch).run_id not in set(df["run_id"]) and len(df) == 1
    with pytest.warns(UserWarning):
        bad = invalid_rows([folder])
    assert list(bad["path"]) == [str(_file(folder, batch))] and words in bad.loc[0, "reason"]
    assert complete_row(folder, "m", _config(batch).run_id) is None


def test_a_figure_that_is_text_is_not_kept_on_resume(folder):
    _edit(folder, train_samples_per_s="fast")
    _refused(folder, "train_samples_per_s 'fast' is not a number")


@pytest.mark.parametrize("column, value", [("train_samples_per_s", 80.0), ("train_step_s_median", 0.1),
                                           ("latency_ms_p50", 4.0), ("train_steps", 7)])
def test_a_plausible_edited_figure_is_not_what_its_samples_give(folder, column, value):
    _edit(folder, **{column: value})
    _refused(folder, f"its {column} {value!r} is not what its")


def test_a_figure_whose_samples_are_gone_is_not_believed(folder):
    ResultsLayout.of(folder).samples_path("m", _config().run_id).unlink()
    _refused(folder, "has no samples file behind it")


def test_a_row_file_of_another_configuration_is_not_believed(folder):
    """The file of batch 8 holds batch 16's row (copied over it, samples and all)."""
    layout = ResultsLayout.of(folder)
    shutil.copy(_file(folder, 16), _file(folder))
    shutil.copy(layout.samples_path("m", _config(16).run_id), layout.samples_path("m", _config().run_id))
    _refused(folder, "but it holds the row of " + _config(16).run_id)


@pytest.mark.parametrize("change, words", [
    ({"run_id": "placeholder"}, "its run id is not the one its settings make"),
    ({"settings_json": json.dumps({**_config().settings.flat(), "lr": 0.5}, sort_keys=True)},
     "is not the digest of its settings"),
    ({"variant": "gpu-amp"}, "its variant 'gpu-amp' is not its settings' 'default'"),
])
def test_a_run_id_its_settings_do_not_make_is_not_believed(folder, change, words):
    """The row claims an identity its recorded settings do not give (its file renamed to match)."""
    layout = ResultsLayout.of(folder)
    row = json.loads(_file(folder).read_text())
    if "run_id" in change:  # another configuration's id: batch 8's row under batch 32's id, its files renamed
        change = {"run_id": _config(32).run_id}
        for path in (_file(folder), layout.samples_path("m", _config().run_id)):
            text = path.read_text().replace(_config().run_id, change["run_id"])
            path.unlink()
            target = layout.row_path("m", change["run_id"]) if path.suffix == ".json" else layout.samples_path(
                "m", change["run_id"])
            target.write_text(text if path.suffix != ".json" else json.dumps({**row, **change}))
        name = layout.row_path("m", change["run_id"]).name
        with pytest.warns(UserWarning, match=name):
            assert _config(32).run_id not in set(read_results([folder])["run_id"])
        return
    _edit(folder, **change)
    _refused(folder, words)


@pytest.mark.parametrize("garbage", ["garbage\n", "m,train_step_s,6,0.1\n", "\n", "x", "\x00\x01"])
def test_a_samples_file_with_anything_appended_is_out_of_form(folder, garbage):
    path = ResultsLayout.of(folder).samples_path("m", _config().run_id)
    with path.open("a", encoding="utf-8") as f:
        f.write(garbage)
    _refused(folder, "is not a samples file")


def test_the_samples_parser_is_strict_and_reads_back_what_was_written():
    text = samples_text("r", "m", {"train_step_s": STEPS, "loss": [2.3, float("nan")]})
    back = parse_samples(text, "r", "m")
    assert list(back) == ["train_step_s", "loss"] and back["train_step_s"] == STEPS
    for bad, words in [(text.replace("r,m,loss,1", "r,m,loss,3"), "indexes do not run"),
                       (text.replace("0.12", "0.12 s"), "line 3 is"),
                       (text.replace("r,m,train_step_s,0", "q,m,train_step_s,0"), "not a sample of r on m"),
                       (text[:-1], "no line break"), ("run_id,value\n", "its header")]:
        with pytest.raises(ValueError, match=words):
            parse_samples(bad, "r", "m")


def test_reading_samples_is_cheap():
    """One samples file read per row on every report: a run's few hundred samples in well under a millisecond
    each, a long run's 20 000 in a few tens (the bound is loose: a busy 2-core host)."""
    small = samples_text("r", "m", {"train_step_s": np.linspace(0.1, 0.2, 300)})
    big = samples_text("r", "m", {"latency_s": np.linspace(0.001, 0.002, 20_000)})
    start = time.perf_counter()
    for _ in range(100):
        parse_samples(small, "r", "m")
    assert (time.perf_counter() - start) / 100 < 0.01
    start = time.perf_counter()
    assert len(parse_samples(big, "r", "m")["latency_s"]) == 20_000
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_the_figures_are_computed_again_as_the_row_computed_them(n):
    """The check's percentiles are numpy's (``instruments.samples``), without numpy in the store."""
    from benchlib.instruments.samples import Samples
    from benchlib.store.integrity import quantile

    values = list(np.random.default_rng(n).lognormal(-2, 0.3, n))
    for q in (25, 50, 75, 90, 99):
        assert quantile(values, q) == pytest.approx(Samples.of(values).percentile(q), rel=1e-12)


def test_read_samples_reads_the_same_file_strictly(folder):
    frame = read_samples(folder, {"machine": "m", "run_id": _config().run_id})
    assert list(frame.columns) == ["run_id", "machine", "series", "index", "value"]
    assert frame[frame["series"] == "train_step_s"]["value"].tolist() == STEPS


def test_a_resume_measures_a_row_that_failed_its_check_again_keeping_the_old_file(folder, monkeypatch):
    """run_pair sets the tampered row aside (superseded/<stamp>-failed-check/, samples with it), says why in one
    line, and measures the configuration again; the good row is kept."""
    from benchlib.run import record

    _edit(folder, train_samples_per_s=80.0)
    measured = []

    def fake_record(cfg, results_dir, **kwargs):
        measured.append(cfg.run_id)
        assert not _file(folder).exists(), "the tampered row is out of the way before it is measured again"
        row = _row(cfg)
        write_row(results_dir, row, {"train_step_s": STEPS, "latency_s": LATENCY})
        return row

    monkeypatch.setattr(record, "record", fake_record)
    monkeypatch.setattr(record, "machine_name", lambda: "m")
    lines: list[str] = []
    settings = _config().settings
    record.run_pair("s", "cpu", "resnet18", [8, 16], settings, folder, progress=lines.append, supersede=False)
    assert measured == [_config().run_id], "only the row that failed its check is measured again"
    said = [ln for ln in lines if "failed its check" in ln]
    assert len(said) == 1 and "train_samples_per_s 80.0" in said[0] and "failed-check" in said[0], lines
    kept = list((folder / "superseded").glob("*-failed-check/rows/*.json"))
    assert [p.name for p in kept] == [_file(folder).name]
    assert json.loads(kept[0].read_text())["train_samples_per_s"] == 80.0
    assert list((folder / "superseded").glob("*-failed-check/samples/*.csv"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_results([folder])) == 2
