"""Config validation: every bad input is refused before work starts, with one line and exit code 2."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from benchlib.cli import main
from benchlib.errors import ConfigError
from benchlib.run.admission import load_study
from benchlib.spec.settings import RunSettings, settings_from_mapping

GOOD = {
    "study": "t", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [16], "dataset": "digits",
}


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def _yaml(mapping: dict) -> str:
    import yaml

    return yaml.safe_dump(mapping)


def test_default_study_loads():
    cfg = load_study("params/default.yaml")
    assert cfg.study == "default"
    assert cfg.models == ("resnet18", "mobilenet_v2")
    assert cfg.pairs() == [("cpu", "resnet18"), ("cpu", "mobilenet_v2")]
    assert [c.batch_size for c in cfg.configs("cpu", "resnet18")] == [64]
    assert cfg.settings.image_size == 32 and cfg.settings.dataset == "digits"


def test_papers_studies_parse_without_devices_or_data(tmp_path):
    """The paper files are valid apart from what this machine lacks (GPU, data sets)."""
    import yaml

    from benchlib.run.preflight import check_data
    from benchlib.spec.study import parse_study

    for name in PAPER_FILES:
        raw = yaml.safe_load(Path(f"params/{name}.yaml").read_text())
        cfg = parse_study(raw, name)  # the file itself is valid: devices and data are checked on the machine
        with pytest.raises(ConfigError, match="data_path"):
            check_data(cfg.settings, name)


PAPER_FILES = ("gyawali-densenet121-catsdogs", "loe-cifar10", "loe-cifar10-code", "tambe-tinyimagenet",
               "tambe-tinyimagenet-code")


def test_every_params_file_parses_with_its_own_study_name():
    import yaml

    from benchlib.spec.study import parse_study

    files = sorted(Path("params").glob("*.yaml"))
    names = [parse_study(yaml.safe_load(f.read_text()), str(f)).study for f in files]
    assert {f.stem for f in files} >= set(PAPER_FILES)
    assert len(set(names)) == len(names), "two params files would share a results folder"


@pytest.mark.parametrize("name", PAPER_FILES)
def test_paper_files_name_their_source_and_say_text_or_code(name):
    """Each paper file opens with the paper it reproduces, and whether it follows the text or the public code."""
    text = Path(f"params/{name}.yaml").read_text()
    header = text[:text.index("study:")]
    assert header.startswith("# Source: the ")
    kind = "public code" if name.endswith("-code") else "text"
    assert header.startswith(f"# Source: the {kind} of ")
    assert "../shared" not in text and "seed 00" not in header
    other = name.removesuffix("-code") if name.endswith("-code") else f"{name}-code"
    if Path(f"params/{other}.yaml").exists():
        assert f"params/{other}.yaml" in header, "the text file and the code file point at each other"


def test_grid_expands_hardware_model_batch():
    from benchlib.spec.study import parse_study

    cfg = parse_study({**GOOD, "models": ["resnet18", "squeezenet1_1"], "batch_sizes": [8, 16]}, "x")
    assert len(cfg.all_configs()) == 4
    assert len({c.run_id for c in cfg.all_configs()}) == 4


BAD_STUDIES = [
    ({**GOOD, "batchsize": 3}, "unknown key 'batchsize' (did you mean 'batch_sizes'?)"),
    ({**GOOD, "batch_sizes": [0]}, "key 'batch_sizes' has 0; allowed: integers >= 1"),
    ({**GOOD, "batch_sizes": [-4]}, "key 'batch_sizes' has -4"),
    ({**GOOD, "batch_sizes": [4096]}, "larger than the 1437 training samples"),
    ({**GOOD, "batch_sizes": ["big"]}, "key 'batch_sizes' has 'big' (str)"),
    ({**GOOD, "batch_sizes": []}, "key 'batch_sizes' is an empty list"),
    ({**GOOD, "batch_sizes": [16, 16]}, "lists a value twice"),
    ({**GOOD, "models": ["resnet19"]},
     "key 'models' has 'resnet19' (did you mean 'resnet18'?); allowed: a torchvision name"),
    ({**GOOD, "hardware": ["gpu"]}, "key 'hardware' has 'gpu'; allowed: cpu, cuda, cuda:N, mps, auto"),
    ({**GOOD, "hardware": ["cuda:7"]}, "hardware 'cuda:7' is not present on this machine; available:"),
    ({**GOOD, "dataset": "imagenet"}, "key 'dataset' is 'imagenet'; allowed: one of: digits, synthetic"),
    ({**GOOD, "dataset": "cifar10"}, "key 'data_path' is missing; dataset 'cifar10' needs"),
    ({**GOOD, "dataset": "cifar10", "data_path": "/nonexistent/cifar"}, "/nonexistent/cifar"),
    ({**GOOD, "lr": 0}, "key 'lr' is 0.0; allowed: a number > 0.0"),
    ({**GOOD, "lr": "fast"}, "key 'lr' is 'fast' (str); allowed: a number"),
    ({**GOOD, "epochs": 1.5}, "key 'epochs' is 1.5 (float); allowed: an integer"),
    ({**GOOD, "epochs": True}, "key 'epochs' is True (bool)"),
    ({**GOOD, "momentum": 1.0}, "key 'momentum' is 1.0; allowed: a number >= 0.0 and < 1.0"),
    ({**GOOD, "image_size": 4}, "key 'image_size' is 4; allowed: an integer >= 8"),
    ({**GOOD, "optimizer": "rmsprop"}, "allowed: one of: sgd, adam"),
    ({**GOOD, "pin_memory": "yes"}, "key 'pin_memory' is 'yes' (str); allowed: true or false"),
    ({**GOOD, "freeze_backbone": True}, "key 'freeze_backbone' is true but 'pretrained' is false"),
    ({**GOOD, "persistent_workers": True}, "persistent_workers only with num_workers >= 1"),
    ({**GOOD, "epochs": None}, "key 'epochs' must not be empty"),
    ({**GOOD, "study": "../escape"}, "key 'study' is '../escape'"),
    ({**GOOD, "precision": "fp8"}, "key 'precision' is 'fp8'; allowed: one of: fp32"),
    ({k: v for k, v in GOOD.items() if k != "models"}, "key 'models' is missing"),
    ({**GOOD, "threads": 0}, "key 'threads' is 0; allowed: an integer >= 1"),
]


@pytest.mark.parametrize("mapping,message", BAD_STUDIES, ids=[m for _, m in BAD_STUDIES])
def test_bad_study_files_exit_2_with_one_line(tmp_path, capsys, mapping, message):
    path = _write(tmp_path, _yaml(mapping))
    results = tmp_path / "results"
    code = main(["study", str(path), "--results-root", str(results), "--reports-root", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert str(path) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not results.exists(), "no work may start on bad input"


@pytest.mark.parametrize("text,message", [
    ("study: [unclosed\n", "not valid YAML at line"),
    ("- just\n- a list\n", "expected a mapping of keys at the top level, got list"),
    ("", "expected a mapping of keys at the top level, got NoneType"),
    ("study: t\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [8]\nlr: !!python/object/apply:os.system ['true']\n",
     "not valid YAML"),
])
def test_malformed_yaml(tmp_path, capsys, text, message):
    path = _write(tmp_path, text)
    assert main(["study", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_missing_params_file(tmp_path, capsys):
    assert main(["study", str(tmp_path / "nope.yaml")]) == 2
    assert "params file not found" in capsys.readouterr().err


def test_debug_shows_traceback(tmp_path):
    path = _write(tmp_path, _yaml({**GOOD, "batch_sizes": [0]}))
    with pytest.raises(ConfigError):
        main(["--debug", "study", str(path)])


def test_yaml_exponent_without_dot_is_a_number(tmp_path):
    path = _write(
        tmp_path, "study: t\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [8]\nlr: 1e-3\nweight_decay: 5E-4\n"
    )
    cfg = load_study(path)
    assert cfg.settings.lr == 0.001 and cfg.settings.weight_decay == 0.0005


def test_settings_types_are_coerced():
    s = settings_from_mapping({"lr": 1, "weight_decay": 0}, "x")
    assert isinstance(s.lr, float) and s.lr == 1.0
    assert s == RunSettings(lr=1.0, weight_decay=0.0)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["run", "--model", "vgg16"], "--model 'vgg16' is unknown; allowed: a torchvision name (resnet18"),
        (["run", "--model", "resnet18", "--batch-size", "0"], "--batch-size 0; allowed: integers >= 1"),
        (["run", "--model", "resnet18", "--device", "cuda"], "hardware 'cuda' is not present"),
        (
            ["run", "--model", "resnet18", "--device", "tpu"],
            "unknown hardware 'tpu'; allowed: cpu, cuda, cuda:N, mps, auto",
        ),
        (["run", "--model", "resnet18", "--data", "tinyimagenet"], "key 'data_path' is missing"),
        (["run", "--model", "resnet18", "--data", "imagefolder", "--data-path", "/no/such/dir"], "/no/such/dir"),
        (["run", "--model", "resnet18", "--set", "lr"], "--set 'lr': expected KEY=VALUE"),
        (["run", "--model", "resnet18", "--set", "colour=red"], "unknown key 'colour'"),
        (["run", "--model", "resnet18", "--steps", "0"], "key 'train_steps' is 0"),
        (["report", "/no/such/results"], "results folder '/no/such/results' has no rows/ folder"),
    ],
)
def test_bad_command_lines(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("given, sizes", [("[8]", [8]), ("[8, 16]", [8, 16]), ([8, 16], [8, 16]), ((8,), [8]),
                                          ("{from: 8, to: 32}", [8, 16, 32]), (8, [8])])
def test_notebook_batch_sizes_as_papermill_passes_them(given, sizes):
    """``papermill -p batch_sizes '[8]'`` passes text: it is read, never split into '[', '8' and ']'."""
    from benchlib.spec.study import pair_parameters

    assert pair_parameters(given, "{}", "[]", RunSettings())[0] == sizes


@pytest.mark.parametrize("batch_sizes, sweep, variants, words", [
    ("[8", {}, [], "notebook parameters: batch_sizes is the text '[8', not valid YAML"),
    ("[a, b]", {}, [], "key 'batch_sizes' has 'a'"),
    ("[8]", "{bogus: [1]}", [], "key 'sweep.bogus' cannot be swept"),
    ("[8]", {}, "{precision: fp64}", "fp64"),
])
def test_bad_notebook_parameters_are_one_line(batch_sizes, sweep, variants, words):
    from benchlib.spec.study import pair_parameters
    from benchlib.spec.variants import parse_variant

    with pytest.raises(ConfigError) as exc:
        _, _, chosen = pair_parameters(batch_sizes, sweep, variants, RunSettings())
        [parse_variant(v, "notebook parameters: variants") for v in chosen]
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_study_set_replaces_keys_of_the_file_and_is_checked_as_they_are(tmp_path, capsys):
    import yaml

    from benchlib.spec.study import study_from_file

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8],
                                    "train_steps": 4}))
    cfg = study_from_file(path, {"train_steps": 2, "models": ["squeezenet1_1", "resnet18"]})
    assert cfg.settings.train_steps == 2 and cfg.models == ("squeezenet1_1", "resnet18")
    assert study_from_file(path).settings.train_steps == 4, "the file itself is unchanged"
    assert main(["study", str(path), "--set", "train_steps=-1", "--results-root", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"benchlib: error: {path} with --set train_steps: key 'train_steps'") and err.count("\n") == 1
    assert not (tmp_path / "r").exists()
