"""`starebrain devices`, `$STAREBRAIN_DEVICE`, and phones named ``usb:SERIAL``."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import ActionRecord, Ledger, RetryPolicy, SmsIntent, fail_delivery
from starebrain_actions.cli.devices import (
    DEVICE_ENV,
    CheckVerdict,
    doctor_line,
    lease_holders,
    role_fields,
)
from starebrain_actions.cli.main import main
from starebrain_actions.core.model import ReviewReason
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT
from tests.e2e.test_cli_doctor import CHECKS

#: doctor's checks of the phone in its probe round trip, which devices runs too (not the
#: key's, the connection's, nor framework-codes, which pulls framework.jar in a round trip of
#: its own).
PHONE_CHECKS = [
    name
    for name in CHECKS
    if name not in ("adb-key", "connect", "framework-codes", "send-path", "ledger")
]

SENT = 2


async def cli(*argv: str, env: dict[str, str] | None = None) -> Result:
    """Run `starebrain ARGV` in-process, off the simulated phones' event loop."""
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, main, list(argv), env=env, catch_exceptions=False)


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests set $STAREBRAIN_DEVICE themselves when they mean to."""
    monkeypatch.delenv(DEVICE_ENV, raising=False)


@pytest.fixture
def no_usb_support(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``libusb1`` unimportable, as it is without the ``[usb]`` extra."""
    monkeypatch.setitem(sys.modules, "usb1", None)
    monkeypatch.delitem(sys.modules, "adb_shell.transport.usb_transport", raising=False)


async def hold_lease(ledger_path: Path, device: str, action_id: str) -> ActionRecord:
    """Create an action and an unresolved attempt of it on ``device`` (it takes the lease)."""
    async with Ledger.open(ledger_path) as ledger:
        await ledger.create_action(
            action_id,
            SmsIntent(recipient=RECIPIENT, body=BODY),
            RetryPolicy(
                settle_after=timedelta(milliseconds=300),
                framework_settle_after=timedelta(milliseconds=200),
            ),
        )
        return await ledger.begin_attempt(action_id, device)


async def resolved_attempt(ledger_path: Path, device: str, action_id: str) -> None:
    """Create an action whose only attempt on ``device`` FAILED (no lease)."""
    record = await hold_lease(ledger_path, device, action_id)
    async with Ledger.open(ledger_path) as ledger:
        await ledger.apply(fail_delivery(record, reason="test", now=ledger.now()))


async def test_devices_reports_release_sms_app_and_answer(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """A named phone: no ledger's key yet, its identity (ANDROID_ID), it answers, its release
    and API level, its default SMS app and how it was read (Android 13 has no `cmd role
    get-role-holders`: the `dumpsys role` parse); exit 0, and no ledger is created."""
    phone = await phone_factory(android=13, app="samsung")
    result = await cli(
        "--db", str(ledger_path), "devices", "--device", phone.serial, "--key", str(adb_key_path)
    )
    assert 0 == result.exit_code, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith(phone.serial))
    expected = [
        "-", f"android_id:{phone.android_id}", "yes", "13", "(API", "33)",
        "com.samsung.android.messaging", "dumpsys", "role", "ui", "5", "warn", "free", "-", "-",
    ]  # fmt: skip
    # doctor's warnings on an empty phone with Samsung Messages: chat may be on, no SMS or MMS
    # row to read, no sent row to see the view by, no row to try SqlQueryChecker on
    assert expected == row.split()[1:]
    assert not ledger_path.exists()


async def test_devices_says_which_path_auto_would_take_and_why(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """The column ``auto path`` is the choice a send with ``--send-path auto`` makes now: the
    app until a framework send on this build came back as the shell's row, the framework
    after it, and the app again on another build of the phone (ro.build.fingerprint)."""
    phone = await phone_factory(android=14)
    base = ["--db", str(ledger_path)]
    device = ["--device", phone.serial, "--key", str(adb_key_path)]

    async def auto_path() -> tuple[str, str]:
        result = await cli(*base, "devices", *device, "--json")
        assert 0 == result.exit_code, result.output
        (report,) = json.loads(result.stdout)["devices"]
        return report["auto_send_path"], report["auto_send_path_why"]

    path, why = await auto_path()
    assert ("ui", True) == (path, "no ledger" in why)
    sent = await cli(
        *base, "send", *device, "--to", RECIPIENT, "--body", BODY, "--send-path", "framework",
        "--action-id", "proof-1", "--wait", "10",
    )  # fmt: skip
    assert 0 == sent.exit_code, sent.output
    path, why = await auto_path()
    assert ("framework", True) == (path, "proof-1" in why)
    phone.build_type = "eng"
    path, why = await auto_path()
    assert ("ui", True) == (path, "no framework send" in why)


async def test_devices_shows_the_jar_proof_a_send_kept_and_pulls_no_jar_itself(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """``devices`` writes nothing and pulls no jar: before any send it says the build's jar was
    not read yet; after one ``auto`` send (which read the jar and kept its codes in the
    ledger, and went through the framework) it says the jar proves the code, without asking
    the phone for its jar again."""
    phone = await phone_factory(android=15)
    base = ["--db", str(ledger_path)]
    device = ["--device", phone.serial, "--key", str(adb_key_path)]
    sent = await cli(
        *base, "send", *device, "--to", RECIPIENT, "--body", BODY, "--action-id", "first",
        "--wait", "10",
    )  # fmt: skip
    assert sent.exit_code in (0, 6), sent.output
    out = await phone.wait_transmissions(then_idle=True)
    assert ["com.android.shell"] == [transmission.app for transmission in out]
    pulls = sum("base64 /system/framework/framework.jar" in c for c in phone.commands_run)
    async with Ledger.open(ledger_path) as ledger:
        (kept,) = (await ledger.all_framework_codes()).values()
    # another ledger holding the codes and no send: the jar's proof alone
    other = ["--db", str(ledger_path.with_name("other.db"))]
    async with Ledger.open(ledger_path.with_name("other.db")) as ledger:
        await ledger.keep_framework_codes(kept)
    result = await cli(*other, "devices", *device, "--json")
    assert 0 == result.exit_code, result.output
    (report,) = json.loads(result.stdout)["devices"]
    assert "framework" == report["auto_send_path"]
    assert "framework.jar proves sendTextForSubscriber code 5" in report["auto_send_path_why"]
    phone.build_type = "eng"  # another build: nothing kept for it
    result = await cli(*other, "devices", *device, "--json")
    (report,) = json.loads(result.stdout)["devices"]
    assert ("ui", True) == (
        report["auto_send_path"],
        "not read yet" in report["auto_send_path_why"],
    )
    after = sum("base64 /system/framework/framework.jar" in c for c in phone.commands_run)
    assert (1, 1) == (pulls, after)


async def test_devices_json_on_android_10_reads_the_role_dump_not_the_setting(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """Android 10 has no `cmd role get-role-holders`: the holder is user 0's in `dumpsys
    role`, as the send script reads it, never the stale `sms_default_application` setting
    (here naming Google Messages, the default before an upgrade from Android 9)."""
    phone = await phone_factory(
        android=10, app="aosp", sms_default_setting="com.google.android.apps.messaging"
    )
    result = await cli(
        "--db", str(ledger_path), "devices", "--device", phone.serial,
        "--key", str(adb_key_path), "--json",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    data = json.loads(result.stdout)
    (row,) = data["devices"]
    checks = {check["name"]: check["verdict"] for check in row.pop("checks")}
    assert "ok" == checks["rcs"]  # AOSP Messaging: no chat
    assert {"sms-read", "mms-read", "sms-view", "query-checker"} == {
        name for name, verdict in checks.items() if verdict == "warn"
    }  # an empty phone
    assert {
        "device": phone.serial,
        "phone": None,
        "identity": f"android_id:{phone.android_id}",
        "aliases": [],
        "note": None,
        "answers": True,
        "android_release": "10",
        "sdk": 29,
        "sms_app": "com.android.messaging",
        "sms_app_source": "dumpsys role",
        "sms_app_note": None,
        "named": True,
        "in_ledger": False,
        "lease": None,
        "worker": None,
        "error": None,
        "shell_uid": 2000,
        "build": "starebrain/sb_sim/sbsim:10/QQ3A.200805.001/11269751:user/release-keys",
        "auto_send_path": "ui",
        # no ledger yet: nothing can prove the framework path
        "auto_send_path_why": "no ledger to prove the framework path by",
        "framework": None,
        "doctor": "4 warn",
    } == row
    assert (1, 0) == (data["answered"], data["exit_code"])
    assert 1 == data["schema_version"]


async def test_no_default_sms_app_is_said(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """Two SMS apps and no default: the row says none (a send would be refused), and the
    role was read (by cmd role on 15, from dumpsys role on 12)."""
    for android, source in ((15, "cmd role"), (12, "dumpsys role")):
        phone = await phone_factory(android=android, second_sms_app=True)
        result = await cli(
            "--db", str(ledger_path), "devices", "--device", phone.serial,
            "--key", str(adb_key_path), "--json",
        )  # fmt: skip
        assert 0 == result.exit_code, result.output
        (row,) = json.loads(result.stdout)["devices"]
        assert (True, None, source, None) == (
            row["answers"], row["sms_app"], row["sms_app_source"], row["sms_app_note"]
        )  # fmt: skip


async def test_ledger_phones_with_lease_holder_and_one_that_does_not_answer(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path, closed_port: int
) -> None:
    """Without --device: every phone the ledger's attempts name; the one holding an
    unresolved attempt shows it (action, attempt, dispatch id), the unreachable one is a row
    saying why; exit 0 since one answered and none was named."""
    holder = await hold_lease(ledger_path, phone.serial, "otp-lease")
    gone = f"127.0.0.1:{closed_port}"
    await resolved_attempt(ledger_path, gone, "otp-old")
    result = await cli("--db", str(ledger_path), "devices", "--key", str(adb_key_path))
    assert 0 == result.exit_code, result.output
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert {phone.serial, gone} == set(lines)
    assert f"otp-lease attempt 1 ({holder.dispatch_id})" in lines[phone.serial]
    # the ledger's key of each (the address it was reached at), the identity only the phone
    # that answered could give
    assert [phone.serial, f"android_id:{phone.android_id}", "yes"] == lines[phone.serial].split()[
        1:4
    ]
    assert [gone, "-", "NO", "-"] == lines[gone].split()[1:5]
    assert "refused" in lines[gone].lower()
    as_json = await cli("--db", str(ledger_path), "devices", "--key", str(adb_key_path), "--json")
    data = json.loads(as_json.stdout)
    by_device = {row["device"]: row for row in data["devices"]}
    assert {
        "action_id": "otp-lease",
        "dispatch_id": holder.dispatch_id,
        "attempt": 1,
        "since": by_device[phone.serial]["lease"]["since"],
    } == by_device[phone.serial]["lease"]
    assert by_device[phone.serial]["lease"]["since"].endswith("Z")
    assert (None, False) == (by_device[gone]["lease"], by_device[gone]["answers"])
    assert by_device[gone]["in_ledger"] and not by_device[gone]["named"]


async def test_a_named_phone_that_does_not_answer_is_exit_1(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path, closed_port: int
) -> None:
    """Every phone named with --device must answer for exit 0, even when another did."""
    result = await cli(
        "--db", str(ledger_path), "devices", "--key", str(adb_key_path),
        "--device", phone.serial, "--device", f"127.0.0.1:{closed_port}",
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    assert 3 == len(result.stdout.splitlines())


async def test_a_phone_that_has_not_authorised_the_key_does_not_answer(
    phone_factory: PhoneFactory, ledger_path: Path, tmp_path: Path
) -> None:
    """A key the phone does not know: the row says it did not answer, within the timeout."""
    phone = await phone_factory()
    stranger = tmp_path / "stranger" / "adbkey"
    assert 0 == (await cli("key", "new", "--key", str(stranger))).exit_code
    started = asyncio.get_running_loop().time()
    result = await cli(
        "--db", str(ledger_path), "devices", "--device", phone.serial,
        "--key", str(stranger), "--timeout", "0.5", "--json",
    )  # fmt: skip
    assert 1 == result.exit_code, result.output
    assert asyncio.get_running_loop().time() - started < 5
    (row,) = json.loads(result.stdout)["devices"]
    assert (False, phone.serial) == (row["answers"], row["device"])
    assert row["error"]


def test_no_phone_known_is_exit_1_with_the_hint(tmp_path: Path) -> None:
    """No ledger and no --device: one line saying how to name a phone; exit 1."""
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db"), "devices"])
    assert 1 == result.exit_code
    assert "--device HOST:PORT" in result.stderr and DEVICE_ENV in result.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(
    "command",
    [
        ("send", "--to", RECIPIENT, "--body", BODY),
        ("send", "--to", RECIPIENT, "--body", BODY, "--json"),
        ("worker",),
        ("resume",),
    ],
)
def test_no_phone_names_both_ways_to_give_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    """A command that needs a phone and got none is a usage error (exit 2) naming --device
    and $STAREBRAIN_DEVICE (issue 36: it named --device only); nothing is created."""
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db"), *command])
    assert 2 == result.exit_code, result.output
    said = result.stdout if "--json" in command else result.stderr
    assert "Missing option '--device'" in said
    assert f"${DEVICE_ENV}" in said
    assert not (tmp_path / "none.db").exists()


async def test_device_variable_names_the_phones(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """$STAREBRAIN_DEVICE (several separated by spaces) stands for --device."""
    first, second = await phone_factory(), await phone_factory(android=12)
    result = await cli(
        "--db", str(ledger_path), "devices", "--key", str(adb_key_path), "--json",
        env={DEVICE_ENV: f"{first.serial} {second.serial}"},
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    rows = json.loads(result.stdout)["devices"]
    assert [(first.serial, True, "15"), (second.serial, True, "12")] == [
        (row["device"], row["named"], row["android_release"]) for row in rows
    ]


async def test_send_and_reconcile_take_the_device_from_the_variable(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """`send` without --device sends through $STAREBRAIN_DEVICE; `reconcile` reads it."""
    env = {DEVICE_ENV: phone.serial}
    sent = await cli(
        "--db", str(ledger_path), "send", "--to", RECIPIENT, "--body", BODY,
        "--key", str(adb_key_path), "--json", env=env,
    )  # fmt: skip
    assert 0 == sent.exit_code, sent.output
    assert [phone.serial] == [a["device"] for a in json.loads(sent.stdout)["attempts"]]
    assert [BODY] == [row.body for row in phone.store.rows(types=[SENT])]
    read = await cli(
        "--db", str(ledger_path), "reconcile", "--key", str(adb_key_path), "--json", env=env
    )
    assert 0 == read.exit_code, read.output
    assert [phone.serial] == [report["device"] for report in json.loads(read.stdout)["devices"]]


@pytest.mark.parametrize("value", ["usb:", "usb:ABC 123", "usb:-lead", "usb:a/b", "phone"])
def test_malformed_device_names_are_exit_2(ledger_path: Path, value: str) -> None:
    """A malformed HOST:PORT or usb:SERIAL, from the option or the variable, is a usage
    error (exit 2) naming what is expected; nothing is recorded."""
    message = ["--to", RECIPIENT, "--body", BODY]
    for argv, env in (
        (["send", "--device", value, *message], {}),
        (["send", *message], {DEVICE_ENV: value}),
        (["devices", "--device", value], {}),
        (["reconcile"], {DEVICE_ENV: value}),
    ):
        result = CliRunner().invoke(main, ["--db", str(ledger_path), *argv], env=env)
        assert 2 == result.exit_code, (argv, env, result.output)
        assert "usb:SERIAL" in result.stderr
    assert not ledger_path.exists()


def test_usb_phone_without_the_extra_says_what_to_install(
    no_usb_support: None, ledger_path: Path, adb_key_path: Path
) -> None:
    """Without `starebrain-actions[usb]`, a usb:SERIAL phone is a clear error: `send` exits 1
    having recorded no action, `devices` shows the row and exits 1."""
    sent = CliRunner().invoke(
        main,
        ["--db", str(ledger_path), "send", "--device", "usb:0123456789ABCDEF", "--to", RECIPIENT,
         "--body", BODY, "--key", str(adb_key_path), "--wait", "2"],
    )  # fmt: skip
    assert 1 == sent.exit_code, sent.output
    assert "pip install 'starebrain-actions[usb]'" in sent.stderr
    listed = CliRunner().invoke(
        main,
        ["--db", str(ledger_path), "devices", "--device", "usb:0123456789ABCDEF",
         "--key", str(adb_key_path), "--json"],
    )  # fmt: skip
    assert 1 == listed.exit_code, listed.output
    (row,) = json.loads(listed.stdout)["devices"]
    assert row["in_ledger"] is False  # the failed send recorded no attempt
    assert "pip install 'starebrain-actions[usb]'" in row["error"]


GOOGLE = "com.google.android.apps.messaging"
UNREAD = (
    "cmd role get-role-holders exited 255 and dumpsys role showed no SMS role for user 0"
    " (awk exited 1)"
)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (f"0:0:{GOOGLE}\n", (GOOGLE, "cmd role", None)),
        ("255:0:com.android.messaging\n", ("com.android.messaging", "dumpsys role", None)),
        ("0:0:\n", (None, "cmd role", None)),
        ("255:0:\n", (None, "dumpsys role", None)),
        ("0:0:a.sms;b.sms\n", (None, "cmd role", "cmd role gave 'a.sms;b.sms', not one package")),
        ("255:1:\n", (None, None, UNREAD)),
        ("Error: boom\n", (None, None, "unreadable answer 'Error: boom'")),
    ],
)
def test_role_read_fields(output: str, expected: tuple[str | None, str | None, str | None]) -> None:
    """What the role read prints (`t:d:holders`): one package and how it was read (cmd role
    exited 0, or user 0's SMS role was in the dump), none, or why no package came out."""
    fields = role_fields(output)
    assert expected == (fields["sms_app"], fields["sms_app_source"], fields["sms_app_note"])


def test_unverified_attempts_do_not_hold_the_lease() -> None:
    """An UNVERIFIED or RCS_SUSPECTED attempt is unresolved but has released its phone (the
    ledger's lease index); the other unresolved attempt is the holder."""
    now = datetime.now(UTC)

    def record(action_id: str, reason: ReviewReason | None) -> ActionRecord:
        return ActionRecord(
            action_id=action_id,
            dispatch_id=f"d-{action_id}",
            attempt=1,
            device="127.0.0.1:5555",
            dispatched_at=now,
            review_reason=reason,
        )

    holders = lease_holders(
        [record("late", ReviewReason.UNVERIFIED), record("chat", ReviewReason.RCS_SUSPECTED)]
    )
    assert {} == holders
    holders = lease_holders([record("late", ReviewReason.UNVERIFIED), record("now", None)])
    assert "now" == holders["127.0.0.1:5555"].action_id


DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


def docs_sample(command: str) -> tuple[list[str], list[str]]:
    """The lines docs/cli.md shows after ``$ command`` up to the next prompt, and the lines
    after that, up to the end of the block."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"$ {command}") + 1
    end = lines.index("```", start)
    prompt = next((i for i in range(start, end) if lines[i].startswith("$ ")), end)
    return lines[start:prompt], lines[prompt:end]


def tokens(line: str, names: dict[str, str]) -> list[str]:
    """``line`` split on whitespace, with device names, dispatch ids and times made generic."""
    for real, generic in names.items():
        line = line.replace(real, generic)
    return re.sub(TIME, "<time>", re.sub(UUID, "<dispatch>", line)).split()


async def test_docs_sample_of_devices_is_what_it_prints(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path, closed_port: int
) -> None:
    """docs/cli.md's `devices` sample, ports, ids and times aside, is the real output: the
    header, the answering phone with its lease, and the unreachable one (error text aside)."""
    await hold_lease(ledger_path, phone.serial, "otp-1001")
    gone = f"127.0.0.1:{closed_port}"
    await resolved_attempt(ledger_path, gone, "otp-old")
    result = await cli("--db", str(ledger_path), "devices", "--key", str(adb_key_path))
    names = {phone.serial: "PHONE", gone: "GONE"}
    documented, after = docs_sample("starebrain devices")
    doc_names = {"127.0.0.1:5557": "PHONE", "127.0.0.1:5559": "GONE"}
    header, *rows = [tokens(line, names) for line in result.stdout.splitlines()]
    # the ledger's phones are listed sorted by address: the test's ports decide the order
    actual = [header, *sorted(rows, key=lambda row: row[0] != "PHONE")]
    expected = [tokens(line, doc_names) for line in documented]
    assert 0 == result.exit_code, result.output
    assert expected[0] == actual[0]
    assert expected[1][2].startswith("android_id:")
    assert actual[1][2] == f"android_id:{phone.android_id}"
    assert expected[1][:2] + expected[1][3:] == actual[1][:2] + actual[1][3:]
    assert expected[2][:11] == actual[2][:11]
    assert "GONE:" == actual[2][11]
    assert ["$ echo $?", "0"] == after


def documented_fields(heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``### heading``."""
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^#|\Z)", text, re.S | re.M)
    assert match is not None, heading
    return {
        name
        for line in match.group(1).splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([^`]+)`", line.split("|")[1])
    }


async def test_devices_json_fields_are_the_documented_ones(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """`devices --json` prints exactly the fields docs/cli.md lists (Devices, Device)."""
    await hold_lease(ledger_path, phone.serial, "otp-1001")
    result = await cli("--db", str(ledger_path), "devices", "--key", str(adb_key_path), "--json")
    data = json.loads(result.stdout)
    assert documented_fields("Devices") == set(data)
    assert documented_fields("Device") == set(data["devices"][0])
    assert {"action_id", "dispatch_id", "attempt", "since"} == set(data["devices"][0]["lease"])


async def test_an_empty_postgresql_schema_is_no_ledger_yet_as_a_missing_file_is(
    phone_factory: PhoneFactory, pg_url: str, adb_key_path: Path
) -> None:
    """Issue 13, one behaviour on both backends: ``devices`` on a PostgreSQL schema that holds
    no ledger yet probes the named phone, exit 0, as on a SQLite file that does not exist yet,
    and creates nothing in the schema."""
    phone = await phone_factory()
    result = await cli(
        "--db", pg_url, "devices", "--device", phone.serial, "--key", str(adb_key_path)
    )
    assert 0 == result.exit_code, result.output
    assert any(line.startswith(phone.serial) for line in result.stdout.splitlines())
    raw = await asyncpg.connect(pg_url)
    try:
        tables = await raw.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    finally:
        await raw.close()
    assert 0 == tables


async def test_devices_sums_up_doctors_checks_without_changing_its_exit_status(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """A locked phone answers (exit 0, as before), and its `doctor` column names the failing
    check; `--json` carries every check's name and verdict, the same as `doctor` gives."""
    locked = await phone_factory(android=13, screen="locked")
    fine = await phone_factory(android=14, app="aosp")
    fine.store.insert_incoming("+12025550143", "hello", date_ms=1_700_000_000_000)
    fine.store.insert_outgoing("+12025550143", "hi", date_ms=1_700_000_001_000, message_type=2)
    fine.store.insert_incoming_mms("+12025550143", "pic", date_ms=1_700_000_002_000)
    argv = ["--key", str(adb_key_path)]
    result = await cli("devices", "--device", locked.serial, "--device", fine.serial, *argv)
    assert 0 == result.exit_code, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert "  FAIL: screen  " in rows[locked.serial]
    assert "  ok  " in rows[fine.serial]
    result = await cli("devices", "--device", locked.serial, *argv, "--json")
    device = json.loads(result.stdout)["devices"][0]
    assert "FAIL: screen" == device["doctor"]
    doctor = await cli("doctor", "--device", locked.serial, *argv, "--json")
    verdicts = {check["name"]: check["verdict"] for check in json.loads(doctor.stdout)["checks"]}
    # the phone's checks of doctor's probe round trip (not the key's, nor the connection's)
    assert [name for name in PHONE_CHECKS] == [check["name"] for check in device["checks"]]
    assert [verdicts[name] for name in PHONE_CHECKS] == [
        check["verdict"] for check in device["checks"]
    ]


def test_the_doctor_line_names_failures_and_counts_warnings() -> None:
    def line(*verdicts: str) -> str:
        return doctor_line([CheckVerdict(name=f"c{i}", verdict=v) for i, v in enumerate(verdicts)])

    assert "ok" == line("ok", "ok")
    assert "ok" == line()
    assert "2 warn" == line("warn", "ok", "warn")
    assert "FAIL: c1, c2" == line("warn", "fail", "fail")


async def test_a_named_phone_is_the_only_one_asked(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """`devices --device A` asks A alone, though the ledger knows B too (issue 36): B runs no
    command and has no row; without --device both are asked."""
    named, other = await phone_factory(), await phone_factory()
    await resolved_attempt(ledger_path, named.serial, "otp-a")
    await resolved_attempt(ledger_path, other.serial, "otp-b")
    argv = ["--db", str(ledger_path), "devices", "--key", str(adb_key_path)]
    result = await cli(*argv, "--device", named.serial)
    assert 0 == result.exit_code, result.output
    assert [named.serial] == [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert [] == other.commands_run
    result = await cli(*argv)
    assert 0 == result.exit_code, result.output
    listed = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert sorted([named.serial, other.serial]) == listed
    assert [] != other.commands_run
