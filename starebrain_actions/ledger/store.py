"""The ledger: durable receipts, compare-and-set transitions and history, on SQLite or
PostgreSQL. ``Ledger`` is one class, composed of its parts, each a module of its own:

=================  =====================================================================
``connection``     opening (creating, migrating) a ledger; how every operation runs on
                   its connection (one transaction, one thread hop); locks, snapshots
``receipts``       new actions, and each new attempt's receipt (``begin_attempt``)
``gate``           the policy gate's part of a new attempt (counts, verdicts kept)
``updates``        transitions by compare-and-set, duplicates, a reconcile pass's writes
``rulings``        a person's decisions: ``resolve``, ``retry``, ``approve``, ``deny``
``queue``          actions queued for a pool, their claims by workers, the phones held
``queries``        reads by action: summaries, pages, review, holds, derived generations
``devices``        reads by phone (leases, rows claimed, send rates) and the phones
``events``         the events every change writes (the outbox), read after a position
``webhooks``       the webhook endpoints: secrets, cursors, tries, deliverers' claims
``replies``        the replies of numbers texted, and their opt-outs (STOP, START, a person)
``read``           the file checks and one action's reads, without asyncio
``postgres``       the PostgreSQL backend (``pg``: asyncpg behind ``sqlite3``'s surface)
=================  =====================================================================

This module holds the class and ``Ledger.open``, and names what the layers above use.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path

from starebrain_actions.ledger import pg as _pg
from starebrain_actions.ledger.connection import open_postgresql, open_sqlite
from starebrain_actions.ledger.deadlines import Deadlines
from starebrain_actions.ledger.devices import DeviceReads
from starebrain_actions.ledger.devices import dispatches_since as dispatches_since
from starebrain_actions.ledger.events import EventReads
from starebrain_actions.ledger.queries import SUMMARY_PAGE as SUMMARY_PAGE
from starebrain_actions.ledger.queries import ActionReads
from starebrain_actions.ledger.queries import LedgerTally as LedgerTally
from starebrain_actions.ledger.queue import QueueWork
from starebrain_actions.ledger.read import SCHEMA_VERSION as SCHEMA_VERSION
from starebrain_actions.ledger.read import inspect_ledger as inspect_ledger
from starebrain_actions.ledger.read import summarize as summarize
from starebrain_actions.ledger.receipts import Receipts
from starebrain_actions.ledger.replies import ReplyWrites
from starebrain_actions.ledger.rulings import Rulings
from starebrain_actions.ledger.updates import DuplicateInput as DuplicateInput
from starebrain_actions.ledger.updates import Updates
from starebrain_actions.ledger.webhooks import WebhookStore

__all__ = [
    "SCHEMA_VERSION",
    "SUMMARY_PAGE",
    "DuplicateInput",
    "Ledger",
    "LedgerTally",
    "dispatches_since",
    "inspect_ledger",
    "summarize",
]


class Ledger(
    Receipts,
    QueueWork,
    Updates,
    Rulings,
    ActionReads,
    DeviceReads,
    WebhookStore,
    EventReads,
    ReplyWrites,
    Deadlines,
):
    """The durable two-axis action ledger. Open it with ``async with Ledger.open(path)``."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 10.0,
        clock: Callable[[], datetime] | None = None,
        read_only: bool = False,
        create: bool = True,
    ) -> AsyncIterator[Ledger]:
        """Open (creating and migrating if needed) the ledger at ``path``: a file (SQLite),
        or a ``postgresql://`` URL (``postgres``).

        ``create``: a missing path, an empty (0-byte) file or an empty SQLite database becomes
        a new ledger (a new file is made mode 0600); with False they are refused.
        ``read_only``: open SQLite read-only (``file:…?mode=ro``; in a directory this user
        cannot write, with no ``-wal`` file, as an immutable snapshot), for auditors and
        backups: nothing is created or migrated, and every write raises LedgerUnavailable.
        Whatever the flags, a file that is not a ledger is refused and left byte for byte
        unchanged.

        Raises:
            LedgerUnavailable: the path is a directory, a device, read-only (unless
                ``read_only``), missing or empty (unless ``create``), not SQLite, a SQLite
                database of something else, damaged, or (``read_only``) in need of a migration.
            SchemaTooNew: the database was written by a newer version (it is not touched).
        """
        if _pg.is_url(path):
            async with open_postgresql(
                cls,
                str(path),
                busy_timeout_s=busy_timeout_s,
                clock=clock,
                read_only=read_only,
                create=create,
            ) as ledger:
                yield ledger
            return
        async with open_sqlite(
            cls,
            Path(path),
            busy_timeout_s=busy_timeout_s,
            clock=clock,
            read_only=read_only,
            create=create,
        ) as ledger:
            yield ledger
