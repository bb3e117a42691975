"""The simulated phone's test-harness waits (issue 38): ``wait_transmissions`` waits for what
the radio sends, which comes ``send_delay_ms`` after the app's row; ``radio_idle`` waits until
nothing can still be sent. They only watch: the phone behaves the same with or without them."""

from __future__ import annotations

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner
from adb_shell.exceptions import TcpTimeoutException

from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect, send_command

BODY = "Your code is 4821"
DELAY_MS = 400


async def test_the_wait_returns_the_transmission_the_radio_makes_after_the_row(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The app's SENT row is in the store when the command returns; the transmission comes
    ``send_delay_ms`` later, and the wait returns it, dated after the row by that delay."""
    phone = await phone_factory(send_delay_ms=DELAY_MS)
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    [row] = phone.store.rows()
    [sent] = await phone.wait_transmissions(lambda t: t.body == BODY)
    assert (BODY, 2) == (sent.body, row.type)
    assert row.date is not None and sent.time_ms - row.date >= DELAY_MS - 50


async def test_then_idle_counts_a_second_copy_still_on_its_way(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``then_idle`` waits for every send under way: the app's duplicate is counted, though
    one transmission was all the wait asked for."""
    phone = await phone_factory(send_delay_ms=DELAY_MS, faults=["duplicate-send"])
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    assert 2 == len(await phone.wait_transmissions(count=1, then_idle=True))


async def test_the_wait_fails_saying_what_it_saw(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A message the radio never sends (``stuck-outbox``): the wait ends at its deadline with
    an AssertionError naming the count it wanted and what did leave the phone."""
    phone = await phone_factory(faults=["stuck-outbox"])
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    with pytest.raises(AssertionError, match=r"for 1 matching transmission\(s\), 0 matched"):
        await phone.wait_transmissions(within_s=0.3)
    await phone.radio_idle()
    assert [] == phone.transmissions


async def test_radio_idle_waits_for_a_delayed_send(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """Right after the command the radio has a send pending; ``radio_idle`` returns once it
    went out, and says what is pending when its deadline comes first."""
    phone = await phone_factory(send_delay_ms=2_000)
    device = await connect(phone, adb_signer)
    await device.shell(send_command("+15550100", BODY))
    await device.close()
    with pytest.raises(AssertionError, match=r"still busy after 0 s: delayed sends \[\('sms'"):
        await phone.radio_idle(within_s=0)
    await phone.radio_idle()
    assert [BODY] == [t.body for t in phone.transmissions]


async def test_radio_idle_does_not_wait_for_a_script_the_hang_fault_parked(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """A script parked for good by ``hang`` never sends: ``radio_idle`` has nothing to wait
    for (a deadline of 0 would fail on anything pending)."""
    phone = await phone_factory()
    phone.inject_fault("hang")
    device = await connect(phone, adb_signer)
    with pytest.raises(TcpTimeoutException):
        await device.shell(send_command("+15550100", BODY), transport_timeout_s=0.5)
    await device.close()
    await phone.radio_idle(within_s=0)
    assert [] == phone.transmissions
