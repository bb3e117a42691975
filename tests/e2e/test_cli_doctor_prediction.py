"""`starebrain doctor`'s send-path check against the first send (issue 36): the path doctor
predicts is the path the next `starebrain send --send-path auto` takes, on each release the
simulated phone models, judged by the row the phone itself wrote (its creator)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from android_bridge._framework import SHELL_PACKAGE
from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.devices import DEVICE_ENV
from starebrain_actions.cli.main import main
from tests.conftest import PhoneFactory
from tests.e2e.conftest import BODY, RECIPIENT, Target


@pytest.fixture(autouse=True)
def _no_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.delenv("STAREBRAIN_DB", raising=False)


async def invoke(*argv: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, list(argv), catch_exceptions=False)


async def prediction(ledger: Target, phone: SimulatedPhone, key: Path) -> dict[str, Any]:
    """doctor's send-path check, run as a user runs it (the same ledger as the send)."""
    result = await invoke(
        "--db", str(ledger), "doctor", "--device", phone.serial, "--key", str(key), "--json"
    )
    report = json.loads(result.stdout)
    (check,) = [check for check in report["checks"] if check["name"] == "send-path"]
    return dict(check)


def predicted(check: dict[str, Any]) -> str:
    match = re.match(r"--send-path auto takes (ui|framework):", check["evidence"])
    assert match is not None, check
    return match.group(1)


def path_of_rows(phone: SimulatedPhone) -> list[str]:
    """Which path wrote each outgoing row the phone holds: the framework writes its rows as
    the shell's package (SMSDispatcher), the app as its own."""
    return [
        "framework" if row.creator == SHELL_PACKAGE else "ui"
        for row in phone.store.rows(types=[2, 4, 5, 6])
    ]


@pytest.mark.parametrize(
    ("android", "expected"), [(10, "ui"), (12, "ui"), (14, "framework"), (15, "framework")]
)
async def test_doctor_predicts_the_first_send(
    phone_factory: PhoneFactory,
    ledger_target: Target,
    adb_key_path: Path,
    android: int,
    expected: str,
) -> None:
    """On a fresh phone and ledger, doctor names the path the first auto send takes: the
    messaging app before 14 (subscription 1 cannot be shown to be the phone's), the framework
    from 14 (dumpsys isub shows it); and again after that send, for the second."""
    phone = await phone_factory(android=android)
    first = await prediction(ledger_target, phone, adb_key_path)
    assert expected == predicted(first)
    assert "ok" == first["verdict"]
    sent = await invoke(
        "--db", str(ledger_target), "send", "--device", phone.serial, "--key",
        str(adb_key_path), "--to", RECIPIENT, "--body", BODY, "--wait", "30",
    )  # fmt: skip
    assert 0 == sent.exit_code, sent.output
    assert [expected] == path_of_rows(phone)
    assert 1 == len(phone.transmissions)
    second = await prediction(ledger_target, phone, adb_key_path)
    sent = await invoke(
        "--db", str(ledger_target), "send", "--device", phone.serial, "--key",
        str(adb_key_path), "--to", RECIPIENT, "--body", BODY + " again", "--wait", "30",
    )  # fmt: skip
    assert 0 == sent.exit_code, sent.output
    assert [expected, predicted(second)] == path_of_rows(phone)


async def test_a_dark_screen_before_14_is_a_warning_and_the_send_exits_7(
    phone_factory: PhoneFactory, ledger_target: Target, adb_key_path: Path
) -> None:
    """The issue's case: Android 12, screen off. doctor predicts the messaging app and warns
    that it needs the screen; the send then exits 7 with nothing sent, as predicted."""
    phone = await phone_factory(android=12, screen="off")
    check = await prediction(ledger_target, phone, adb_key_path)
    assert ("ui", "warn") == (predicted(check), check["verdict"])
    assert "exits 7" in check["consequence"]
    sent = await invoke(
        "--db", str(ledger_target), "send", "--device", phone.serial, "--key",
        str(adb_key_path), "--to", RECIPIENT, "--body", BODY, "--wait", "10",
    )  # fmt: skip
    assert 7 == sent.exit_code, sent.output
    assert [] == phone.transmissions
    assert [] == path_of_rows(phone)
