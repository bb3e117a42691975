"""The events every change writes (issue 34, DESIGN.md invariant 10), judged against the
ledger's own history: none missing after kill -9 at any moment, none without its change, in
order; on PostgreSQL a cursor read while writers commit out of order never skips one."""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from starebrain_actions import Ledger, SmsIntent
from starebrain_actions.core.exceptions import InvalidInput

ROOT = Path(__file__).resolve().parents[2]


def _writer(target: str, prefix: str, count: int) -> subprocess.Popen[bytes]:
    """A process writing ``count`` actions with their histories (``event_writer``)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tests.ledger._race_workers import event_writer;"
            " event_writer(sys.argv[1], sys.argv[2], int(sys.argv[3]))",
            target,
            prefix,
            str(count),
        ],
        cwd=ROOT,
        env={**os.environ, "STAREBRAIN_LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _history_rows(ledger: Ledger) -> int:
    return await ledger._run(
        lambda db: int(db.execute("SELECT count(*) FROM history").fetchone()[0])
    )


async def _check_against_history(ledger: Ledger) -> int:
    """Every history row has its event, every event of a history row has that row, every
    action its action.created; positions run 1, 2, 3..., each action's in the order of its
    history. Returns how many events there are.

    The history is read before the events and again after them: a killed client's last
    statement may still commit on a PostgreSQL server meanwhile (the server learns of the
    kill only when it next reads the socket), so what the first read shows must have its
    events, and every event must have a row in the second."""

    def read(db: Any) -> tuple[list[int], set[str]]:
        sequences = [int(row[0]) for row in db.execute("SELECT sequence FROM history ORDER BY 1")]
        actions = {str(row[0]) for row in db.execute("SELECT action_id FROM actions")}
        return sequences, actions

    before, actions_before = await ledger._run(read)
    events = [event async for event in ledger.follow_events(follow=False)]
    after, actions_after = await ledger._run(read)
    assert list(range(1, len(events) + 1)) == [event.position for event in events]
    reported = [event.history_sequence for event in events if event.history_sequence is not None]
    assert set(before) <= set(reported) <= set(after)
    # one action's changes are in the order of its history (two writers' transactions
    # commit in an order of their own: on PostgreSQL history numbers are taken at insert,
    # positions at commit)
    by_action: dict[str | None, list[int]] = {}
    for event in events:
        if event.history_sequence is not None:
            by_action.setdefault(event.action_id, []).append(event.history_sequence)
    assert all(sequences == sorted(sequences) for sequences in by_action.values())
    created = {event.action_id for event in events if event.type == "action.created"}
    assert actions_before <= created <= actions_after
    assert len({event.event_id for event in events}) == len(events)
    return len(events)


async def test_nothing_is_missing_after_kill_9_at_any_moment(ledger_target: str) -> None:
    """Writers are killed (SIGKILL) at random moments, twice, two at once; the ledger they
    leave has an event for every change and a change for every event."""
    rng = random.Random(34)
    async with Ledger.open(ledger_target) as ledger:
        for round_ in range(2):
            before = await _history_rows(ledger)
            writers = [_writer(ledger_target, f"{round_}{n}", 400) for n in range(2)]
            try:
                for _ in range(400):  # until they have written something
                    if await _history_rows(ledger) > before + rng.randrange(5, 60):
                        break
                    await asyncio.sleep(0.02)
                await asyncio.sleep(rng.random() * 0.05)
            finally:
                for writer in writers:
                    writer.kill()
                    writer.wait()
            assert await _history_rows(ledger) > before
            count = await _check_against_history(ledger)
        assert count > 2 * 10


async def test_a_cursor_never_passes_an_event_committed_later(ledger_target: str) -> None:
    """Two writers commit while a reader follows the events after its cursor: the reader sees
    every event, once, in position order (on PostgreSQL, an identity taken before another
    writer's commit must not be passed over)."""
    async with Ledger.open(ledger_target) as ledger:
        seen: list[Any] = []
        writers = [_writer(ledger_target, f"c{n}", 25) for n in range(2)]
        try:
            cursor = 0
            for _ in range(3000):
                page = await ledger.events(after=cursor, limit=1000)
                seen += page
                cursor = page[-1].position if page else cursor
                if all(writer.poll() is not None for writer in writers) and not page:
                    break
                await asyncio.sleep(0.005)
        finally:
            for writer in writers:
                writer.kill()
                writer.wait()
        assert all(writer.returncode == 0 for writer in writers)
        everything = await ledger.events(after=0, limit=1000)
    assert [event.event_id for event in everything] == [event.event_id for event in seen]
    assert 2 * 25 * 5 < len(seen)


async def test_events_are_append_only(ledger_target: str) -> None:
    """No update and no delete of an event, whoever asks (numbering on PostgreSQL aside)."""
    async with Ledger.open(ledger_target) as ledger:
        await ledger.create_action("A-1", SmsIntent(recipient="+12025550100", body="x"))
        for statement in (
            "UPDATE events SET type = 'action.succeeded'",
            "UPDATE events SET data_json = '{}'",
            "DELETE FROM events",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                await ledger._write(lambda db, s=statement: db.execute(s))
        events = await ledger.events()
    assert ["action.created"] == [event.type for event in events]


async def test_bad_reads_are_refused_with_what_is_wrong(ledger_target: str) -> None:
    async with Ledger.open(ledger_target) as ledger:
        with pytest.raises(InvalidInput, match=r"unknown event type 'action\.sentt'"):
            await ledger.events(types=["action.sentt"])
        with pytest.raises(InvalidInput, match="0 or more"):
            await ledger.events(after=-1)
        with pytest.raises(InvalidInput, match="limit"):
            await ledger.events(limit=0)


async def test_a_read_only_reader_sees_the_numbered_events(ledger_target: str) -> None:
    """A ledger opened read-only reads events (on PostgreSQL it numbers none itself: it sees
    those a writer's read numbered)."""
    async with Ledger.open(ledger_target) as ledger:
        await ledger.create_action("A-1", SmsIntent(recipient="+12025550100", body="x"))
        numbered = await ledger.events()
        await ledger.create_action("A-2", SmsIntent(recipient="+12025550100", body="y"))
    async with Ledger.open(ledger_target, read_only=True) as reader:
        seen = await reader.events()
    assert ["A-1"] == [event.action_id for event in numbered]
    assert {"A-1"} <= {event.action_id for event in seen}
