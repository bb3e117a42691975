"""``SmsAgent.open(check=True)``: doctor's checks on connecting, against the simulated phone."""

from __future__ import annotations

from pathlib import Path

import pytest

from starebrain_actions import Ledger
from starebrain_actions.orchestration.agent import SmsAgent
from starebrain_actions.phone.android import PhoneUnavailable
from tests.conftest import PhoneFactory


async def test_a_failing_check_refuses_the_phone_before_anything_is_recorded(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """A locked phone: open(check=True) raises PhoneUnavailable naming the failing check, what
    it read and what to do, not retryable, and the ledger records no phone; without check
    (the default) the same phone opens as before."""
    phone = await phone_factory(android=14, screen="locked")
    db = tmp_path / "ledger.db"
    with pytest.raises(PhoneUnavailable) as caught:
        async with SmsAgent.open(db=db, device=phone.serial, key_path=adb_key_path, check=True):
            pytest.fail("a phone whose screen check fails was opened")
    message = str(caught.value)
    assert message.startswith(f"{phone.serial}: doctor's checks failed: screen (")
    assert "mIsShowing=true" in message
    assert "unlock the phone" in message
    assert "sms-role" not in message  # only the failing checks are named
    assert caught.value.retryable is False
    async with Ledger.open(db) as ledger:
        assert [] == list(await ledger.phones())
    async with SmsAgent.open(db=db, device=phone.serial, key_path=adb_key_path) as agent:
        assert phone.serial == agent.phone.device


@pytest.mark.parametrize("android", [10, 15])
async def test_a_phone_whose_checks_pass_or_only_warn_opens(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path, android: int
) -> None:
    """Warnings (Google Messages may send chat, an empty phone shows no row) do not stop it:
    the agent opens, one round trip more than without the checks (on the app's path: ``auto``
    reads the framework jar in a round trip of its own the first time it meets a build)."""
    phone = await phone_factory(android=android)
    db = tmp_path / "ledger.db"
    async with SmsAgent.open(
        db=db, device=phone.serial, key_path=adb_key_path, send_path="ui"
    ) as agent:
        without = agent.phone.round_trips
    async with SmsAgent.open(
        db=db, device=phone.serial, key_path=adb_key_path, check=True, send_path="ui"
    ) as agent:
        assert without + 1 == agent.phone.round_trips


async def test_two_failing_checks_are_both_named(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    phone = await phone_factory(android=12, screen="off", second_sms_app=True)
    with pytest.raises(PhoneUnavailable) as caught:
        async with SmsAgent.open(
            db=tmp_path / "ledger.db", device=phone.serial, key_path=adb_key_path, check=True
        ):
            pytest.fail("opened")
    message = str(caught.value)
    assert "sms-role (" in message and "; screen (" in message
