"""Hang-up: when the ADB connection or stream goes, the running script stops where it stands.

adbd runs a legacy ``shell:<command>`` in a PTY (raw mode) because closing the PTY master
sends SIGHUP to the script (``StartSubprocess``, ``shell_service.cpp``, system/core
android-10.0.0_r1 and packages/modules/adb android-11 to 15); with the shell protocol
(``shell,v2:``) adbd sends SIGHUP itself when the stream dies (``PassDataStreams``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import CLSE, OKAY, OPEN, WRTE, RawClient, connect, send_command

BODY = "Your code is 4821"


def stored(path: Path) -> list[tuple[str, str, int]]:
    """(address, body, type) of every row, read straight from the SQLite file."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT address, body, type FROM sms ORDER BY _id").fetchall()


@pytest.mark.parametrize("android", [10, 15])
async def test_drop_after_am_leaves_the_draft_and_presses_no_key(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """A drop right after ``am`` hangs the script up there: the compose window holds the body
    and no key event ever reaches it (PTY hang-up, ``shell_service.cpp`` android-10.0.0_r1 to
    15)."""
    phone = await phone_factory(android=android)
    phone.drop_after_command("am")
    device = await connect(phone, adb_signer)
    command = send_command("+15550100", BODY)
    with pytest.raises(ConnectionResetError):
        await device.shell(command)
    await device.close()
    await phone.wait_idle()
    compose = phone.compose
    assert compose is not None
    assert (BODY, "text") == (compose.body, compose.focus)
    assert [] == stored(phone.store_path)
    assert [command] == phone.commands_run


async def test_drop_after_the_nth_command_lets_that_command_finish(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """The command running when the connection drops has done its work (the send key was
    pressed), and nothing after it runs (``shell_service.cpp``, android-10.0.0_r1 to 15)."""
    phone.drop_after_command("input", nth=2)
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(send_command("+15550100", BODY) + "; echo after")
    await device.close()
    await phone.wait_idle()
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)


async def test_drop_points_count_only_their_command(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """An armed drop waits for its own command: other commands and earlier lines run whole."""
    phone.drop_after_command("input", nth=3)
    device = await connect(phone, adb_signer)
    assert "one\n" == await device.shell("echo one; input keyevent 3")
    assert "two\n" == await device.shell("input keyevent 3; echo two")
    with pytest.raises(ConnectionResetError):
        await device.shell("input keyevent 3; echo three")
    await device.close()
    fresh = await connect(phone, adb_signer)
    assert "four\n" == await fresh.shell("input keyevent 3; echo four")
    await fresh.close()


@pytest.mark.parametrize("how", ["connection", "stream"])
@pytest.mark.parametrize("service", ["shell:", "shell,v2,raw:", "exec:"])
async def test_client_hang_up_mid_script_stops_it_there(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, service: str, how: str
) -> None:
    """A client that goes away (connection closed, or just the stream) mid-script hangs it up:
    the step under way ends and the next never starts (PTY SIGHUP for ``shell:``/``exec:``,
    SIGHUP from ``PassDataStreams`` for ``shell,v2:``; android-10.0.0_r1 to 15)."""
    script = (
        "echo started; sleep 0.2; am start -a android.intent.action.SENDTO -d smsto:+15550100"
        f" --es sms_body '{BODY}'; input keyevent 22; input keyevent 66"
    )
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"{service}{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        kind, _, _, payload, _ = await client.read()
        assert WRTE == kind
        assert b"started\n" in payload
        if how == "stream":
            await client.send(CLSE, 5, remote_id)
        else:
            client.close()
        await asyncio.sleep(0.4)
    finally:
        client.close()
    await phone.wait_idle()
    assert phone.compose is None
    assert [] == stored(phone.store_path)


async def test_output_streams_while_the_script_runs(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """What a command printed reaches the client before a later command finishes, as it does
    through adbd's PTY (``shell_service.cpp``)."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 1, 0, b"shell:echo first; sleep 2; echo second\0")
        _, remote_id, _, _, _ = await client.read()
        kind, _, _, payload, _ = await client.read(wait_s=1.0)
        assert (WRTE, b"first\n") == (kind, payload)
        await client.send(CLSE, 1, remote_id)
    finally:
        client.close()


def test_drop_after_command_needs_a_name_and_a_positive_count(tmp_path: Path) -> None:
    """An empty command name or a count below 1 is refused."""
    phone = SimulatedPhone(store_path=tmp_path / "s.db", authorized_keys_path=tmp_path / "k")
    with pytest.raises(ValueError, match="nth >= 1"):
        phone.drop_after_command("")
    with pytest.raises(ValueError, match="nth >= 1"):
        phone.drop_after_command("am", nth=0)
