"""What only the PostgreSQL backend has to get right: opening a schema, refusals that must not
abort a whole batch, and locks shared by every host on one ledger and by no other ledger."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from starebrain_actions import (
    DeliveryState,
    Ledger,
    LedgerError,
    LedgerUnavailable,
    SchemaTooNew,
    SmsIntent,
    confirm_delivery,
)
from starebrain_actions.ledger.pg import LOCK_KEY_SQL, _usable
from starebrain_actions.ledger.postgres import PG_SCHEMA_VERSION, VERSION_TABLE
from tests._postgres import fresh_schema, pg_base_url, pg_schema_url
from tests.conftest import until


def intent(n: int) -> SmsIntent:
    return SmsIntent(recipient="+12025550100", body=f"m{n}")


async def test_a_batch_with_one_refused_transition_applies_the_others(pg_url: str) -> None:
    """PostgreSQL aborts a transaction at its first refused statement, where SQLite rolls back
    only that statement. A batch holding a transition the database refuses (a provider row
    already confirming another attempt) still applies every other one, and reports the
    refusal in its place, as on SQLite."""
    async with Ledger.open(pg_url) as ledger:
        records = []
        for n in range(4):
            await ledger.create_action(f"A-{n}", intent(n))
            records.append(await ledger.begin_attempt(f"A-{n}", f"dev-{n % 2}"))
            if n < 2:  # the first two confirm at once, freeing their devices
                await ledger.apply(
                    confirm_delivery(records[-1], provider_object_id=100 + n, now=ledger.now())
                )
        now = ledger.now()
        batch = [
            confirm_delivery(records[2], provider_object_id=100, now=now),  # dev-0's row 100
            confirm_delivery(records[3], provider_object_id=7, now=now),
        ]
        results = await ledger.apply_many(batch)
        assert isinstance(results[0], LedgerError) and "UNIQUE" in str(results[0])
        assert DeliveryState.CONFIRMED is results[1].delivery  # type: ignore[union-attr]
        stored = await ledger.attempts_by_id(r.dispatch_id for r in records[2:])
        assert [DeliveryState.PENDING, DeliveryState.CONFIRMED] == [
            stored[r.dispatch_id].delivery for r in records[2:]
        ]
        history = await ledger.history("A-3")
        assert ["created", "confirm"] == [e.event.value for e in history][:2]


async def test_locks_are_shared_by_one_ledger_and_by_no_other(pg_url: str) -> None:
    """``exclusive`` is held across processes on one ledger (here two opens with their own
    pools stand for two hosts: the first holder keeps it from the second), and two ledgers in
    two schemas of one database never share a lock (advisory locks belong to the database;
    the key mixes in the schema)."""
    async with (
        fresh_schema() as other_url,
        Ledger.open(pg_url) as one,
        Ledger.open(other_url) as elsewhere,
    ):
        async with one.exclusive("nightly") as held:
            assert held
            async with elsewhere.exclusive("nightly", wait=False) as other_held:
                assert other_held
            # a second host on the same ledger: a connection of its own, the same schema
            raw = await asyncpg.connect(pg_url)
            try:
                taken = await raw.fetchval(
                    f"SELECT pg_try_advisory_lock({LOCK_KEY_SQL})", "nightly"
                )
            finally:
                await raw.close()
            assert taken is False
        async with one.exclusive("nightly", wait=False) as again:
            assert again  # released at the end of the block


async def test_a_second_block_of_one_process_waits_for_the_first(pg_url: str) -> None:
    """A session may take its own advisory lock twice; the ledger must not: a second block of
    the same process asking for a held name waits (or, not waiting, is told it is held)."""
    async with Ledger.open(pg_url) as ledger:
        order: list[str] = []

        async def second() -> None:
            async with ledger.exclusive("reconcile:dev"):
                order.append("second")

        async with ledger.exclusive("reconcile:dev"):
            async with ledger.exclusive("reconcile:dev", wait=False) as held:
                assert not held
            task = asyncio.create_task(second())
            await asyncio.sleep(0.2)
            order.append("first done")
        await asyncio.wait_for(task, 5)
        assert ["first done", "second"] == order


async def test_a_schema_holding_other_tables_is_refused_and_left_alone(pg_url: str) -> None:
    """As SQLite refuses a database of something else: nothing is created beside the other
    tables, and the error says why."""
    raw = await asyncpg.connect(pg_url)
    try:
        await raw.execute("CREATE TABLE invoices (id int)")
        with pytest.raises(LedgerUnavailable, match="holds other tables"):
            async with Ledger.open(pg_url):
                pass
        tables = await raw.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    finally:
        await raw.close()
    assert ["invoices"] == [row[0] for row in tables]


async def test_a_missing_schema_or_an_empty_one_opened_without_create_is_refused() -> None:
    """A search_path naming no schema, or (``create=False``, as read commands open) an empty
    one, is refused with the reason; a read-only open of an empty schema writes nothing."""
    missing = pg_schema_url(pg_base_url(), "t_no_such_schema_here")
    with pytest.raises(LedgerUnavailable, match="does not exist"):
        async with Ledger.open(missing):
            pass
    async with fresh_schema() as url:
        for kwargs in ({"create": False}, {"read_only": True}):
            with pytest.raises(LedgerUnavailable, match="holds no ledger"):
                async with Ledger.open(url, **kwargs):  # type: ignore[arg-type]
                    pass
        raw = await asyncpg.connect(url)
        try:
            count = await raw.fetchval(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema ="
                " current_schema()"
            )
        finally:
            await raw.close()
        assert 0 == count


async def test_a_newer_schema_is_refused_untouched_and_read_only_never_writes(
    pg_url: str,
) -> None:
    """A ledger a newer package wrote is refused (SchemaTooNew) and not changed; a read-only
    open reads but refuses every write."""
    async with Ledger.open(pg_url) as ledger:
        await ledger.create_action("A-1", intent(1))
    async with Ledger.open(pg_url, read_only=True) as reader:
        assert "A-1" == (await reader.get_action("A-1")).action_id
        with pytest.raises(LedgerUnavailable, match="read-only"):
            await reader.create_action("A-2", intent(2))
    raw = await asyncpg.connect(pg_url)
    try:
        await raw.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES ($1)", 99)
        with pytest.raises(SchemaTooNew, match="99"):
            async with Ledger.open(pg_url):
                pass
        versions = await raw.fetch(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")
    finally:
        await raw.close()
    assert [*range(1, PG_SCHEMA_VERSION + 1), 99] == [row[0] for row in versions]


async def test_two_processes_opening_one_new_schema_migrate_it_once(pg_url: str) -> None:
    """Two opens racing on an empty schema: one migrates (under an advisory lock), the other
    finds the ledger made; one version row, one set of tables."""

    async def open_and_write(n: int) -> None:
        async with Ledger.open(pg_url) as ledger:
            await ledger.create_action(f"A-{n}", intent(n))

    await asyncio.gather(*(open_and_write(n) for n in range(4)))
    raw = await asyncpg.connect(pg_url)
    try:
        versions = await raw.fetch(f"SELECT version FROM {VERSION_TABLE}")
        actions = await raw.fetchval("SELECT count(*) FROM actions")
    finally:
        await raw.close()
    assert (list(range(1, PG_SCHEMA_VERSION + 1)), 4) == (
        sorted(row[0] for row in versions),
        actions,
    )


async def test_the_password_never_appears_in_an_error() -> None:
    """A URL's password is left out of the ledger's name in every message."""
    base = pg_base_url().replace("postgresql://", "postgresql://nobody:s3cret@", 1)
    url = pg_schema_url(base.replace("@127.0.0.1:5432", "@127.0.0.1:9"), "t_x")
    with pytest.raises(LedgerUnavailable) as raised:
        async with Ledger.open(url, busy_timeout_s=1):
            pass
    assert "s3cret" not in str(raised.value) and "***" in str(raised.value)


async def test_a_waiter_cancelled_while_another_host_holds_the_lock_leaves_it_free(
    pg_url: str,
) -> None:
    """A caller cancelled while it waits for a lock another host holds (its pass timed out,
    say) must not take the lock later and keep it: once the other host lets go, the lock is
    free for everyone, this process included."""
    other_host = await asyncpg.connect(pg_url)
    try:
        assert await other_host.fetchval(f"SELECT pg_try_advisory_lock({LOCK_KEY_SQL})", "x")
        async with Ledger.open(pg_url) as ledger:

            async def wait_for_it() -> None:
                async with ledger.exclusive("x"):
                    pass

            waiter = asyncio.create_task(wait_for_it())
            await asyncio.sleep(0.2)
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
            await other_host.fetchval(f"SELECT pg_advisory_unlock({LOCK_KEY_SQL})", "x")
            await asyncio.sleep(0.3)  # longer than the waiter's polling interval
            async with ledger.exclusive("x", wait=False) as held:
                assert held
            assert await other_host.fetchval(f"SELECT pg_try_advisory_lock({LOCK_KEY_SQL})", "x")
    finally:
        await other_host.close()


#: The lock names the receipts of these tests take.
_NAMES = ["policy-gate", "device:dev", "device:dev-2"] + [
    f"action:{p}-{n}" for p in "RL" for n in range(9)
]


async def _advisory_locks_held(url: str) -> int:
    """Locks of this ledger (``_NAMES``, keyed as ``LOCK_KEY_SQL``) held or awaited by any
    session of the server right now."""
    connection = await asyncpg.connect(url)
    try:
        keys = f"SELECT {LOCK_KEY_SQL.replace('$1', 'name')} AS key FROM unnest($1::text[]) name"
        return int(
            await connection.fetchval(
                f"SELECT count(*) FROM pg_locks JOIN ({keys}) k"
                " ON (classid::bigint << 32 | objid::bigint) = k.key"
                " WHERE locktype = 'advisory' AND objsubid = 1",
                _NAMES,
            )
        )
    finally:
        await connection.close()


async def test_a_receipt_and_a_transition_take_at_most_two_round_trips(pg_url: str) -> None:
    """Issue 26: statements sent to the server (``BEGIN``, ``COMMIT`` and the pool's own
    counted) per receipt, per transition and per batch of transitions. A count, not a time:
    ``begin_attempt`` ≤ 2, ``apply`` ≤ 2, ``apply_many`` of two ≤ 2, ``create_action`` ≤ 2;
    and no lock is left held after them."""
    from starebrain_actions import MatchVerdict, try_accept
    from starebrain_actions.core import transitions as core

    async with Ledger.open(pg_url) as ledger:
        assert ledger._pg is not None
        database = ledger._pg.database
        counted: dict[str, list[int]] = {}

        def count(name: str, before: int) -> None:
            counted.setdefault(name, []).append(database.statements - before)

        for n in range(3):
            before = database.statements
            await ledger.create_action(f"R-{n}", intent(n))
            count("create_action", before)
            before = database.statements
            record = await ledger.begin_attempt(f"R-{n}", "dev")
            count("begin_attempt", before)
            now = ledger.now()
            before = database.statements
            record = await ledger.apply(
                core.record_submission(record, watermark_id=n, device_clock_ms=n, now=now)
            )
            count("apply", before)
            confirmed = confirm_delivery(record, provider_object_id=n + 1, now=now)
            accepted = try_accept(confirmed.after, MatchVerdict(matched=True), now=now)
            before = database.statements
            results = await ledger.apply_many([confirmed, accepted])
            count("apply_many", before)
            assert not [r for r in results if isinstance(r, Exception)]
        assert all(max(values) <= 2 for values in counted.values()), counted
        assert [2, 2, 2] == counted["begin_attempt"]
        assert 0 == await _advisory_locks_held(pg_url)


async def test_a_refused_receipt_leaves_no_lock_and_writes_nothing(pg_url: str) -> None:
    """A receipt refused after its locks are taken (no such action, an unresolved attempt, a
    phone leased to another action, a concurrent winner) gives them up, in at most one more
    round trip, and writes nothing; the next receipt on the phone is not kept waiting."""
    from starebrain_actions import AttemptInFlight, DeviceBusy, NotFound

    async with Ledger.open(pg_url) as ledger:
        assert ledger._pg is not None
        database = ledger._pg.database
        await ledger.create_action("L-1", intent(1))
        await ledger.create_action("L-2", intent(2))
        first = await ledger.begin_attempt("L-1", "dev")
        for action_id, error in (
            ("missing", NotFound),
            ("L-1", AttemptInFlight),  # its attempt is unresolved
            ("L-2", DeviceBusy),  # dev is leased to L-1's attempt
        ):
            before = database.statements
            with pytest.raises(error):
                await ledger.begin_attempt(action_id, "dev")
            assert database.statements - before <= 3
            assert 0 == await _advisory_locks_held(pg_url)
        assert [first.dispatch_id] == [r.dispatch_id for r in await ledger.attempts("L-1")]
        assert [] == await ledger.attempts("L-2")
        # many at once on one phone: one wins, the others are refused, no lock is left
        for n in range(3, 9):
            await ledger.create_action(f"L-{n}", intent(n))
        await ledger.apply(confirm_delivery(first, provider_object_id=1, now=ledger.now()))
        outcomes = await asyncio.gather(
            *(ledger.begin_attempt(f"L-{n}", "dev-2") for n in range(3, 9)),
            return_exceptions=True,
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        assert 1 == len(won), outcomes
        assert all(isinstance(o, DeviceBusy | AttemptInFlight) for o in outcomes if o not in won)
        assert 0 == await _advisory_locks_held(pg_url)


async def test_a_batch_of_one_shape_is_one_statement_and_reports_the_stale_in_place(
    pg_url: str,
) -> None:
    """A batch of transitions writing the same columns of different attempts (a reconcile
    pass's acceptances) is one UPDATE on the server, in one round trip; one that finds its
    attempt moved on is reported in its place as ``StaleTransition``, the others apply."""
    from starebrain_actions import AcceptanceState, MatchVerdict, StaleTransition, try_accept

    async with Ledger.open(pg_url) as ledger:
        assert ledger._pg is not None
        database = ledger._pg.database
        confirmed = []
        for n in range(5):
            await ledger.create_action(f"B-{n}", intent(n))
            record = await ledger.begin_attempt(f"B-{n}", f"dev-{n}")
            confirmed.append(
                await ledger.apply(
                    confirm_delivery(record, provider_object_id=n + 1, now=ledger.now())
                )
            )
        now = ledger.now()
        batch = [try_accept(record, MatchVerdict(matched=True), now=now) for record in confirmed]
        await ledger.apply(batch[2])  # moved on: the batch's copy is stale
        before = database.statements
        results = await ledger.apply_many(batch)
        assert 1 == database.statements - before
        assert isinstance(results[2], StaleTransition)
        applied = [r for n, r in enumerate(results) if n != 2]
        assert all(r.acceptance is AcceptanceState.ACCEPTED for r in applied)  # type: ignore[union-attr]
        stored = await ledger.attempts_by_id(r.dispatch_id for r in confirmed)
        assert {AcceptanceState.ACCEPTED} == {r.acceptance for r in stored.values()}
        assert 1 == sum(e.event.value == "accept" for e in await ledger.history("B-2"))


def _backend_pid(database: Any, hold_s: float = 0.0) -> int:
    """The server process of the connection a block of ``database`` gets (held ``hold_s``)."""
    with database.connection() as db:
        row = db.execute("SELECT pg_backend_pid(), pg_sleep(?)", (hold_s,)).fetchone()
        return int(row[0])


async def test_blocks_keep_their_connections_and_never_take_more_than_the_pool_holds(
    pg_url: str,
) -> None:
    """A block's connection is kept for the next block (issue 37: giving it back to the pool
    cost a call to the loop thread per operation): blocks one after another use one server
    process. Ten blocks at once, each holding its connection a while, share the pool's four:
    they wait for one to come free, and all of them finish."""
    async with Ledger.open(pg_url) as ledger:
        assert ledger._pg is not None
        database = ledger._pg.database
        one_after_another = {await asyncio.to_thread(_backend_pid, database) for _ in range(5)}
        assert 1 == len(one_after_another)
        at_once = await asyncio.gather(
            *(asyncio.to_thread(_backend_pid, database, 0.2) for _ in range(10))
        )
        assert 10 == len(at_once)
        assert 1 <= len(set(at_once)) <= 4


async def test_a_kept_connection_the_server_ended_is_replaced(pg_url: str) -> None:
    """A kept connection whose server process was ended (a restart, an administrator) is not
    handed out again once its end is seen: the next operation gets a new one and works; and
    closing the ledger leaves none of its connections open on the server."""
    async with Ledger.open(pg_url) as ledger:
        assert ledger._pg is not None
        database = ledger._pg.database
        await ledger.create_action("K-1", intent(1))
        first = await asyncio.to_thread(_backend_pid, database)
        admin = await asyncpg.connect(pg_url)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)

            async def seen_closed() -> bool:
                return not any(_usable(raw) for raw in database._idle)

            await until(seen_closed, "the kept connection seen closed")
            await ledger.create_action("K-2", intent(2))
            second = await asyncio.to_thread(_backend_pid, database)
            assert first != second
            assert ["K-1", "K-2"] == sorted(
                row[0] for row in await admin.fetch("SELECT action_id FROM actions")
            )
        finally:
            await admin.close()
    admin = await asyncpg.connect(pg_url)
    try:

        async def gone() -> bool:
            return not await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", second
            )

        await until(gone, "the ledger's connections closed")
    finally:
        await admin.close()
