"""The Optuna storage of a results folder's tuning studies: SQLite for one process, a journal file for many.

SQLite under concurrent writers on a shared filesystem fails with "database is locked" (Optuna's own
documentation advises against it), so parallel workers share a journal file (``JournalFileBackend``:
append-only, with a lock that works over NFS). Once a folder has a journal, every later run, parallel or
not, uses it, so a study stays one study; studies a single process stored in SQLite before are copied
into the journal when parallel work first starts (:func:`move_to_journal`), and the SQLite file is kept
aside under another name.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import missing

try:
    import optuna
    from optuna.storages import BaseStorage, JournalStorage
    from optuna.storages.journal import JournalFileBackend
except ImportError as _exc:
    raise missing("optuna", "tuning (benchlib tune, the tune notebook)") from _exc

from .layout import ResultsLayout

SQLITE_SET_ASIDE_SUFFIX = ".copied-to-journal"


def open_storage(results_dir: str | Path, *, parallel: bool = False) -> str | BaseStorage:
    """The storage to open the folder's studies in: the journal when ``parallel`` or once it exists."""
    layout = ResultsLayout.of(results_dir)
    if parallel or layout.tuning_journal.is_file():
        layout.tuning_dir.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(layout.tuning_journal.resolve())))
    return layout.tuning_storage_url


def has_studies(results_dir: str | Path) -> bool:
    return ResultsLayout.of(results_dir).tuning_storage.is_file()


def move_to_journal(results_dir: str | Path) -> list[str]:
    """Before parallel workers start: copy every study of the SQLite file into the journal; their names.

    Run once, by the one process that submits the workers (never by the workers, who would race). The
    SQLite file is renamed with :data:`SQLITE_SET_ASIDE_SUFFIX`, so no reader takes it for the studies.
    """
    layout = ResultsLayout.of(results_dir)
    if layout.tuning_journal.is_file() or not layout.tuning_sqlite.is_file():
        return []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = optuna.get_all_study_names(layout.tuning_storage_url)
    journal = open_storage(results_dir, parallel=True)
    for name in names:
        optuna.copy_study(from_study_name=name, from_storage=layout.tuning_storage_url, to_storage=journal)
    layout.tuning_sqlite.rename(layout.tuning_sqlite.with_name(layout.tuning_sqlite.name + SQLITE_SET_ASIDE_SUFFIX))
    return names
