"""The nightly job's lock: one run at a time per ledger (``fcntl.flock`` on
``<ledger>.nightly.lock`` for SQLite; the ledger's advisory lock ``nightly`` on PostgreSQL),
and the error a second run leaves with."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from starebrain_actions.core.exceptions import LedgerUnavailable
from starebrain_actions.ledger.store import inspect_ledger

#: The name of the nightly job's lock in a PostgreSQL ledger (``Ledger.exclusive``).
NIGHTLY_LOCK: Final = "nightly"


class NightlyBusy(Exception):
    """Another nightly run holds the lock on this ledger."""


def lock_path_for(ledger_path: Path) -> Path:
    """``<ledger>.nightly.lock``, next to the ledger."""
    return ledger_path.with_name(ledger_path.name + ".nightly.lock")


@contextlib.contextmanager
def nightly_lock(ledger_path: Path) -> Iterator[Path]:
    """Hold the nightly lock of ``ledger_path`` for the duration of the block.

    A non-blocking ``flock``: the kernel releases it when the holder exits or crashes, so no
    stale lock survives; the file itself stays (removing it would race with a new holder).
    The ledger is checked first, without writing anything: no lock file is ever left next to
    something that is not a ledger (``/dev/null``, a text file, another program's database).

    Raises:
        NightlyBusy: another process holds it.
        LedgerUnavailable: ``ledger_path`` is not a usable ledger, or the lock file cannot be
            created.
        SchemaTooNew: the ledger was written by a newer version.
    """
    inspect_ledger(ledger_path)
    path = lock_path_for(ledger_path)
    descriptor = _open_lock_file(path)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LedgerUnavailable(f"cannot lock {path}: {exc}") from exc
            holder = _read_holder(descriptor)
            raise NightlyBusy(
                f"another nightly run{holder} holds {path}; leaving this run without touching"
                " anything"
            ) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(descriptor)


def _open_lock_file(path: Path) -> int:
    """A descriptor of the lock file at ``path``, created 0600 if missing: never through a
    symlink (``O_NOFOLLOW``: one planted there would have its target truncated and
    overwritten with a pid), never blocking on a FIFO (``O_NONBLOCK``), not inherited by the
    programs the run starts (``O_CLOEXEC``), never a terminal's controller (``O_NOCTTY``),
    and only a regular file (a directory, a FIFO, a
    device is refused, untouched).

    Raises:
        LedgerUnavailable: the path is not a regular file, or cannot be opened or created.
    """
    refuse = (
        f"the nightly lock {path} is not a regular file; leaving it untouched (remove it, or"
        " move it aside, if it is not yours)"
    )
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) or (
            os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path))
        ):
            raise LedgerUnavailable(f"{refuse} ({_kind(path)})") from None
        hint = (
            " (a read-only ledger or directory? `starebrain nightly --dry-run` needs no lock)"
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
            else ""
        )
        raise LedgerUnavailable(f"cannot create the nightly lock {path}: {exc}{hint}") from exc
    try:
        status = os.fstat(descriptor)
    except OSError as exc:
        os.close(descriptor)
        raise LedgerUnavailable(f"cannot use the nightly lock {path}: {exc}") from exc
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)  # a FIFO or a device opened without blocking: nothing written
        raise LedgerUnavailable(f"{refuse} ({_kind(path)})")
    return descriptor


def _kind(path: Path) -> str:
    """What stands at ``path``, in words (for a refusal)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "gone"
    for test, word in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def _read_holder(descriptor: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(descriptor, 32, 0).decode().strip()
        if text:
            return f" (pid {int(text)})"
    return ""
