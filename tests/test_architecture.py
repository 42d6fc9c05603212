"""The package's shape: layers that import only downward, no import cycle, one training step, torch-free specs.

Imports are read from the source (every ``import`` statement, function-level and TYPE_CHECKING ones
included), so a lazy import cannot hide a cycle or an upward dependency.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "benchlib"

# Lower numbers sit lower; a module may import its own subpackage and any lower layer, nothing else.
# Subpackages that share a rank are siblings and may not import each other.
LAYERS: dict[str, int] = {
    "_version": 0, "errors": 0, "log": 0,
    "store": 1,
    "spec": 2,
    "env": 3,
    "data": 4, "nets": 4, "instruments": 4,
    "engine": 5, "roofline": 5,
    "run": 6, "report": 6,
    "pipeline": 7,
    "cli": 8,
    "__main__": 9, "__init__": 9,
}
MAX_MODULE_LINES = 470

# Inside report/ the same rule, one floor finer: subpackages by concept, pure computation (words, evidence,
# tables, findings) below rendering (figures, display). Same-rank subpackages are siblings.
REPORT_LAYERS: dict[str, int] = {
    "words": 0, "readback": 0,
    "evidence": 1,
    "tables": 2,
    "findings": 3, "figures": 3,
    "display": 4,
}
REPORT_MAX_MODULES = 8
REPORT_MAX_LINES = 350


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom, modules: set[str]) -> list[str]:
    """The modules a ``from ... import ...`` reaches: a submodule it names, else the module it names."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        anchor = parts if is_package else parts[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
    return submodules if len(submodules) == len(node.names) else [base, *submodules]


def import_graph() -> dict[str, set[str]]:
    """module -> the benchlib modules it imports (anywhere in its source)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                targets.update(_resolve(name, path.name == "__init__.py", node, set(modules)))
        # a module always runs after the packages that hold it: an import of one is no dependency
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {t for t in targets if t in modules and t != name and t not in ancestors}
    return graph


def layer_of(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_every_module_belongs_to_a_layer():
    assert {layer_of(m) for m in _modules()} <= set(LAYERS)


def test_imports_point_down_between_layers():
    upward = []
    for module, targets in import_graph().items():
        for target in targets:
            a, b = layer_of(module), layer_of(target)
            if a == b or target == "benchlib":
                continue
            if LAYERS[b] >= LAYERS[a]:
                upward.append(f"{module} -> {target} ({a} rank {LAYERS[a]} imports {b} rank {LAYERS[b]})")
    assert not upward, "\n".join(sorted(upward))


def report_floor(module: str) -> str | None:
    """The report subpackage a module sits in (None for ``benchlib.report`` itself and modules outside)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "report" else None


def test_report_is_subpackages_by_concept():
    report = PACKAGE / "report"
    loose = sorted(p.name for p in report.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"report/ holds subpackages only, not modules: {loose}"
    floors = {p.name for p in report.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert floors == set(REPORT_LAYERS), floors
    crowded = {f: n for f in floors if (n := len([p for p in (report / f).glob("*.py") if p.name != "__init__.py"]))
               > REPORT_MAX_MODULES}
    assert not crowded, crowded
    long = {str(p.relative_to(report)): n for p in report.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > REPORT_MAX_LINES}
    assert not long, long


def test_imports_point_down_inside_the_report():
    upward = []
    for module, targets in import_graph().items():
        a = report_floor(module)
        if a is None:
            continue
        for target in targets:
            b = report_floor(target)
            if b is None or a == b:
                continue
            if REPORT_LAYERS[b] >= REPORT_LAYERS[a]:
                upward.append(f"{module} -> {target} ({a} rank {REPORT_LAYERS[a]} imports {b} rank "
                              f"{REPORT_LAYERS[b]})")
    assert not upward, "\n".join(sorted(upward))


def test_no_import_cycle():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("layer", ["spec", "store"])
def test_specs_and_the_store_do_not_import_torch(layer):
    offenders = []
    for name, path in _modules().items():
        if layer_of(name) != layer:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{name}: {n}" for n in names if n.split(".")[0] in ("torch", "torchvision", "numpy")]
    assert not offenders


def test_the_summary_pages_and_the_datasheets_load_no_torch():
    """The summary notebook's kernel builds pages from files: loading torch there cost each report about
    1.8 s (the roofline pages reached it through the datasheet's MIG check, in env/gpu.py)."""
    probe = ("import sys\n"
             "from benchlib.report.display import summary\n"
             "from benchlib.report.figures import roofline\n"
             "from benchlib.roofline.datasheet import datasheet_for\n"
             "datasheet_for('NVIDIA A100-SXM4-40GB MIG 1g.5gb'); datasheet_for('NVIDIA H200')\n"
             "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]


def test_the_report_command_loads_neither_torchvision_nor_the_iri_grammar(tmp_path):
    """`benchlib report` (and a study's driver between its kernels) reads rows and runs notebooks: torchvision
    (torch._dynamo with it, 1.5 s) came through the manifest and the row columns, and jsonschema's optional
    IRI grammar (1.2 s) through nbformat; neither serves that process."""
    probe = ("import sys\n"
             "from benchlib.cli import main\n"
             f"assert main(['report', {str(tmp_path / 'none')!r}]) == 2\n"
             "assert 'benchlib.pipeline.study' in sys.modules and 'nbformat' in sys.modules\n"
             "print(sorted(m for m in ('torchvision', 'rfc3987_syntax') if sys.modules.get(m)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]


def test_refusals_that_need_no_torch_load_neither_torch_nor_pandas(tmp_path):
    """A typo in a model's name, a params file that is missing or is not YAML, a model a study file misspells: each
    is refused before torch loads (45 to 75 s of a busy 2-core VM when torch came first), and before pandas."""
    (tmp_path / "bad.yaml").write_text("study: s\nhardware: [cpu]\nmodels: [resnet81]\nbatch_sizes: [8]\n")
    (tmp_path / "broken.yaml").write_text("study: [s\n")
    refused = [["run", "--model", "resnet81"], ["profile", "--model", "resnet81"], ["layers", "--model", "resnet81"],
               ["flops", "--model", "resnet81"], ["study", str(tmp_path / "nope.yaml")],
               *([command, str(tmp_path / name)] for command in ("study", "compare", "sweep", "tune", "slurm")
                 for name in ("bad.yaml", "broken.yaml"))]
    probe = ("import sys\n"
             "from benchlib.cli import main\n"
             f"for argv in {refused!r}:\n"
             "    assert main(argv) == 2, argv\n"
             "print(sorted(m for m in ('torch', 'torchvision', 'pandas') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]
    assert done.stderr.count("did you mean 'resnet18'?") == 9, done.stderr


def test_the_facade_exports_what_it_lists():
    import benchlib
    from benchlib.errors import MissingExtra

    assert set(benchlib.__all__) == {"__version__", *benchlib._API}
    for name in benchlib.__all__:
        try:
            assert getattr(benchlib, name) is not None, name
        except MissingExtra as exc:  # a name behind an extra that is not installed says which, in one line
            assert "pip install 'benchlib[" in str(exc) and "\n" not in str(exc), (name, str(exc))


def test_backward_is_called_in_exactly_one_place_outside_flop_counting():
    """One training step: measuring, tuning and profiling all train through benchlib.engine.step.train_step."""
    calls = []
    for name, path in _modules().items():
        if name in ("benchlib.nets.counters", "benchlib.nets.layer_work"):  # counting a backward's FLOPs runs one
            continue
        if name == "benchlib.instruments.hook_times":  # its probe times hooks on a chain of ReLUs: no training
            continue
        if name == "benchlib.roofline.shapes":  # it times one layer's backward alone, as the roofs time a matmul
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\.backward\(", line) and not line.lstrip().startswith("#"):
                calls.append(f"{name}:{i}")
    assert len(calls) == 1 and calls[0].startswith("benchlib.engine.step:"), calls


# One author of a row: only run/columns.py writes a column's name into a row. The schema (store/, which also
# migrates rows of older formats as it reads them) and the report (whose tables are not rows) are not read.
ROW_AUTHOR = "run/columns.py"
NOT_ROWS = {"roofline/__init__.py": "names of functions, mapped to the modules that define them"}


def _column_writes(tree: ast.AST, columns: set[str], measured: set[str]) -> list[tuple[int, str]]:
    """(line, column) of every column written into a row: a dict holding two or more measured columns (a
    row's part), any column in a dict that spreads a row, an assignment to ``row[...]`` / ``x_row[...]``,
    or a keyword of ``row.update(...)``."""
    def is_row(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and (node.id == "row" or node.id.endswith("_row"))

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in columns]
            spreads_a_row = any(k is None and is_row(v) for k, v in zip(node.keys, node.values))
            if len([k for k in keys if k in measured]) >= 2 or (spreads_a_row and keys):
                found += [(node.lineno, k) for k in keys]
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and is_row(node.value)
              and isinstance(node.slice, ast.Constant) and node.slice.value in columns):
            found.append((node.lineno, node.slice.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("update", "setdefault") and is_row(node.func.value)):
            found += [(node.lineno, k.arg) for k in node.keywords if k.arg in columns]
    return found


def _row_columns() -> tuple[set[str], set[str]]:
    """(every column, the measured ones: those no setting or identity shares a name with)."""
    from benchlib.spec.settings import setting_names
    from benchlib.store import schema

    columns = set(schema.COLUMN_NAMES)
    shared = set(schema.names(schema.IDENTITY)) | set(schema.names(schema.SETTINGS)) | set(setting_names())
    return columns, columns - shared


def _parsed(under: Path = PACKAGE) -> list[tuple[str, ast.AST]]:
    """Every module under ``under``, by its path in the package, parsed."""
    return [(str(p.relative_to(PACKAGE)), ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(under.rglob("*.py"))]


def test_only_run_columns_writes_a_column_into_a_row():
    """A column is named in a row in one place: a new figure is a function of the measurement there, not a line
    in the middle of measuring, recording or an instrument (the issue this rule came from: 22 columns set
    inline in run/measure.py, 7 more in its quantized path, and the instruments naming their own)."""
    columns, measured = _row_columns()
    writes = [f"{rel}:{line} {column}" for rel, tree in _parsed()
              if not (rel == ROW_AUTHOR or rel in NOT_ROWS or rel.startswith(("store/", "report/")))
              for line, column in _column_writes(tree, columns, measured)]
    assert not writes, f"columns written into a row outside {ROW_AUTHOR}: {writes}"


# What opens, lists or parses a file, and the store's readers of one: in report/, only readback/ calls them, so
# a report reads each file once, in one place (``display.results.Results`` holds what it read).
FILE_READS = {"read_csv", "read_parquet", "read_json", "read_text", "read_bytes", "open", "glob", "rglob", "iterdir",
              "exists", "is_file", "is_dir", "stat"}
STORE_READERS = {"read_results", "read_checked", "read_samples", "read_series", "load_noise_floors", "load_ceilings",
                 "read_noise_floor", "read_layer_file"}


def _file_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno} imports {a.name}" for a in node.names if a.name in STORE_READERS]
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in FILE_READS | STORE_READERS:
            found.append(f"{node.lineno} {f.id}()")
        elif isinstance(f, ast.Attribute) and (f.attr in FILE_READS | STORE_READERS or (
                f.attr in ("load", "loads") and isinstance(f.value, ast.Name) and f.value.id in ("json", "pickle"))):
            found.append(f"{node.lineno} .{f.attr}()")
    return found


def test_report_reads_files_in_readback_only():
    reads = [f"{rel}:{r}" for rel, tree in _parsed(PACKAGE / "report") if not rel.startswith("report/readback/")
             for r in _file_reads(tree)]
    assert not reads, f"report modules outside readback/ that read a file: {reads}"


@pytest.mark.parametrize("rule, source", [
    ("one author", 'def f(row):\n    row["test_accuracy"] = 0.9\n'),
    ("one author", 'def f(row):\n    row.update(latency_ms_p50=1.0)\n'),
    ("one author", 'def f():\n    return {"model_size_bytes": 1, "accuracy_drop_pts": 0.5}\n'),
    ("one author", 'def f(base_row):\n    return {**base_row, "status": "failed"}\n'),
    ("one reader", "import pandas as pd\ndef f(p):\n    return pd.read_csv(p)\n"),
    ("one reader", "import json\ndef f(text):\n    return json.loads(text)\n"),
    ("one reader", "def f(path):\n    return path.exists()\n"),
    ("one reader", "from benchlib.store.rows import read_samples\n"),
])
def test_the_rules_see_what_they_forbid(rule, source):
    """The one-author rule sees a column written elsewhere; the one-reader rule a file read outside readback/."""
    tree = ast.parse(source)
    assert (_column_writes(tree, *_row_columns()) if rule == "one author" else _file_reads(tree)), source


# Small things with one home: spelled again elsewhere, two spellings drift apart (the summary's note on ratios
# once said "else same" where the key findings said "inconclusive").
ONE_HOME = {
    "the first line of an exception": (r"splitlines\(\)\[0\]|for \w+ in str\(\w+\)\.splitlines\(\)", "errors.py"),
    "the progress callback type": (r"Callable\[\[str\], None\]", "log.py"),
    "the note on how ratios are judged": (r"^INTERVAL_NOTE = ", "report/findings/key.py"),
    "the practical threshold": (r"PRACTICAL_THRESHOLD = |[^\d.]2 ?%", "report/evidence/stats.py"),
}


@pytest.mark.parametrize("what", sorted(ONE_HOME))
def test_small_things_have_one_home(what):
    pattern, home = ONE_HOME[what]
    found = [f"{path.relative_to(PACKAGE)}:{i}" for path in sorted(PACKAGE.rglob("*.py"))
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(pattern, line) and not line.lstrip().startswith("#")]
    assert found and all(f.startswith(f"{home}:") for f in found), f"{what}: {found} (its home: {home})"


def _docstring_summary(path: Path, whole_paragraph: bool) -> str:
    """What docs/architecture.md says of a module: its docstring's first sentence (a package: its first
    paragraph), its lines joined."""
    text = " ".join(line.strip() for line in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")
                    .split("\n\n")[0].splitlines())
    end = re.search(r"(?<=[.!?])\s", text)
    return text if whole_paragraph or end is None else text[:end.start()]


def test_docs_architecture_says_of_each_module_what_its_docstring_says():
    """The one-line descriptions are generated from the docstrings (``python tests/test_architecture.py``
    prints them), so the page cannot drift from the code it describes."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    drifted = []
    package = None
    for line in text.splitlines():
        if m := re.match(r"### `([\w/]+)/`: (.*)", line):
            package = "" if m.group(1) == "benchlib" else m.group(1)
            init = PACKAGE / package / "__init__.py"
            if m.group(2) != _docstring_summary(init, whole_paragraph=True):
                drifted.append(f"{package}/")
        elif package is not None and (m := re.match(r"- `(\w+\.py)`: (.*)", line)):
            path = PACKAGE / package / m.group(1)
            if path.exists() and m.group(2) != _docstring_summary(path, whole_paragraph=False):
                drifted.append(f"{package}/{m.group(1)}")
        elif line.startswith("## "):
            package = None
    assert not drifted, f"lines of docs/architecture.md that no longer say what the docstring does: {drifted}"


def test_docs_architecture_names_every_module_under_its_package():
    """docs/architecture.md lists every module under its package's heading, and no module that is gone."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed: set[str] = set()
    package = None
    for line in text.splitlines():
        if m := re.match(r"### `([\w/]+)/`", line):
            package = "" if m.group(1) == "benchlib" else m.group(1)
        elif package is not None and (m := re.match(r"- `(\w+\.py)`: \S", line)):
            listed.add(f"{package}/{m.group(1)}".lstrip("/"))
        elif line.startswith("## "):
            package = None
    actual = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
              if p.name != "__init__.py" or p.parent == PACKAGE}
    assert not actual - listed, f"modules docs/architecture.md does not name: {sorted(actual - listed)}"
    assert not listed - actual, f"docs/architecture.md names modules that are gone: {sorted(listed - actual)}"


def test_modules_stay_small():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def regenerate_module_lines(doc: Path) -> None:
    """Rewrite each package heading and module line of ``doc`` from the docstrings, in the page's own order."""
    out, package = [], None
    for line in doc.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"### `([\w/]+)/`: (.*)", line):
            package = "" if m.group(1) == "benchlib" else m.group(1)
            line = f"### `{m.group(1)}/`: {_docstring_summary(PACKAGE / package / '__init__.py', True)}"
        elif line.startswith("### `benchlib/`"):
            package = ""
        elif package is not None and (m := re.match(r"- `(\w+\.py)`: (.*)", line)):
            if (PACKAGE / package / m.group(1)).exists():
                line = f"- `{m.group(1)}`: {_docstring_summary(PACKAGE / package / m.group(1), False)}"
        elif line.startswith("## "):
            package = None
        out.append(line)
    doc.write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":  # after changing a module's docstring: python tests/test_architecture.py
    regenerate_module_lines(PACKAGE.parent / "docs" / "architecture.md")


# ---------------------------------------------------------------- benchmarks/: the lab, on public seams

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
PUBLIC_UNDERSCORE = {"_asdict", "_replace", "_fields", "_make", "_exit"}  # namedtuple's and os's public names
FOREIGN_ROOTS = {"torch", "os", "sys", "np", "numpy", "pd", "subprocess"}


def _private_uses(tree: ast.AST, where: str) -> list[str]:
    """What a script (or Python code it hands a child process as a string) takes of benchlib's private parts:
    a name or module starting with ``_`` imported from benchlib, an attribute starting with ``_`` read off
    anything but ``self`` (a benchlib object's private state), or an attribute of a benchlib name assigned."""
    bound: set[str] = set()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "benchlib"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "benchlib":
            bound |= {a.asname or a.name for a in node.names}
            out += [f"{where}:{node.lineno}: imports {node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_")]
            if any(part.startswith("_") for part in str(node.module).split(".")):
                out.append(f"{where}:{node.lineno}: imports the private module {node.module}")

    def root(n: ast.AST) -> str | None:
        while isinstance(n, ast.Attribute):
            n = n.value
        return n.id if isinstance(n, ast.Name) else None

    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and (root(node) in bound or (node.attr not in PUBLIC_UNDERSCORE and root(node) not in FOREIGN_ROOTS
                                             and not (isinstance(node.value, ast.Name)
                                                      and node.value.id in ("self", "cls"))))):
            out.append(f"{where}:{node.lineno}: reads {ast.unparse(node)}")
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
        out += [f"{where}:{node.lineno}: assigns {ast.unparse(t)}" for t in targets
                if isinstance(t, ast.Attribute) and root(t) in bound]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and node.args and root(node.args[0]) in bound):
            out.append(f"{where}:{node.lineno}: setattr on {ast.unparse(node.args[0])}")
    return out


def _child_code(tree: ast.AST) -> list[tuple[int, ast.AST]]:
    """Python a script hands a child process as a string (``python -c CODE``), parsed."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "benchlib" in node.value \
                and "import" in node.value:
            try:
                found.append((node.lineno, ast.parse(textwrap.dedent(node.value))))
            except SyntaxError:
                continue
    return found


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_the_lab_uses_benchlibs_public_names_only(path):
    """The scripts under benchmarks/ measure benchlib through its public seams (``benchlib.before_step``, the
    sampler's ``sample_now``): one that patches or reads a private part breaks when that part changes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = _private_uses(tree, path.name)
    for line, code in _child_code(tree):
        found += _private_uses(code, f"{path.name} (code in a string at line {line})")
    assert not found, found


def test_the_private_name_check_catches_a_patch_and_a_private_read():
    code = ast.parse("import benchlib.run.measure as m\nfrom benchlib.x import _y\nm.f = 1\nobj.sampler._rows\n"
                     "self._ok\nos._exit(0)\nsetattr(m, 'g', 2)\n")
    found = _private_uses(code, "s.py")
    assert found == ["s.py:2: imports benchlib.x._y", "s.py:3: assigns m.f", "s.py:4: reads obj.sampler._rows",
                     "s.py:7: setattr on m"], found
