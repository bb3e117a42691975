"""`send --not-after` and `--not-before` (issue 35, items 1 and 2) on the command line, on both
backends: a deadline named as a duration is the same on a rerun, another one is a changed
intent (exit 2); a phone ready only after the deadline never sends (the phone's store holds
nothing), the rerun exits 10 EXPIRED, `list --status EXPIRED` finds it, `events` shows its
`action.expired`, and the nightly report counts it; a queued message with a schedule shows
it and waits."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory, until_time
from tests.e2e.conftest import RECIPIENT, Target

SENT = 2
QUICK = ("--grace", "1", "--backoff", "0.05", "--send-path", "ui")


async def cli(ledger: Target, *argv: str) -> Result:
    """Run `starebrain --db LEDGER ARGV` off the phone's loop."""
    args = ["--db", str(ledger), *argv]
    return await asyncio.to_thread(CliRunner().invoke, main, args, catch_exceptions=False)


async def send(ledger: Target, key: Path, phone: SimulatedPhone, *args: str) -> Result:
    return await cli(
        ledger, "send", "--device", phone.serial, "--key", str(key), "--to", RECIPIENT, *args
    )


def stored(phone: SimulatedPhone, body: str) -> int:
    """SENT rows carrying ``body`` in the phone's own store."""
    return sum(1 for row in phone.store.rows(types=[SENT]) if row.body == body)


async def test_a_duration_names_the_same_deadline_on_a_rerun_and_another_is_exit_2(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """`--not-after 10m` counts from the action's creation: the same command later is the
    same action (exit 0, nothing sent again); `--not-after 20m` is a changed intent that
    says so (exit 2); a new action whose deadline has passed, and a time without its zone,
    are bad input (exit 2, nothing written); one SMS in the phone's store."""
    phone = await phone_factory()
    what = ("--body", "deadline text", "--action-id", "N-1", "--wait", "10", *QUICK)
    first = await send(ledger_target, adb_key_path, phone, *what, "--not-after", "10m")
    assert 0 == first.exit_code, first.output
    data = json.loads((await cli(ledger_target, "status", "N-1", "--json")).stdout)
    created = datetime.fromisoformat(data["action"]["created_at"].replace("Z", "+00:00"))
    deadline = datetime.fromisoformat(data["not_after"].replace("Z", "+00:00"))
    assert timedelta(minutes=10) == deadline - created
    shown = await cli(ledger_target, "status", "N-1")
    assert "not after:" in shown.stdout and "no attempt starts at or after it" in shown.stdout
    again = await send(ledger_target, adb_key_path, phone, *what, "--not-after", "10m")
    assert 0 == again.exit_code, again.output
    changed = await send(ledger_target, adb_key_path, phone, *what, "--not-after", "20m")
    assert 2 == changed.exit_code and "the same message; its deadline" in changed.output
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    late = await send(
        ledger_target, adb_key_path, phone, "--body", "late", "--action-id", "N-2",
        "--not-after", past, *QUICK,
    )  # fmt: skip
    assert 2 == late.exit_code and "has passed already" in late.output
    zoneless = await send(
        ledger_target, adb_key_path, phone, "--body", "x", "--not-after", "2026-12-08T09:00"
    )
    assert 2 == zoneless.exit_code and "has no zone" in zoneless.output
    assert "N-2" not in (await cli(ledger_target, "list")).stdout
    await phone.radio_idle()
    assert (1, 0) == (stored(phone, "deadline text"), stored(phone, "late"))


async def test_a_phone_ready_only_after_the_deadline_sends_nothing_and_exits_10(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """Locked until the deadline has passed: the send before it exits 7 (not ready); once
    the phone is unlocked, `nightly --resume` sends nothing and the same command exits 10,
    EXPIRED, nothing sent; `list --status
    EXPIRED` lists it, `events` shows one action.expired, `retry` refuses it, and the
    nightly report counts it."""
    phone = await phone_factory(screen="locked")
    # the locked send's wait (3 s from its start) ends before the deadline (6 s from the
    # action's creation, which comes after the start)
    what = ("--body", "expiring text", "--action-id", "X-1", "--not-after", "6s", *QUICK)
    locked = await send(ledger_target, adb_key_path, phone, *what, "--wait", "3")
    assert 7 == locked.exit_code, locked.output
    data = json.loads((await cli(ledger_target, "status", "X-1", "--json")).stdout)
    deadline = datetime.fromisoformat(data["not_after"].replace("Z", "+00:00"))
    await until_time(deadline)
    phone.screen = "on"
    # `nightly --resume` on the phone, now ready: nothing sent, the expiry recorded by its pass
    night = await cli(
        ledger_target, "nightly", "--resume", "--device", phone.serial,
        "--key", str(adb_key_path), "--json",
    )  # fmt: skip
    assert [] == [line["action_id"] for line in json.loads(night.stdout)["resumed"]]
    expired = await send(ledger_target, adb_key_path, phone, *what, "--wait", "10")
    assert 10 == expired.exit_code, expired.output
    assert "EXPIRED" in expired.stdout and "passed with nothing sent" in expired.stdout
    listed = await cli(ledger_target, "list", "--status", "EXPIRED")
    assert "X-1" in listed.stdout
    events = await cli(ledger_target, "events", "--type", "action.expired", "--json")
    assert 1 == sum(1 for line in events.stdout.splitlines() if '"X-1"' in line)
    retried = await cli(ledger_target, "retry", "X-1", "--reason", "send it", "--operator", "ana")
    assert 0 != retried.exit_code and "deadline" in retried.output
    report = json.loads((await cli(ledger_target, "nightly", "--json")).stdout)
    assert 1 == report["status_counts"]["EXPIRED"]
    await phone.radio_idle()
    assert 0 == stored(phone, "expiring text") == len(phone.transmissions)


async def test_a_queued_message_with_a_schedule_shows_it_and_waits(
    ledger_target: Target,
) -> None:
    """`send --queue --not-before 1h`: queued, PLANNED, its schedule in `status` (and JSON)
    and a worker's next look at that time; a schedule not before the deadline is bad
    input."""
    queued = await cli(
        ledger_target, "send", "--queue", "--to", RECIPIENT, "--body", "later",
        "--action-id", "S-1", "--not-before", "1h", "--json",
    )  # fmt: skip
    assert 0 == queued.exit_code, queued.output
    data = json.loads(queued.stdout)
    assert ("PLANNED", data["not_before"]) == (data["status"], data["action"]["queue_after"])
    shown = await cli(ledger_target, "status", "S-1")
    assert "not before:" in shown.stdout
    inverted = await cli(
        ledger_target, "send", "--queue", "--to", RECIPIENT, "--body", "never",
        "--not-before", "2h", "--not-after", "1h",
    )  # fmt: skip
    assert 2 == inverted.exit_code and "must come before not_after" in inverted.output
