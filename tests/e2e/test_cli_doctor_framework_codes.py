"""`starebrain doctor`'s framework-codes check through the CLI against the simulated phone:
ok where the phone's own DEX proves the bridge's code, a failing run where it proves another,
a warning with the reason where it proves nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from starebrain_actions.cli.devices import DEVICE_ENV
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)


async def framework_codes(serial: str, key: Path) -> tuple[int, dict[str, Any]]:
    """Run `starebrain doctor --json`; its exit status and the framework-codes check."""
    result = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        ["doctor", "--device", serial, "--key", str(key), "--json"],
        catch_exceptions=False,
    )
    report = json.loads(result.stdout)
    found = [check for check in report["checks"] if check["name"] == "framework-codes"]
    assert 1 == len(found)
    return result.exit_code, found[0]


@pytest.mark.parametrize("android", [10, 15])
async def test_codes_proven_by_the_phone_are_ok(
    phone_factory: PhoneFactory, adb_key_path: Path, android: int
) -> None:
    """The AOSP jar proves the code the bridge sends with (6 on 10, 5 on 15): ok."""
    phone = await phone_factory(android=android)
    _status, check = await framework_codes(phone.serial, adb_key_path)
    assert "ok" == check["verdict"]
    code = 6 if android == 10 else 5
    assert f"sendTextForSubscriber {code}," in check["evidence"]
    assert "ISms.aidl" in check["source"]


async def test_an_oem_isms_fails_doctor(phone_factory: PhoneFactory, adb_key_path: Path) -> None:
    """An OEM ISms whose code is not the bridge's: the check fails and doctor exits 1."""
    phone = await phone_factory(android=13, framework_jar="vendor-reordered")
    status, check = await framework_codes(phone.serial, adb_key_path)
    assert (1, "fail") == (status, check["verdict"])
    assert "sendTextForSubscriber 6," in check["evidence"]
    assert "never send with --send-path framework" in check["consequence"]


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("stripped", "odex/vdex"), ("dex041", "041"), ("no-read-permission", "Permission denied")],
)
async def test_a_jar_that_proves_nothing_warns(
    phone_factory: PhoneFactory, adb_key_path: Path, kind: str, reason: str
) -> None:
    """A stripped jar, a DEX of another version, a jar the shell may not read: warn, why,
    and auto keeps today's rule; doctor does not fail for it."""
    phone = await phone_factory(android=14, framework_jar=kind)
    _status, check = await framework_codes(phone.serial, adb_key_path)
    assert "warn" == check["verdict"]
    assert reason in check["evidence"]
    assert "auto keeps today's rule" in check["consequence"]
