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
