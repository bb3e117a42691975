"""The one rule for the files and directories starebrain creates: private to their owner.

Every directory created (the config directory, its ``simulator`` directory, any missing
parent of a key or a store) is 0700, and every file created that holds keys, messages or a
ledger is 0600, whatever the umask. The XDG base directory specification asks the same of a
directory created for a user's files (0700).

The public key (``adbkey.pub``) is 0600 too, though it is no secret. One rule, with no
exception to argue about or forget, is the one both paths that create it (the first
``send``'s ``ensure_key`` and ``starebrain key new``) can keep; nobody else needs to read the
file (``starebrain key show`` prints its line, for the phone or a colleague), and it names
the user and the host in its comment.

Files and directories that already exist are left as they are: their modes are their
owner's choice (the ledger warns when its own file is readable by others). ``starebrain_actions``
creates its ledger by the same rule (``Ledger.open``: 0600, its default directory 0700).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

#: The mode of every directory starebrain creates.
PRIVATE_DIR_MODE: Final = 0o700
#: The mode of every file starebrain creates holding keys, messages or a ledger.
PRIVATE_FILE_MODE: Final = 0o600


def make_private_dirs(path: Path) -> None:
    """Create the directory ``path`` and its missing parents, each one 0700 whatever the
    umask. Directories already there are left as they are.

    Raises:
        OSError: a directory cannot be created (``FileExistsError``: a file stands there).
    """
    missing: list[Path] = []
    current = Path(path)
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if directory.is_dir():
                continue  # made by another process meanwhile: theirs, left as it is
            raise
        os.chmod(directory, PRIVATE_DIR_MODE)  # a umask such as 0277 narrows mkdir's mode


def open_private_file(path: Path) -> int:
    """A write-only descriptor of a new file at ``path``, mode 0600 whatever the umask:
    created exclusively (never through a symlink, never over an existing file) and not
    inherited by child processes.

    Raises:
        FileExistsError: something (a file, a symlink) is already at ``path``.
        OSError: it cannot be created.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def write_private_file(path: Path, data: bytes) -> None:
    """Create ``path`` (0600, exclusively: :func:`open_private_file`) holding ``data``,
    synced to disk; a file left half-written by a failure is removed.

    Raises:
        FileExistsError: something is already at ``path``; it is left as it is.
        OSError: it cannot be written.
    """
    descriptor = open_private_file(path)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def ensure_private_file(path: Path) -> bool:
    """Create ``path`` empty and 0600 if nothing is there, so that SQLite opens a file of
    that mode (it gives a database's journal and WAL files the database file's mode).

    Returns:
        True if it was created; False if something was already there (left as it is).
    """
    try:
        descriptor = open_private_file(path)
    except FileExistsError:
        return False
    os.close(descriptor)
    return True
