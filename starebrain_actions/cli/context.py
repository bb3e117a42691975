"""What every ``starebrain`` command shares, below the commands themselves: the settings the
group's global options decided, the ledger they name, the errors commands raise and the
exit statuses they end with.

Light on purpose: the group imports it at start-up, so it imports neither asyncio nor the
ledger until a command opens one.
"""

from __future__ import annotations

import getpass
import os
import stat
from collections.abc import Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import click

from android_bridge.exceptions import BridgeError
from starebrain_actions import _paths
from starebrain_actions.cli.db import LedgerTarget, is_url
from starebrain_actions.core.exceptions import (
    CorruptRecord,
    FingerprintConflict,
    InvalidInput,
    LedgerUnavailable,
    NotFound,
    SchemaTooNew,
    StarebrainError,
)

if TYPE_CHECKING:
    from starebrain_actions.ledger.store import Ledger

T = TypeVar("T")

#: Environment variable naming the ledger, a file path or a PostgreSQL URL (same as ``--db``).
DB_ENV: Final = _paths.DB_ENV

#: Exit statuses of ``send``.
EXIT_SUCCEEDED: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNRESOLVED: Final = 3
EXIT_FAILED: Final = 4
EXIT_MISMATCH: Final = 5
#: the phone shows the message sent, but it has not settled: the app may still mark it
#: failed until its settle time (rerun to follow it; never send it anew)
EXIT_SETTLING: Final = 6
#: the phone is not ready (locked, screen off, no SMS app, unreachable...): nothing was sent
#: and no attempt was spent; a person must act on the phone, then rerun the same command
EXIT_NOT_READY: Final = 7
#: the policy gate holds the action: a person's approval, or quiet hours (nothing was sent)
EXIT_HELD: Final = 8
#: the policy gate refused the action: a recipient rule or a person's denial (never sent), or
#: a limit (try later)
EXIT_REFUSED: Final = 9
#: the action's deadline passed with nothing sent (EXPIRED): it is never sent, by any path
EXIT_EXPIRED: Final = 10
#: Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED: Final = 130


#: What the help of every command that opens a ledger says of it (the group's ``--db``).
LEDGER_HELP: Final = (
    "The ledger: the one `starebrain --db` names, else $STAREBRAIN_DB, else"
    " $XDG_DATA_HOME/starebrain/ledger.db (~/.local/share/starebrain/ledger.db), the same as"
    " SmsAgent.open() without db; `starebrain status` without an id shows which it is."
)


def default_db_path() -> Path:
    """``ledger.db`` in the user's data directory (platformdirs): on Linux
    ``$XDG_DATA_HOME/starebrain/ledger.db``, i.e. ``~/.local/share/starebrain/ledger.db``."""
    return _paths.default_db_path()


class CliError(click.ClickException):
    """A clear, one-line error naming the problem; exit status 1."""


class CliUsageError(CliError):
    """Bad input the user must fix (a malformed number, a changed intent...); exit status 2."""

    exit_code = EXIT_USAGE


@attrs.frozen(kw_only=True)
class Settings:
    """What the group's global options decided, passed to every subcommand."""

    #: the ledger: a file path, or a PostgreSQL URL (a ``str``)
    db: LedgerTarget
    #: True when ``db`` is the built-in default (its directory may be created)
    db_is_default: bool
    #: read phones through ``su 1000`` (``--read-as-system``)
    read_as_system: bool = False


def settings_of(ctx: click.Context) -> Settings:
    """The :class:`Settings` the ``starebrain`` group left for its subcommands."""
    settings = ctx.find_object(Settings)
    if settings is None:  # pragma: no cover - the group always sets it
        raise CliError("internal: the starebrain group did not run")
    return settings


def ledger_path(settings: Settings, *, create: bool) -> LedgerTarget:
    """The ledger path to open; read commands refuse a missing file instead of creating one.

    Only ``send`` creates a ledger (``Ledger.open`` makes the file mode 0600); in the default
    location it also creates the directory, mode 0700. An existing ledger readable by other
    users gets a warning on stderr: it holds phone numbers and message bodies. A PostgreSQL
    URL is returned as it is: the commands open it with ``create=False`` where they read, and
    the ledger's own error says when the schema holds no ledger.
    """
    if is_url(settings.db):
        return settings.db
    path = Path(settings.db)
    if path.exists():
        warn_if_readable(path)
        return path
    if not create:
        hint = f"pass --db PATH or set {DB_ENV}" if settings.db_is_default else "check --db"
        raise CliError(f"no ledger at {path} (nothing has been sent with it yet?); {hint}")
    if settings.db_is_default:
        _paths.make_default_dir(path)  # each missing directory 0700, whatever the umask
    return path


def warn_if_readable(path: Path) -> None:
    """Warn on stderr when the ledger file is readable by its group or by others."""
    try:
        status = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(status.st_mode)
    if stat.S_ISREG(status.st_mode) and mode & 0o044:
        click.echo(
            f"starebrain: warning: the ledger {path} is readable by other users (mode"
            f" {mode:04o}) and holds phone numbers and message bodies; fix it with:"
            f" chmod 600 {path}",
            err=True,
        )


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning the ledger's errors into clear CLI errors."""
    import asyncio  # not by ``status`` and ``history``, which read through ``open_read_only``

    with ledger_errors():
        return asyncio.run(coroutine)


@contextmanager
def ledger_errors() -> Iterator[None]:
    """The ledger's (and the phone's) errors raised in the block, as clear CLI errors."""
    try:
        yield
    except FingerprintConflict:
        raise  # the caller decides what a conflict means
    except NotFound as exc:
        raise CliError(str(exc)) from exc
    except (LedgerUnavailable, SchemaTooNew, CorruptRecord) as exc:
        raise CliError(f"cannot use the ledger: {exc}") from exc
    except InvalidInput as exc:
        raise CliUsageError(str(exc)) from exc
    except (StarebrainError, BridgeError) as exc:
        raise CliError(f"{type(exc).__name__}: {exc}") from exc


def open_ledger(
    path: LedgerTarget, *, read_only: bool = False, create: bool = True
) -> AbstractAsyncContextManager[Ledger]:
    """``Ledger.open``, imported (with asyncio and aiosqlite) by the commands that use it."""
    from starebrain_actions.ledger.store import Ledger

    return Ledger.open(path, read_only=read_only, create=create)


@contextmanager
def stop_on_signals() -> Iterator[Any]:
    """An ``asyncio.Event`` set by SIGTERM or SIGINT while the block runs (in a running event
    loop), for the commands that keep going until told to stop (``events --follow``,
    ``deliver --follow``); the signals' handlers are given back afterwards."""
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        yield stop
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def operator_name(given: str | None) -> str:
    """Who rules, grants or approves: ``--operator``, else ``$USER``, else the login name.

    Raises:
        CliUsageError: none of them is known.
    """
    name = given or os.environ.get("USER") or _login_name()
    if not name:
        raise CliUsageError("cannot tell who you are: pass --operator NAME")
    return name


def _login_name() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
