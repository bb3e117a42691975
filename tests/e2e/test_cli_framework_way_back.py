"""The framework path's way back through the CLI (issue 35, item 4): a doubted phone sends
through the app, `devices` says since when and by which action, and `doctor --send-test
NUMBER --send-path framework` or `resolve ACTION --as sent` brings `--send-path auto` back to
the framework, which `devices` then says (restored, by what, when). Counted on the phone
(``transmissions``: who sent what), on both ledgers."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, ReviewReason
from starebrain_actions.cli.devices import DEVICE_ENV
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, Target

SHELL = "com.android.shell"
MESSAGING = "com.google.android.apps.messaging"
#: the operator's own number, which the send test texts
OWN = "+12025550142"
#: another customer (a later send to the doubted action's number stays unattributed while
#: that action is open: its row could be the doubted one's)
OTHER = "+12025550177"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"
#: settle windows short enough for a test, generous waits for a loaded machine
FAST = ("--framework-settle-after", "0.2", "--settle-after", "0.3", "--wait", "20")


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)


async def cli(ledger: Target, *argv: str) -> Result:
    """Run `starebrain --db LEDGER ARGV` in-process, off the simulated phone's event loop."""
    runner = CliRunner()
    args = ["--db", str(ledger), *argv]
    return await asyncio.to_thread(runner.invoke, main, args, catch_exceptions=False)


async def send(
    ledger: Target, phone: SimulatedPhone, key: Path, action_id: str, to: str, *extra: str
) -> Result:
    """`starebrain send` through ``phone`` with ``--send-path auto`` (the default)."""
    return await cli(
        ledger, "send", "--device", phone.serial, "--key", str(key), "--action-id", action_id,
        "--to", to, "--body", f"{BODY} ({action_id})", *extra,
    )  # fmt: skip


async def devices(ledger: Target, phone: SimulatedPhone, key: Path) -> tuple[dict[str, Any], str]:
    """`devices --json`'s report of the phone, and the table's line of it."""
    base = ["devices", "--device", phone.serial, "--key", str(key)]
    result = await cli(ledger, *base, "--json")
    assert 0 == result.exit_code, result.output
    (report,) = json.loads(result.stdout)["devices"]
    table = await cli(ledger, *base)
    assert 0 == table.exit_code, table.output
    (line,) = [line for line in table.stdout.splitlines() if line.startswith(phone.serial)]
    return report, line


def senders(phone: SimulatedPhone) -> list[tuple[str, str]]:
    """Who sent what, as the phone recorded it (ground truth): (package, recipient)."""
    return [(sent.app, sent.addresses[0]) for sent in phone.transmissions]


async def lost_in_review(ledger: Target, phone: SimulatedPhone, key: Path) -> None:
    """`send --action-id lost` (one attempt allowed, review at once), again until its attempt
    went to review as UNVERIFIED (the same action: never a second SMS; a loaded machine may
    end a short wait before the attempt was even dispatched)."""
    for _ in range(20):
        lost = await send(
            ledger, phone, key, "lost", RECIPIENT,
            "--max-attempts", "1", "--unverified-after", "0", "--wait", "2",
        )  # fmt: skip
        assert 3 == lost.exit_code, lost.output  # unresolved
        async with Ledger.open(ledger, create=False) as opened:
            attempts = await opened.attempts("lost")
        if attempts and attempts[0].review_reason is ReviewReason.UNVERIFIED:
            assert 1 == len(attempts)
            assert "framework" == attempts[0].evidence.get("send_path")
            return
    raise AssertionError("lost never went to review")


async def proven_then_doubted(ledger: Target, phone: SimulatedPhone, key: Path) -> None:
    """One send proves the framework path (``auto`` takes it: the jar proves the code, and
    the send comes back); then, the SIM swapped, the framework answers success and sends
    nothing, and that action ``lost`` goes to review at once (UNVERIFIED). The SIM is put
    back: the framework could send again, but nothing proves it."""
    first = await send(ledger, phone, key, "first", RECIPIENT, *FAST)
    assert 0 == first.exit_code, first.output
    phone.sim_sub_ids = (2,)
    await lost_in_review(ledger, phone, key)
    phone.sim_sub_ids = (1,)


async def test_doctors_send_test_on_the_framework_path_restores_it(
    phone_factory: PhoneFactory, adb_key_path: Path, ledger_target: Target
) -> None:
    """Doubted: `devices` says `ui: doubted since T by lost` and `auto` sends through the
    app. `doctor --send-test OWN --send-path framework` sends one SMS through the framework,
    its row comes back, and its check says the path is proven again; `devices` then says
    `framework: restored at T by doctor-…`, and the next `auto` send goes through the
    framework. The phone sent through the app once, and never the lost SMS."""
    phone = await phone_factory(android=14)
    ledger, key = ledger_target, adb_key_path
    await proven_then_doubted(ledger, phone, key)
    report, line = await devices(ledger, phone, key)
    standing = report["framework"]
    assert ("ui", "doubted", "lost", "UNVERIFIED") == (
        report["auto_send_path"],
        standing["state"],
        standing["decided_by"]["action_id"],
        standing["decided_by"]["review_reason"],
    )
    assert standing["decided_by"]["at"] is not None
    assert re.search(rf"ui: doubted since {TIME} by lost", line), line
    assert "--send-path framework" in report["auto_send_path_why"]
    by_app = await send(ledger, phone, key, "by-app", OTHER, *FAST)
    assert by_app.exit_code in (0, 6), by_app.output
    result = await cli(
        ledger, "doctor", "--device", phone.serial, "--key", str(key), "--send-test", OWN,
        "--send-path", "framework", "--wait", "20", "--report-wait", "0", "--json",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    (check,) = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "send-test"]
    assert "ok" == check["verdict"], check
    assert "proves the framework path again" in check["consequence"]
    assert "by action lost" in check["consequence"]
    report, line = await devices(ledger, phone, key)
    standing = report["framework"]
    assert ("framework", "restored", True, "lost") == (
        report["auto_send_path"],
        standing["state"],
        standing["decided_by"]["action_id"].startswith("doctor-"),
        standing["doubt"]["action_id"],
    )
    assert re.search(rf"framework: restored at {TIME} by doctor-", line), line
    after = await send(ledger, phone, key, "after", OTHER, *FAST)
    assert 0 == after.exit_code, after.output
    await phone.wait_transmissions(count=4, then_idle=True)
    assert [
        (SHELL, RECIPIENT),
        (MESSAGING, OTHER),
        (SHELL, OWN),
        (SHELL, OTHER),
    ] == senders(phone)


async def test_a_ruling_that_the_doubted_sms_went_out_restores_it(
    phone_factory: PhoneFactory, adb_key_path: Path, ledger_target: Target
) -> None:
    """The framework sent ``lost``, but its row was gone before any read saw it (the radio
    answered late, the owner deleted the thread at once): review, and `auto` turns to the app.
    A `reconcile` that sees nothing changes nothing. A person rules it sent: `resolve` says the
    framework path is restored, `devices` says `framework: restored at T by a ruling on
    lost`, and the next `auto` send goes through the framework. The phone agrees with the
    person: the lost SMS went out, once."""
    phone = await phone_factory(android=14)
    ledger, key = ledger_target, adb_key_path
    first = await send(ledger, phone, key, "first", RECIPIENT, *FAST)
    assert 0 == first.exit_code, first.output
    phone.hold_radio()
    await lost_in_review(ledger, phone, key)
    phone.release_radio()
    sent = await phone.wait_transmissions(count=2, then_idle=True)
    assert sent[-1].provider_id is not None
    phone.store.delete(sent[-1].provider_id)  # the owner deletes the thread
    passed = await cli(ledger, "reconcile", "--device", phone.serial, "--key", str(key))
    assert passed.exit_code in (0, 3), passed.output
    report, line = await devices(ledger, phone, key)
    assert ("ui", "doubted") == (report["auto_send_path"], report["framework"]["state"])
    ruled = await cli(
        ledger, "resolve", "lost", "--as", "sent", "--reason", "the recipient got the code",
        "--operator", "ops",
    )  # fmt: skip
    assert 0 == ruled.exit_code, ruled.output
    assert "is restored: `--send-path auto` sends through framework" in ruled.stdout
    report, line = await devices(ledger, phone, key)
    standing = report["framework"]
    assert ("framework", "restored", "lost", "ops") == (
        report["auto_send_path"],
        standing["state"],
        standing["decided_by"]["action_id"],
        standing["decided_by"]["ruled_by"],
    )
    assert re.search(rf"framework: restored at {TIME} by a ruling on lost", line), line
    after = await send(ledger, phone, key, "after", OTHER, *FAST)
    assert 0 == after.exit_code, after.output
    await phone.wait_transmissions(count=3, then_idle=True)
    assert [(SHELL, RECIPIENT), (SHELL, RECIPIENT), (SHELL, OTHER)] == senders(phone)
