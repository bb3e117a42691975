"""PostgreSQL for the ledger: asyncpg, behind the small synchronous surface its SQL runs on.

The ledger's operations are synchronous functions of a connection (``work(db)``), each run
whole on a worker thread: one transaction is one call, never interleaved with another
operation's statements. On SQLite ``db`` is a ``sqlite3.Connection``; here it is a
:class:`PgConnection`, which runs each statement on an asyncpg connection through a private
event loop (one thread per process, holding one pool per database URL), so that the same
functions, the same SQL and the same compare-and-set rules serve both backends.

What differs, and where it is handled:

* placeholders: ``?`` and ``:name`` become ``$n`` (:func:`translate`); SQLite's planner hints
  (a unary ``+`` before a column) are dropped;
* transactions: ``BEGIN IMMEDIATE`` (SQLite's one writer) becomes ``BEGIN`` (READ COMMITTED):
  compare-and-set updates and unique indexes keep the invariants, and the few checks that
  read before they write take a transaction-scoped advisory lock first
  (:meth:`PgConnection.lock`: a device's lease and pass, the send cap);
* a failed statement aborts a PostgreSQL transaction, where SQLite rolls back only that
  statement: the places that go on after a refused statement run it under a savepoint
  (:meth:`PgConnection.savepoint`);
* errors: a constraint or trigger refusal is raised as ``sqlite3.IntegrityError`` (the class
  the ledger's code already handles), a lost or refused connection as ``LedgerUnavailable``,
  anything else the server says as ``sqlite3.DatabaseError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeVar

from starebrain_actions.core.exceptions import LedgerUnavailable

T = TypeVar("T")

#: URL schemes that name a PostgreSQL ledger.
SCHEMES: Final = ("postgresql", "postgres")

_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\?|(?<![:\w]):([A-Za-z_]\w*)")
#: SQLite's planner hint: a unary + before a column name (``+dispatched_at``)
_HINT = re.compile(r"(?<=[\s(,])\+(?=[A-Za-z_])")
_BEGIN: Final[Mapping[str, str]] = {
    "BEGIN IMMEDIATE": "BEGIN ISOLATION LEVEL READ COMMITTED",
    "BEGIN DEFERRED": "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    "BEGIN": "BEGIN ISOLATION LEVEL READ COMMITTED",
}


def is_url(target: object) -> bool:
    """Does ``target`` (a path or a URL) name a PostgreSQL database?"""
    if not isinstance(target, str):
        return False
    scheme, sep, _rest = target.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


#: Query parameters whose values are secrets, matched on the lower-cased, unquoted name:
#: ``password`` and ``sslpassword`` (which asyncpg reads), and any other name that says it
#: holds a password, secret or token (asyncpg sends unknown names to the server as settings,
#: where they appear in its error messages). File paths (``passfile``, ``sslkey``,
#: ``sslcert``, ``sslrootcert``) are shown: they name where a secret is, not the secret.
_SECRET_NAME = re.compile(r"pass(?:word|wd)|secret|token")
#: What a secret is shown as.
MASK: Final = "***"


class BadUrl(ValueError):
    """A PostgreSQL URL the ledger cannot use as it is written; the message names the problem
    and shows the URL only through :func:`redact`."""


def _split(url: str) -> tuple[str, str, str, str]:
    """``url`` as (``scheme://``, netloc, path, ``?query#fragment``), split where ``urlsplit``
    (and asyncpg's ``urlparse``) split it: the netloc ends at the first ``/``, ``?`` or ``#``.
    Never raises."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    else:
        head += sep
    match = re.search(r"[/?#]", rest)
    end = match.start() if match else len(rest)
    netloc, tail = rest[:end], rest[end:]
    cut = min((i for i in (tail.find("?"), tail.find("#")) if i >= 0), default=len(tail))
    return head, netloc, tail[:cut], tail[cut:]


def _query_secrets(query_and_fragment: str) -> tuple[str, list[str]]:
    """``?query#fragment`` with every secret parameter's value masked, and those values."""
    query, hash_sign, fragment = query_and_fragment.partition("#")
    if not query.startswith("?"):
        return query_and_fragment, []
    found: list[str] = []
    fields = []
    for field in query[1:].split("&"):
        name, equals, value = field.partition("=")
        if equals and value and _SECRET_NAME.search(urllib.parse.unquote_plus(name).lower()):
            found.append(value)
            value = MASK
        fields.append(name + equals + value)
    return "?" + "&".join(fields) + hash_sign + fragment, found


def _netloc_secrets(netloc: str) -> tuple[str, list[str]]:
    """The netloc with the password masked, and the password. The user info ends at the
    netloc's last ``@`` (``urlsplit``'s reading), and the password starts at its first ``:``;
    asyncpg ends the user info at the first ``@`` instead, so a password holding an ``@``
    is masked whole under either reading."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return netloc, []
    user, colon, password = userinfo.partition(":")
    if not colon:
        return netloc, []
    return f"{user}:{MASK}@{hosts}", [password] if password else []


def _cut_short(netloc: str, path: str, query: str) -> bool:
    """Does the netloc look cut short by a password holding an unescaped ``/``, ``?`` or
    ``#``? It has a ``:`` and no ``@``, and an ``@`` follows: in the path (where a database
    name rarely has one), or in the query when what stands as the port is not a number."""
    if "@" in netloc or ":" not in netloc:
        return False
    if "@" in path:
        return True
    port = netloc.rpartition(":")[2]
    return "@" in query.partition("#")[0] and not (port.isascii() and port.isdigit())


def _secrets(url: str) -> tuple[str, list[str]]:
    """``url`` with every secret masked, and the secrets (as written, not unquoted)."""
    head, netloc, path, query = _split(url)
    shown_netloc, secrets = _netloc_secrets(netloc)
    if not secrets and _cut_short(netloc, path, query):
        # a password holding an unescaped / ? or # (``postgresql://user:pa/ss@host/db``) cut
        # the netloc short, and what looks like a port is the password's start: mask from
        # the user's colon to the last @
        user = netloc.partition(":")[0]
        rest = netloc + path + query
        secret = rest[len(user) + 1 : rest.rindex("@")]
        return f"{head}{user}:{MASK}{rest[rest.rindex('@') :]}", _pieces([secret])
    shown_query, query_secrets = _query_secrets(query)
    return head + shown_netloc + path + shown_query, _pieces(secrets) + query_secrets


def _pieces(secrets: list[str]) -> list[str]:
    """The secrets, and the pieces of each between an ``@``, ``/``, ``?`` or ``#`` (what a
    driver that splits the URL otherwise takes for the password, or quotes as the port)."""
    pieces = list(secrets)
    for secret in secrets:
        parts = re.split(r"[@/?#]", secret)
        pieces += [part for part in parts[1:] if len(part) >= 3] + parts[:1]
    return pieces


def redact(url: str) -> str:
    """The URL without its secrets, for messages, logs and reports: the password in the user
    info (``user:password@``) and the values of secret query parameters (``?password=…``,
    ``?sslpassword=…``) are ``***``. Total: a malformed URL (a port that is not a number,
    several hosts, a password with an unescaped ``/`` or ``@``) is masked as well as it can
    be, never refused."""
    return _secrets(url)[0]


def without_secrets(url: str) -> str:
    """``url`` with its secrets taken out rather than masked (the user info's password and
    the secret query parameters dropped): a URL that can be pasted, for a ledger whose
    password is given in ``$PGPASSWORD`` or a ``~/.pgpass`` file (which asyncpg reads)."""
    head, netloc, path, query_and_fragment = _split(url)
    userinfo, at, hosts = netloc.rpartition("@")
    if at:
        netloc = f"{userinfo.partition(':')[0]}@{hosts}"
    query, hash_sign, fragment = query_and_fragment.partition("#")
    if query.startswith("?"):
        kept = [
            field
            for field in query[1:].split("&")
            if not _SECRET_NAME.search(urllib.parse.unquote_plus(field.partition("=")[0]).lower())
        ]
        query = "?" + "&".join(kept) if kept else ""
    return head + netloc + path + query + hash_sign + fragment


def redact_text(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url`` shown by :func:`redact` and any of its
    secrets that appear elsewhere, as written or unquoted, replaced by ``***``."""
    shown, secrets = _secrets(url)
    text = text.replace(url, shown)
    candidates = {
        secret
        for raw in secrets
        for secret in (raw, urllib.parse.unquote(raw), urllib.parse.unquote_plus(raw))
    }
    for secret in sorted(candidates - {"", MASK}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def check_url(url: str) -> None:
    """Refuse a PostgreSQL URL the ledger cannot use as written, before any driver reads it
    (asyncpg would fail deep inside with a bare ``ValueError``, or read it otherwise).

    Refused: a scheme other than ``postgresql://``/``postgres://``; a port that is not a
    number from 1 to 65535; several hosts (``h1,h2``, ``?host=h1,h2``): the ledger's
    guarantees hold only if every process writes to one database, and a list of hosts lets
    two processes settle on two different servers; an ``@`` in the user info (asyncpg and
    ``urlsplit`` would split it differently: percent-encode it as ``%40``); a query that is
    not ``name=value`` pairs.

    Raises:
        BadUrl: the URL and what is wrong with it, the URL redacted.
    """
    shown = redact(url)

    def bad(problem: str) -> BadUrl:
        return BadUrl(f"malformed PostgreSQL URL {shown}: {problem}")

    if not is_url(url):
        raise bad("expected postgresql://USER@HOST:PORT/DATABASE")
    _head, netloc, _path, query_and_fragment = _split(url)
    if _cut_short(netloc, _path, query_and_fragment):
        raise bad("the password holds a / ? or #: percent-encode it (/ is %2F, ? %3F, # %23)")
    userinfo, _at, hosts = netloc.rpartition("@")
    if "@" in userinfo:
        raise bad("the user or password holds an @: percent-encode it as %40")
    query = query_and_fragment.partition("#")[0].removeprefix("?")
    try:
        fields = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise bad("its query is not NAME=VALUE pairs joined by &") from None
    ports = [value for name, value in fields if name == "port"]
    for name, value in fields:
        if name == "host" and "," in value:
            raise bad(_SEVERAL_HOSTS)
    if "," in hosts:
        raise bad(_SEVERAL_HOSTS)
    if hosts.startswith("["):
        _address, bracket, port = hosts[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise bad("an IPv6 address is written [ADDRESS]:PORT")
        port = port[1:]
    else:
        port = hosts.partition(":")[2]
        if ":" in port:
            raise bad("an IPv6 address goes in brackets: [ADDRESS]:PORT")
    for candidate in [urllib.parse.unquote(port), *ports]:
        if "," in candidate:
            raise bad(_SEVERAL_HOSTS)
        if candidate and not (candidate.isascii() and candidate.isdigit()):
            raise bad("the port is not a number")
        if candidate and not 0 < int(candidate) < 65536:
            raise bad("the port is not between 1 and 65535")


_SEVERAL_HOSTS: Final = (
    "several hosts are not supported: the ledger must be one database for every process"
    " (give one host, or one address in front of a failover pair)"
)


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """``sql`` in PostgreSQL's placeholders, and the names its ``:name`` placeholders bind in
    order (None: positional ``?`` placeholders, bound in order)."""
    names: list[str] = []
    positional = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal positional
        text = match.group(0)
        if text.startswith("'"):
            return text  # a string literal: left alone
        if text == "?":
            positional += 1
            return f"${positional}"
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    out = _PLACEHOLDER.sub(replace, sql)
    if names and positional:
        raise ValueError("a statement mixes ? and :name placeholders")
    out = _HINT.sub("", out)
    stripped = out.strip().upper()
    out = _BEGIN.get(stripped, out)
    return out, (tuple(names) if names else None)


#: The advisory lock key of a name, computed by the server: advisory locks belong to the whole
#: database, so the key mixes in the ledger's schema (two ledgers in two schemas never share a
#: lock; two hosts on one ledger always do, however they spell its URL).
LOCK_KEY_SQL: Final = "hashtextextended('starebrain:' || current_schema() || ':' || $1, 0)"


class _Loop:
    """A private event loop on its own daemon thread: asyncpg's connections live there, and
    synchronous callers wait on it (never from the loop's own thread)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="starebrain-postgresql", daemon=True
        )
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("internal: the PostgreSQL loop cannot wait on itself")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


_LOOP: _Loop | None = None
_LOOP_GUARD = threading.Lock()


def _loop() -> _Loop:
    global _LOOP
    with _LOOP_GUARD:
        if _LOOP is None:
            _LOOP = _Loop()
        return _LOOP


#: Statements that return rows (``_run``), and that write nothing (``locked`` mode).
_READS: Final = ("SELECT", "WITH", "VALUES", "FETCH")
#: Statements that leave session state the pool's reset must undo.
_SESSION_STATE: Final = ("SET ", "RESET", "LISTEN", "DECLARE", "PREPARE")


async def _no_reset(_connection: Any) -> None:
    """The pool's reset of a connection given back: nothing to send (``PgDatabase``)."""


class _Unreachable(Exception):
    """The pool gave no connection (the message is ``LedgerUnavailable``'s, redacted)."""


class _LazyConnection:
    """A connection of the pool, acquired by the first statement's own call on the loop (no
    round trip of the calling thread to the loop for it): ``execute``, ``fetch``, ``fetchval``
    … of asyncpg's connection, as coroutines that acquire it first if need be."""

    def __init__(self, database: PgDatabase, pool: Any) -> None:
        self._database = database
        self._pool = pool
        self.raw: Any = None

    async def acquired(self) -> Any:
        if self.raw is None:
            self.raw = await self._database._acquired(self._pool)
        return self.raw

    def is_in_transaction(self) -> bool:
        return self.raw is not None and bool(self.raw.is_in_transaction())

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            raw = await self.acquired()
            return await getattr(raw, name)(*args, **kwargs)

        return call


def _usable(raw: Any) -> bool:
    """May a connection of the pool be kept for another block: open, and in no transaction?
    (Once its connection ends, the pool takes it back and detaches what it handed out, which
    then answers every call with an error: not usable either.)"""
    try:
        return not raw.is_closed() and not raw.is_in_transaction()
    except Exception:
        return False


async def _release(pool: Any, raw: Any) -> None:
    with contextlib.suppress(Exception):
        await pool.release(raw, timeout=10)


class Unguarded(Exception):
    """A statement the caller expects may be refused (it runs it under ``savepoint``) was
    refused in a transaction run without savepoints: PostgreSQL has aborted the whole
    transaction, so it must be rolled back and run again with them (``PgConnection.guarded``).
    Refusals are rare (a race lost, a row claimed twice): the usual transaction spends no
    round trip on savepoints."""


class PgCursor:
    """What ``sqlite3.Cursor`` gives the ledger's code: rows and ``rowcount``."""

    def __init__(self, rows: Sequence[Any], rowcount: int) -> None:
        self._rows = list(rows)
        self._next = 0
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        if self._next >= len(self._rows):
            return None
        row = self._rows[self._next]
        self._next += 1
        return row

    def fetchall(self) -> list[Any]:
        rows = self._rows[self._next :]
        self._next = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgConnection:
    """One asyncpg connection, used synchronously from a worker thread, with
    ``sqlite3.Connection``'s ``execute`` (see the module docstring)."""

    dialect: Final = "postgresql"

    def __init__(self, raw: Any, loop: _Loop, where: str, statement_timeout_s: float) -> None:
        self._raw = raw
        self._loop = loop
        self.where = where
        self._timeout = statement_timeout_s
        self._savepoints = 0
        #: savepoints around the statements a refusal must not abort the transaction for
        #: (``savepoint``); off for a transaction's first run (no round trips spent on them)
        self.guarded = False
        self._unguarded_block = 0
        #: the statements this connection sent to the server (each one round trip); the
        #: database's total is ``PgDatabase.statements``
        self.statements = 0
        self._database: PgDatabase | None = None
        #: ``locked`` mode (``PgBackend.write_locked``): no transaction is begun; ``lock``
        #: takes session locks, held until the work's last write (``finish``) releases them
        #: in its own statement, or until ``end_locked``
        self.locked_mode = False
        self._session_locks: list[str] = []
        #: session state the pool's reset must undo (a script ran, a SET, a session lock
        #: left): otherwise the connection goes back to the pool with no reset statement
        self.dirty = False

    def _sent(self) -> None:
        self.statements += 1
        if self._database is not None:
            self._database.statements += 1

    @property
    def raw(self) -> Any:
        """The asyncpg connection (for the migration runner's scripts)."""
        return self._raw

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        import asyncpg

        self._sent()
        try:
            return self._loop.call(coroutine)
        except _Unreachable as exc:
            raise LedgerUnavailable(str(exc)) from exc.__cause__
        except asyncpg.IntegrityConstraintViolationError as exc:
            if self._unguarded_block:
                raise Unguarded(_message(exc)) from exc
            raise sqlite3.IntegrityError(_message(exc)) from exc
        except (
            asyncpg.PostgresConnectionError,
            asyncpg.InterfaceError,
            # a backend terminated while its connection idled in a transaction: asyncpg may
            # refuse the next statement before it sees the socket close
            asyncpg.InternalClientError,
            OSError,
        ) as exc:
            raise LedgerUnavailable(
                f"ledger {self.where}: the connection to PostgreSQL failed: {exc}"
            ) from exc
        except asyncpg.PostgresError as exc:
            raise sqlite3.DatabaseError(_message(exc)) from exc

    def execute(self, sql: str, parameters: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        """Run one statement (``?`` or ``:name`` placeholders)."""
        text, names = translate(sql)
        if names is not None:
            if not isinstance(parameters, Mapping):
                raise TypeError("named placeholders need a mapping of parameters")
            args: Sequence[Any] = [parameters[name] for name in names]
        else:
            if isinstance(parameters, Mapping):
                raise TypeError("positional placeholders need a sequence of parameters")
            args = list(parameters)
        head = text.lstrip()[:8].upper()
        if head.startswith(_SESSION_STATE):
            self.dirty = True
        if self.locked_mode and not head.startswith(_READS) and not self.in_transaction:
            # a write before the last one (a verdict kept, say): the rest of the work becomes
            # one transaction, committed by ``end_locked`` (an unusual path: one more trip)
            self._begin()
        return self._call(self._run(text, args))

    @property
    def in_transaction(self) -> bool:
        """Is a transaction block open (as the server last said; no round trip)?"""
        return bool(self._raw.is_in_transaction())

    def _begin(self) -> None:
        self.guarded = True
        self._call(self._raw.execute(_BEGIN["BEGIN"]))

    async def _run(self, text: str, args: Sequence[Any]) -> PgCursor:
        head = text.lstrip()[:6].upper()
        if head.startswith(_READS):
            rows = await self._raw.fetch(text, *args, timeout=self._timeout)
            return PgCursor(rows, -1)
        status = await self._raw.execute(text, *args, timeout=self._timeout)
        count = status.rsplit(" ", 1)[-1]
        return PgCursor((), int(count) if count.isdigit() else -1)

    def script(self, sql: str) -> None:
        """Run a script of several statements, no parameters (a migration)."""
        self.dirty = True
        self._call(self._raw.execute(sql))

    def copy_records(
        self, table: str, records: Sequence[Sequence[Any]], columns: Sequence[str]
    ) -> None:
        """Write ``records`` (values in the order of ``columns``) into ``table`` with one
        ``COPY``, in the open transaction: the bulk path of ``starebrain migrate``. A refused
        row is raised as every refusal is (``sqlite3.IntegrityError``, ``sqlite3.DatabaseError``;
        the server's message says at which line of the ``COPY`` it stopped)."""
        self._call(
            self._raw.copy_records_to_table(table, records=list(records), columns=list(columns))
        )

    def lock(self, *names: str) -> None:
        """Take transaction-scoped advisory locks on ``names`` (in sorted order, so that two
        transactions never wait on each other crosswise), in one round trip; released at
        COMMIT or ROLLBACK."""
        ordered = sorted(set(names))
        function = "pg_advisory_xact_lock"
        if self.locked_mode and not self.in_transaction:
            # held past this statement, until ``finish`` or ``end_locked``
            ordered = [name for name in ordered if name not in self._session_locks]
            self._session_locks.extend(ordered)
            function = "pg_advisory_lock"
        if ordered:
            calls = ", ".join(
                f"{function}({LOCK_KEY_SQL.replace('$1', f'${n}')})"
                for n in range(1, len(ordered) + 1)
            )
            self._call(self._raw.execute(f"SELECT {calls}", *ordered))

    # ------------------------------------------------------------------ fewer round trips

    def lock_and_read(
        self,
        names: Sequence[str],
        action_id: str,
        device: str,
        releasing: Sequence[str],
        gate_since: tuple[str, str] | None,
    ) -> dict[str, Any]:
        """A receipt's first round trip, in ``locked`` mode (``starebrain_lock_and_read``,
        migration 0007): session locks on ``names``, then, read under them, the action
        (``action``: its row, or None), its attempts (``attempts``: rows, oldest first), the
        unresolved attempt holding ``device`` (``lease``: ``[dispatch_id, action_id,
        dispatched_at]`` or None; ``releasing``: the reviews that free a phone) and, with
        ``gate_since`` (the day's and the hour's start), the gate's counts (``counts``)."""
        if not self.locked_mode or self.in_transaction:
            raise RuntimeError("internal: lock_and_read needs locked mode, no transaction")
        ordered = sorted(set(names) - set(self._session_locks))
        self._session_locks.extend(ordered)  # before the call: a failure still releases them
        day, hour = gate_since if gate_since is not None else (None, None)
        text = self._call(
            self._raw.fetchval(
                "SELECT starebrain_lock_and_read($1, $2, $3, $4, $5, $6)",
                ordered,
                action_id,
                device,
                list(releasing),
                day,
                hour,
                timeout=self._timeout,
            )
        )
        found: dict[str, Any] = json.loads(text)
        return found

    def finish(self, sql: str, parameters: Mapping[str, Any]) -> None:
        """The last write of a ``locked`` work (``:name`` placeholders): with no transaction
        open, one statement that writes and releases the session locks
        (``starebrain_release``: the names stay locked until that statement commits); in a
        transaction, the write alone (``end_locked`` commits, then releases them)."""
        if not self.locked_mode or self.in_transaction or not self._session_locks:
            self.execute(sql, parameters)
            return
        text, names = translate(sql)
        args = [parameters[name] for name in names or ()]
        held = sorted(self._session_locks)
        self._call(
            self._raw.execute(
                f"WITH written AS ({text}) SELECT starebrain_release(${len(args) + 1})",
                *args,
                held,
                timeout=self._timeout,
            )
        )
        self._session_locks.clear()

    def end_locked(self, ok: bool) -> None:
        """End a ``locked`` work: commit (``ok``) or roll back the transaction it may have
        begun, then give up the session locks still held."""
        try:
            if self.in_transaction:
                self._call(self._raw.execute("COMMIT" if ok else "ROLLBACK"))
        finally:
            self.locked_mode = False
            if self._session_locks:
                self._session_locks.clear()
                self.dirty = True  # the pool's reset releases them if this fails
                self._call(self._raw.execute("SELECT pg_advisory_unlock_all()"))
                self.dirty = False

    def apply_batch(self, items: Sequence[Mapping[str, Any]], *, guarded: bool) -> list[Any]:
        """Compare-and-set transitions in one statement (``starebrain_apply``, migration
        0007): one result per item (see there). Unguarded, a refusal is raised
        (``sqlite3.IntegrityError``) and nothing of the call is written."""
        text = self._call(
            self._raw.fetchval(
                "SELECT starebrain_apply($1::jsonb, $2)",
                json.dumps(items, ensure_ascii=False, separators=(",", ":")),
                guarded,
                timeout=self._timeout,
            )
        )
        results: list[Any] = json.loads(text)
        return results

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Run the block's statements so that a refusal undoes only them (SQLite's statement
        rollback) and the transaction goes on: in a transaction run ``guarded`` (see
        :class:`Unguarded`); otherwise nothing is added, and a refusal is raised as
        :class:`Unguarded` so that the transaction is run again, guarded."""
        if self.locked_mode and not self.in_transaction:
            self._begin()  # a savepoint needs a transaction (an unusual path of locked mode)
        if not self.guarded:
            self._unguarded_block += 1
            try:
                yield
            finally:
                self._unguarded_block -= 1
            return
        self._savepoints += 1
        name = f"sb_{self._savepoints}"
        self._call(self._raw.execute(f"SAVEPOINT {name}"))
        try:
            yield
        except BaseException:
            self._call(self._raw.execute(f"ROLLBACK TO SAVEPOINT {name}"))
            raise
        else:
            self._call(self._raw.execute(f"RELEASE SAVEPOINT {name}"))
        finally:
            self._savepoints -= 1


def _message(exc: Exception) -> str:
    """The server's refusal in SQLite's words where SQLite has some (``UNIQUE constraint
    failed: …``), so that one refusal reads the same on both backends; the details after."""
    return refusal_message(
        str(getattr(exc, "sqlstate", None) or ""),
        str(getattr(exc, "message", None) or exc),
        table=getattr(exc, "table_name", None),
        constraint=getattr(exc, "constraint_name", None),
        column=getattr(exc, "column_name", None),
        detail=getattr(exc, "detail", None),
    )


def refusal_message(
    sqlstate: str,
    message: str,
    *,
    table: str | None = None,
    constraint: str | None = None,
    column: str | None = None,
    detail: str | None = None,
) -> str:
    """A refusal's text from its fields (``_message``; ``starebrain_apply``'s "refused")."""
    table = table or "?"
    constraint = constraint or "?"
    if sqlstate == "23505":
        head = f"UNIQUE constraint failed: {table} ({constraint})"
    elif sqlstate == "23514":
        head = f"CHECK constraint failed: {constraint}"
    elif sqlstate == "23502":
        head = f"NOT NULL constraint failed: {table}.{column or '?'}"
    elif sqlstate == "23503":
        head = "FOREIGN KEY constraint failed"
    else:
        return message
    return f"{head}: {detail}" if detail else head


def dialect(db: object) -> str:
    """``"postgresql"`` for a :class:`PgConnection`, else ``"sqlite"``."""
    return "postgresql" if isinstance(db, PgConnection) else "sqlite"


def json_field(column: str, key: str, cast: str = "") -> Mapping[str, str]:
    """A JSON text column's field in SQL, by :func:`dialect` (PostgreSQL reads the text as
    jsonb; ``cast`` is appended there, e.g. ``::bigint``)."""
    return {
        "sqlite": f"json_extract({column}, '$.{key}')",
        "postgresql": f"({column}::jsonb ->> '{key}'){cast}",
    }


@contextlib.contextmanager
def savepoint(db: object) -> Iterator[None]:
    """A savepoint on PostgreSQL (see :meth:`PgConnection.savepoint`); nothing on SQLite,
    where a refused statement is rolled back on its own."""
    if isinstance(db, PgConnection):
        with db.savepoint():
            yield
    else:
        yield


def lock(db: object, *names: str) -> None:
    """Advisory locks on PostgreSQL (:meth:`PgConnection.lock`); nothing on SQLite, whose
    ``BEGIN IMMEDIATE`` already lets one writer at a time."""
    if isinstance(db, PgConnection):
        db.lock(*names)


class LockBusy(Exception):
    """A session advisory lock asked for without waiting is held elsewhere."""


class PgDatabase:
    """The process's pool for one database URL (asyncpg, on the private loop)."""

    _pools: ClassVar[dict[str, PgDatabase]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, url: str, *, max_size: int, connect_timeout_s: float) -> None:
        """Raises:
        LedgerUnavailable: ``url`` is malformed (:func:`check_url`)."""
        try:
            check_url(url)
        except BadUrl as exc:
            raise LedgerUnavailable(f"cannot open the ledger: {exc}") from None
        self.url = url
        self.where = redact(url)
        self._loop = _loop()
        self._max_size = max_size
        self._connect_timeout = connect_timeout_s
        self._pool: Any = None
        #: connections taken from the pool and kept, not in use: a block takes one here and
        #: puts it back, with no call to the loop (``connection``); ``_taken`` counts these
        #: and those in use, never more than the pool's size
        self._idle: list[Any] = []
        self._taken = 0
        self._idle_changed = threading.Condition()
        #: the connection holding this process's session locks (``session_lock``), apart
        #: from the pool: a block holding a lock can always get a connection to work with
        self._lock_connection: Any = None
        self._lock_guard = threading.Lock()
        self._held: set[str] = set()
        self._held_changed = threading.Condition()
        self.users = 0
        #: statements sent to the server by this process's connections of the pool (each
        #: one round trip): what a test or a benchmark counts per operation
        self.statements = 0

    @classmethod
    def shared(cls, url: str, *, max_size: int = 4, connect_timeout_s: float = 10.0) -> PgDatabase:
        """The pool for ``url`` in this process, created on first use."""
        with cls._guard:
            database = cls._pools.get(url)
            if database is None:
                database = cls(url, max_size=max_size, connect_timeout_s=connect_timeout_s)
                cls._pools[url] = database
            database.users += 1
            return database

    def release(self) -> None:
        """One user fewer; the last one closes the pool."""
        with self._guard:
            self.users -= 1
            if self.users > 0:
                return
            self._pools.pop(self.url, None)
        with self._idle_changed:
            idle, self._idle = self._idle, []
            self._taken -= len(idle)
        for raw in idle:
            with contextlib.suppress(Exception):
                self._loop.call(_release(self._pool, raw), timeout=10)
        for closable in (self._pool, self._lock_connection):
            if closable is not None:
                with contextlib.suppress(Exception):
                    self._loop.call(closable.close(), timeout=10)
        self._pool = self._lock_connection = None

    def _make_pool(self, max_size: int) -> Any:
        import asyncpg

        async def create() -> Any:
            # made on the private loop (asyncpg binds a pool to the loop that makes it)
            return await asyncpg.create_pool(
                self.url,
                min_size=0,
                max_size=max_size,
                timeout=self._connect_timeout,
                command_timeout=None,
                # no reset query on release (a round trip per operation): the ledger's
                # connections keep no session state, and one that did (``dirty``) is reset
                # by ``connection`` before it goes back
                reset=_no_reset,
            )

        try:
            return self._loop.call(create())
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            raise LedgerUnavailable(
                f"cannot open ledger {self.where}: {redact_text(str(exc), self.url)}"
            ) from exc

    def _ensure_pool(self) -> Any:
        with self._guard:
            if self._pool is None:
                self._pool = self._make_pool(self._max_size)
            return self._pool

    @contextlib.contextmanager
    def connection(self, statement_timeout_s: float = 60.0) -> Iterator[PgConnection]:
        """A connection for the block (kept for the next block after, rolled back if the
        block left a transaction open).

        The pool's connections are taken once and kept (``_idle``): a block takes a kept
        one and gives it back without a call to the loop thread, which a statement's call
        costs as much as the statement (issue 37). Only when none is kept does the block's
        first statement take one from the pool, in its own call; a connection that was lost
        or had to be reset is given back to the pool, which makes a new one.

        Raises:
            LedgerUnavailable: every connection stayed in use for the connect timeout.
        """
        pool = self._ensure_pool()
        lazy = _LazyConnection(self, pool)
        lazy.raw = self._take()
        connection = PgConnection(lazy, self._loop, self.where, statement_timeout_s)
        connection._database = self
        keep = False
        try:
            yield connection
        finally:
            raw = lazy.raw
            if raw is not None:
                keep = True
                with contextlib.suppress(Exception):
                    if raw.is_in_transaction():
                        self.statements += 1
                        self._loop.call(raw.execute("ROLLBACK"), timeout=10)
                if connection.dirty or connection._session_locks:
                    keep = False
                    try:
                        self.statements += 1
                        self._loop.call(raw.execute(raw.get_reset_query()), timeout=10)
                    except Exception:
                        # it may still hold a session lock: end it (the server drops its
                        # locks) rather than give it back
                        self._loop.loop.call_soon_threadsafe(raw.terminate)
                keep = keep and _usable(raw)
                if not keep:
                    # given back without waiting for it: the loop runs it before anything
                    # this thread asks next, and a connection the pool cannot take back is
                    # closed
                    asyncio.run_coroutine_threadsafe(_release(pool, raw), self._loop.loop)
            self._give_back(raw if keep else None)

    def _take(self) -> Any:
        """A kept connection (None: the block's first statement takes one from the pool, a
        place for it reserved), waiting while all the pool's are in use.

        Raises:
            LedgerUnavailable: none came free within the connect timeout.
        """
        deadline = time.monotonic() + self._connect_timeout
        lost = []
        try:
            with self._idle_changed:
                while True:
                    while self._idle:
                        raw = self._idle.pop()
                        if _usable(raw):
                            return raw
                        lost.append(raw)
                        self._taken -= 1
                    if self._taken < self._max_size:
                        self._taken += 1
                        return None
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LedgerUnavailable(
                            f"cannot reach ledger {self.where}: no connection came free in"
                            f" {self._connect_timeout:g} s"
                        )
                    self._idle_changed.wait(left)
        finally:
            for raw in lost:  # closed while kept (a server restart): the pool makes a new one
                asyncio.run_coroutine_threadsafe(_release(self._pool, raw), self._loop.loop)

    def _give_back(self, raw: Any) -> None:
        """The end of a block: its connection kept (``raw``), or its place freed (None)."""
        with self._idle_changed:
            if raw is not None:
                self._idle.append(raw)
            else:
                self._taken -= 1
            self._idle_changed.notify()

    async def _acquired(self, pool: Any) -> Any:
        """A connection of ``pool`` (on the loop), or ``_Unreachable``."""
        import asyncpg

        try:
            return await pool.acquire(timeout=self._connect_timeout)
        except (
            OSError,
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            TimeoutError,
            ValueError,  # a setting asyncpg reads from the URL and refuses (sslmode=...)
        ) as exc:
            raise _Unreachable(
                f"cannot reach ledger {self.where}: {redact_text(str(exc), self.url)}"
            ) from exc

    @contextlib.contextmanager
    def session_lock(
        self,
        name: str,
        *,
        wait: bool,
        poll_s: float = 0.05,
        stop: threading.Event | None = None,
    ) -> Iterator[None]:
        """Hold the session advisory lock ``name`` for the block: another process (host)
        asking for it waits (``wait``, polling every ``poll_s``) or gets :class:`LockBusy`.
        Every session lock of this process is held on one connection kept for them (so a
        process holding many never takes many connections), and a name is held by one block
        of this process at a time (a session may take its own lock twice). The server drops
        the locks when that connection ends, so a holder that dies never leaves one taken.

        Raises:
            LockBusy: not ``wait``, and another holds it; or ``stop`` was set while waiting
                (the waiter gave up: nothing is held).
            LedgerUnavailable: the server cannot be reached.
        """

        def give_up() -> bool:
            return not wait or (stop is not None and stop.is_set())

        with self._held_changed:
            while name in self._held:
                if give_up():
                    raise LockBusy(name)
                self._held_changed.wait(poll_s)
            self._held.add(name)
        try:
            while not self._locks_call("pg_try_advisory_lock", name):
                if give_up():
                    raise LockBusy(name)
                time.sleep(poll_s)
            try:
                yield
            finally:
                with contextlib.suppress(Exception):
                    self._locks_call("pg_advisory_unlock", name)
        finally:
            with self._held_changed:
                self._held.discard(name)
                self._held_changed.notify_all()

    def _locks_call(self, function: str, name: str) -> bool:
        """``SELECT function(key of name)`` on the connection that holds this process's
        session locks (made on first use, made again if it was lost)."""
        import asyncpg

        async def call() -> bool:
            if self._lock_connection is None or self._lock_connection.is_closed():
                self._lock_connection = await asyncpg.connect(
                    self.url, timeout=self._connect_timeout
                )
            row = await self._lock_connection.fetchrow(f"SELECT {function}({LOCK_KEY_SQL})", name)
            return bool(row[0])

        with self._lock_guard:
            try:
                return self._loop.call(call())
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                raise LedgerUnavailable(
                    f"ledger {self.where}: cannot take a lock: {redact_text(str(exc), self.url)}"
                ) from exc
