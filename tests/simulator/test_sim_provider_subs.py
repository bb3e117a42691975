"""The subscription filter of Android 14 and 15, and its absence on Android 10 to 13."""

from __future__ import annotations

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from click.testing import CliRunner

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator.cli import simulator_command
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect

QUERY = "content query --uri content://sms --projection _id:sub_id --sort _id"


async def run(phone: SimulatedPhone, signer: PythonRSASigner, command: str) -> str:
    """Run one command line on ``phone`` over adb-shell and return its merged output."""
    device = await connect(phone, signer)
    try:
        return str(await device.shell(command))
    finally:
        await device.close()


def sent_rows_on_subs(phone: SimulatedPhone, *sub_ids: int) -> None:
    """One sent message per ``sub_id``, ``_id`` 1, 2... in the order given."""
    for index, sub_id in enumerate(sub_ids, start=1):
        phone.store.insert(
            address="+15550100", body=f"s{sub_id}", type=2, date=index, sub_id=sub_id
        )


@pytest.mark.parametrize("android", (10, 11, 12, 13))
async def test_no_subscription_filter_up_to_13(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Android 10 to 13 show sent rows of every sub_id, known SIM or not (SmsProvider.query
    has no getSelectionBySubIds, TelephonyProvider android-10.0.0_r30 to 13.0.0_r1)."""
    phone = await phone_factory(android=android)
    sent_rows_on_subs(phone, 1, 2, 7, -1)
    assert (
        "Row: 0 _id=1, sub_id=1\nRow: 1 _id=2, sub_id=2\nRow: 2 _id=3, sub_id=7\n"
        "Row: 3 _id=4, sub_id=-1\n"
    ) == await run(phone, adb_signer, QUERY)


@pytest.mark.parametrize("android", (14, 15))
async def test_single_sim_sees_its_sub_and_minus_one(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Android 14 and 15 add sub_id IN ('1','-1') for a single-SIM phone: rows of an unknown
    SIM are hidden, restored rows (-1) shown (ProviderUtil.getSelectionBySubIds, TelephonyProvider
    android-14.0.0_r1, 15.0.0_r1)."""
    phone = await phone_factory(android=android)
    sent_rows_on_subs(phone, 1, 2, 7, -1)
    assert "Row: 0 _id=1, sub_id=1\nRow: 1 _id=4, sub_id=-1\n" == await run(
        phone, adb_signer, QUERY
    )


@pytest.mark.parametrize("android", (14, 15))
async def test_dual_sim_sees_both_sims(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Every subscription of the main user is in the filter, so both SIMs of a dual-SIM phone
    are visible (ProviderUtil.getSelectionBySubIds, TelephonyProvider android-14.0.0_r1)."""
    phone = await phone_factory(android=android, sim_sub_ids=(1, 2))
    sent_rows_on_subs(phone, 1, 2, 7, -1)
    assert "Row: 0 _id=1, sub_id=1\nRow: 1 _id=2, sub_id=2\nRow: 2 _id=4, sub_id=-1\n" == await run(
        phone, adb_signer, QUERY
    )


@pytest.mark.parametrize("android", (14, 15))
async def test_the_filter_applies_to_the_full_view_too(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """SmsProvider.query adds the filter for every caller, system included (TelephonyProvider
    android-14.0.0_r1, 15.0.0_r1)."""
    phone = await phone_factory(android=android, build_type="userdebug")
    sent_rows_on_subs(phone, 1, 7)
    phone.store.insert(address="+15550100", body="o", type=4, date=3, sub_id=7)
    assert "Row: 0 _id=1, sub_id=1\n" == await run(phone, adb_signer, f"su 1000 {QUERY}")


@pytest.mark.parametrize("android", (14, 15))
async def test_emergency_numbers_are_shown_whatever_their_sub(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """Rows addressed to an emergency number pass the filter by the OR'ed address clause
    (ProviderUtil.getSelectionByEmergencyNumbers in SmsProvider.query, TelephonyProvider
    android-14.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.store.insert(address="911", body="help", type=2, date=1, sub_id=7)
    phone.store.insert(address="+15550100", body="hidden", type=2, date=2, sub_id=7)
    assert "Row: 0 _id=1, sub_id=7\n" == await run(phone, adb_signer, QUERY)


@pytest.mark.parametrize(("android", "sub_filter"), [(13, False), (14, True)])
async def test_mms_has_the_same_filter(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int, sub_filter: bool
) -> None:
    """MmsProvider.query adds sub_id IN (...) from Android 14 and nothing before
    (TelephonyProvider android-13.0.0_r1, 14.0.0_r1)."""
    phone = await phone_factory(android=android)
    known = phone.store.insert_incoming_mms("+15550100", "a", date_ms=1_000, sub_id=1)
    other = phone.store.insert_incoming_mms("+15550100", "b", date_ms=2_000, sub_id=7)
    printed = await run(
        phone, adb_signer, "content query --uri content://mms --projection _id --sort _id"
    )
    expected = [known] if sub_filter else [known, other]
    assert "".join(f"Row: {n} _id={pdu}\n" for n, pdu in enumerate(expected)) == printed


async def test_sim_sub_ids_must_name_a_subscription(phone_factory: PhoneFactory) -> None:
    """A phone needs at least one subscription id, each 1 or more."""
    with pytest.raises(ValueError, match="sim_sub_ids"):
        await phone_factory(sim_sub_ids=())
    with pytest.raises(ValueError, match="sim_sub_ids"):
        await phone_factory(sim_sub_ids=(0,))


@pytest.mark.parametrize("value", ["0", "1,x", ""])
def test_cli_refuses_bad_sim_sub_ids(value: str) -> None:
    """--sim-sub-ids takes subscription ids of 1 or more separated by commas."""
    result = CliRunner().invoke(simulator_command, ["--allow-new-keys", "--sim-sub-ids", value])
    assert 2 == result.exit_code
    assert "expected subscription ids of 1 or more" in result.output
