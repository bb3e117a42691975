"""Process entry points for the concurrency tests (importable by spawned children)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from starebrain_actions import (
    AttemptRefused,
    Ledger,
    MatchVerdict,
    StaleTransition,
    confirm_delivery,
    try_accept,
)


def begin_attempt_worker(path: str, action_id: str, device: str, barrier: Any, out: Any) -> None:
    """Wait at the barrier, then race begin_attempt; report 'won' or the refusal class."""

    async def run() -> str:
        async with Ledger.open(path) as ledger:
            barrier.wait(timeout=60)
            try:
                await ledger.begin_attempt(action_id, device)
            except AttemptRefused as exc:
                return type(exc).__name__
            return "won"

    out.put(asyncio.run(run()))


def confirm_worker(path: str, dispatch_id: str, provider_id: int, barrier: Any, out: Any) -> None:
    """Race to confirm one record with a distinct provider id, then to accept it."""

    async def run() -> str:
        async with Ledger.open(path) as ledger:
            record = await ledger.get_attempt(dispatch_id)
            barrier.wait(timeout=60)
            now = datetime.now(UTC)
            try:
                confirmed = await ledger.apply(
                    confirm_delivery(record, provider_object_id=provider_id, now=now)
                )
            except StaleTransition:
                return "stale"
            try:
                await ledger.apply(try_accept(confirmed, MatchVerdict(matched=True), now=now))
            except StaleTransition:
                return "won-confirm-lost-accept"
            return "won"

    out.put(asyncio.run(run()))


def event_writer(path: str, prefix: str, count: int) -> None:
    """Write ``count`` actions as fast as it can, each with a history of several kinds (a
    failed attempt, then a confirmed and accepted one; every third also a noted error), on
    a phone of its own: the work a kill -9 interrupts in the events tests."""
    from datetime import timedelta

    from starebrain_actions import RetryPolicy, SmsIntent, fail_delivery, note_error

    policy = RetryPolicy(initial_interval=timedelta(0), jitter=0.0)

    async def run() -> None:
        async with Ledger.open(path) as ledger:
            device = f"10.9.{prefix}:5555"
            for n in range(count):
                action_id = f"{prefix}-{n}"
                await ledger.create_action(
                    action_id,
                    SmsIntent(recipient="+12025550100", body=f"code {n}"),
                    policy=policy,
                )
                first = await ledger.begin_attempt(action_id, device)
                now = datetime.now(UTC)
                if n % 3 == 0:
                    first = await ledger.apply(note_error(first, "timeout", now=now))
                await ledger.apply(fail_delivery(first, reason="refused", now=now))
                second = await ledger.begin_attempt(action_id, device)
                confirmed = await ledger.apply(
                    confirm_delivery(second, provider_object_id=n + 1, now=datetime.now(UTC))
                )
                await ledger.apply(
                    try_accept(confirmed, MatchVerdict(matched=True), now=datetime.now(UTC))
                )

    asyncio.run(run())
