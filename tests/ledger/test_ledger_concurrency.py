"""Separate processes racing on one ledger (a SQLite file, or a PostgreSQL schema shared by
processes with their own connections, as hosts would): exactly one winner each time."""

from __future__ import annotations

import multiprocessing

import pytest

from starebrain_actions import Ledger, SmsIntent

from ._race_workers import begin_attempt_worker, confirm_worker

WORKERS = 8
pytestmark = pytest.mark.slow


def race(target: object, args_for: list[tuple[object, ...]]) -> list[str]:
    """Run one spawned process per argument tuple, released together by a barrier."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(args_for))
    out = context.Queue()
    processes = [
        context.Process(target=target, args=(*args, barrier, out), daemon=True)  # type: ignore[arg-type]
        for args in args_for
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert 0 == process.exitcode
    return results


async def test_processes_racing_begin_attempt_on_one_action_make_one_attempt(
    ledger_target: str,
) -> None:
    """Eight processes call begin_attempt on the same action: one attempt exists after."""
    async with Ledger.open(ledger_target) as ledger:
        await ledger.create_action("A-1", SmsIntent(recipient="+12025550100", body="hi"))
    results = race(
        begin_attempt_worker, [(ledger_target, "A-1", f"dev-{n}") for n in range(WORKERS)]
    )
    assert 1 == results.count("won")
    assert {"AttemptInFlight"} == set(results) - {"won"}
    async with Ledger.open(ledger_target) as ledger:
        assert 1 == len(await ledger.attempts("A-1"))


async def test_processes_racing_for_one_device_make_one_attempt(ledger_target: str) -> None:
    """Eight actions racing for the same device: the lease lets exactly one through."""
    async with Ledger.open(ledger_target) as ledger:
        for n in range(WORKERS):
            await ledger.create_action(f"A-{n}", SmsIntent(recipient="+12025550100", body=f"m{n}"))
    results = race(begin_attempt_worker, [(ledger_target, f"A-{n}", "dev") for n in range(WORKERS)])
    assert 1 == results.count("won")
    assert {"DeviceBusy"} == set(results) - {"won"}
    async with Ledger.open(ledger_target) as ledger:
        assert 1 == len(await ledger.in_flight("dev"))


async def test_processes_racing_transitions_have_one_winner_and_one_history_row(
    ledger_target: str,
) -> None:
    """Eight processes confirm one record: one wins, the others are told they are stale,
    and history holds exactly one confirm and one accept."""
    async with Ledger.open(ledger_target) as ledger:
        await ledger.create_action("A-1", SmsIntent(recipient="+12025550100", body="hi"))
        record = await ledger.begin_attempt("A-1", "dev")
    results = race(
        confirm_worker,
        [(ledger_target, record.dispatch_id, 900 + n) for n in range(WORKERS)],
    )
    assert ["won"] == [result for result in results if result != "stale"]
    async with Ledger.open(ledger_target) as ledger:
        events = [entry.event.value for entry in await ledger.history("A-1")]
    assert ["created", "confirm", "accept"] == events
