"""Where starebrain keeps its files on this platform, from ``platformdirs``: one answer for
every caller (the ``starebrain`` command, the bridge's key loader, the simulated phone).

On Linux these follow the XDG base directories: ``$XDG_CONFIG_HOME/starebrain``, i.e.
``~/.config/starebrain`` when the variable is unset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import platformdirs

#: The application name used for every per-user directory.
APP_NAME: Final = "starebrain"


def config_dir() -> Path:
    """The user's starebrain configuration directory (``~/.config/starebrain`` on Linux,
    ``~/Library/Application Support/starebrain`` on macOS, ``%LOCALAPPDATA%\\starebrain`` on
    Windows). Not created here."""
    return platformdirs.user_config_path(APP_NAME, appauthor=False)


def simulator_dir() -> Path:
    """Where the simulated phone keeps its SMS store and ``adb_keys`` unless told otherwise."""
    return config_dir() / "simulator"
