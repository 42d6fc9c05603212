"""Every exception benchlib raises on purpose, in one module.

Two families:

- :class:`BenchlibError`: a problem the user can fix (bad input, a missing file, an absent device). Its
  message is one line naming the problem and what is allowed; the CLI prints it and exits with
  ``exit_code`` (2) without a traceback unless ``--debug`` is given.
- :class:`MeasurementOutcome`: a configuration ended without a measurement for a reason that is itself a
  result (it cannot run here, it ran out of memory, its loss diverged). The runner records it as a row
  whose ``status`` names the outcome, and the study goes on.
"""
from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message that says anything ('' when none does): one line for a row, a
    warning or a refusal, whatever the library below wrote (a YAML mark, a traceback, a C++ frame list)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an exception (just ``Type`` when its message is empty)."""
    said = first_line(exc)
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


class BenchlibError(Exception):
    """Base class for user-facing errors: the message is the whole explanation."""

    exit_code: int = 2


class ConfigError(BenchlibError):
    """A params file or command-line value is malformed, unknown or out of range."""


class DataPathError(BenchlibError):
    """A data set is missing on disk or is not in the expected on-disk format."""


class DeviceNotPresentError(BenchlibError):
    """The requested hardware is not present on this machine."""


class WeightsUnavailableError(BenchlibError):
    """Pretrained weights are neither cached nor downloadable."""


class ResultsFileError(BenchlibError):
    """A results file is unreadable, truncated or not a benchlib results file."""


class DiskFull(BenchlibError):
    """The disk filled while results were written: complete rows are kept, the command resumes when re-run."""

    exit_code = 1


class MissingExtra(BenchlibError):
    """A feature needs a package of an optional extra (``benchlib[tune]``, ...) that is not installed.

    A platform's kernel (Colab, Kaggle) has pinned its own Jupyter stack and torch, so benchlib's core install
    adds nothing that would upgrade them; tuning (optuna), timm models and JupyterLab are extras, imported on
    first use. :func:`missing` words the line.
    """


EXTRAS: dict[str, str] = {"optuna": "tune", "timm": "timm", "jupyterlab": "lab"}


def missing(module: str, what: str) -> MissingExtra:
    """The one line for ``what`` without ``module``: which extra installs it."""
    top = module.split(".")[0]
    return MissingExtra(f"{what} needs {top}, which is not installed; install it with "
                        f"pip install 'benchlib[{EXTRAS.get(top, 'all')}]'")


class FolderLocked(BenchlibError):
    """Another live process holds the results folder (``store.lock``)."""


class Orphaned(BenchlibError):
    """A notebook kernel whose study process is gone tried to write (``store.driver``)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's cancel, ``kill``), raised in the command's main thread so that it leaves as Ctrl-C
    does: the kernel papermill started stopped, the results folder's lock released, one line said."""


class BrowserError(RuntimeError):
    """Chromium did not start, answer or load a page in time (``pipeline.page_check``)."""


class ClusterError(BenchlibError):
    """The cluster's scheduler failed (its commands unreachable or broken): not the input's fault."""

    exit_code = 1


class CalibrationFailed(BenchlibError):
    """A calibration run produced no row: the floor is not measured (the line names the run and why)."""

    exit_code = 1


class MeasurementOutcome(RuntimeError):
    """A configuration produced no measurement; ``status`` is the word its row records."""

    status: str = "failed"


class SkippedConfiguration(MeasurementOutcome):
    """The variant cannot run on this device (fp16 training on CPU, quantized inference on CUDA, ...)."""

    status = "skipped"


class NonFiniteLossError(MeasurementOutcome):
    """The training loss became NaN or infinite: the configuration is unstable."""

    status = "unstable"


class MemoryCeilingError(MeasurementOutcome, MemoryError):
    """The process RSS passed the configured CPU memory ceiling."""

    status = "oom"


class RankFailed(MeasurementOutcome):
    """Another data-parallel rank failed: this one stops too, its row naming that rank and its error.

    ``status`` is the failed rank's own (``oom`` when it ran out of memory, ...); ``rank`` the one that failed.
    """

    def __init__(self, message: str, status: str = "failed", rank: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.rank = rank


class InjectedFault(RuntimeError):
    """Raised by the ``raise`` fault of a drill (``BENCHLIB_FAULT``): a pair notebook that errors."""
