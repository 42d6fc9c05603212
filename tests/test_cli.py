"""The command line: run --json, env --json, python -m benchlib."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from benchlib.cli import main
from benchlib.report.words import fmt
from benchlib.store.schema import REQUIRED_COLUMNS as ROW_COLUMNS


@pytest.mark.slow
def test_run_json_prints_one_row(capsys, tmp_path):
    code = main(["run", "--model", "squeezenet1_1", "--data", "digits", "--device", "cpu", "--batch-size", "16",
                 "--steps", "2", "--set", "train_subset=64", "--set", "test_subset=32", "--set", "warmup_steps=1",
                 "--set", "latency_repeats=3", "--set", "latency_budget_s=0", "--set", "infer_warmup_batches=1",
                 "--results-dir", str(tmp_path), "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(out) == 1
    row = json.loads(out[0])
    assert set(ROW_COLUMNS) <= set(row)
    assert row["batch_size"] == 16 and row["train_steps"] == 2 and row["status"] == "ok"
    assert len(list((tmp_path / "rows").glob("*.json"))) == 1


def test_run_json_holds_an_infinite_figure_as_null(capsys, monkeypatch):
    """A row may hold an infinity (a ratio over a zero-length window): --json prints null, as the row file does.
    The earlier spelling checked for NaN only, then dumped with allow_nan=False, and raised after the row was
    written."""
    from benchlib.run import columns

    real = columns.measured_row
    monkeypatch.setattr(columns, "measured_row", lambda m: {**real(m), "infer_samples_per_s": float("inf")})
    code = main(["run", "--model", "squeezenet1_1", "--data", "synthetic", "--device", "cpu", "--batch-size", "8",
                 "--image-size", "32", "--steps", "2", "--set", "warmup_steps=1", "--set", "latency_repeats=3",
                 "--set", "latency_budget_s=0", "--set", "infer_warmup_batches=1", "--no-save", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(out) == 1
    assert json.loads(out[0])["infer_samples_per_s"] is None


def test_commands_print_json_one_way():
    """Every --json goes through store.atomic.json_text (NaN and infinities as null, numpy scalars as numbers)."""
    import pathlib
    import re

    import benchlib

    root = pathlib.Path(benchlib.__file__).parent
    printed = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
               for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"print\(json\.dumps", line)]
    assert not printed, printed


def test_env_json(capsys):
    assert main(["env", "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    for key in ("torch", "torchvision", "python", "cpu_model", "cpus_usable", "torch_num_threads",
                "default_tf32_matmul", "default_cudnn_benchmark", "cuda_available", "benchlib_version", "git_commit"):
        assert key in manifest


@pytest.mark.slow
def test_python_dash_m_and_exit_code():
    proc = subprocess.run([sys.executable, "-m", "benchlib", "study", "/nonexistent.yaml"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "benchlib: error: /nonexistent.yaml: params file not found; give a YAML file such as params/default.yaml"
    )
    # the command ends its process without Python's teardown (cli.entry): what it printed into a pipe (block
    # buffered, so lost unless flushed) arrives whole, with main's exit code
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-m", "benchlib", "env", "--json"], capture_output=True, text=True,
                          timeout=120, env=buffered)
    assert done.returncode == 0 and json.loads(done.stdout)["torchvision"], done.stderr[-2000:]


def test_flops_json(capsys):
    assert (
        main(
            ["flops", "--model", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-size", "4", "--json"]
        )
        == 0
    )
    c = json.loads(capsys.readouterr().out)
    for key in ("macs_per_sample", "flops_per_sample", "train_flops_per_sample", "params", "model_size_bytes",
                "activation_bytes_per_sample", "bytes_per_sample", "train_bytes_per_sample", "arithmetic_intensity",
                "train_arithmetic_intensity", "uncounted_ops"):
        assert key in c
    assert c["batch_size"] == 4 and c["num_classes"] == 10
    assert 2.5 < c["train_flops_per_sample"] / c["flops_per_sample"] < 3.5


def test_roofline_json_saves_ceilings(capsys, tmp_path):
    assert main(["roofline", "--device", "cpu", "--repeats", "3", "--results-dir", str(tmp_path), "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["peak_flops_per_s"]["fp32"] > 0 and c["bandwidth_bytes_per_s"] > 0
    assert len(c["samples"]["copy_s"]) == 3
    assert len(list((tmp_path / "ceilings").glob("*.json"))) == 1


def test_flops_and_roofline_bad_input(capsys):
    assert main(["flops", "--model", "vgg", "--json"]) == 2
    assert "--model 'vgg' is unknown" in capsys.readouterr().err
    assert main(["flops", "--model", "resnet18", "--batch-size", "0"]) == 2
    assert "--batch-size 0; allowed: integers >= 1" in capsys.readouterr().err
    assert main(["roofline", "--device", "cuda:3"]) == 2
    assert "hardware 'cuda:3' is not present" in capsys.readouterr().err


@pytest.mark.slow
def test_run_says_each_phase_and_where_it_wrote_the_row(capsys, tmp_path):
    code = main(["run", "--model", "squeezenet1_1", "--data", "digits", "--device", "cpu", "--batch-size", "16",
                 "--steps", "2", "--set", "train_subset=64", "--set", "test_subset=32", "--set", "warmup_steps=1",
                 "--set", "latency_repeats=3", "--set", "infer_warmup_batches=1", "--results-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0
    progress = [ln for ln in captured.err.splitlines() if ln.startswith("[benchlib] ")]
    for phase in ("set up on ", "epoch 1/1 done in ", "evaluating on the test split (32 samples)",
                  "timing inference: 1 warmup pass(es) at batch 1 and at 16; latency at each: at least 3 passes"):
        assert any(phase in ln for ln in progress), phase
    rows = list((tmp_path / "rows").glob("*.json"))
    assert len(rows) == 1 and progress[-1].startswith(f"[benchlib] row written to {rows[0]}")
    shown = dict(ln.strip().split(": ", 1) for ln in captured.out.splitlines())
    assert shown["status"] == "ok"
    assert shown["train_samples_per_s"].endswith(" samples/s") and shown["test_accuracy"].endswith("%")
    row = json.loads(rows[0].read_text())  # the p50 with its 95% interval over the passes, as the row holds it
    low, high = (fmt.significant(row[f"latency_ms_p50_ci_{end}"]) for end in ("low", "high"))
    assert re.fullmatch(rf"[\d.,]+ (µs|ms|s) \[{re.escape(low)}, {re.escape(high)}\]", shown["latency_ms_p50"]), \
        shown["latency_ms_p50"]
    assert re.fullmatch(r"[\d.,]+ (KiB|MiB|GiB)", shown["peak_rss_bytes"])
    assert not any(re.search(r"\d\.\d{4,}|e[+-]\d|None|nan", v) for v in shown.values()), shown


def test_progress_rewrites_one_status_line_on_a_terminal_and_writes_plain_lines_elsewhere(capsys):
    import sys

    from benchlib.cli.progress import Progress

    p = Progress(sys.stderr, terminal=True)
    p.heartbeat("epoch 1/2 step 3/10")
    p.heartbeat("epoch 1/2 step 4/10")
    p.line("epoch 1/2 done")  # through benchlib's logger, after the status line is cleared
    p.close()
    assert capsys.readouterr().err == ("\r\033[K[benchlib] epoch 1/2 step 3/10\r\033[K[benchlib] epoch 1/2 step 4/10"
                                       "\r\033[K[benchlib] epoch 1/2 done\n")
    p = Progress(sys.stderr, terminal=False)
    for step in range(5):
        p.heartbeat(f"step {step}")
    p.line("done")
    assert capsys.readouterr().err == "[benchlib] step 0\n[benchlib] done\n", "a log gets a heartbeat a minute at most"
    p = Progress(sys.stderr, terminal=False, shown=False)  # -q
    p.heartbeat("step 9")
    assert capsys.readouterr().err == ""


def test_profile_prints_its_tables_in_human_units(capsys, tmp_path):
    code = main(["profile", "--model", "squeezenet1_1", "--data", "digits", "--device", "cpu", "--batch-size", "8",
                 "--set", "train_subset=64", "--set", "test_subset=32", "--active", "2",
                 "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"backward +[\d.,]+ (µs|ms|s) +[\d.,]+%", out), out
    assert "self CPU time" in out and "device" not in out.split("tables, trace.json")[0], "no device columns on a CPU"
    assert not re.search(r"\d{5,} us|\d\.\d{5,}|e[+-]\d", out), "three significant digits, no raw microseconds"


@pytest.mark.parametrize("argv, said", [
    (["--steps", "5"], "active=5"), (["--active", "4"], "active=4"), ([], "active=3"),
    (["--steps", "5", "--active", "5"], "active=5"),
    (["--steps", "5", "--active", "3"], "--steps 5 and --active 3: both are the profiled steps"),
    (["--steps", "0"], "--steps 0; allowed: integers >= 1"),
])
def test_profile_steps_are_the_steps_the_profiler_records(monkeypatch, capsys, argv, said):
    from benchlib.errors import ConfigError
    from benchlib.run import profile

    def recorded(cfg, results_dir, *, wait, warmup, active, repeat=1):
        raise ConfigError(f"active={active}")

    monkeypatch.setattr(profile, "record_profile", recorded)
    assert main(["profile", "--model", "resnet18", "--data", "synthetic", "--image-size", "32", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_version_is_printed(capsys):
    from benchlib import __version__
    from benchlib.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"benchlib {__version__}"


def test_the_parser_answers_help_and_version_without_importing_torch():
    """A command's module (and torch with it) is imported when the command runs, not to parse the line."""
    import subprocess
    import sys

    code = ("import sys\nfrom benchlib.cli.parser import build_parser\nparser = build_parser()\n"
            "parser.format_help()\nargs = parser.parse_args(['run', '--model', 'resnet18'])\n"
            "print(args.func.__name__, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["cmd_run", "False"], out.stdout + out.stderr


def test_check_pages_refuses_a_folder_without_a_report_in_one_line(capsys, tmp_path):
    assert main(["check-pages", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "index.html does not exist" in err[0] and "allowed:" in err[0], err
