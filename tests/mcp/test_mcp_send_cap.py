"""``--max-sends-per-hour`` is counted inside the receipt's write transaction, so it holds for
several servers sharing one ledger (two handles on one file, as two processes would open it,
or on one PostgreSQL schema)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from starebrain_actions import SmsIntent
from starebrain_actions.mcp.send_cap import CappedLedger, SendCap, SendLimitReached
from tests._postgres import fresh_schema

DEVICES = ("10.0.0.1:5555", "10.0.0.2:5555")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("round_", range(10))
async def test_two_servers_racing_for_the_last_send_of_the_hour_start_one(
    tmp_path: Path, round_: int, backend: str
) -> None:
    """Each server's own check sees no send yet; only one receipt may be written: the other
    is refused with SendLimitReached and writes nothing. On PostgreSQL the two receipts run
    on two connections at once (READ COMMITTED): the count is taken under an advisory lock."""
    async with contextlib.AsyncExitStack() as stack:
        path: Path | str = tmp_path / f"ledger-{round_}.db"
        if backend == "postgresql":
            path = await stack.enter_async_context(fresh_schema())
        await race_for_the_last_send(path)


async def race_for_the_last_send(path: Path | str) -> None:
    """Two capped ledgers on one store, each starting the hour's one allowed send at once."""
    intent = SmsIntent(recipient="+12025550100", body="your code is 1234")
    async with CappedLedger.open(path) as first, CappedLedger.open(path) as second:
        for ledger in (first, second):
            ledger.cap = SendCap(limit=1, devices=DEVICES)  # type: ignore[attr-defined]
        await first.create_action("a-1", intent)
        await first.create_action("a-2", intent)
        # (PostgreSQL) connections open beforehand, so that both receipts start at once
        await asyncio.gather(*(ledger.devices() for ledger in (first, second, first, second)))
        results = await asyncio.gather(
            first.begin_attempt("a-1", DEVICES[0]),
            second.begin_attempt("a-2", DEVICES[1]),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, SendLimitReached)]
        assert 1 == len(refused), results
        assert "--max-sends-per-hour 1" in str(refused[0])
        started = [await first.attempts(action_id) for action_id in ("a-1", "a-2")]
    assert [1] == sorted(len(attempts) for attempts in started if attempts)
