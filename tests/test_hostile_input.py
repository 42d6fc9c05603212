"""Hostile and mistaken input: refused before work, in one line naming the problem and what is allowed,
with a non-zero exit, and never at the cost of an earlier result.

Every case runs against a results root that already holds a measured study; the fixture checks that no
file of it changed.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

from benchlib.cli import main
from benchlib.run.record import run_pair
from benchlib.spec.settings import RunSettings
from benchlib.store import rows as store_rows
from benchlib.store.rows import invalid_rows, read_results

TINY = dict(dataset="digits", image_size=32, train_subset=64, test_subset=32, train_steps=2, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=3, epochs=1)
BASE = ("study: s\nhardware: [cpu]\nmodels: [squeezenet1_1]\nbatch_sizes: [8]\ndataset: digits\n"
        "train_subset: 64\ntest_subset: 32\ntrain_steps: 2\nwarmup_steps: 1\nlatency_repeats: 3\n"
        "latency_budget_s: 0\ninfer_warmup_batches: 1\n")


def _set(key: str, value: object, text: str = BASE) -> str:
    """The study file with ``key`` set to ``value`` (replacing its line when it has one)."""
    kept = [ln for ln in text.splitlines() if not ln.startswith(f"{key}:")]
    return "\n".join(kept) + f"\n{key}: {value}\n"


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A results root with a study measured before any bad input arrives."""
    root = tmp_path_factory.mktemp("earlier") / "results"
    run_pair("s", "cpu", "squeezenet1_1", [8], RunSettings.of(**TINY), root / "s")
    return root


@pytest.fixture
def untouched(earlier):
    before = _digest(earlier)
    yield earlier
    assert _digest(earlier) == before, "an earlier result changed"


def _fails_in_one_line(capsys, argv, code, *words):
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, err
    lines = [ln for ln in err.splitlines() if ln.startswith("benchlib: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _study(tmp_path, text, untouched, capsys, *words, code=2):
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    line = _fails_in_one_line(capsys, ["study", str(path), "--results-root", str(untouched),
                                       "--reports-root", str(tmp_path / "reports")], code, *words)
    assert str(path) in line
    assert not (tmp_path / "reports").exists(), "no work may start on bad input"
    return line


# ---------------------------------------------------------------- 1. values no range check caught

@pytest.mark.parametrize("key", ["lr", "momentum", "weight_decay", "telemetry_interval_s"])
def test_a_nan_is_refused_everywhere(tmp_path, untouched, capsys, key):
    _study(tmp_path, BASE + f"{key}: .nan\n", untouched, capsys, f"key '{key}' is nan", "allowed: a number",
           "finite")


def test_an_infinite_number_is_refused(tmp_path, untouched, capsys):
    _study(tmp_path, BASE + "weight_decay: .inf\n", untouched, capsys, "key 'weight_decay' is inf", "finite")


def test_a_seed_beyond_what_the_generators_take_is_refused(tmp_path, untouched, capsys):
    _study(tmp_path, BASE + "seed: 100000000000000000000\n", untouched, capsys, "key 'seed'",
           "allowed: an integer >= 0 and <= 4294967295")


@pytest.mark.parametrize("key, value", [("synthetic_samples", 10**12), ("train_steps", 10**12),
                                        ("latency_repeats", 10**9), ("memory_limit_bytes", 2**70)])
def test_integers_are_bounded_by_what_their_consumer_accepts(tmp_path, untouched, capsys, key, value):
    _study(tmp_path, _set(key, value), untouched, capsys, f"key '{key}'", "allowed: an integer >=", "<=")


def test_a_repeated_key_is_refused_naming_both_lines(tmp_path, untouched, capsys):
    _study(tmp_path, BASE + "lr: 0.1\nlr: 0.2\n", untouched, capsys, "key 'lr' appears twice, at lines 13 and 14",
           "allowed: each key once")


def test_a_repeated_key_inside_a_section_is_refused(tmp_path, untouched, capsys):
    text = BASE + "tune:\n  search_space:\n    lr: {low: 0.001, high: 0.1}\n    lr: {low: 0.01, high: 0.2}\n"
    _study(tmp_path, text, untouched, capsys, "key 'lr' appears twice, at lines 15 and 16")


# ---------------------------------------------------------------- 2. settings that exceed the machine

@pytest.mark.parametrize("text, key", [
    ("threads: 1000\n", "threads"), ("interop_threads: 1000\n", "interop_threads"),
    ("num_workers: 256\n", "num_workers"), ("sweep: {threads: [1, 1000]}\n", "sweep.threads"),
])
def test_threads_and_workers_are_bounded_by_the_usable_cpus(tmp_path, untouched, capsys, text, key):
    line = _study(tmp_path, BASE + text, untouched, capsys, f"key '{key}'", "allowed: 1..", "CPUs this process may use",
                  "oversubscribed")
    assert str(len(os.sched_getaffinity(0))) in line


def test_a_variants_threads_are_bounded_too(tmp_path, untouched, capsys):
    _study(tmp_path, BASE + "variants: [cpu-default, {name: many, threads: 999}]\n", untouched, capsys,
           "variant 'many'", "key 'threads'", "CPUs this process may use")


# ---------------------------------------------------------------- 3. problems found before work, not after

@pytest.mark.parametrize("key, value, words", [
    ("train_subset", 5000, ["key 'train_subset' is 5000", "1437 images of the training split", "allowed: 1..1437"]),
    ("test_subset", 1000, ["key 'test_subset' is 1000", "360 images of the test split", "allowed: 1..360"]),
])
def test_a_subset_larger_than_its_split_is_refused(tmp_path, untouched, capsys, key, value, words):
    _study(tmp_path, _set(key, value), untouched, capsys, *words)


def _image_tree(root: Path, classes: dict[str, int]) -> Path:
    for split in ("train", "test"):
        for name, count in classes.items():
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (12, 12), (i * 20 % 255, 10, 10)).save(folder / f"{i}.png")
    return root


def test_an_image_folder_class_without_images_is_refused(tmp_path, untouched, capsys):
    data = _image_tree(tmp_path / "data", {"cats": 3, "dogs": 0})
    text = BASE.replace("dataset: digits", f"dataset: imagefolder\ndata_path: {data}").replace("train_subset: 64\n", "")
    text = text.replace("test_subset: 32\n", "")
    _study(tmp_path, text, untouched, capsys, "key 'data_path'", "without images")


def test_a_data_set_with_one_class_is_refused(tmp_path, untouched, capsys):
    data = _image_tree(tmp_path / "data", {"cats": 4})
    text = BASE.replace("dataset: digits", f"dataset: imagefolder\ndata_path: {data}").replace("train_subset: 64\n", "")
    text = text.replace("test_subset: 32\n", "")
    _study(tmp_path, text, untouched, capsys, "key 'data_path'", "1 class", "allowed: 2 or more classes")


@pytest.fixture
def resnet18_weights(tmp_path):
    from benchlib.nets.models import build_model

    path = tmp_path / "resnet18.pth"
    torch.save(build_model("resnet18", 1000).state_dict(), path)
    return path


@pytest.mark.parametrize("case", ["missing", "not_a_checkpoint", "other_model"])
def test_pretrained_weights_that_cannot_serve_are_refused(tmp_path, untouched, capsys, resnet18_weights, case):
    path = {"missing": tmp_path / "none.pth", "not_a_checkpoint": tmp_path / "notes.pth",
            "other_model": resnet18_weights}[case]
    if case == "not_a_checkpoint":
        path.write_text("these are not weights")
    model = "resnet50" if case == "other_model" else "resnet18"
    text = BASE.replace("[squeezenet1_1]", f"[{model}]") + f"pretrained: true\nweights_path: {path}\n"
    words = {"missing": ["does not exist"], "not_a_checkpoint": ["not a PyTorch checkpoint"],
             "other_model": ["does not fit resnet50", "missing", "allowed: a state_dict of resnet50"]}[case]
    _study(tmp_path, text, untouched, capsys, "key 'weights_path'", *words)


def test_an_image_too_small_for_the_network_is_refused(tmp_path, untouched, capsys):
    _study(tmp_path, _set("image_size", 16), untouched, capsys,
           "key 'image_size' is 16", "too small for squeezenet1_1", "allowed: image_size >=")


def test_flops_on_an_image_too_small_is_one_line(capsys):
    _fails_in_one_line(capsys, ["flops", "--model", "squeezenet1_1", "--image-size", "8"], 2,
                       "--image-size 8", "too small for squeezenet1_1", "allowed: --image-size >=")


def test_a_tuned_variants_batch_beyond_the_synthetic_samples_is_refused(tmp_path, untouched, capsys):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "cpu-tuned.yaml").write_text("batch_size: 4096\n")
    text = (BASE.replace("dataset: digits", "dataset: synthetic\nsynthetic_samples: 64")
            + f"variants: [cpu-default, cpu-tuned]\ntuned_params_dir: {tuned}\n")
    _study(tmp_path, text, untouched, capsys, "variant 'cpu-tuned'", "4096", "64 training samples",
           "allowed: 1..64")


# ---------------------------------------------------------------- 4. the environment

def test_a_study_name_too_long_for_a_file_name_is_refused(tmp_path, untouched, capsys):
    _study(tmp_path, BASE.replace("study: s", "study: " + "x" * 300), untouched, capsys, "key 'study'",
           "300 characters", "at most 100")


def test_a_results_root_that_is_a_file_is_refused(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(BASE)
    (tmp_path / "results").write_text("I am a file")
    _fails_in_one_line(capsys, ["study", str(path), "--results-root", str(tmp_path / "results"),
                                "--reports-root", str(tmp_path / "reports")], 2,
                       "--results-root", "is a file", "allowed: a folder")


def test_an_unwritable_results_root_is_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "p.yaml"
    path.write_text(BASE)
    real_mkdir = Path.mkdir

    def read_only(self, *a, **k):
        if "results" in str(self):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", read_only)
    _fails_in_one_line(capsys, ["study", str(path), "--results-root", str(tmp_path / "results"),
                                "--reports-root", str(tmp_path / "reports")], 2,
                       "cannot be written", "Read-only file system", "allowed: a writable folder")


@pytest.mark.slow
def test_a_full_disk_stops_cleanly_keeps_complete_rows_and_says_how_to_resume(tmp_path, capsys, monkeypatch):
    settings = RunSettings.of(**TINY)
    run_pair("s", "cpu", "squeezenet1_1", [8], settings, tmp_path)  # one complete row first
    kept = _digest(tmp_path / "rows")

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store_rows, "atomic_write_json", full)
    from benchlib.errors import DiskFull

    with pytest.raises(DiskFull) as exc:
        run_pair("s", "cpu", "squeezenet1_1", [8, 16], settings, tmp_path)
    message = str(exc.value)
    assert "\n" not in message and "disk full" in message and "1 complete row(s) kept" in message
    assert "run the same command again to resume" in message and exc.value.exit_code == 1
    assert _digest(tmp_path / "rows") == kept


def test_a_folder_given_as_params_is_called_a_folder(tmp_path, capsys):
    _fails_in_one_line(capsys, ["study", str(tmp_path)], 2, "is a directory", "give a YAML file")


# ---------------------------------------------------------------- 5. two studies on one results folder

def _lock(folder: Path, pid: int) -> Path:
    import socket

    lock = folder / ".benchlib-study.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started_utc": "2026-01-01T00:00:00Z",
                                "command": "benchlib study"}))
    return lock


def test_a_second_study_on_a_locked_folder_is_refused(tmp_path, untouched, capsys):
    from lock_holder import held_elsewhere

    path = tmp_path / "p.yaml"
    path.write_text(BASE)
    with held_elsewhere(untouched / "s") as holder:  # a live study, in a process of its own
        _fails_in_one_line(capsys, ["study", str(path), "--results-root", str(untouched), "--reports-root",
                                    str(tmp_path / "reports")], 2, "is in use by process", str(holder),
                           "allowed: one study per results folder at a time")


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(tmp_path):
    import subprocess
    import sys

    from benchlib.store.lock import folder_lock

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = _lock(tmp_path / "r", int(dead.stdout))
    with pytest.warns(UserWarning, match="which no longer runs"):
        with folder_lock(tmp_path / "r"):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


# ---------------------------------------------------------------- 6. garbage in the results

@pytest.mark.parametrize("change, reason", [
    ({"status": "weird"}, "status 'weird'"), ({"batch_size": "abc"}, "batch_size 'abc'"),
    ({"train_samples_per_s": "fast"}, "train_samples_per_s 'fast'"),
])
def test_a_hand_edited_row_is_listed_with_its_reason_never_drawn(tmp_path, earlier, change, reason):
    folder = tmp_path / "r"
    import shutil

    shutil.copytree(earlier / "s", folder)
    row_file = next((folder / "rows").glob("*.json"))
    row = json.loads(row_file.read_text())
    edited = folder / "rows" / "edited.json"
    edited.write_text(json.dumps({**row, "run_id": "edited", **change}))
    df = read_results([folder])
    assert list(df["run_id"]) == [row["run_id"]], "the invalid row is not among the rows drawn"
    bad = invalid_rows([folder])
    assert len(bad) == 1 and reason in bad.loc[0, "reason"] and bad.loc[0, "path"].endswith("edited.json")


def test_a_measured_row_with_an_edited_figure_is_listed_never_drawn(tmp_path, earlier):
    """A real row passes its check (store.integrity) as it was written; with its throughput edited to a plausible
    figure its samples do not give, it is out of the table, listed, and not kept on resume."""
    import shutil

    from benchlib.store.rows import complete_row

    folder = tmp_path / "r"
    shutil.copytree(earlier / "s", folder)
    row_file = next((folder / "rows").glob("*.json"))
    row = json.loads(row_file.read_text())
    assert complete_row(folder, row["machine"], row["run_id"]) is not None
    row_file.write_text(json.dumps({**row, "train_samples_per_s": row["train_samples_per_s"] * 1.1}))
    with pytest.warns(UserWarning, match=f"{row_file.name}: its train_samples_per_s .* is not what its train_step_s"):
        assert read_results([folder]).empty
    assert complete_row(folder, row["machine"], row["run_id"]) is None


# ---------------------------------------------------------------- 7. duplicates and allocation failures

def test_auto_is_resolved_before_the_grid_and_duplicates_dropped(tmp_path, capsys):
    from benchlib.run.admission import load_study

    path = tmp_path / "p.yaml"
    path.write_text(BASE.replace("hardware: [cpu]", "hardware: [auto, cpu]"))
    with pytest.warns(UserWarning, match="hardware 'cpu' is listed twice"):
        cfg = load_study(path)
    assert cfg.hardware == ("cpu",) and len(cfg.pairs()) == 1


@pytest.mark.slow
def test_an_absurd_batch_on_the_cpu_is_an_oom_row(tmp_path, capsys):
    code = main(["run", "--model", "resnet18", "--data", "synthetic", "--batch-size", "4000000", "--image-size", "224",
                 "--set", "synthetic_samples=4000000", "--steps", "1", "--results-dir", str(tmp_path), "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and row["status"] == "oom" and "allocate" in row["error"].lower()


def test_the_readme_lists_every_class_of_bad_input():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split("**Bad input**", 1)[1].split("\n#", 1)[0]  # to the next heading
    for phrase in ("NaN", "repeated key", "CPUs", "before any configuration", "results folder", "lock",
                   "hand-edited", "auto"):
        assert phrase in section, phrase


def test_yaml_duplicate_keys_do_not_slip_through_the_reader():
    from benchlib.spec.yamlfile import DuplicateKeyError, load

    assert load("a: 1\nb: [1, 2]\n") == {"a": 1, "b": [1, 2]}
    with pytest.raises(DuplicateKeyError):
        load(textwrap.dedent("""
            a:
              b: 1
              b: 2
        """))
    with pytest.raises(yaml.YAMLError):
        load("lr: !!python/object/apply:os.system ['true']\n")


@pytest.mark.slow
def test_a_corrupt_image_found_mid_epoch_is_named_in_its_failure_row(tmp_path, capsys):
    data = _image_tree(tmp_path / "data", {"cats": 4, "dogs": 4})
    (data / "train" / "dogs" / "2.png").write_bytes(b"\x89PNG\r\n\x1a\n not really an image")
    code = main(["run", "--model", "resnet18", "--data", "imagefolder", "--data-path", str(data), "--batch-size", "4",
                 "--image-size", "32", "--steps", "2", "--set", "warmup_steps=0", "--set", "latency_repeats=3",
                 "--results-dir", str(tmp_path / "r"), "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and row["status"] == "failed"
    assert "2.png" in row["error"] and "cannot be read" in row["error"]
