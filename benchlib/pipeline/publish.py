"""Executing notebooks with papermill and publishing them: HTML pages, the data they show, the index.

Every file written here is written atomically (``store.atomic``): papermill saves the notebook it runs
after every cell, so it saves to a temporary name that becomes the executed notebook when the run ends; a
run that fails keeps what it saved only where that is a whole notebook (a full disk or a kill tears it).
"""
from __future__ import annotations

import datetime as dt
import gzip
import html
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
import papermill
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_runtime_dir
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from traitlets import default

from .._version import __version__
from ..errors import ConfigError
from ..report.display import site
from ..report.words import dictionary
from ..store import driver
from ..store.atomic import (
    atomic_copy,
    atomic_path,
    atomic_write_json,
    atomic_write_text,
    json_text,
    naming,
    temp_beside,
)
from ..store.layout import ReportLayout, ResultsLayout, reports_index, reports_page
from ..store.lock import held_fds

KERNEL_NAME = "python3"
# Once the last cell has answered, the kernel is stopped at once (its process group killed) instead of asked to
# shut down: a graceful shutdown waits for Python to tear down torch and torchvision, 1.2 s of every pair's
# notebook here, and the kernel has nothing left to do by then (every row and file is written, atomically, by
# a cell; benchlib registers no exit handler). nbclient's own switch, passed through papermill.
KERNEL_SHUTDOWN = "immediate"


def notebooks_dir() -> Path:
    """The repository's ``notebooks/`` folder (next to the package in a checkout)."""
    here = Path(__file__).resolve().parents[2] / "notebooks"
    return here if here.is_dir() else Path.cwd() / "notebooks"


def check_parameters(notebook: Path, params: Mapping[str, Any]) -> None:
    """Refuse parameters the notebook does not declare (papermill itself only logs them)."""
    declared = papermill.inspect_notebook(str(notebook))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigError(f"{notebook}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(declared)}")


# The debugger an ipykernel 6 kernel starts warns on stderr at every start ("frozen modules ... Debugging will
# proceed"), which papermill passes to the user's terminal: its own documented switch turns the check off.
QUIET_KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
UNIX_SOCKET_PATH_MAX = 100  # sun_path holds 104 (macOS) to 108 (Linux) bytes with its terminator


class LockSharingKernelManager(AsyncKernelManager):
    """A kernel that inherits the results folder's lock from its driver (``store.lock.held_fds``).

    A driver killed with SIGKILL releases its lock at once, while its kernel may run a second more and write a
    row; sharing the lock's open file keeps the folder held until that kernel is gone too, and the kernel itself
    refuses to write once its driver is (``store.driver``)."""

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        fds = held_fds()
        await super()._async_launch_kernel(kernel_cmd, **({**kw, "pass_fds": fds} if fds else kw))


class IpcKernelManager(LockSharingKernelManager):
    """A kernel reached over Unix sockets beside its connection file, not TCP on localhost.

    Over TCP a current ipykernel warns at every start that code and outputs travel unencrypted (as they do,
    to any local user who finds the port); over IPC nothing listens on the network and the warning has no
    cause, so no user's terminal shows it.
    """

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        """Each kernel's sockets under a name of its own in the runtime folder. jupyter_client's default, when
        no connection file is named yet, is ``kernel-ipc`` in the working folder: two kernels started there at
        once (a SLURM array's tasks on one node, two studies in one checkout) would share its sockets and
        talk to each other's kernel ("Invalid Signature")."""
        runtime = jupyter_runtime_dir()
        os.makedirs(runtime, exist_ok=True)
        return os.path.join(runtime, f"kernel-{uuid.uuid4()}-ipc")


def kernel_manager() -> type[AsyncKernelManager]:
    """IPC where Unix sockets exist and their paths fit (the runtime folder is short enough); else TCP as
    papermill's own manager does. Either way the kernel shares the driver's lock."""
    longest = os.path.join(jupyter_runtime_dir(), f"kernel-{uuid.uuid4()}-ipc-65535")
    return IpcKernelManager if os.name == "posix" and len(longest) <= UNIX_SOCKET_PATH_MAX \
        else LockSharingKernelManager


def execute(notebook: Path, output: Path, params: Mapping[str, Any], *, cwd: Path,
            cell_timeout_s: int | None, progress: bool = True, kernel_env: Mapping[str, str] | None = None) -> None:
    """Run ``notebook`` into ``output`` with ``params``; raises PapermillExecutionError on a failing cell.

    The executed notebook is written even when a cell fails, with the failing cell marked (atomically: papermill
    saves to a temporary name, see the module's docstring). ``kernel_env``: variables the kernel starts with
    where this process does not set them already.
    """
    check_parameters(notebook, params)
    saving = temp_beside(output, ".ipynb")  # papermill warns on a name that does not end in .ipynb
    manager = kernel_manager()
    try:
        with _environment({**QUIET_KERNEL_ENV, **(kernel_env or {})}, forced=driver.for_kernels()):
            papermill.execute_notebook(
                str(notebook), str(saving), parameters=dict(params), kernel_name=KERNEL_NAME, cwd=str(cwd),
                execution_timeout=cell_timeout_s, progress_bar=progress, log_output=False,
                request_save_on_cell_execute=True, shutdown_kernel=KERNEL_SHUTDOWN,
                kernel_manager_class=manager,
            )
    except OSError as exc:  # papermill's own save of the notebook (a full disk) names no file: its output is meant
        keep_notebook(saving, output, failed=True)
        naming(exc, output, saving)
        raise
    except BaseException:
        keep_notebook(saving, output, failed=True)
        raise
    keep_notebook(saving, output)


def keep_notebook(saving: Path, output: Path, *, failed: bool = False) -> bool:
    """The notebook papermill saved at ``saving`` put in ``output``'s place atomically, its recorded output
    path made ``output``'s; whether it was. After a run that ``failed``, one that is not a whole notebook (a
    full disk or a kill tore it) is dropped and ``output`` keeps what it held, since the run's own error is
    what the caller reports; otherwise its error is raised."""
    try:
        nb = nbformat.reads(saving.read_text(encoding="utf-8"), as_version=4)
        if "papermill" in nb.metadata:
            nb.metadata.papermill["output_path"] = str(output)
        atomic_write_text(output, nbformat.writes(nb))
        return True
    except (OSError, ValueError):  # nbformat's NotJSONError is a ValueError
        if not failed:
            raise
        return False
    finally:
        saving.unlink(missing_ok=True)


@contextmanager
def _environment(values: Mapping[str, str], forced: Mapping[str, str] | None = None) -> Iterator[None]:
    """``values`` in this process's environment (which a kernel inherits) for the block, where not set already;
    ``forced`` whatever was set (restored after)."""
    forced = dict(forced or {})
    added = [k for k in values if k not in os.environ and k not in forced]
    before = {k: os.environ.get(k) for k in forced}
    os.environ.update({k: values[k] for k in added})
    os.environ.update(forced)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def render_html(ipynb: Path, title: str, report: ReportLayout, *, summary_link: bool = True) -> Path:
    """Render an executed notebook to HTML without code cells (``nbconvert --no-input``).

    The page gets ``title``, a bar linking back to the index, its study's summary (``summary_link``: a
    study has one, a tuning run does not) and the shared pages, and links to the repository's
    ``docs/*.md`` pointed at their published copies.
    """
    nb = nbformat.read(str(ipynb), as_version=4)
    nb.metadata["title"] = title
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    out = ipynb.with_suffix(".html")
    nav = site.nav_bar(out.parent, report.reports_root, report.root if summary_link else None, title)
    body = _BODY_TAG.sub(lambda m: m.group(0) + nav, body, count=1)
    atomic_write_text(out, docs_links(body, out.parent, report.reports_root))
    return out


_BODY_TAG = re.compile(r"<body[^>]*>")
_DOC_LINK = re.compile(r'href="(?:(?:\.\./)*docs/)?(' + "|".join(site.SHARED_PAGES) + r')\.md(#[^"]*)?"')


def docs_links(body: str, page_dir: Path, reports_root: Path) -> str:
    """Links to ``docs/columns.md`` and ``docs/measurement.md`` pointed at the pages published beside the index."""
    return _DOC_LINK.sub(lambda m: f'href="{site.rel(reports_page(reports_root, m.group(1)), page_dir)}'
                                   f'{m.group(2) or ""}"', body)


def pair_title(kind: str, hardware: str, model: str, study: str) -> str:
    """A pair page's title: ``resnet18 on cpu: measurements · default``."""
    return f"{model} on {hardware}: {kind} \u00b7 {study}"


# ---------------------------------------------------------------- what the pages were made from

def copy_data(results_dirs: Sequence[Path], report: ReportLayout) -> list[Path]:
    """Copy each results folder's table, run rules, manifests, ceilings and noise floors under the report's
    ``data/``.

    The report folder then holds everything its pages link to and can be published on its own; the copy
    is replaced each time (raw samples, telemetry and weights stay in the results folder).
    """
    if report.data_dir.exists():
        shutil.rmtree(report.data_dir)
    copies = []
    taken: set[str] = set()
    for d in results_dirs:
        layout = ResultsLayout.of(d)
        name = layout.root.name
        n = 2
        while name in taken:
            name, n = f"{layout.root.name}-{n}", n + 1
        taken.add(name)
        dest = report.data_copy(name)
        dest.mkdir(parents=True, exist_ok=True)
        for src in (layout.results_csv, layout.results_parquet, layout.run_rules_path):
            if src.exists():
                atomic_copy(src, dest / src.name)
        for sub, files in (("manifests", layout.manifest_files()), ("ceilings", layout.ceilings_files()),
                           ("noise_floor", layout.noise_floor_files())):
            for src in files:
                (dest / sub).mkdir(exist_ok=True)
                atomic_copy(src, dest / sub / src.name)
        copies.append(dest)
    return copies


# What a results folder holds that no page is made from: the tables ``summarize`` writes from the rows, trained
# weights, the study's lock, and files being written.
NOT_INPUTS = ("results.csv", "results.parquet")
NOT_INPUT_DIRS = ("weights",)


def page_inputs(results_dirs: Sequence[Path], notebook: str, title: str, description: str) -> dict[str, Any]:
    """What an analysis page is made from, as a stamp to compare: benchlib's version, the notebook, the page's
    title and description, and each file of its results folders (its size and time of change), less
    ``NOT_INPUTS``. Equal stamps make equal pages."""
    source = notebooks_dir() / f"{notebook}.ipynb"
    files: dict[str, list[int]] = {}
    for d in results_dirs:
        root = Path(d).resolve()
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if (not path.is_file() or rel.parts[0] in NOT_INPUT_DIRS or path.name in NOT_INPUTS
                    or path.name.startswith(".benchlib-") or path.suffix == ".tmp"):
                continue
            st = path.stat()
            files[f"{root}/{rel}"] = [st.st_size, st.st_mtime_ns]
    st = source.stat()
    return {"benchlib": __version__, "notebook": [str(source), st.st_size, st.st_mtime_ns], "title": title,
            "description": description, "files": files}


def up_to_date(report: ReportLayout, notebook: str, inputs: Mapping[str, Any]) -> bool:
    """Whether the page ``notebook`` of ``report`` exists and was made from ``inputs`` (``page_inputs``)."""
    stamp = report.inputs_stamp(notebook)
    if not (stamp.is_file() and report.analysis_notebook(notebook).with_suffix(".html").is_file()):
        return False
    try:
        return bool(stamp.read_text(encoding="utf-8").strip() == json_text(inputs))
    except (OSError, ValueError):
        return False


def write_meta(report: ReportLayout, title: str, description: str, results_dirs: Sequence[Path]) -> Path:
    """``report.json``: what the index says of the report (its title, the study's description, its folders)."""
    meta = {"title": title, "description": description, "results_dirs": [Path(d).name for d in results_dirs]}
    atomic_write_json(report.meta_path, meta)
    return report.meta_path


def publish_trace(trace: Path, dest: Path) -> Path | None:
    """A profile's Chrome trace, gzipped beside its page (Perfetto and chrome://tracing open ``.json.gz``)."""
    if not trace.exists():
        return None
    with (atomic_path(dest) as tmp, trace.open("rb") as src, open(tmp, "wb") as raw,
          gzip.GzipFile(dest.name.removesuffix(".gz"), "wb", compresslevel=6, fileobj=raw) as out):
        shutil.copyfileobj(src, out)
    return dest


_HEADING = re.compile(r'<h([1-6]) id="[^"]*">(.*?)<a class="anchor-link" href="#[^"]*">')
_TAG = re.compile(r"<[^>]+>")


def _github_anchor(m: re.Match[str]) -> str:
    """A heading's id as GitHub makes it (lower case, punctuation dropped, spaces to dashes), so the
    contents links written for the repository's Markdown work in the published page too."""
    text = html.unescape(_TAG.sub("", m.group(2))).strip().lower()
    slug = re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))
    return f'<h{m.group(1)} id="{slug}">{m.group(2)}<a class="anchor-link" href="#{slug}">'


def docs_dir() -> Path:
    """The repository's ``docs/`` folder (beside ``notebooks/``)."""
    return notebooks_dir().parent / "docs"


def write_shared_pages(reports_root: Path) -> list[Path]:
    """``columns.html`` (from the schema) and ``measurement.html`` (from docs/measurement.md, when present)."""
    written = []
    columns = reports_page(reports_root, "columns")
    atomic_write_text(columns, site.shared_page("Columns of a result row", dictionary.columns_html_body(), columns,
                                                reports_root))
    written.append(columns)
    source = docs_dir() / "measurement.md"
    if source.exists():
        measurement = reports_page(reports_root, "measurement")
        body = docs_links(markdown2html_mistune(source.read_text(encoding="utf-8")), reports_root, reports_root)
        body = _HEADING.sub(_github_anchor, body)
        atomic_write_text(measurement, site.shared_page("How benchlib measures", body, measurement, reports_root))
        written.append(measurement)
    return written


def write_index(reports_root: Path) -> Path:
    """``reports/index.html``: every study with its description, headline numbers, pages and data."""
    reports_root = Path(reports_root)
    write_shared_pages(reports_root)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    folders = sorted(p for p in reports_root.iterdir() if p.is_dir())
    out = reports_index(reports_root)
    atomic_write_text(out, site.index_page(reports_root, folders, stamp))
    return out
