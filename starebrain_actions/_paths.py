"""Where the ``starebrain`` command keeps its ledger on this platform, from ``platformdirs``.

The configuration directory (the ADB key, the simulated phone's files) is
``android_bridge._paths.config_dir``; the ledger is data, so it lives in the data directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: The application name used for every per-user directory (as in ``android_bridge._paths``).
APP_NAME: Final = "starebrain"


def data_dir() -> Path:
    """The user's starebrain data directory (``$XDG_DATA_HOME/starebrain``, i.e.
    ``~/.local/share/starebrain`` on Linux). Not created here."""
    import platformdirs  # only when no ledger path is given: a command starts sooner without

    return platformdirs.user_data_path(APP_NAME, appauthor=False)


def default_db_path() -> Path:
    """The ledger used when neither ``--db`` nor ``$STAREBRAIN_DB`` names one."""
    return data_dir() / "ledger.db"
