"""The options of every ``benchlib`` command, each with its help, its default and the values it allows."""
from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable
from typing import NoReturn

from .._version import __version__
from ..spec.variants import PRESETS
from ..spec.vocab import DATASETS, ELEMENT_DTYPES, HARDWARE_CHOICES, MODEL_FORMS, OPTIMIZERS

DESCRIPTION = """\
Profile and benchmark CNN training and inference on CPUs and GPUs: a study file runs through the
notebooks into an HTML report; single configurations, FLOP counts and ceilings run from here.

'benchlib COMMAND --help' lists a command's options, their defaults and allowed values. Bad input exits 2
with one line saying what is allowed.
"""


PREDICT_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command's function, imported when the command runs: ``benchlib --help``, ``--version`` and a refused
    option answer in a fraction of a second, without importing torch."""
    def run(args: argparse.Namespace) -> int:
        command: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        return command(args)

    run.__name__ = run.__qualname__ = name
    return run


class _Parser(argparse.ArgumentParser):
    """Refuses a bad option in benchlib's one line, as every other refusal is (argparse prints its usage first,
    names the option as an "argument" and says of a number only that it is invalid): ``benchlib: error: command
    line:``, the option, the value and what is allowed."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"invalid (int|float) value: (.*)",
                         lambda m: f"{m.group(2)} is not {'an integer' if m.group(1) == 'int' else 'a number'}; "
                                   f"allowed: {'an integer' if m.group(1) == 'int' else 'a number'}", message)
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", message)
        self.exit(2, f"benchlib: error: command line: {message} (see '{self.prog} --help')\n")


def seconds(text: str) -> int:
    """A whole number of seconds >= 1 (``--cell-timeout``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}; allowed: a whole number of seconds >= 1")
    return value


class _Help(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default, except where there is none to show (unset, off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _verbosity() -> argparse.ArgumentParser:
    """-v and -q, before the command or after it (``benchlib -q study x.yaml``, ``benchlib study x.yaml -q``)."""
    p = argparse.ArgumentParser(add_help=False)
    loudness = p.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                          help="more detail: debug lines naming the module that says them")
    loudness.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                          help="no progress lines: warnings and errors only (results still print)")
    return p


VERBOSITY = _verbosity()


def _sub(sub: argparse._SubParsersAction, name: str, text: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=text, description=text, formatter_class=_Help, parents=[VERBOSITY])


def _add_study_args(p: argparse.ArgumentParser, *, fresh: bool = True) -> None:
    p.add_argument("params", help="study params file, e.g. params/default.yaml")
    p.add_argument("--results-root", default="results", help="results go to RESULTS_ROOT/<study>/")
    p.add_argument("--reports-root", default="reports", help="reports go to REPORTS_ROOT/<study>/")
    p.add_argument("--cell-timeout", type=seconds, default=3600, metavar="S",
                   help="seconds a notebook cell may run before its pair is recorded as failed")
    if fresh:
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="replace a key of the params file, its value read as YAML (repeatable): "
                       "--set train_steps=5 --set models=[resnet18]")
        p.add_argument("--fresh", action="store_true",
                       help="start over: move the study's old results and reports aside (nothing is deleted)")
        p.add_argument("--repeats", metavar="N|auto",
                       help="rounds of seeds, each in fresh processes (overrides the file's repeats): N, or auto "
                       "(rounds until every figure and ratio is within ±3%%, at most 10 runs or 10 minutes)")


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help=MODEL_FORMS.replace("%", "%%"))
    p.add_argument("--data", default="digits", help=f"data set: {', '.join(DATASETS)}")
    p.add_argument("--data-path", dest="data_path", metavar="DIR",
                   help="folder of a data set read from disk (cifar10, tinyimagenet, imagefolder)")
    p.add_argument("--device", default="cpu", help=HARDWARE_CHOICES)
    p.add_argument("--batch-size", type=int, default=64, metavar="B", help="global batch size, >= 1")
    p.add_argument("--epochs", type=int, metavar="N", help="training epochs (default: the run setting's)")
    p.add_argument("--image-size", dest="image_size", type=int, metavar="PX", help="input side in pixels")
    p.add_argument("--lr", type=float, help="learning rate, > 0")
    p.add_argument("--optimizer", help=f"one of {', '.join(OPTIMIZERS)}")
    p.add_argument("--seed", type=int, help="seed of weights, data order and synthetic data")
    p.add_argument("--threads", type=int, metavar="N",
                   help="intra-op CPU threads (default: $SLURM_CPUS_PER_TASK when SLURM set it, else the CPUs "
                   "this process may use; the row's threads_source says which)")
    p.add_argument("--num-workers", dest="num_workers", type=int, metavar="N", help="DataLoader worker processes")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any run setting, repeatable, e.g. --set pretrained=true --set warmup_steps=10")
    p.add_argument("--study", default="adhoc", help="study name the row is tagged with")
    p.add_argument("--variant", help=f"a variant preset: {', '.join(PRESETS)}")


def _add_slurm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time", default="02:00:00", help="time limit of each task, HH:MM:SS")
    p.add_argument("--cpus-per-task", type=int, default=4, metavar="N", help="CPUs of each task; its threads")
    p.add_argument("--mem", default="16G", help="memory of each task (each node with --nodes), in SLURM's units")
    p.add_argument("--gpus-per-task", type=int, default=0, metavar="N", help="GPUs of each task")
    p.add_argument("--partition", help="SLURM partition (default: the cluster's default)")
    p.add_argument("--account", help="SLURM account to charge (default: yours)")
    p.add_argument("--out-dir", default="slurm", help="where the .sbatch scripts and the tasks' logs go")


# The commands' option declarations look alike line by line (argparse's shape), not by logic: each option
# belongs to its command; what several commands share is in the _add_*_args helpers above.
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="benchlib", description=DESCRIPTION, formatter_class=_Help, parents=[VERBOSITY])
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--version", action="version", version=f"benchlib {__version__}",
                        help="print benchlib's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _study_commands(sub)
    _configuration_commands(sub)
    _results_commands(sub)
    return parser


def _study_commands(sub: argparse._SubParsersAction) -> None:
    """Commands that run a params file's grid: study, sweep, compare, tune, slurm."""
    p = _sub(sub, "study", "run every hardware/model pair of a params file, then the summary and HTML")
    _add_study_args(p)
    p.add_argument("--pair", type=int, help="run only pair number PAIR (0-based; what a SLURM array task does)")
    p.add_argument("--no-summary", action="store_true", help="skip the summary (build it later with benchlib report)")
    p.set_defaults(func=_command("studies", "cmd_study"))

    p = _sub(sub, "sweep", "run a sweep study (batch sizes, threads, workers) and its sweep analysis")
    _add_study_args(p)
    p.set_defaults(func=_command("studies", "cmd_sweep"))

    p = _sub(sub, "compare", "compare optimization variants (the params file's variants:) per pair")
    _add_study_args(p)
    p.set_defaults(func=_command("studies", "cmd_compare"))

    p = _sub(sub, "tune", "one Optuna study per hardware/model pair (the params file's tune: section)")
    _add_study_args(p, fresh=False)
    p.add_argument("--slurm", type=int, metavar="N",
                   help="N SLURM array tasks share each pair's study and split its trials, then one job exports "
                   "and reports (default: the file's tune.workers; 1 runs here)")
    p.add_argument("--wait", action="store_true", help="with --slurm: wait for the jobs and judge their tasks")
    p.add_argument("--worker", type=int, metavar="I", help="what SLURM array task I runs: its share of the trials")
    p.add_argument("--finish", action="store_true",
                   help="add no trials: export each pair's best and build the tuning report (the job after workers)")
    _add_slurm_args(p)
    p.set_defaults(func=_command("studies", "cmd_tune"))

    p = _sub(sub, "slurm", "write (and with --submit, submit) a SLURM job array of one task per pair, or with "
             "--nodes one data-parallel job over several nodes")
    _add_study_args(p, fresh=False)
    _add_slurm_args(p)
    p.add_argument("--submit", action="store_true", help="submit it with sbatch")
    p.add_argument("--wait", action="store_true",
                   help="after --submit: wait for the tasks, build the report, exit 1 naming any failed task")
    p.add_argument("--job", metavar="ID", help="a job already submitted: wait for it and report (as --wait)")
    p.add_argument("--pair", type=int, action="append", metavar="I",
                   help="only array task I (repeatable): re-submit tasks that died; each resumes its pair")
    p.add_argument("--nodes", type=int, metavar="N",
                   help="one data-parallel job instead: torchrun under srun on N nodes, every configuration")
    p.add_argument("--gpus-per-node", type=int, default=0, metavar="G", help="with --nodes: GPUs of each node")
    p.add_argument("--nproc-per-node", type=int, metavar="P",
                   help="with --nodes: processes per node (default: --gpus-per-node, else 1)")
    p.set_defaults(func=_command("cluster", "cmd_slurm"))


def _configuration_commands(sub: argparse._SubParsersAction) -> None:
    """Commands about one configuration or this machine: run, profile, layers, flops, roofline, predict."""
    p = _sub(sub, "run", "measure one configuration and write its row")
    _add_config_args(p)
    p.add_argument("--steps", type=int, metavar="N", help="timed training steps after warmup (default: full epochs)")
    p.add_argument("--results-dir", default="results/adhoc", help="the row goes to RESULTS_DIR/rows/")
    p.add_argument("--no-save", action="store_true", help="print only, write no results files")
    p.add_argument("--json", action="store_true", help="print the row as one JSON object")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                   help="data-parallel processes (DDP through torchrun; gloo on CPU, NCCL on GPUs); the batch is "
                   "global")
    p.set_defaults(func=_command("single", "cmd_run"))

    p = _sub(sub, "profile", "profile training steps of one configuration with torch.profiler")
    _add_config_args(p)
    p.add_argument("--wait", type=int, default=1, metavar="N", help="profiler schedule: steps skipped")
    p.add_argument("--warmup", type=int, default=1, metavar="N", help="profiler schedule: steps traced and discarded")
    p.add_argument("--steps", type=int, metavar="N",
                   help="training steps profiled: recorded in the tables, the trace and TensorBoard's logs, after "
                   "--wait and --warmup (the schedule's active steps, so the same as --active; default 3)")
    p.add_argument("--active", type=int, metavar="N", help="profiler schedule: steps recorded, >= 1 (default 3)")
    p.add_argument("--results-dir", default="results/adhoc", help="profiles go to RESULTS_DIR/profiles/")
    p.set_defaults(func=_command("single", "cmd_profile"))

    p = _sub(sub, "layers", "where one configuration's training step goes, layer by layer, against the roofline")
    _add_config_args(p)
    p.add_argument("--steps", type=int, default=20, metavar="N",
                   help="profiled training steps, interleaved with as many plain ones (default 20)")
    p.add_argument("--block", type=int, default=5, metavar="N",
                   help="steps per block: plain and profiled blocks alternate (default 5)")
    p.add_argument("--results-dir", default="results/adhoc",
                   help="where the ceilings are read or measured; the table goes to RESULTS_DIR/layers/")
    p.add_argument("--top", type=int, default=15, metavar="N", help="rows printed: the N that lose the most time")
    p.add_argument("--json", action="store_true", help="print the table and its checks as one JSON object")
    p.set_defaults(func=_command("layers", "cmd_layers"))

    p = _sub(sub, "flops", "count MACs, FLOPs (forward and training), bytes moved and intensity of a model")
    p.add_argument("--model", required=True, help=MODEL_FORMS.replace("%", "%%"))
    p.add_argument("--image-size", type=int, default=224, metavar="PX", help="input side in pixels")
    p.add_argument("--batch-size", type=int, default=1, metavar="B", help="batch the bytes are counted at")
    p.add_argument("--num-classes", type=int, default=1000, metavar="K", help="classes of the head, >= 2")
    p.add_argument("--dtype", choices=sorted(ELEMENT_DTYPES), default="fp32", help="element size used for bytes moved")
    p.add_argument("--layers", action="store_true", help="also print the per-layer table")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_command("single", "cmd_flops"))

    p = _sub(sub, "roofline", "measure this machine's compute and bandwidth ceilings")
    p.add_argument("--device", default="cpu", help=HARDWARE_CHOICES)
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="repeats per figure, >= 3 (median kept)")
    p.add_argument("--results-dir", help="save the ceilings under RESULTS_DIR/ceilings/ for the summary")
    p.add_argument("--threads", type=int, metavar="N", help="intra-op CPU threads the roofs are measured with "
                   "(default: the CPUs this process may use): a target of `benchlib predict` with N threads")
    p.add_argument("--shapes-of", metavar="RESULTS", help="also time the distinct convolution and matmul shapes of "
                   "RESULTS' per-layer tables here, forward and backward, within 2 minutes (needs --results-dir): "
                   "`benchlib predict` then carries those layers by their own shapes")
    p.add_argument("--shapes-dtype", action="append", choices=PREDICT_DTYPES, metavar="DTYPE",
                   help=f"with --shapes-of: also time the shapes in DTYPE ({', '.join(PREDICT_DTYPES)}), for "
                        "`benchlib predict --dtype`")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_command("single", "cmd_roofline"))

    p = _sub(sub, "predict", "how a results folder's configurations would train and answer on another machine, "
             "from their per-layer tables and that machine's ceilings")
    p.add_argument("results", help="a results folder with per-layer tables (layers: true, or benchlib layers)")
    p.add_argument("--on", required=True, metavar="TARGET", help="the target's ceilings file (`benchlib roofline "
                   "--results-dir DIR` there, DIR/ceilings/*.json copied here, with DIR/shapes/ where --shapes-of "
                   "timed them), MACHINE[:DEVICE] of the machine cache, or a GPU's datasheet (\"NVIDIA L4\", not "
                   "measured)")
    p.add_argument("--no-shapes", action="store_true", help="carry every layer by its kind's roof, even where the "
                   "target timed its shapes")
    p.add_argument("--dtype", choices=PREDICT_DTYPES, help="each configuration as it would run there in this "
                   "precision (bf16: an fp32 study's step under bf16 autocast), on the target's roofs of it")
    p.add_argument("--device", help="the target's device type, checked against its ceilings (cpu, cuda, mps)")
    p.add_argument("--parts", action="store_true", help="also print each configuration's parts, largest first")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_command("results", "cmd_predict"))


def _results_commands(sub: argparse._SubParsersAction) -> None:
    """Commands about the machine's noise and results already written: calibrate, diff, report, check-pages, env."""
    p = _sub(sub, "calibrate", "measure this machine's run-to-run noise floor: one small configuration in fresh "
             "processes, so comparisons of one run a side claim only differences beyond it")
    p.add_argument("--device", default="cpu", help=HARDWARE_CHOICES)
    p.add_argument("--results-dir", default="results/adhoc",
                   help="the floor goes to RESULTS_DIR/noise_floor/ and to the machine cache, where every results "
                   "folder of this machine finds it")
    p.add_argument("--runs", type=int, default=5, metavar="N", help="fresh processes per thread count, >= 3")
    p.add_argument("--threads", type=int, nargs="+", metavar="N",
                   help="thread counts to calibrate (default: 1 and the CPUs this process may use; on a GPU the "
                   "default threads)")
    p.add_argument("--json", action="store_true", help="print the record as one JSON object")
    p.set_defaults(func=_command("single", "cmd_calibrate"))

    p = _sub(sub, "diff", "compare two results folders configuration by configuration, with intervals")
    p.add_argument("a", help="reference results folder (a study folder or a results root), e.g. the last commit's")
    p.add_argument("b", help="candidate results folder")
    p.add_argument("--metric", action="append", help="metric to compare (repeatable; default: throughput, step "
                   "time, latency, peak memory, energy, accuracy)")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print one JSON object with a rows list")
    shape.add_argument("--markdown", action="store_true", help="print the comparison as a Markdown table (to paste "
                       "in a pull request)")
    p.add_argument("--ignore", action="append", metavar="SETTING",
                   help="leave a setting out of the match, to compare what differs in it (e.g. threads, hardware)")
    p.add_argument("--threshold", type=float, metavar="PCT",
                   help="changes under PCT%% are judged same (default: the practical threshold every verdict uses)")
    p.add_argument("--fail-on-regression", type=float, metavar="PCT",
                   help="exit 1 when B is slower (or worse) than A by more than PCT%% with an interval excluding 1")
    p.add_argument("--explain", action="store_true", help="split each configuration's step difference layer by "
                   "layer (forward, backward, optimizer, data wait, the rest) from the rows' per-layer tables "
                   "(benchlib layers, layers: true), with intervals and the top three causes")
    p.set_defaults(func=_command("results", "cmd_diff"))

    p = _sub(sub, "report", "summary and HTML from existing results folders (several machines merge)")
    p.add_argument("results_dirs", nargs="+", metavar="RESULTS_DIR", help="folders written by benchlib")
    p.add_argument("--name", help="report name (default: the folder's name, or 'merged')")
    p.add_argument("--reports-root", default="reports", help="the report goes to REPORTS_ROOT/NAME/")
    p.set_defaults(func=_command("results", "cmd_report"))

    p = _sub(sub, "check-pages", "open a published report in headless Chromium and check each page")
    p.add_argument("reports_root", nargs="?", default="reports", metavar="REPORTS_ROOT",
                   help="the reports folder, with index.html (default: reports)")
    p.add_argument("--screenshots", metavar="DIR", help="keep a PNG of each page in DIR")
    p.set_defaults(func=_command("results", "cmd_check_pages"))

    p = _sub(sub, "env", "print the environment manifest")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_command("single", "cmd_env"))
