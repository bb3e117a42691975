"""`starebrain send` while a messaging app's SENT row settles (issue 21, item 2): the app
writes its row SENT before the radio sends anything, so the CLI says "sent by the phone, not
yet settled" and exits 6 until the settle time, never SUCCEEDED; a row the phone then marks
failed is a resend on proof, one that leaves the shell's view goes to review, never a resend.
The ground truth is what left the phone (``phone.transmissions``)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.context import EXIT_SETTLING
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, Target, at

FAILED = 5
#: How long the simulated radio takes to answer, the app's SENT row in view meanwhile.
RADIO_MS = 1_500


async def cli(ledger: Target, *argv: str) -> Result:
    """Run `starebrain --db LEDGER ARGV` off the phone's loop."""
    args = ["--db", str(ledger), *argv]
    return await asyncio.to_thread(CliRunner().invoke, main, args, catch_exceptions=False)


async def sends(phone: SimulatedPhone, expected: int, body: str = BODY) -> int:
    """How many messages carrying ``body`` left the phone, counted once the ``expected`` ones
    have (the radio sends after the app's row) and nothing more is on its way."""
    sent = await phone.wait_transmissions(
        lambda transmission: transmission.body == body, count=expected, then_idle=True
    )
    return len(sent)


async def test_a_message_the_app_sent_is_exit_6_until_it_settles(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, default_settling: None
) -> None:
    """With the defaults, the app's row is found at once but settles 30 minutes after its
    own date (the phone's clock, placed on ours by its reading just before the send): exit
    6, VERIFYING, the time it settles (text and JSON), never SUCCEEDED; one SMS went out,
    and a rerun sends nothing."""
    device = ["--device", phone.serial, "--key", str(adb_key_path)]
    argv = [
        "send", *device, "--to", RECIPIENT, "--body", BODY, "--action-id", "A-1",
        "--send-path", "ui",
    ]  # fmt: skip
    # the first send's wait covers connecting, the fence and the dispatch on a loaded machine
    # (with 1 s it once ended before its attempt started: PLANNED, exit 3)
    text = await cli(ledger_target, *argv, "--wait", "5")
    assert EXIT_SETTLING == text.exit_code == 6, text.output
    assert "VERIFYING" in text.stdout and "SUCCEEDED" not in text.stdout
    assert "sent by the phone, not yet settled" in text.stdout
    shown = await cli(ledger_target, *argv, "--wait", "1", "--json")
    data = json.loads(shown.stdout)
    (attempt,) = data["attempts"]
    assert (6, "VERIFYING", True) == (data["exit_code"], data["status"], data["settling"])
    row_after_dispatch = timedelta(
        milliseconds=attempt["provider_row_date_ms"] - attempt["device_clock_ms"]
    )
    assert timedelta(0) < row_after_dispatch < timedelta(seconds=30)
    assert timedelta(minutes=30) + row_after_dispatch == at(data["settles_at"]) - at(
        attempt["dispatched_at"]
    )
    assert data["settles_at"] in text.stdout
    assert (1, "CONFIRMED", "PENDING") == (
        await sends(phone, 1),
        attempt["delivery"],
        attempt["acceptance"],
    )


async def test_a_settled_row_is_accepted_by_a_later_read(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """Through the messaging app, exit 6 within the settle time; once it has passed,
    `reconcile` (a read, never a send) accepts the row: SUCCEEDED, and the same command exits
    0 without sending again."""
    # the wait (4 s from the command's start) ends before the row can settle (6 s from the
    # attempt, which starts after the command), and is long enough to find the row beside a
    # loaded machine's other work (with 1 s, the send sometimes had not started)
    argv = [
        "send", "--device", phone.serial, "--key", str(adb_key_path), "--to", RECIPIENT,
        "--body", BODY, "--action-id", "A-2", "--settle-after", "6", "--send-path", "ui",
    ]  # fmt: skip
    first = await cli(ledger_target, *argv, "--wait", "4", "--json")
    assert 6 == first.exit_code, first.output
    due = at(json.loads(first.stdout)["settles_at"])
    await asyncio.sleep((due - datetime.now(UTC)).total_seconds() + 0.2)
    read = await cli(ledger_target, "reconcile", "--key", str(adb_key_path), "--json")
    assert 0 == read.exit_code, read.output
    assert [("A-2", "accept", "VERIFYING", "SUCCEEDED")] == [
        (c["action_id"], c["event"], c["from_status"], c["to_status"])
        for c in json.loads(read.stdout)["changes"]
    ]
    again = await cli(ledger_target, *argv, "--wait", "1")
    assert (0, 1) == (again.exit_code, await sends(phone, 1)), again.output


async def test_a_row_the_phone_marks_failed_is_resent_on_that_proof(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The radio fails after the messaging app wrote its row SENT: read through su 1000, the
    row turns FAILED within the app's send timeout, which proves nothing went out; the next
    attempt sends the one SMS. The phone holds the FAILED row and the SENT one."""
    # the radio answers 1.5 s after the app wrote its row: the read finds it SENT first
    phone = await phone_factory(
        build_type="userdebug", faults=["send-fails"], send_delay_ms=RADIO_MS
    )
    result = await cli(
        ledger_target, "--read-as-system", "send", "--device", phone.serial,
        "--key", str(adb_key_path), "--to", RECIPIENT, "--body", BODY, "--action-id", "A-3",
        "--wait", "15", "--backoff", "0.2", "--settle-after", "2.5", "--send-path", "ui",
        "--json",
    )  # fmt: skip
    data = json.loads(result.stdout)
    first, second = data["attempts"]
    assert (0, "SUCCEEDED") == (result.exit_code, data["status"]), result.output
    assert ("CONFIRMED", "REJECTED", True) == (
        first["delivery"],
        first["acceptance"],
        first["evidence"]["failed_after_sent"],
    )
    assert ("CONFIRMED", "ACCEPTED") == (second["delivery"], second["acceptance"])
    assert (1, 1) == (await sends(phone, 1), len(phone.store.rows(types=[FAILED])))


async def test_a_row_that_leaves_the_shells_view_goes_to_review_never_resent(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The shell's restricted view: the SENT row is found, then the app marks it failed and
    it vanishes (failed or deleted: the shell cannot tell). Review as UNSETTLED, exit 3, and
    no second attempt: nothing is sent on an absence."""
    phone = await phone_factory(faults=["send-fails"], send_delay_ms=RADIO_MS)
    # an earlier message of the owner's: a read anchored on it proves what it does not show
    # (on an empty sent box an empty answer proves nothing)
    phone.store.insert_outgoing(
        "+12025550199", "see you", date_ms=phone.now_ms() - 60_000, message_type=2
    )
    result = await cli(
        ledger_target, "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--to", RECIPIENT, "--body", BODY, "--action-id", "A-4", "--wait", "6",
        "--settle-after", "2.5", "--send-path", "ui", "--json",
    )  # fmt: skip
    data = json.loads(result.stdout)
    assert (3, ["UNSETTLED"], 1) == (
        result.exit_code,
        data["review_reasons"],
        len(data["attempts"]),
    ), result.output
    assert 0 == await sends(phone, 0)
