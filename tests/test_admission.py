"""One admission for every entry point: a single configuration its device cannot run is refused in one line
before any work; in a grid it is a skipped row with the reason. bf16 is faked off (``BENCHLIB_CPU_BF16``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

from benchlib.cli import main
from benchlib.env.devices import CPU_BF16_ENV, bf16_supported, cpu_model_name
from benchlib.errors import ConfigError
from benchlib.run import admission
from benchlib.run.admission import Names, admit
from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.spec.variants import PRESETS, apply_variant, parse_variant

TINY_RUN = ["--model", "resnet18", "--data", "synthetic", "--device", "cpu", "--batch-size", "8",
            "--image-size", "32"]
COMMANDS = {
    "run": ["run", *TINY_RUN, "--steps", "3", "--no-save", "--json", "--set", "precision=amp_bf16"],
    "run-saved": ["run", *TINY_RUN, "--steps", "3", "--json", "--set", "precision=amp_bf16"],
    "layers": ["layers", *TINY_RUN, "--steps", "3", "--set", "precision=amp_bf16"],
    "profile": ["profile", *TINY_RUN, "--set", "precision=amp_bf16"],
}
BF16_REFUSED = (f"command line: --set precision=amp_bf16: this CPU ({cpu_model_name()}) has no bf16 kernels "
                "(oneDNN reports bf16 unsupported); allowed: precision fp32")


@pytest.fixture
def no_bf16(monkeypatch):
    monkeypatch.setenv(CPU_BF16_ENV, "off")
    assert not bf16_supported("cpu")


def _one_line(capsys) -> str:
    out = capsys.readouterr()
    assert "Traceback" not in out.err and out.err.count("\n") == 1, out.err
    assert out.out == "", "nothing printed on stdout"
    return out.err.removeprefix("benchlib: error: ").strip()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_single_configuration_the_cpu_cannot_run_is_refused_in_one_line(no_bf16, capsys, tmp_path, command):
    assert main([*COMMANDS[command], "--results-dir", str(tmp_path)]) == 2
    assert _one_line(capsys) == BF16_REFUSED
    assert not any(tmp_path.iterdir()), "no row, no ceilings, no profile written"


def test_the_environment_override_reaches_a_fresh_process(tmp_path):
    env = {**os.environ, CPU_BF16_ENV: "off", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "benchlib", *COMMANDS["run"], "--results-dir", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == f"benchlib: error: {BF16_REFUSED}\n"
    assert not any(tmp_path.iterdir())


def test_the_override_says_on_off_or_unset(monkeypatch):
    monkeypatch.setenv(CPU_BF16_ENV, "on")
    assert bf16_supported("cpu")
    monkeypatch.setenv(CPU_BF16_ENV, "maybe")
    with pytest.raises(ConfigError, match="BENCHLIB_CPU_BF16=maybe; allowed: off, on, or unset"):
        bf16_supported("cpu")


@pytest.mark.parametrize("argv, words", [
    (["--variant", "gpu-amp"], "command line: --variant gpu-amp: fp16 autocast training is not supported on CPU; "
                               "allowed: precision fp32, amp_bf16"),
    (["--set", "tf32=true"], "command line: --set tf32=true: tf32 is a CUDA knob: it would be ignored on cpu; "
                             "allowed: tf32 false"),
    (["--variant", "gpu-amp", "--set", "precision=amp_bf16"], "command line: --variant gpu-amp: fp16 autocast"),
])
def test_the_refusal_names_the_flag_that_asked_and_the_values_the_device_runs(monkeypatch, capsys, argv, words):
    monkeypatch.setenv(CPU_BF16_ENV, "on")
    assert main(["run", *TINY_RUN, "--no-save", *argv]) == 2
    assert _one_line(capsys).startswith(words)


def test_a_grid_records_what_the_device_cannot_run_as_a_skipped_row(no_bf16, capsys, tmp_path):
    import benchlib

    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(4, 3))
    df = benchlib.benchmark(net, name="tiny", hardware="cpu", batch_sizes=[8], image_size=32, steps=2,
                            variants=["cpu-default", {"name": "bf16", "precision": "amp_bf16"}], results_dir=tmp_path,
                            settings={"latency_repeats": 3, "warmup_steps": 1}, progress=None)
    status = dict(zip(df["variant"], df["status"]))
    assert status == {"cpu-default": "ok", "bf16": "skipped"}
    assert list(df.columns[:7]) == ["model", "hardware", "batch_size", "variant", "status", "train_samples_per_s",
                                    "train_step_s_median"], "the key figures first"
    error = df.set_index("variant").loc["bf16", "error"]
    assert f"this CPU ({cpu_model_name()}) has no bf16 kernels" in error
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "cannot run" in ln]
    assert len(warned) == 1 and "variant 'bf16' cannot run on cpu" in warned[0], warned


def test_a_study_admits_its_grid_with_the_variant_skipped(no_bf16, tmp_path, capsys):
    from benchlib.run.admission import load_study

    path = tmp_path / "s.yaml"
    path.write_text("study: s\nhardware: [cpu]\nmodels: [squeezenet1_1]\nbatch_sizes: [8, 16]\n"
                    "variants: [cpu-default, {name: cpu-bf16, precision: amp_bf16}]\n")
    cfg = load_study(path)
    assert {c.settings.variant for c in cfg.all_configs()} == {"cpu-default", "cpu-bf16"}, "the grid is whole"
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "cannot run" in ln]
    assert len(warned) == 1 and "variant 'cpu-bf16' cannot run on cpu" in warned[0], "one line per variant"


def test_admit_returns_what_runs_and_what_is_skipped_with_why(no_bf16):
    base = RunSettings.of(dataset="synthetic", image_size=32)
    grid = [RunConfig("s", "auto", "squeezenet1_1", 8, apply_variant(base, v))
            for v in (PRESETS["cpu-default"], parse_variant({"name": "cpu-bf16", "precision": "amp_bf16"}, "test"))]
    got = admit(grid, Names("s.yaml"), settings=base)
    assert [c.settings.variant for c in got.configs] == ["cpu-default"] and got.hardware == {"auto": "cpu"}
    assert got.configs[0].hardware == "cpu", "auto resolved"
    ((skipped, why),) = got.skipped
    assert skipped.settings.variant == "cpu-bf16" and "no bf16 kernels" in why
    with pytest.raises(ConfigError, match=r"^where: --set precision=amp_bf16: this CPU .*allowed: precision fp32$"):
        admit(grid[1:], Names("where", knobs={"precision": "--set precision=amp_bf16"}), single=True)


def test_a_measurement_outcome_that_escapes_a_single_command_is_one_line(no_bf16, monkeypatch, capsys):
    monkeypatch.setattr(admission, "why_not", lambda s, device: None)  # admission lets it through: measure skips it
    assert main([*COMMANDS["run"], "-q"]) == 2  # -q: no progress line before it
    line = _one_line(capsys)
    assert line.startswith("skipped: this CPU") and "bf16" in line
    with pytest.raises(Exception, match="no bf16 kernels"):
        main(["--debug", *COMMANDS["run"]])


# ---------------------------------------------------------------- every entry point goes through admit

@pytest.fixture
def admit_raises(monkeypatch):
    def refuse(*args, **kwargs):
        raise ConfigError("admission was asked")

    monkeypatch.setattr(admission, "admit", refuse)


@pytest.mark.parametrize("argv", [
    ["run", *TINY_RUN, "--no-save"],
    ["run", *TINY_RUN, "--no-save", "--nproc-per-node", "2"],
    ["layers", *TINY_RUN],
    ["profile", *TINY_RUN],
])
def test_every_command_about_one_configuration_is_admitted(admit_raises, capsys, argv):
    assert main(argv) == 2
    assert _one_line(capsys) == "admission was asked"


def test_benchmark_compare_and_a_study_file_are_admitted(admit_raises, tmp_path):
    import benchlib
    from benchlib.run.admission import load_study

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    with pytest.raises(ConfigError, match="admission was asked"):
        benchlib.benchmark(net, name="a", hardware="cpu", image_size=32, results_dir=tmp_path, progress=None)
    with pytest.raises(ConfigError, match="admission was asked"):
        benchlib.compare(net, variants=["cpu-default", "cpu-quantized"], hardware="cpu", image_size=32,
                         results_dir=tmp_path, progress=None)
    path = tmp_path / "s.yaml"
    path.write_text("study: s\nhardware: [cpu]\nmodels: [squeezenet1_1]\nbatch_sizes: [8]\n")
    with pytest.raises(ConfigError, match="admission was asked"):
        load_study(path)
    with pytest.raises(ConfigError, match="admission was asked"):
        load_study(path, check_devices=False)
    assert not (tmp_path / "rows").exists()
