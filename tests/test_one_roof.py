"""One roof per page: rows placed under different roofs as they were measured are shown under the one roof the
results folder's ceilings file holds now, in every table, sentence and figure of the page."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from benchlib.report.figures import roofline as roofline_figures  # noqa: E402
from benchlib.report.findings import key  # noqa: E402
from benchlib.report.findings.work import roofline_sentences  # noqa: E402
from benchlib.report.readback.folders import load_rows  # noqa: E402
from benchlib.report.readback.roofs import page_ceilings, placed  # noqa: E402
from benchlib.report.tables import summaries  # noqa: E402
from benchlib.roofline.measured import Ceilings  # noqa: E402
from benchlib.run.columns import roof_columns  # noqa: E402
from benchlib.store.atomic import atomic_write_json  # noqa: E402
from benchlib.store.layout import ResultsLayout  # noqa: E402
from benchlib.store.rows import write_row  # noqa: E402
from benchlib.store.schema import BATCHES_PER_THROUGHPUT_REPEAT, FORMAT_VERSION, REQUIRED_COLUMNS  # noqa: E402

BANDWIDTH = 6.43e9
EARLY = Ceilings(device="cpu", device_name="Some CPU", peak_flops_per_s={"fp32": 29.5e9},
                 bandwidth_bytes_per_s=BANDWIDTH, machine="m", conv_flops_per_s={"fp32": 29.5e9})  # ridge 4.59
NOW = Ceilings(device="cpu", device_name="Some CPU", peak_flops_per_s={"fp32": 32.3e9},
               bandwidth_bytes_per_s=BANDWIDTH, machine="m", conv_flops_per_s={"fp32": 32.3e9})  # ridge 5.02


def _row(model: str, ceilings: Ceilings, train_samples_per_s: float) -> dict:
    row = {**dict.fromkeys(REQUIRED_COLUMNS), "format_version": FORMAT_VERSION, "study": "s", "machine": "m",
           "hardware": "cpu", "device_name": "Some CPU", "model": model, "batch_size": 64, "variant": "default",
           "precision": "fp32", "quantization": "none", "tf32": False, "status": "ok", "seed": 0, "world_size": 1,
           "run_id": f"cpu__{model}__bs64__default__fp32__abc__seed0", "finished_utc": "2026-01-01T00:00:00",
           "train_flops_per_sample": 1e9, "train_samples_per_s": train_samples_per_s,
           "train_arithmetic_intensity": 50.0, "flops_per_sample": 0.3e9, "infer_samples_per_s": 50.0,
           "arithmetic_intensity": 40.0}
    return {**row, **roof_columns(row, ceilings, "cpu")}


@pytest.fixture
def folder(tmp_path):
    """Two pairs' rows: the first placed under the roof of 29.5 GFLOP/s (and above it), the second under the roof
    that rose to 32.3 GFLOP/s while it ran; the ceilings file holds the risen roof."""
    first = _row("resnet18", EARLY, 31.5)  # 31.5 GFLOP/s: 107% of the early roof, 97.5% of today's
    second = _row("mobilenet_v2", NOW, 20.0)
    assert first["above_roof"] and first["roof_peak_flops_per_s"] == 29.5e9
    for row in (first, second):  # one step and one throughput repeat, as long as the figures say
        write_row(tmp_path, row, {"train_step_s": [64 / row["train_samples_per_s"]],
                                  "infer_repeat_s": [64 * BATCHES_PER_THROUGHPUT_REPEAT / row["infer_samples_per_s"]]})
    atomic_write_json(ResultsLayout.of(tmp_path).ceilings_path("m", "cpu"), NOW.to_json())
    return tmp_path


def test_every_row_is_placed_under_the_roof_the_page_shows(folder):
    df = load_rows([str(folder)])
    assert set(df["roof_peak_flops_per_s"]) == {32.3e9}
    for _, row in df.iterrows():  # the very placement that records a row, under today's roof
        recorded = roof_columns(row.to_dict(), NOW, "cpu")
        for column in ("roof_fraction", "infer_roof_fraction", "train_roof_flops_per_s", "above_roof"):
            assert row[column] == pytest.approx(recorded[column]), column
    assert not df["above_roof"].any()


def test_sentences_tables_and_figure_read_one_roof(folder, tmp_path_factory):
    df = load_rows([str(folder)])
    good = df.assign(device=df["hardware"])
    lines = roofline_sentences(good)
    assert len(lines) == 2 and all("ridge at 5.02" in line for line in lines), lines
    assert not any("4.59" in line for line in lines)
    assert any("97.5% of its fp32 roof" in line for line in lines), lines
    text = key.as_markdown(key.key_findings(df, []))
    assert "ridge at 5.02" in text and "4.59" not in text and "above their measured roof" not in text
    assert summaries.above_roof_rows(df).empty
    table = summaries.roof_table(df)
    assert set(table["train_roof_flops_per_s"]) == {32.3e9}
    ceilings = page_ceilings([str(folder)])
    assert [c.peak_flops_per_s for c in ceilings] == [{"fp32": 32.3e9}]
    fig = roofline_figures.device_rooflines(df, ceilings, tmp_path_factory.mktemp("figures"))[0]
    ax = fig.axes[0]
    roofs = [line for line in ax.get_lines() if line.get_label().startswith("measured")]
    assert len(roofs) == 1 and max(roofs[0].get_ydata()) == pytest.approx(32.3e9)
    assert "ridge 5.02 FLOP/byte" in roofs[0].get_label()
    assert not [t for t in ax.texts if "above roof" in t.get_text()]


def test_a_row_without_a_shown_roof_is_placed_under_none():
    row = _row("resnet18", EARLY, 10.0)
    df = placed(pd.DataFrame([row]), [])
    assert df["roof_fraction"].isna().all() and df["roof_peak_flops_per_s"].isna().all()
    assert df["achieved_train_flops_per_s"].iloc[0] == pytest.approx(10e9)  # the measurement stays


def test_two_folders_of_one_device_show_the_higher_roof(tmp_path):
    for name, ceilings in (("a", EARLY), ("b", NOW)):
        atomic_write_json(ResultsLayout.of(tmp_path / name).ceilings_path("m", "cpu"), ceilings.to_json())
    shown = page_ceilings([str(tmp_path / "a"), str(tmp_path / "b")])
    assert len(shown) == 1 and shown[0].peak_flops_per_s == {"fp32": 32.3e9}
