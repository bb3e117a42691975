"""Where starebrain keeps its ledger when none is named: one answer for every entry point
(the ``starebrain`` commands, ``nightly_reconcile``, ``starebrain mcp``, ``worker`` and
``SmsAgent.open()`` without ``db``), from ``$STAREBRAIN_DB`` and ``platformdirs``.

The configuration directory (the ADB key, the simulated phone's files) is
``android_bridge._paths.config_dir``; the ledger is data, so it lives in the data directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: The application name used for every per-user directory (as in ``android_bridge._paths``).
APP_NAME: Final = "starebrain"

#: Environment variable naming the ledger, a file path or a PostgreSQL URL (as ``--db`` does).
DB_ENV: Final = "STAREBRAIN_DB"


def data_dir() -> Path:
    """The user's starebrain data directory (``$XDG_DATA_HOME/starebrain``, i.e.
    ``~/.local/share/starebrain`` on Linux). Not created here."""
    import platformdirs  # only when no ledger path is given: a command starts sooner without

    return platformdirs.user_data_path(APP_NAME, appauthor=False)


def default_db_path() -> Path:
    """The ledger used when neither ``--db`` nor ``$STAREBRAIN_DB`` names one."""
    return data_dir() / "ledger.db"


def default_ledger() -> str | Path:
    """The ledger used when the caller names none: ``$STAREBRAIN_DB`` (a file path or a
    ``postgresql://`` URL, kept as the string it is), else :func:`default_db_path`. An empty
    ``$STAREBRAIN_DB`` counts as unset, as it does for ``--db``."""
    named = os.environ.get(DB_ENV)
    return named if named else default_db_path()


def make_default_dir(target: str | os.PathLike[str]) -> None:
    """Create the directory of the default ledger (and its missing parents, each 0700
    whatever the umask) when ``target`` is :func:`default_db_path` and it is missing; any
    other ledger's directory is the caller's to make.

    Raises:
        OSError: the directory cannot be created.
    """
    if not isinstance(target, os.PathLike):
        return
    path = Path(target)
    if path == default_db_path() and not path.parent.exists():
        from android_bridge._private_files import make_private_dirs

        make_private_dirs(path.parent)
