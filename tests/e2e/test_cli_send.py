"""`starebrain send` against the simulated phone: one SMS per action, and the exit statuses,
on a SQLite file and on a PostgreSQL ledger alike."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Action, ActionSummary, Ledger, RetryPolicy, SmsIntent, Status
from starebrain_actions.cli.main import main
from starebrain_actions.cli.send import send_exit_code
from starebrain_actions.orchestration.reconciler import reconcile_pending
from starebrain_actions.orchestration.watched import SCRIPT_FINISH_WITHIN
from tests.conftest import OUTBOX_FIRST, PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, Target, starebrain_command

SENT = 2


async def send(ledger: Target, key: Path, serial: str, *args: str) -> Result:
    """Run `starebrain --db L send --device SERIAL --key KEY ARGS` off the phone's loop (a
    file or, on the PostgreSQL run of a test, a URL)."""
    argv = ["--db", str(ledger), "send", "--device", serial, "--key", str(key), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


def sent_bodies(phone: SimulatedPhone) -> list[str | None]:
    """Bodies of the rows the phone's sent box holds."""
    return [row.body for row in phone.store.rows(types=[SENT])]


async def test_send_succeeds_once_and_rerun_is_idempotent(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """Exit 0 on SUCCEEDED; rerunning the same command reuses the derived id and sends nothing."""
    args = ("--to", RECIPIENT, "--body", BODY, "--wait", "10")
    first = await send(ledger_target, adb_key_path, phone.serial, *args)
    assert 0 == first.exit_code, first.output
    assert "SUCCEEDED" in first.stdout
    action_id = first.stdout.split()[2]
    assert action_id.startswith("sms-") and 20 == len(action_id)
    again = await send(ledger_target, adb_key_path, phone.serial, *args)
    assert 0 == again.exit_code, again.output
    assert action_id == again.stdout.split()[2]
    assert [BODY] == sent_bodies(phone)


async def test_send_json(phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path) -> None:
    """`send --json` prints the record with its status and exit code, redacted."""
    result = await send(
        ledger_target, adb_key_path, phone.serial,
        "--to", RECIPIENT, "--body", BODY, "--action-id", "A-17", "--json",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    data = json.loads(result.stdout)
    assert ("A-17", "SUCCEEDED", 0) == (
        data["action"]["action_id"],
        data["status"],
        data["exit_code"],
    )
    assert ("CONFIRMED", "ACCEPTED") == (data["latest"]["delivery"], data["latest"]["acceptance"])
    assert RECIPIENT not in result.stdout and BODY not in result.stdout


async def test_send_reply_lost_is_one_sms(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The link stalls after a send through the messaging app (the reply never comes): the
    CLI's command times out, the fence shows the script pressed its keys, a read confirms:
    exit 0, one SMS."""
    phone = await phone_factory(faults=["hang-after-send"])
    result = await send(
        ledger_target, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", BODY,
        "--command-timeout", "1", "--wait", "10", "--send-path", "ui",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert [BODY] == sent_bodies(phone)


@pytest.mark.parametrize("android", [10, 15])
async def test_send_whose_reply_is_lost_right_after_the_send_key_succeeds(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path, android: int
) -> None:
    """``drop-after-send``: the connection drops right after the messaging app's send key. The
    script runs on on the phone and records its keys; the read confirms the one SMS:
    SUCCEEDED (exit 0), and a rerun sends nothing more."""
    phone = await phone_factory(android=android, faults=["drop-after-send"])
    args = ("--to", RECIPIENT, "--body", BODY, "--send-path", "ui", "--wait", "10")
    first = await send(ledger_target, adb_key_path, phone.serial, *args)
    again = await send(ledger_target, adb_key_path, phone.serial, *args)
    await phone.wait_idle()
    assert (0, 0) == (first.exit_code, again.exit_code), first.output + again.output
    assert "SUCCEEDED" in first.stdout
    assert [BODY] == sent_bodies(phone)
    assert 1 == sum(1 for row in phone.store.rows(types=[2]) if row.body == BODY)


async def test_send_cut_right_after_the_send_key_is_review_never_resent(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """Through the messaging app, adbd restarts right after the send key, before the script
    recorded its keys (init kills it; a dropped connection would not): unresolved (exit 3)
    while its keys marker may still come (SCRIPT_FINISH_WITHIN), and a rerun sends nothing
    more; after that the matching row cannot be told from an identical text of the owner's,
    so the action goes to review (AMBIGUOUS)."""
    phone = await phone_factory()
    phone.drop_after_command("input", nth=2, adbd_restarts=True)
    args = ("--to", RECIPIENT, "--body", BODY, "--send-path", "ui", "--wait", "5")
    first = await send(ledger_target, adb_key_path, phone.serial, *args)
    again = await send(ledger_target, adb_key_path, phone.serial, *args, "--wait", "1")
    assert (3, 3) == (first.exit_code, again.exit_code), first.output + again.output
    assert "AMBIGUOUS" not in again.stdout
    async with Ledger.open(ledger_target) as ledger:
        later = ledger.now() + SCRIPT_FINISH_WITHIN
        await reconcile_pending(ledger, [phone.serial], key_path=str(adb_key_path), now=later)
    shown = await send(ledger_target, adb_key_path, phone.serial, *args, "--wait", "1")
    assert (3, True) == (shown.exit_code, "AMBIGUOUS" in shown.stdout), shown.output
    assert [BODY] == sent_bodies(phone)


async def test_send_changed_intent_is_exit_2_and_sends_nothing(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """The same --action-id with another body is a fingerprint conflict: exit 2, no SMS."""
    first = await send(
        ledger_target, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", BODY,
        "--action-id", "A-1",
    )  # fmt: skip
    assert 0 == first.exit_code, first.output
    changed = await send(
        ledger_target, adb_key_path, phone.serial, "--to", RECIPIENT, "--body", "Your code is 9999",
        "--action-id", "A-1",
    )  # fmt: skip
    assert 2 == changed.exit_code
    assert "changed intent, nothing sent" in changed.stderr
    assert [BODY] == sent_bodies(phone)


async def test_send_bad_input_is_exit_2(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """A number with no digits, a blank body, a bad device or region: exit 2, nothing sent."""
    cases = [
        ("--to", "not-a-number", "--body", BODY),
        ("--to", RECIPIENT, "--body", "   "),
        ("--to", RECIPIENT, "--body", BODY, "--region", "USA"),
        ("--to", RECIPIENT, "--body", BODY, "--action-id", "has space"),
    ]
    for args in cases:
        result = await send(ledger_target, adb_key_path, phone.serial, *args)
        assert 2 == result.exit_code, (args, result.output)
    bad_device = await send(
        ledger_target, adb_key_path, "no-port", "--to", RECIPIENT, "--body", BODY
    )
    assert 2 == bad_device.exit_code
    assert [] == sent_bodies(phone)


async def test_send_mismatch_is_exit_5(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The messaging app alters the text and no attempt is left: MISMATCH, exit 5."""
    phone = await phone_factory(faults=["mangle-body"])
    result = await send(
        ledger_target, adb_key_path, phone.serial,
        "--to", RECIPIENT, "--body", BODY, "--max-attempts", "1", "--send-path", "ui",
    )  # fmt: skip
    assert 5 == result.exit_code, result.output
    assert "MISMATCH" in result.stdout


async def test_a_superseded_mismatch_stays_on_show(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """Issue 10, section 1: the messaging app alters the first text, the resend goes out
    right: the action SUCCEEDED, needs no review, and `status` still shows the wrong text went
    out (MISMATCH, superseded), in text and in JSON."""
    phone = await phone_factory(faults=["mangle-body"])
    args = (
        "--action-id", "A-17", "--to", RECIPIENT, "--body", BODY, "--max-attempts", "2",
        "--send-path", "ui",
    )  # fmt: skip
    result = await send(ledger_target, adb_key_path, phone.serial, *args, "--wait", "10")
    assert 0 == result.exit_code, result.output
    runner = CliRunner()
    base = ["--db", str(ledger_target), "status", "A-17"]
    text = await asyncio.to_thread(runner.invoke, main, base)
    assert "superseded" in text.stdout and "MISMATCH" in text.stdout, text.output
    shown = await asyncio.to_thread(runner.invoke, main, [*base, "--json"])
    data = json.loads(shown.stdout)
    assert ("SUCCEEDED", [], ["MISMATCH"]) == (
        data["status"],
        data["review_reasons"],
        data["superseded_reasons"],
    )
    assert data["needs_review"] is False


async def test_send_failed_without_budget_is_exit_4(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The radio fails, a read through su 1000 (--read-as-system, userdebug build) shows the
    FAILED row, and no attempt is left: exit 4."""
    phone = await phone_factory(build_type="userdebug", faults=["send-fails"])
    argv = [
        "--db", str(ledger_target), "--read-as-system", "send", "--device", phone.serial,
        "--key", str(adb_key_path), "--to", RECIPIENT, "--body", BODY,
        "--max-attempts", "1", "--wait", "10",
    ]  # fmt: skip
    result = await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)
    assert 4 == result.exit_code, result.output
    assert "FAILED" in result.stdout
    assert [] == sent_bodies(phone)


async def test_send_failed_on_a_rooted_phone_stays_unresolved(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """adb root does not show the FAILED row (ProviderUtil.isAccessRestricted restricts uid 0
    too): the attempt stays unresolved, exit 3, and nothing is sent again."""
    phone = await phone_factory(root=True, faults=["send-fails"])
    result = await send(
        ledger_target, adb_key_path, phone.serial,
        "--to", RECIPIENT, "--body", BODY, "--max-attempts", "3", "--wait", "5",
    )  # fmt: skip
    # (a wait of 1 s once ended before the attempt started on a loaded machine: no row)
    assert 3 == result.exit_code, result.output
    assert ([], 1) == (sent_bodies(phone), len(phone.store.rows(types=[5])))


async def test_send_unresolved_is_exit_3(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The message sits in the outbox when --wait ends: still unresolved, exit 3. (5 s: at
    1.5 s a loaded PostgreSQL run ended the wait before the first attempt, PLANNED.)"""
    phone = await phone_factory(faults=["stuck-outbox"], app=OUTBOX_FIRST)
    result = await send(
        ledger_target,
        adb_key_path,
        phone.serial,
        "--to",
        RECIPIENT,
        "--body",
        BODY,
        "--wait",
        "5",
    )
    assert 3 == result.exit_code, result.output
    assert "IN_FLIGHT" in result.stdout


async def test_send_to_an_unreachable_phone_waits_within_wait_then_exits_7(
    ledger_target: Target, adb_key_path: Path, closed_port: int
) -> None:
    """A phone that refuses the connection is tried again within --wait (its link may come
    back), then: exit 7 (the phone is not ready), a clear error naming it, nothing recorded."""
    serial = f"127.0.0.1:{closed_port}"
    started = time.monotonic()
    result = await send(
        ledger_target, adb_key_path, serial, "--to", RECIPIENT, "--body", BODY, "--wait", "2"
    )
    took = time.monotonic() - started
    assert 7 == result.exit_code, result.output
    assert serial in result.stderr and "did not answer within --wait" in result.stderr
    assert 1.0 < took < 10.0
    async with Ledger.open(ledger_target) as ledger:
        assert [] == await ledger.summaries()


async def test_installed_command_sends_once(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """The installed `starebrain` console script sends through the phone and exits 0."""
    env = {key: value for key, value in os.environ.items() if key != "STAREBRAIN_DB"}
    process = await asyncio.create_subprocess_exec(
        *starebrain_command(), "--db", str(ledger_target), "send", "--device", phone.serial,
        "--key", str(adb_key_path), "--to", RECIPIENT, "--body", BODY,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert 0 == process.returncode, stderr.decode()
    assert "SUCCEEDED" in stdout.decode()
    assert [BODY] == sent_bodies(phone)


@pytest.mark.parametrize("status", ["IN_FLIGHT", "UNKNOWN", "VERIFYING"])
def test_unresolved_statuses_map_to_3(status: str) -> None:
    """Every not-yet-proven status maps to exit 3."""
    intent = SmsIntent(recipient=RECIPIENT, body=BODY)
    action = Action(
        action_id="x", fingerprint=intent.fingerprint, intent=intent, policy=RetryPolicy(),
        created_at=datetime.now(UTC),
    )  # fmt: skip
    summary = ActionSummary(action=action, attempts=(), status=Status(status), review_reasons=())
    assert 3 == send_exit_code(summary)


async def test_ledger_settles_reruns_while_the_phone_is_down(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, closed_port: int
) -> None:
    """Once an action succeeded, a rerun exits 0 and a changed intent exits 2 from the ledger
    alone, without reaching for the (now unreachable) phone."""
    args = ("--to", RECIPIENT, "--body", BODY, "--action-id", "A-5")
    first = await send(ledger_target, adb_key_path, phone.serial, *args)
    assert 0 == first.exit_code, first.output
    down = f"127.0.0.1:{closed_port}"
    rerun = await send(ledger_target, adb_key_path, down, *args)
    assert 0 == rerun.exit_code, rerun.output
    changed = await send(
        ledger_target,
        adb_key_path,
        down,
        "--to",
        RECIPIENT,
        "--body",
        "other",
        "--action-id",
        "A-5",
    )
    assert 2 == changed.exit_code, changed.output
    assert [BODY] == sent_bodies(phone)


async def test_default_ledger_is_created_under_xdg_data_home(
    phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db or STAREBRAIN_DB, `send` creates $XDG_DATA_HOME/starebrain/ledger.db."""
    monkeypatch.delenv("STAREBRAIN_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    argv = ["send", "--device", phone.serial, "--key", str(adb_key_path)]
    argv += ["--to", RECIPIENT, "--body", BODY]
    result = await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)
    assert 0 == result.exit_code, result.output
    assert (tmp_path / "xdg" / "starebrain" / "ledger.db").is_file()


async def test_send_names_the_attempt_it_waits_for(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """A send that meets another action's unresolved attempt on the phone says at once, on
    stderr, which attempt and action it waits for, and exits 3 when its wait ends. (Its
    wait is 5 s: at 1.5 s a loaded machine ended it before it had opened a PostgreSQL
    ledger, connected and met the lease, with nothing said: red in `.ci/run`.) The first
    send is rerun, as its own advice says, until its attempt holds the phone: on a loaded
    machine its 1.5 s could end before it had dispatched at all, and the second send then
    found the phone free, sent, and had no one to wait for (red in `.ci/run`), or not even
    connected in it (exit 7, nothing sent: red in `.ci/run` too)."""
    phone = await phone_factory(faults=["stuck-outbox"], app=OUTBOX_FIRST)
    for _ in range(10):
        first = await send(
            ledger_target, adb_key_path, phone.serial,
            "--to", RECIPIENT, "--body", BODY, "--action-id", "stuck-1", "--wait", "1.5",
        )  # fmt: skip
        # 3: unresolved; 7: the phone did not answer within the wait (a loaded machine)
        assert first.exit_code in (3, 7), first.output
        async with Ledger.open(ledger_target) as ledger:
            if any(held.action_id == "stuck-1" for held in await ledger.holders()):
                break
    else:
        pytest.fail("the first send never dispatched its attempt")
    second = await send(
        ledger_target, adb_key_path, phone.serial,
        "--to", RECIPIENT, "--body", "another text", "--action-id", "next-1", "--wait", "5",
    )  # fmt: skip
    assert 3 == second.exit_code, second.output
    assert "waiting for attempt" in second.stderr and "stuck-1" in second.stderr
