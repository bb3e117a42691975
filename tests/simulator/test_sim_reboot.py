"""Reboots: the user stays locked until the first unlock, and ``adb tcpip`` mode is lost."""

from __future__ import annotations

import asyncio

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import connect, send_command

RELEASES = [10, 11, 12, 13, 14, 15]


@pytest.mark.parametrize("tcpip_survives", [False, True])
async def test_adb_over_tcp_after_a_reboot(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, tcpip_survives: bool
) -> None:
    """A phone forgets adb tcpip on reboot (service.adb.tcp.port is not persistent); an emulator
    keeps listening (adbd daemon/main.cpp, packages/modules/adb android-11 to 15)."""
    phone = await phone_factory(tcpip_survives_reboot=tcpip_survives)
    device = await connect(phone, adb_signer)
    await phone.reboot()
    with pytest.raises(ConnectionResetError):
        await device.shell("echo hi")
    await device.close()
    if not tcpip_survives:
        assert not phone.tcpip_enabled
        with pytest.raises(ConnectionRefusedError):
            await connect(phone, adb_signer)
        await phone.enable_tcpip()
    again = await connect(phone, adb_signer)
    assert "back\n" == await again.shell("echo back")
    await again.close()


@pytest.mark.parametrize("android", RELEASES)
async def test_until_the_first_unlock_the_messaging_app_does_not_resolve(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """After boot the user is locked and the keyguard is up: the app, not direct-boot aware, does
    not resolve until unlock_user (no directBootAware in packages/apps/Messaging
    AndroidManifest.xml)."""
    phone = await phone_factory(android=android, tcpip_survives_reboot=True, focus_delay_ms=20)
    assert phone.user_unlocked
    await phone.reboot()
    assert (False, "locked") == (phone.user_unlocked, phone.screen)
    device = await connect(phone, adb_signer)
    output = await device.shell(send_command("+15550100", "hello"))
    assert "Error: Activity not started, unable to resolve Intent {" in output
    await phone.radio_idle()
    assert [] == phone.transmissions
    phone.unlock_user()
    assert (True, "on") == (phone.user_unlocked, phone.screen)
    await device.shell(send_command("+15550100", "hello"))
    await device.close()
    sent = await phone.wait_transmissions(then_idle=True)
    assert [("+15550100",)] == [t.addresses for t in sent]


async def test_user_unlocks_by_itself_after_the_configured_time(
    phone_factory: PhoneFactory,
) -> None:
    """unlock_after_boot_ms unlocks the user that long after each reboot."""
    phone = await phone_factory(unlock_after_boot_ms=50, tcpip_survives_reboot=True)
    await phone.reboot()
    assert not phone.user_unlocked
    await asyncio.sleep(0.3)
    assert (True, "on") == (phone.user_unlocked, phone.screen)


async def test_a_reboot_closes_every_window(phone_factory: PhoneFactory) -> None:
    """Windows and app processes do not survive a reboot: the open compose window is gone."""
    phone = await phone_factory(tcpip_survives_reboot=True)
    phone.open_compose("+15550100", "old draft")
    await phone.reboot()
    assert phone.compose is None
