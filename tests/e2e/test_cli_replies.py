"""Replies and STOP through the CLI, on SQLite and PostgreSQL: `reconcile` records a reply and
a STOP, `replies` shows them (redacted unless --show-private), `optouts` lists the number,
`send` to it exits 9 with rule opted_out and nothing reaches the phone, `resume` does not
send it either, `optouts remove` lets it go."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.main import main
from tests.e2e.conftest import RECIPIENT, Target

SENT = 2


async def cli(ledger: Target, *args: str) -> Result:
    argv = ["--db", str(ledger), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


def sent(phone: SimulatedPhone, to: str) -> int:
    return sum(1 for row in phone.store.rows(types=[SENT]) if row.address == to)


async def test_stop_refuses_send_and_resume_with_exit_9_until_removed(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """A reply and a STOP recorded by `reconcile`; the next `send` to the number exits 9
    (opted_out) and sends nothing, another number still sends, `resume` leaves it unsent;
    `optouts remove` lifts it and `resume` sends it once."""
    phone_args = ("--device", phone.serial, "--key", str(adb_key_path))
    first = await cli(
        ledger_target, "send", *phone_args, "--to", RECIPIENT, "--body", "hello",
        "--action-id", "R-1", "--wait", "5",
    )  # fmt: skip
    assert 0 == first.exit_code, first.output
    phone.receive_sms(RECIPIENT, "who is this?")
    phone.store.insert_incoming(RECIPIENT, "STOP", date_ms=phone.now_ms() + 1)
    read = await cli(ledger_target, "reconcile", *phone_args)
    assert 0 == read.exit_code, read.output
    replies = json.loads((await cli(ledger_target, "replies", "R-1", "--json")).stdout)
    assert [None, "opt_out"] == [row["keyword"] for row in replies["replies"]]
    assert "who is this?" not in json.dumps(replies) and RECIPIENT not in json.dumps(replies)
    private = await cli(ledger_target, "replies", "--show-private")
    assert "who is this?" in private.stdout and "R-1" in private.stdout
    listed = json.loads((await cli(ledger_target, "optouts", "--json", "--show-private")).stdout)
    assert [RECIPIENT] == [row["number"] for row in listed["opted_out"]]
    before = sent(phone, RECIPIENT)
    refused = await cli(
        ledger_target, "send", *phone_args, "--to", RECIPIENT, "--body", "still there?",
        "--action-id", "R-2", "--wait", "5", "--json",
    )  # fmt: skip
    data = json.loads(refused.stdout)
    assert (9, "opted_out") == (refused.exit_code, data["gate"]["rule"])
    other = await cli(
        ledger_target, "send", *phone_args, "--to", "+12025550199", "--body", "hi",
        "--wait", "5",
    )  # fmt: skip
    assert 0 == other.exit_code, other.output
    resumed = await cli(ledger_target, "resume", *phone_args, "--wait", "3")
    assert before == sent(phone, RECIPIENT), resumed.output
    removed = await cli(
        ledger_target, "optouts", "remove", RECIPIENT, "--reason", "asked to resume",
        "--operator", "bo",
    )  # fmt: skip
    assert 0 == removed.exit_code, removed.output
    assert "no number is opted out" in (await cli(ledger_target, "optouts")).stdout
    again = await cli(ledger_target, "resume", *phone_args, "--wait", "10")
    assert again.exit_code in (0, 3), again.output
    assert before + 1 == sent(phone, RECIPIENT)


async def test_optouts_add_refuses_and_keeps_who_and_why(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """`optouts add` with no reply at all: `send` exits 9; adding again changes nothing; a
    reason is required (exit 2)."""
    phone_args = ("--device", phone.serial, "--key", str(adb_key_path))
    await cli(
        ledger_target, "send", *phone_args, "--to", "+12025550199", "--body", "creates it",
        "--wait", "5",
    )  # fmt: skip
    no_reason = await cli(ledger_target, "optouts", "add", RECIPIENT, "--reason", " ")
    assert 2 == no_reason.exit_code
    added = await cli(
        ledger_target, "optouts", "add", "+1 202 555 0100", "--reason", "complaint",
        "--operator", "al", "--json", "--show-private",
    )  # fmt: skip
    data = json.loads(added.stdout)
    assert (True, RECIPIENT, "al", "complaint") == (
        data["changed"],
        data["in_force"]["number"],
        data["in_force"]["actor"],
        data["in_force"]["reason"],
    )
    again = await cli(ledger_target, "optouts", "add", RECIPIENT, "--reason", "again")
    assert "already opted out" in again.stdout
    refused = await cli(
        ledger_target, "send", *phone_args, "--to", RECIPIENT, "--body", "x", "--wait", "3",
    )  # fmt: skip
    assert 9 == refused.exit_code
    assert "opted out" in refused.output
    assert 0 == sent(phone, RECIPIENT)
