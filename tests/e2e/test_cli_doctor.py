"""`starebrain doctor` against the simulated phone on Android 10 to 15, and against each fault
or configuration that makes one of its checks warn or fail."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from android_bridge import Device, ensure_key
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
    "fence",
    "adb-expiry",
]


#: ro.build.version.sdk of each release (12L, 32, is not a release the simulator plays).
SDK = {10: 29, 11: 30, 12: 31, 13: 33, 14: 34, 15: 35}


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)


async def doctor(*argv: str) -> tuple[Result, dict[str, Any]]:
    """Run `starebrain doctor ARGV --json` in-process; its result and the report."""
    runner = CliRunner()
    result = await asyncio.to_thread(
        runner.invoke, main, ["doctor", *argv, "--json"], catch_exceptions=False
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
