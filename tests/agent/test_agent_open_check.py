"""doctor's checks on connecting, against the simulated phone: ``SmsAgent.open(check=True)``
on every connection, and by default (``check=None``) on the first contact with a phone the
ledger never met, which refuses a phone that breaks an assumption and leaves a locked
screen or no default SMS app to the send."""

from __future__ import annotations

from pathlib import Path

import pytest

from android_bridge import Device
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
    # without check=True a locked screen is the send's to wait for, even on a first contact
    async with SmsAgent.open(db=db, device=phone.serial, key_path=adb_key_path) as agent:
        assert phone.serial == agent.phone.device


@pytest.mark.parametrize("android", [10, 15])
async def test_a_phone_whose_checks_pass_or_only_warn_opens(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path, android: int
) -> None:
    """Warnings (Google Messages may send chat, an empty phone shows no row) do not stop it.
    The checks cost one round trip: on the first contact (the default), on every connection
    with check=True; none on a phone the ledger knows, nor with check=False (on the app's
    path: ``auto`` reads the framework jar in a round trip of its own the first time it meets
    a build)."""
    phone = await phone_factory(android=android)
    db = tmp_path / "ledger.db"

    async def round_trips(check: bool | None) -> int:
        async with SmsAgent.open(
            db=db, device=phone.serial, key_path=adb_key_path, check=check, send_path="ui"
        ) as agent:
            return agent.phone.round_trips

    first, known = await round_trips(None), await round_trips(None)
    always, never = await round_trips(True), await round_trips(False)
    assert (known + 1, known + 1, known) == (first, always, never)


async def test_a_new_phone_that_breaks_an_assumption_is_refused_before_its_first_send(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """A file where the fence's directory should be: the first contact names the fence check
    and what to do, records nothing and registers no phone, so the next contact checks it
    again; once mended, the phone opens, and the ledger knows it from then on."""
    phone = await phone_factory(android=13)
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell("touch /data/local/tmp/starebrain")
    db = tmp_path / "ledger.db"
    for _ in range(2):
        with pytest.raises(PhoneUnavailable) as caught:
            async with SmsAgent.open(db=db, device=phone.serial, key_path=adb_key_path):
                pytest.fail("a phone whose fence check fails was opened")
        message = str(caught.value)
        assert "never met" in message and "fence (" in message, message
        assert caught.value.retryable is False
        async with Ledger.open(db) as ledger:
            assert ([], []) == (list(await ledger.phones()), await ledger.summaries())
    assert [] == phone.transmissions
    async with await Device.connect(phone.serial, key_path=adb_key_path) as device:
        await device.shell("rm /data/local/tmp/starebrain")
    async with SmsAgent.open(db=db, device=phone.serial, key_path=adb_key_path) as agent:
        assert phone.serial == agent.phone.device
    async with Ledger.open(db) as ledger:
        assert 1 == len(await ledger.phones())


async def test_a_phone_known_by_its_identity_is_not_checked_at_a_new_address(
    phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """One phone under two addresses is one phone: met at 127.0.0.1, it is not checked again
    at localhost."""
    phone = await phone_factory(android=14)
    db = tmp_path / "ledger.db"
    async with SmsAgent.open(db=db, device=phone.serial, key_path=adb_key_path):
        pass
    other = phone.serial.replace("127.0.0.1", "localhost")
    async with SmsAgent.open(db=db, device=other, key_path=adb_key_path, send_path="ui") as agent:
        again = agent.phone.round_trips
    async with SmsAgent.open(
        db=db, device=other, key_path=adb_key_path, send_path="ui", check=False
    ) as agent:
        assert again == agent.phone.round_trips


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
