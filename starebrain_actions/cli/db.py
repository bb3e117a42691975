"""Where the CLI's ledger is: a SQLite file path or a ``postgresql://`` URL (``--db``,
``$STAREBRAIN_DB``), and the one-action reads of ``status`` and ``history`` on either.

A URL is never treated as a file (no existence check, no file-mode warning, no lock file
next to it) and is only ever shown without its password (``ledger.pg.redact``). This module imports
neither asyncio nor the PostgreSQL code until a URL is actually given, so that ``status`` and
``history`` of a SQLite file still start without them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import click

if TYPE_CHECKING:
    from datetime import datetime

    from starebrain_actions.core.model import ActionSummary, HistoryEntry
    from starebrain_actions.ledger.store import Ledger

T = TypeVar("T")

#: A ledger: the path of a SQLite file, or a PostgreSQL URL (a ``str``).
LedgerTarget = Path | str

#: What ``--db`` says it takes (the same words for the CLI, the nightly script and MCP).
DB_HELP: Final = (
    "The ledger: a SQLite file path, or a postgresql://USER@HOST[:PORT]/DB URL (a shared"
    " ledger for several hosts; give the password in $PGPASSWORD or ~/.pgpass; one in the"
    " URL is never printed)."
)


def is_url(target: object) -> bool:
    """Does ``target`` name a PostgreSQL ledger (``postgresql://`` or ``postgres://``)?"""
    if not isinstance(target, str) or "://" not in target:
        return False  # without importing _pg (and asyncio) for a path
    from starebrain_actions.ledger.pg import is_url as pg_is_url

    return pg_is_url(target)


def describe(target: LedgerTarget) -> str:
    """``target`` fit for a message: the path, or the URL without its password."""
    if is_url(target):
        from starebrain_actions.ledger.pg import redact

        return redact(str(target))
    return str(target)


#: The warning for a URL with a password on the command line (issue 36).
ARGV_URL_WARNING: Final = (
    "starebrain: warning: the URL given with --db holds a password, which every user of this"
    " machine can read (ps, /proc/PID/cmdline) while the command runs: give the password in"
    " $PGPASSWORD or ~/.pgpass, or the whole URL in $STAREBRAIN_DB, instead"
)


def warn_password_in_argv(
    url: str, param: click.Parameter | None, ctx: click.Context | None
) -> None:
    """Warn on stderr when ``url``, a PostgreSQL URL holding a secret (a password, or a
    secret query parameter: ``ledger.pg.redact``), came from the command line, where other
    users see it; one from the environment (``$STAREBRAIN_DB``) is not warned of."""
    from click.core import ParameterSource

    from starebrain_actions.ledger.pg import redact

    if ctx is None or param is None or param.name is None:
        return
    if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        return
    if redact(url) != url:
        click.echo(ARGV_URL_WARNING, err=True)


class BadLedgerUrl(click.ClickException):
    """A malformed PostgreSQL URL in ``--db`` or ``$STAREBRAIN_DB``: a usage error (exit 2)
    on one line, the URL shown redacted (with ``--json``, the JSON error on stdout)."""

    exit_code = 2


class DbTarget(click.ParamType[LedgerTarget, Any]):
    """``--db``: a PostgreSQL URL stays the string it is (once :func:`_pg.check_url` accepts
    it); anything else is a ``Path``."""

    name = "PATH|URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, Path):
            return value
        if is_url(value):
            from starebrain_actions.ledger.pg import BadUrl, check_url

            try:
                check_url(value)
            except BadUrl as exc:
                envvar = getattr(param, "envvar", None)
                where = f"--db (or ${envvar})" if isinstance(envvar, str) else "--db"
                raise BadLedgerUrl(f"{where}: {exc}") from None
            warn_password_in_argv(value, param, ctx)
            return value
        if not isinstance(value, str) or not value:
            self.fail("expected a file path or a postgresql:// URL", param, ctx)
        return Path(value)


class OneActionReader(Protocol):
    """The reads ``status`` and ``history`` make: ``ledger.read.LedgerReader``'s methods."""

    def summary(self, action_id: str, *, now: datetime | None = None) -> ActionSummary: ...

    def duplicates(self, action_id: str) -> list[dict[str, Any]]: ...

    def history(self, action_id: str) -> list[HistoryEntry]: ...


def read_one(target: LedgerTarget, read: Callable[[OneActionReader], T]) -> T:
    """``read`` run on the ledger at ``target`` opened read-only (nothing is created).

    A file is read on this thread through ``open_read_only`` (no asyncio); a URL through
    ``Ledger.open(url, read_only=True, create=False)``, its async methods offered to ``read``
    as ``OneActionReader``'s synchronous ones. Either way ``read`` gets the same results and
    the ledger's own errors.

    Raises:
        LedgerUnavailable / SchemaTooNew / NotFound: as the ledger raises them.
    """
    if not is_url(target):
        from starebrain_actions.ledger.read import open_read_only

        with open_read_only(target) as reader:
            return read(reader)
    import asyncio

    from starebrain_actions.ledger.store import Ledger

    async def work() -> T:
        async with Ledger.open(str(target), read_only=True, create=False) as ledger:
            bridge = _AsyncReader(ledger, asyncio.get_running_loop())
            return await asyncio.to_thread(read, bridge)

    return asyncio.run(work())


class _AsyncReader:
    """An open ``Ledger``'s reads, called synchronously from a worker thread while its event
    loop runs them (``read_one``)."""

    def __init__(self, ledger: Ledger, loop: Any) -> None:
        self._ledger = ledger
        self._loop = loop

    def _wait(self, coroutine: Any) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def summary(self, action_id: str, *, now: datetime | None = None) -> ActionSummary:
        result: ActionSummary = self._wait(self._ledger.summary(action_id, now=now))
        return result

    def duplicates(self, action_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._wait(self._ledger.duplicates(action_id))
        return result

    def history(self, action_id: str) -> list[HistoryEntry]:
        result: list[HistoryEntry] = self._wait(self._ledger.history(action_id))
        return result
