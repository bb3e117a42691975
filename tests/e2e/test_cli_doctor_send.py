"""`starebrain doctor --send-test NUMBER` against the simulated phone: one real send through
the ledger under an id of its own, and what the phone proved of it, counted from the phone's
own store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from android_bridge._sent_row import delivery_report, parse_row, row_queries
from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, Status
from starebrain_actions.cli.devices import DEVICE_ENV
from starebrain_actions.cli.doctor_send import send_test_action_id, tell_interrupted
from starebrain_actions.cli.main import main
from starebrain_actions.core.model import check_action_id
from tests.conftest import PhoneFactory
from tests.e2e.conftest import Target

RECIPIENT = "+12025550100"
SENT, FAILED = 2, 5
TEST_TEXT = "starebrain doctor send test "


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)


async def doctor(
    ledger: Target, key: Path, phone: SimulatedPhone, *argv: str, json_out: bool = True
) -> tuple[Result, dict[str, Any] | None]:
    """Run `starebrain --db LEDGER [--read-as-system] doctor --device D --key K ARGV [--json]`
    off the phone's loop (``--read-as-system`` in ARGV goes before `doctor`); its result and,
    with --json, the report."""
    flags = [arg for arg in argv if arg == "--read-as-system"]
    rest = [arg for arg in argv if arg != "--read-as-system"]
    args = ["--db", str(ledger), *flags, "doctor", "--device", phone.serial, "--key", str(key)]
    args += rest
    if json_out:
        args.append("--json")
    result = await asyncio.to_thread(CliRunner().invoke, main, args, catch_exceptions=False)
    return result, json.loads(result.stdout) if json_out else None


def send_test_of(report: dict[str, Any] | None) -> dict[str, Any]:
    assert report is not None
    (check,) = [check for check in report["checks"] if check["name"] == "send-test"]
    return check


def doctor_rows(phone: SimulatedPhone) -> list[Any]:
    """The rows of the phone's own store holding a send test's text, of any type."""
    return [row for row in phone.store.rows() if (row.body or "").startswith(TEST_TEXT)]


async def polled(condition: Callable[[], bool]) -> None:
    """Return once ``condition()`` holds, looking every 50 ms (the phone's store and its
    command log have no event to wait on)."""
    for _ in range(1200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition never held within 60 s")


async def action_of(ledger: Target, action_id: str) -> Any:
    async with Ledger.open(ledger, create=False) as opened:
        return await opened.summary(action_id)


def action_id_in(evidence: str) -> str:
    """The action id a send-test evidence names first (``action ID: …``)."""
    assert evidence.startswith("action doctor-"), evidence
    return evidence.split()[1].rstrip(":")


async def test_a_framework_send_is_proven_by_its_row_and_creator(
    phone_factory: PhoneFactory, adb_key_path: Path, ledger_target: Target
) -> None:
    """On the framework path the send settles (SUCCEEDED): the check is ok and names the
    action, the row's _id, type and creator (the shell's package) and its status -1 (the
    framework asks for no delivery report); the phone's store holds exactly that one row, and
    the ledger (a SQLite file, or PostgreSQL) holds the action under its doctor id with that
    row."""
    phone = await phone_factory(android=14)
    ledger = ledger_target
    result, report = await doctor(
        ledger, adb_key_path, phone,
        "--send-test", RECIPIENT, "--send-path", "framework", "--report-wait", "5",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    check = send_test_of(report)
    assert "ok" == check["verdict"], check
    (row,) = doctor_rows(phone)
    assert (SENT, "com.android.shell", RECIPIENT) == (row.type, row.creator, row.address)
    evidence = check["evidence"]
    assert f"_id {row.id}, type 2 (sent), creator com.android.shell" in evidence
    assert "SUCCEEDED" in evidence and "-1 (none)" in evidence
    assert "framework path asks for no delivery report" in check["consequence"]
    assert RECIPIENT not in json.dumps(report)  # redacted like every output
    action_id = action_id_in(evidence)
    assert action_id.startswith(f"doctor-{phone.serial}-")
    summary = await action_of(ledger, action_id)
    assert Status.SUCCEEDED == summary.status
    assert (1, row.id) == (len(summary.attempts), summary.latest.provider_object_id)
    assert 1 == summary.action.policy.maximum_attempts


@pytest.mark.long(10)
async def test_a_rerun_is_a_new_action_and_a_new_sms(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """Each run is a new action id, so a rerun sends a second SMS (and says so); neither
    action is ever sent twice."""
    phone = await phone_factory(android=12)
    ledger = tmp_path / "ledger.db"
    args = ("--send-test", RECIPIENT, "--send-path", "framework", "--report-wait", "1")
    first, first_report = await doctor(ledger, adb_key_path, phone, *args)
    second, second_report = await doctor(ledger, adb_key_path, phone, *args)
    assert (0, 0) == (first.exit_code, second.exit_code), second.output
    ids = [action_id_in(send_test_of(r)["evidence"]) for r in (first_report, second_report)]
    assert ids[0] != ids[1]
    assert 2 == len(doctor_rows(phone))
    assert "sends a new SMS under a new id" in send_test_of(second_report)["consequence"]
    for action_id in ids:
        assert 1 == len((await action_of(ledger, action_id)).attempts)


async def test_the_apps_delivery_report_is_read_from_the_status_column(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """On the messaging app's path the row waits to settle (VERIFYING: warn at most), until
    the status column shows the report: 32 pending, then 0 complete, each seen over the wait;
    a delivered report makes the check ok and says this phone writes delivery reports."""
    phone = await phone_factory(android=13)

    async def the_network_reports() -> None:
        """The report pending as soon as the row is written, complete once doctor has read
        the row once (its own query of that `_id`)."""
        await polled(lambda: bool(doctor_rows(phone)))
        (row,) = doctor_rows(phone)
        # doctor's own read of that row (the agent's reads may name `_id = N` too, with more),
        # one that comes after the pending report is written: a read made before (this task
        # is late on a loaded machine) must not let the report complete unseen
        watch = row_queries(row.id)[0]

        def reads() -> int:
            return sum(watch in cmd for cmd in phone.commands_run)

        phone.store.update(row.id, {"status": 32})
        before = reads()
        await polled(lambda: reads() > before)
        phone.store.update(row.id, {"status": 0})

    report_task = asyncio.create_task(the_network_reports())
    result, report = await doctor(
        tmp_path / "ledger.db", adb_key_path, phone,
        "--send-test", RECIPIENT, "--send-path", "ui", "--wait", "3", "--report-wait", "30",
    )  # fmt: skip
    await report_task
    assert 0 == result.exit_code, result.output
    check = send_test_of(report)
    assert "ok" == check["verdict"], check
    assert "VERIFYING" in check["evidence"]
    assert "creator com.google.android.apps.messaging" in check["evidence"]
    assert "32 (pending) at" in check["evidence"]
    assert "0 (complete: delivered) at" in check["evidence"]
    assert "writes delivery reports" in check["consequence"]
    assert 1 == len(doctor_rows(phone))


async def test_an_app_row_without_report_is_a_warning_and_says_so(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """The app's row is there but not settled and no report comes: warn (never ok), exit 0,
    and the product's conclusion: no delivery evidence, sends proven by the row only."""
    phone = await phone_factory(android=15)
    result, report = await doctor(
        tmp_path / "ledger.db", adb_key_path, phone,
        "--send-test", RECIPIENT, "--send-path", "ui", "--wait", "3", "--report-wait", "4",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    check = send_test_of(report)
    assert ("warn", 1) == (check["verdict"], len(doctor_rows(phone)))
    assert "VERIFYING" in check["evidence"] and "-1 (none)" in check["evidence"]
    assert "proves sends by the row only" in check["consequence"]
    assert "starebrain status doctor-" in check["consequence"]


async def test_a_send_that_fails_is_reported_failed(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """The radio fails the send and a full view (su 1000, userdebug) shows the FAILED row:
    the check fails, exit 1; the phone sent nothing (no SENT row) and the ledger holds the
    action FAILED, with its one attempt spent."""
    phone = await phone_factory(build_type="userdebug", faults=["send-fails"])
    ledger = tmp_path / "ledger.db"
    result, report = await doctor(
        ledger, adb_key_path, phone,
        "--read-as-system", "--send-test", RECIPIENT, "--send-path", "ui", "--wait", "15",
        "--report-wait", "1",
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    check = send_test_of(report)
    assert "fail" == check["verdict"], check
    assert "FAILED" in check["evidence"]
    assert [FAILED] == [row.type for row in doctor_rows(phone)]
    await phone.radio_idle()
    assert [] == [t for t in phone.transmissions if t.body.startswith(TEST_TEXT)]
    summary = await action_of(ledger, action_id_in(check["evidence"]))
    assert (Status.FAILED, 1) == (summary.status, len(summary.attempts))


async def test_a_send_sent_as_chat_is_not_proven(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """The app sends it as RCS chat, which never reaches the SMS provider: no row within
    --wait, so the check fails as unproven (never as success), exit 1, and the action stays
    open in the ledger."""
    phone = await phone_factory(android=14, faults=["rcs-send"])
    ledger = tmp_path / "ledger.db"
    result, report = await doctor(
        ledger, adb_key_path, phone, "--send-test", RECIPIENT, "--send-path", "ui", "--wait", "4"
    )
    assert 1 == result.exit_code, result.output
    check = send_test_of(report)
    assert "fail" == check["verdict"], check
    assert "Not proven within --wait" in check["consequence"]
    assert [] == doctor_rows(phone)
    summary = await action_of(ledger, action_id_in(check["evidence"]))
    assert summary.status in (Status.IN_FLIGHT, Status.UNKNOWN)


async def test_a_failing_check_sends_nothing(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """A locked screen fails its check: nothing is sent (the phone's store has no new row),
    no ledger is written, and the send-test check says why; the table names it too."""
    phone = await phone_factory(android=14, screen="locked")
    phone.store.insert_incoming("+12025550143", "hello", date_ms=1_700_000_000_000)
    before = [row.id for row in phone.store.rows()]
    ledger = tmp_path / "ledger.db"
    result, report = await doctor(ledger, adb_key_path, phone, "--send-test", RECIPIENT)
    assert 1 == result.exit_code, result.output
    check = send_test_of(report)
    assert "fail" == check["verdict"]
    assert "nothing sent, no action recorded: screen failed" == check["evidence"]
    assert before == [row.id for row in phone.store.rows()]
    assert not ledger.exists()
    table, _ = await doctor(ledger, adb_key_path, phone, "--send-test", RECIPIENT, json_out=False)
    assert 1 == table.exit_code
    assert "send-test" in [line.split()[0] for line in table.stdout.splitlines() if line.strip()]
    assert before == [row.id for row in phone.store.rows()]


async def test_the_policy_gate_applies_and_nothing_is_sent(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """A policy that denies the number stops the send test as it stops `send`: the check
    fails with the gate's words, exit 1, and the phone's store has no new row."""
    phone = await phone_factory(android=14)
    policy = tmp_path / "policy.toml"
    policy.write_text('[recipients]\ndeny = ["+1202*"]\n', encoding="utf-8")
    result, report = await doctor(
        tmp_path / "ledger.db", adb_key_path, phone,
        "--send-test", RECIPIENT, "--send-path", "framework", "--policy", str(policy),
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    check = send_test_of(report)
    assert "fail" == check["verdict"]
    assert "the policy gate denied it" in check["evidence"]
    assert [] == doctor_rows(phone)


@pytest.mark.parametrize(
    "argv",
    [
        ["--report-wait", "5"],
        ["--send-path", "framework"],
        ["--send-test", "not a number"],
        ["--send-test", "2025550100"],  # national, without --region
    ],
    ids=["report-wait-alone", "send-path-alone", "bad-number", "national-no-region"],
)
async def test_bad_send_test_input_is_a_usage_error(
    phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path, argv: list[str]
) -> None:
    """An option of the send test without --send-test, or a number that is not one: exit 2
    before anything is checked or sent."""
    result = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        ["--db", str(tmp_path / "l.db"), "doctor", "--device", phone.serial,
         "--key", str(adb_key_path), *argv],
        catch_exceptions=False,
    )  # fmt: skip
    assert 2 == result.exit_code, result.output
    assert [] == doctor_rows(phone)


async def test_a_national_number_with_region_is_sent_in_e164(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """--region reads a national number, as `send` does."""
    phone = await phone_factory(android=11)
    result, _ = await doctor(
        tmp_path / "ledger.db", adb_key_path, phone,
        "--send-test", "(202) 555-0100", "--region", "US", "--send-path", "framework",
        "--report-wait", "1",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert [RECIPIENT] == [row.address for row in doctor_rows(phone)]


@pytest.mark.parametrize(
    ("status", "report"),
    [
        (None, "none"), (-1, "none"), (0, "delivered"), (31, "delivered"),
        (32, "pending"), (63, "pending"), (64, "failed"), (127, "failed"),
    ],
)  # fmt: skip
def test_status_values_read_as_tp_status_ranges(status: int | None, report: str) -> None:
    """The status column holds the TP-Status: 0-31 completed, 32-63 still trying, 64 and above
    failed, -1 none."""
    assert report == delivery_report(status)


def test_a_row_out_of_sight_parses_as_none() -> None:
    """`No result found.` (the row not visible, or a rejected query) is no row, not a status."""
    assert parse_row(7, "No result found.\n", "No result found.\n") is None
    row = parse_row(
        7,
        "Row: 0 _id=7, type=2, status=32, error_code=-1, date=1700000000000\n",
        "Row: 0 _id=7, creator=com.android.shell\n",
    )
    assert row is not None
    assert (2, 32, "com.android.shell") == (row.type, row.status, row.creator)


def test_an_action_id_is_new_each_time_and_always_valid() -> None:
    """Two ids made in the same second differ, and a very long host name still makes an id
    the ledger takes (at most 200 characters)."""
    now = datetime.now(UTC)
    assert send_test_action_id("127.0.0.1:5555", now) != send_test_action_id("127.0.0.1:5555", now)
    long_id = send_test_action_id("h" * 250 + ":5555", now)
    assert long_id == check_action_id(long_id)


def test_ctrl_c_says_a_rerun_is_a_new_sms(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C during the send test exits 130 and says what is true: whether the SMS may be
    out, which action records it, and that rerunning doctor sends a new SMS."""
    with pytest.raises(SystemExit) as exited:
        tell_interrupted("doctor-x-1", dispatched=True)
    assert 130 == exited.value.code
    said = capsys.readouterr().err
    assert "may be out" in said and "starebrain status doctor-x-1" in said
    assert "sends a new SMS under a new id" in said


@pytest.mark.long(10)
@pytest.mark.parametrize("android", [11, 14])
async def test_the_apps_launch_path_is_reported_from_am_start(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path, android: int
) -> None:
    """A send test through the app reports how ``am start -W`` launched it (the check
    ``launch``): the activity of the default SMS app and its launch time; one through the
    framework says no app was launched and how to check the app's."""
    phone = await phone_factory(android=android)
    result, report = await doctor(
        tmp_path / "ledger.db", adb_key_path, phone,
        "--send-test", RECIPIENT, "--send-path", "ui", "--wait", "5", "--report-wait", "1",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    (launch,) = [check for check in report["checks"] if check["name"] == "launch"]
    assert "ok" == launch["verdict"], launch
    assert "Activity com.google.android.apps.messaging/" in launch["evidence"]
    assert "TotalTime " in launch["evidence"]
    assert "ActivityManagerShellCommand" in launch["source"]
    result, report = await doctor(
        tmp_path / "ledger.db", adb_key_path, phone,
        "--send-test", RECIPIENT, "--send-path", "framework", "--report-wait", "1",
    )  # fmt: skip
    (launch,) = [check for check in report["checks"] if check["name"] == "launch"]
    assert "framework path" in launch["evidence"]
    assert "--send-path ui" in launch["consequence"]
