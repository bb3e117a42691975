"""`starebrain send` answers when the answer is known (issue 35, item 3): a row that cannot
settle within `--wait` (the messaging app's, 30 minutes by default) is answered as soon as it
is found, VERIFYING and exit 6, not after `--wait`; a framework row settles within its short
window and reads SUCCEEDED at once; `--wait-settled` follows the row for the whole wait and
resends on an early failure, which without it the rerun catches. The ground truth is what
left the phone (``phone.transmissions``) and what its store holds."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, Target, at

SENT, FAILED = 2, 5
#: A wait no early answer comes near: a send that waited it out would fail the test.
LONG_WAIT = 120
#: How long the simulated radio takes to answer, the app's SENT row in view meanwhile.
RADIO_MS = 2_000


async def cli(ledger: Target, *argv: str) -> tuple[Result, float]:
    """Run `starebrain --db LEDGER ARGV` off the phone's loop; with its time in seconds."""
    started = time.monotonic()
    args = ["--db", str(ledger), *argv]
    result = await asyncio.to_thread(CliRunner().invoke, main, args, catch_exceptions=False)
    return result, time.monotonic() - started


async def sends(phone: SimulatedPhone, expected: int) -> int:
    """How many messages carrying BODY left the phone, counted once the ``expected`` ones
    have and nothing more is on its way."""
    sent = await phone.wait_transmissions(
        lambda transmission: transmission.body == BODY, count=expected, then_idle=True
    )
    return len(sent)


def stored(phone: SimulatedPhone, kind: int) -> int:
    """Rows of BODY of type ``kind`` in the phone's own store."""
    return sum(1 for row in phone.store.rows(types=[kind]) if row.body == BODY)


async def test_the_apps_path_answers_as_soon_as_its_row_is_found(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, default_settling: None
) -> None:
    """Through the messaging app with the default settle (30 minutes): exit 6, VERIFYING and
    its settles_at as soon as the row is found, not after the 120 s wait; one SMS in the
    phone's store; the same command again sends nothing and answers at once as well."""
    argv = [
        "send", "--device", phone.serial, "--key", str(adb_key_path), "--to", RECIPIENT,
        "--body", BODY, "--action-id", "E-1", "--send-path", "ui", "--wait", str(LONG_WAIT),
        "--json",
    ]  # fmt: skip
    first, took = await cli(ledger_target, *argv)
    data = json.loads(first.stdout)
    assert (6, "VERIFYING", True) == (first.exit_code, data["status"], data["settling"])
    assert at(data["settles_at"]) - datetime.now(UTC) > timedelta(minutes=29)
    assert took < LONG_WAIT / 2, took  # answered when the row was found, not at the wait's end
    assert (1, 1) == (await sends(phone, 1), stored(phone, SENT))
    again, took_again = await cli(ledger_target, *argv)
    rerun = json.loads(again.stdout)
    assert (6, "VERIFYING", True, 1) == (
        again.exit_code,
        rerun["status"],
        rerun["earlier_message"],
        len(rerun["attempts"]),
    ), again.output
    assert took_again < LONG_WAIT / 2, took_again
    assert (1, 1) == (await sends(phone, 1), stored(phone, SENT))


async def test_the_framework_path_settles_within_the_wait_and_reads_succeeded(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, default_settling: None
) -> None:
    """Through the framework with the default settle (0.5 s after the row is seen): the send
    follows it and exits 0 SUCCEEDED well within the wait, one SMS out and one row of the
    shell's in the store; a rerun sends nothing. With a settle past the wait, the same rule
    as the app's path: exit 6 as soon as the row is found."""
    device = ["--device", phone.serial, "--key", str(adb_key_path), "--to", RECIPIENT]
    argv = [*device, "--body", BODY, "--send-path", "framework", "--wait", str(LONG_WAIT)]
    first, took = await cli(ledger_target, "send", *argv, "--action-id", "F-1", "--json")
    data = json.loads(first.stdout)
    assert (0, "SUCCEEDED") == (first.exit_code, data["status"]), first.output
    assert took < LONG_WAIT / 2, took
    (row,) = [row for row in phone.store.rows(types=[SENT]) if row.body == BODY]
    assert ("com.android.shell", 1) == (row.creator, await sends(phone, 1))
    again, _ = await cli(ledger_target, "send", *argv, "--action-id", "F-1", "--json")
    assert (0, True, 1) == (
        again.exit_code,
        json.loads(again.stdout)["earlier_message"],
        await sends(phone, 1),
    ), again.output
    late = ["--framework-settle-after", "600", "--action-id", "F-2", "--json"]
    later, took = await cli(
        ledger_target, "send", *device, "--body", "Your code is 1618", *argv[6:], *late
    )
    assert (6, "VERIFYING") == (later.exit_code, json.loads(later.stdout)["status"])
    assert took < LONG_WAIT / 2, took
    assert 2 == len(phone.transmissions)


async def test_wait_settled_follows_the_row_and_resends_on_an_early_failure(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """With --wait-settled the row is read for the whole wait: the radio fails the first send
    after the app wrote it SENT, the read through su 1000 sees it FAILED (proof nothing went
    out) and the send resends within the same command; its row cannot settle within the
    wait (600 s): exit 6 at the wait's end, two attempts, one SMS out, one FAILED row."""
    phone = await phone_factory(
        build_type="userdebug", faults=["send-fails"], send_delay_ms=RADIO_MS
    )
    result, took = await cli(
        ledger_target, "--read-as-system", "send", "--device", phone.serial,
        "--key", str(adb_key_path), "--to", RECIPIENT, "--body", BODY, "--action-id", "W-1",
        "--wait", "20", "--wait-settled", "--backoff", "0.2", "--settle-after", "600",
        "--send-path", "ui", "--json",
    )  # fmt: skip
    data = json.loads(result.stdout)
    first, second = data["attempts"]
    assert (6, "VERIFYING") == (result.exit_code, data["status"]), result.output
    assert "ACCEPTED" != first["acceptance"]
    assert ("CONFIRMED", "PENDING") == (second["delivery"], second["acceptance"])
    assert took >= 19, took  # it waited: the row was followed to the wait's end
    assert (1, 1, 1) == (await sends(phone, 1), stored(phone, FAILED), stored(phone, SENT))


async def test_without_wait_settled_an_early_failure_is_caught_by_the_rerun(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The same failing radio without --wait-settled: exit 6 with the first attempt as soon
    as its row is found SENT; once the radio failed it, the same command reads it FAILED and
    resends: two attempts, one SMS out."""
    phone = await phone_factory(
        build_type="userdebug", faults=["send-fails"], send_delay_ms=RADIO_MS
    )
    argv = [
        "--read-as-system", "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--to", RECIPIENT, "--body", BODY, "--action-id", "W-2", "--wait", str(LONG_WAIT),
        "--backoff", "0.2", "--settle-after", "600", "--send-path", "ui", "--json",
    ]  # fmt: skip
    first, took = await cli(ledger_target, *argv)
    data = json.loads(first.stdout)
    (attempt,) = data["attempts"]
    assert (6, "CONFIRMED", "PENDING") == (
        first.exit_code,
        attempt["delivery"],
        attempt["acceptance"],
    ), first.output
    assert took < LONG_WAIT / 2, took
    await phone.radio_idle()  # the radio's verdict: the row is FAILED now
    assert (1, 0) == (stored(phone, FAILED), len(phone.transmissions))
    again, _ = await cli(ledger_target, *argv)
    rerun = json.loads(again.stdout)
    failed, resent = rerun["attempts"]
    assert (6, "REJECTED", True) == (
        again.exit_code,
        failed["acceptance"],
        failed["evidence"]["failed_after_sent"],
    ), again.output
    assert ("CONFIRMED", "PENDING") == (resent["delivery"], resent["acceptance"])
    assert (1, 1) == (await sends(phone, 1), stored(phone, SENT))
