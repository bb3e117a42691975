"""Item 6 of issue 36, on a `user` build: the radio fails the first send, whose FAILED row
the shell cannot see (TelephonyProvider's restricted view: types 1 and 2 only); a person rules
it not sent and grants a retry; the retry's row, in the retry's own window, is the retry's.
It went to review as AMBIGUOUS: the hidden row's id, between the retry's watermark and its
row, could have been the retry's own row failing, and no earlier attempt accounted for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner, Result

from starebrain_actions import Ledger, Status
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, Target

SENT, FAILED = 2, 5


async def invoke(*argv: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, list(argv), catch_exceptions=False)


async def test_a_ruled_not_sent_attempt_leaves_the_retry_its_row(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """exit 3 (the FAILED row unseen), `resolve --as not-sent`, `retry`, send again: exit 0,
    SUCCEEDED by the retry's row; one SMS went out, and the phone holds the failed row too."""
    phone = await phone_factory(faults=["send-fails"])  # a user build: no su, restricted view
    assert "user" == phone.build_type
    db = ("--db", str(ledger_target))
    send = (
        *db, "send", "--device", phone.serial, "--key", str(adb_key_path), "--to", RECIPIENT,
        "--body", BODY, "--action-id", "otp-6", "--send-path", "ui", "--max-attempts", "1",
    )  # fmt: skip
    first = await invoke(*send, "--wait", "5")
    assert 3 == first.exit_code, first.output
    # premises: the radio failed it (the phone's own store), and the shell never saw it
    assert [FAILED] == [row.type for row in phone.store.rows()]
    assert [] == phone.transmissions
    ruled = await invoke(
        *db, "resolve", "otp-6", "--as", "not-sent", "--reason", "radio", "--operator", "ops"
    )
    assert 0 == ruled.exit_code, ruled.output
    granted = await invoke(*db, "retry", "otp-6", "--reason", "radio failed", "--operator", "ops")
    assert 0 == granted.exit_code, granted.output
    second = await invoke(*send, "--wait", "60")
    assert 0 == second.exit_code, second.output
    assert 1 == len(phone.transmissions)
    assert [FAILED, SENT] == [row.type for row in phone.store.rows()]
    async with Ledger.open(ledger_target) as ledger:
        summary = await ledger.summary("otp-6")
    assert Status.SUCCEEDED is summary.status
    retry = summary.attempts[-1]
    assert (2, None) == (retry.attempt, retry.review_reason)
    assert phone.store.rows(types=[SENT])[0]._id == retry.provider_object_id
