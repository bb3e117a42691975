"""`starebrain doctor` against the simulated phone on Android 10 to 15, and against each fault
or configuration that makes one of its checks warn or fail."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from android_bridge import Device, ensure_key
from android_bridge._device import DeviceFacts
from android_bridge._doctor import (
    Probe,
    adb_expiry,
    checks,
    clock,
    fence,
    provider,
    sms_limit,
    worst,
)
from android_bridge._doctor_provider import (
    FRAMEWORK_SUB_ID,
    delivery_status,
    query_checker,
    sms_view,
)
from android_bridge._framework import FrameworkDispatcher
from android_bridge._shell import StepOutput
from starebrain_actions.cli.devices import DEVICE_ENV
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory

#: Every check, in the order doctor prints them.
CHECKS = [
    "adb-key",
    "connect",
    "shell-uid",
    "release",
    "identity",
    "isms",
    "clock",
    "sms-role",
    "rcs",
    "screen",
    "sms-limit",
    "sms-read",
    "mms-read",
    "sms-view",
    "query-checker",
    "subscriptions",
    "delivery-status",
    "fence",
    "adb-expiry",
    "framework-codes",
    "ledger",
    "send-path",
]


#: ro.build.version.sdk of each release (12L, 32, is not a release the simulator plays).
SDK = {10: 29, 11: 30, 12: 31, 13: 33, 14: 34, 15: 35}


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)


async def doctor(*argv: str, before: tuple[str, ...] = ()) -> tuple[Result, dict[str, Any]]:
    """Run `starebrain BEFORE doctor ARGV --json` in-process; its result and the report."""
    runner = CliRunner()
    result = await asyncio.to_thread(
        runner.invoke, main, [*before, "doctor", *argv, "--json"], catch_exceptions=False
    )
    return result, json.loads(result.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


@pytest.mark.parametrize("android", [10, 11, 12, 13, 14, 15])
async def test_doctor_passes_on_every_release(
    phone_factory: PhoneFactory, adb_key_path: Path, android: int
) -> None:
    """A phone as the product assumes it (screen on, a default SMS app, the fence free): no
    check fails, exit 0. Google Messages can send chat (warn), and an empty phone shows no row
    (warn): neither stops a send. Each check carries evidence, a source and a consequence."""
    phone = await phone_factory(android=android)
    phone.store.insert_incoming("+12025550143", "hello", date_ms=1_700_000_000_000)
    phone.store.insert_outgoing("+12025550143", "hi", date_ms=1_700_000_001_000, message_type=2)
    result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    assert 0 == result.exit_code, result.output
    assert CHECKS == [check["name"] for check in report["checks"]]
    assert "warn" == report["verdict"]
    checks_ = by_name(report)
    verdicts = {name: check["verdict"] for name, check in checks_.items()}
    assert {name: "ok" for name in CHECKS if name not in ("rcs", "mms-read")} == {
        name: verdict for name, verdict in verdicts.items() if name not in ("rcs", "mms-read")
    }
    assert "warn" == verdicts["rcs"]  # Google Messages, chat may be on
    assert "warn" == verdicts["mms-read"]  # no MMS on this phone
    assert f"sdk {SDK[android]};" in checks_["release"]["evidence"]
    # the role is read as a send reads it: `cmd role` from 14, the dump before
    source = "cmd role" if android >= 14 else "dumpsys role"
    assert f"(from {source})" in checks_["sms-role"]["evidence"]
    assert "604800000 ms (7 days)" in checks_["adb-expiry"]["evidence"]
    # the provider as AOSP shows it to the shell: types 1 and 2, SqlQueryChecker from 10 r30,
    # the subscription filter from 14
    assert "types 1 and 2 only (1 sent row(s) visible)" in checks_["sms-view"]["evidence"]
    assert "a sort with SELECT: refused" in checks_["query-checker"]["evidence"]
    filtered = "on" if android >= 14 else "off"
    assert f"filter {filtered} (sdk {SDK[android]})" in checks_["subscriptions"]["evidence"]
    assert "status -1 (1)" in checks_["delivery-status"]["evidence"]
    for check in report["checks"]:
        assert check["evidence"] and check["source"] and check["consequence"], check
        assert (
            "android-1" in check["source"] or "AOSP" in check["source"] or check["name"] in ("rcs",)
        ), check
    assert 1 == report["schema_version"]


@pytest.mark.parametrize(
    ("setup", "name", "verdict", "evidence"),
    [
        (dict(screen="locked"), "screen", "fail", "mIsShowing=true"),
        (dict(screen="off"), "screen", "fail", "mWakefulness=Asleep"),
        (dict(second_sms_app=True), "sms-role", "fail", "no holder"),
        (dict(clock_skew_ms=600_000), "clock", "warn", "skew +"),
        (dict(app="samsung"), "rcs", "warn", "com.samsung.android.messaging"),
        (dict(app="aosp"), "rcs", "ok", "com.android.messaging"),
        (dict(disable_adb_auth_timeout=True), "adb-expiry", "ok", "never expires"),
        (dict(root=True), "shell-uid", "ok", "uid 0"),
    ],
    ids=[
        "locked",
        "asleep",
        "no-default-app",
        "clock-skew",
        "samsung",
        "aosp",
        "no-expiry",
        "root",
    ],
)
async def test_each_fault_names_its_check(
    phone_factory: PhoneFactory,
    adb_key_path: Path,
    setup: dict[str, Any],
    name: str,
    verdict: str,
    evidence: str,
) -> None:
    """Each fault or configuration turns its own check, and the exit status follows the worst
    verdict: 1 when a check fails, 0 otherwise."""
    phone = await phone_factory(android=13, **setup)
    result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)[name]
    assert verdict == check["verdict"], check
    assert evidence in check["evidence"], check
    failed = [c["name"] for c in report["checks"] if c["verdict"] == "fail"]
    assert (1 if failed else 0) == result.exit_code
    if verdict == "fail":
        assert [name] == failed


async def test_a_fence_directory_the_shell_cannot_use_fails(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """A file where the fence's directory should be: the fence cannot claim a name, and the
    check says so (exit 1)."""
    phone = await phone_factory(android=11)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell("touch /data/local/tmp/starebrain")
    result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)["fence"]
    assert "fail" == check["verdict"], check
    assert 1 == result.exit_code


async def test_a_lower_sms_limit_on_the_phone_warns(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """An OEM (or a person) set Android's outgoing-SMS limit below the product's rate."""
    phone = await phone_factory(android=15)
    phone.system_state.global_settings["sms_outgoing_check_max_count"] = "10"
    result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)["sms-limit"]
    assert ("warn", "10 SMS per 60000 ms") == (check["verdict"], check["evidence"])
    assert 0 == result.exit_code


async def test_a_key_the_phone_has_not_authorised_fails_the_connection(
    phone_factory: PhoneFactory, tmp_path: Path
) -> None:
    """Another key than the phone knows: the connection check fails with what to do, and no
    phone check runs."""
    phone = await phone_factory(android=12)
    stranger = ensure_key(tmp_path / "stranger" / "adbkey")
    result, report = await doctor(
        "--device", phone.serial, "--key", str(stranger), "--timeout", "1"
    )
    assert 1 == result.exit_code
    assert ["adb-key", "connect"] == [check["name"] for check in report["checks"]]
    connect = by_name(report)["connect"]
    assert "fail" == connect["verdict"]
    assert "Allow" in connect["consequence"] or "reachable" in connect["consequence"]


async def test_no_device_is_a_usage_error() -> None:
    runner = CliRunner()
    result = await asyncio.to_thread(runner.invoke, main, ["doctor"], catch_exceptions=False)
    assert 2 == result.exit_code
    assert "--device" in result.output


async def test_the_table_names_every_check(phone_factory: PhoneFactory, adb_key_path: Path) -> None:
    phone = await phone_factory(android=14, screen="locked")
    runner = CliRunner()
    result = await asyncio.to_thread(
        runner.invoke,
        main,
        ["doctor", "--device", phone.serial, "--key", str(adb_key_path)],
        catch_exceptions=False,
    )
    assert 1 == result.exit_code
    first_words = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    for name in CHECKS:
        assert name in first_words, name
    assert "FAIL" in result.stdout


def step(output: str, status: int = 0) -> StepOutput:
    return StepOutput(output=output, exit_status=status)


def test_the_pure_checks_refuse_what_they_cannot_read() -> None:
    """A clock that printed no number, a provider that printed an error, a fence answer that
    is not the probe's: each fails rather than guess; an unparsable expiry warns."""
    assert "fail" == clock("date: bad format\n", 1000, 1010).verdict
    assert "fail" == provider("sms", step("Error while accessing provider:sms\n")).verdict
    assert "fail" == fence("permission denied\n").verdict
    assert "fail" == fence("1:1:1:0:\n").verdict  # mkdir and ln failed
    assert "fail" == fence("0:0:0:1:script/.\n").verdict  # a second ln -s succeeded
    assert "ok" == fence("0:0:1:1:script/.\n").verdict
    assert "warn" == adb_expiry("Exception: boom\n").verdict
    assert "0: the authorisation never expires" == adb_expiry("0\n").evidence
    assert "ok" == sms_limit("null\n", "null\n").verdict
    assert "warn" == sms_limit("30\n", "120000\n").verdict  # 15 a minute
    assert "ok" == sms_limit("1000\n", "null\n").verdict


def test_the_clock_skew_is_measured_against_the_middle_of_the_round_trip() -> None:
    check = clock("1700000065000\n", 1_700_000_000_000, 1_700_000_000_100)
    assert "skew +64950 ms (±50 ms)" in check.evidence
    assert "warn" == check.verdict
    assert "ok" == clock("1700000000050\n", 1_700_000_000_000, 1_700_000_000_100).verdict


def test_worst_of_no_checks_is_ok() -> None:
    assert "ok" == worst([])
    assert callable(checks) and Probe  # the pure entry points the command builds on


@pytest.mark.parametrize("android", [13, 14])
async def test_the_subscription_filter_hides_a_removed_sims_rows_from_14(
    phone_factory: PhoneFactory, adb_key_path: Path, android: int
) -> None:
    """A row of subscription 3, a SIM the phone no longer has: seen up to 13, hidden from 14
    (ProviderUtil.getSelectionBySubIds), and the check says which."""
    phone = await phone_factory(android=android, sim_sub_ids=(1,))
    phone.store.insert_incoming("+12025550143", "now", date_ms=1_700_000_000_000, sub_id=1)
    phone.store.insert_incoming("+12025550144", "then", date_ms=1_700_000_001_000, sub_id=3)
    result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)["subscriptions"]
    assert "ok" == check["verdict"], check
    if android >= 14:
        assert (
            "filter on (sdk 34); sub_id of the latest 1 row(s): 1 (1); the phone's SIMs"
            " (dumpsys isub): slot 0: 1, default SMS 1" == check["evidence"]
        )
        assert "SIM since removed is hidden" in check["consequence"]
    else:
        assert (
            "filter off (sdk 33); sub_id of the latest 2 row(s): 1 (1), 3 (1)"
            == (check["evidence"])
        )
        assert "rows of every SIM ever used" in check["consequence"]
    assert 0 == result.exit_code


@pytest.mark.parametrize("android", [12, 15])
async def test_a_sim_that_is_not_subscription_1_warns(
    phone_factory: PhoneFactory, adb_key_path: Path, android: int
) -> None:
    """The phone's SIM is subscription 2 (a second SIM ever inserted): the framework path
    sends on 1, which the framework drops silently, so the check warns and names the app
    path."""
    phone = await phone_factory(android=android, sim_sub_ids=(2,))
    phone.store.insert_incoming("+12025550143", "hello", date_ms=1_700_000_000_000, sub_id=2)
    result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)["subscriptions"]
    assert "warn" == check["verdict"], check
    assert "2 (1)" in check["evidence"]
    assert "--send-path ui" in check["consequence"]
    assert 0 == result.exit_code


async def test_reads_through_su_1000_see_the_types_the_restricted_view_hides(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """A failed row (type 5) is hidden from the shell, as AOSP's sms_restricted view hides
    it; read through `su 1000` it shows, and SqlQueryChecker does not apply to the system
    uid."""
    phone = await phone_factory(android=13, build_type="userdebug")
    phone.store.insert_outgoing("+12025550143", "sent", date_ms=1_700_000_000_000, message_type=2)
    failed = phone.store.insert_outgoing(
        "+12025550143", "lost", date_ms=1_700_000_001_000, message_type=5
    )
    argv = ("--device", phone.serial, "--key", str(adb_key_path))
    _, report = await doctor(*argv)
    checks_ = by_name(report)
    assert ("ok", "types 1 and 2 only (1 sent row(s) visible), as AOSP's restricted view") == (
        checks_["sms-view"]["verdict"],
        checks_["sms-view"]["evidence"],
    )
    assert "refused" in checks_["query-checker"]["evidence"]
    result, report = await doctor(*argv, before=("--read-as-system",))
    checks_ = by_name(report)
    assert "ok" == checks_["sms-view"]["verdict"]
    assert (
        f"through su 1000: 1 sent row(s); a type 5 row (_id {failed}) visible"
        == (checks_["sms-view"]["evidence"])
    )
    assert ("ok", "a sort with SELECT: answered through su 1000") == (
        checks_["query-checker"]["verdict"],
        checks_["query-checker"]["evidence"],
    )
    assert 0 == result.exit_code


async def test_delivery_evidence_is_told_per_writing_path(
    phone_factory: PhoneFactory, adb_key_path: Path
) -> None:
    """Sent rows of the framework path (creator com.android.shell, no delivery report asked:
    status -1) and of an app with delivery reports on (status 0, complete): the check says
    which path writes `status`."""
    phone = await phone_factory(android=14)
    common = dict(address="+12025550143", type=2, sub_id=1, date=1_700_000_000_000)
    phone.store.insert(body="a", status=-1, creator="com.android.shell", **common)
    phone.store.insert(body="b", status=0, creator="com.google.android.apps.messaging", **common)
    phone.store.insert(body="c", status=32, creator="com.google.android.apps.messaging", **common)
    _, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)["delivery-status"]
    assert "ok" == check["verdict"], check
    assert (
        "com.android.shell (framework): status -1 (1);"
        " com.google.android.apps.messaging (app): status 0 (1), 32 (1)"
    ) == check["evidence"]
    assert check["consequence"].startswith(
        "com.google.android.apps.messaging writes it (delivery reports on)"
    )


def test_the_provider_checks_judge_what_differs_from_aosp() -> None:
    """A restricted view that shows a failed row, a provider that runs a query with SELECT,
    a phone with no row to compare with, creators that changed mid-read: each warns, none
    fails, and none turns into a proof."""
    shell = DeviceFacts(mode="shell", uid=2000, region=None, sdk=34)
    hidden = step("Row: 0 _id=9, type=5\n")
    sent = step("Row: 0 _id=8, status=-1, sub_id=1\n")
    assert "warn" == sms_view(shell, hidden, sent).verdict
    assert "warn" == sms_view(shell, step("No result found.\n"), step("No result found.\n")).verdict
    latest = step("Row: 0 _id=9, date=1700000000000\n")
    answered = query_checker(shell, latest, step("Row: 0 _id=9\n"))
    assert "warn" == answered.verdict
    assert answered.evidence.startswith("a sort with SELECT: answered: no checker")
    assert "ok" == query_checker(shell, latest, step("No result found.\n")).verdict
    assert "warn" == query_checker(shell, step("No result found.\n"), step("")).verdict
    moved = delivery_status(sent, step("Row: 0 _id=7, creator=com.android.shell\n"))
    assert "warn" == moved.verdict
    assert "ok" == delivery_status(sent, step("Row: 0 _id=8, creator=com.android.shell\n")).verdict


def test_the_framework_path_sends_on_the_subscription_the_check_compares() -> None:
    default = inspect.signature(FrameworkDispatcher).parameters["sub_id"].default
    assert FRAMEWORK_SUB_ID == default


def test_the_docs_table_names_every_check() -> None:
    """docs/cli.md's doctor table has a row for every check doctor prints."""
    docs = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = docs[docs.index("## `doctor`") :]
    section = section[: section.index("\n## ", 1)]
    for name in CHECKS:
        assert f"`{name}`" in section, name


@pytest.mark.parametrize(
    ("android", "sims", "verdict", "shown"),
    [
        (14, (1,), "ok", "the phone's SIMs (dumpsys isub): slot 0: 1, default SMS 1"),
        (15, (2, 1), "ok", "slot 0: 2, slot 1: 1, default SMS 2"),
        (14, (2,), "warn", "slot 0: 2, default SMS 2"),
        (13, (2,), "ok", None),
    ],
    ids=["14-sim-1", "15-dual-sim", "14-no-sim-1", "13-not-read"],
)
async def test_the_phones_own_subscriptions_are_read_from_14(
    phone_factory: PhoneFactory,
    adb_key_path: Path,
    android: int,
    sims: tuple[int, ...],
    verdict: str,
    shown: str | None,
) -> None:
    """From Android 14 the check reads the phone's own SIMs (``dumpsys isub``'s slot mapping
    and default SMS subscription): a phone without subscription 1, the one the framework path
    sends on, is warned of before any row says so (frameworks/opt/telephony
    SubscriptionManagerService.dump, read in the Android 14 SDK's sources, android-34; 15 not
    read). Before 14 the dump is not read (its format is SubscriptionController's, not
    modelled), and an empty phone's rows say nothing."""
    phone = await phone_factory(android=android, sim_sub_ids=sims)
    _result, report = await doctor("--device", phone.serial, "--key", str(adb_key_path))
    check = by_name(report)["subscriptions"]
    assert verdict == check["verdict"], check
    if shown is None:
        assert "dumpsys isub" not in check["evidence"], check
    else:
        assert shown in check["evidence"], check
    if verdict == "warn":
        assert "does not have" in check["consequence"], check
