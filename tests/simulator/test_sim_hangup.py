"""Hang-up: when the ADB connection or stream goes, adbd hangs the script's terminal up.

adbd runs a legacy ``shell:<command>`` in a PTY (raw mode) because closing the PTY master
sends SIGHUP to the script (``StartSubprocess``, ``shell_service.cpp``, system/core
android-10.0.0_r1 and packages/modules/adb android-11 to 15); with the shell protocol
(``shell,v2:``) adbd sends SIGHUP itself when the stream dies (``PassDataStreams``). The
kernel sends that SIGHUP to the session leader alone, the script's ``sh`` (Linux
``tty_signal_session_leader``): without ``trap '' HUP`` mksh ends the command it waits on and
exits, so the script stops where it stands; with it the script runs on to its end, every write
to the hung-up terminal failing with EIO (``hung_up_tty_write``). Only a SIGKILL (adbd
restarting, a reboot: init kills everything adbd started) stops such a script. The same at
every release from 10 to 15 (the research report of issue 21, item 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from android_bridge.simulator._awk import awk
from android_bridge.simulator._shell import Session, Shell
from android_bridge.simulator._toybox import grep as toybox_grep
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import CLSE, OKAY, OPEN, WRTE, RawClient, connect, send_command

BODY = "Your code is 4821"
LOG = "/data/local/tmp/log"
#: What the script does before anything else, so that a hang-up does not end it.
IGNORE_HUP = "trap '' HUP; "


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
    through adbd's PTY (``shell_service.cpp``, system/core ``adb/daemon`` android-10.0.0_r30,
    packages/modules/adb ``daemon`` android-11.0.0_r1 to 15.0.0_r1)."""
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
    with pytest.raises(ValueError, match="not both"):
        phone.drop_after_command("am", adbd_restarts=True, reboot=True)


async def test_a_reboot_after_a_command_stops_the_script_there(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """``drop_after_command(..., reboot=True)``: the phone reboots right after the command
    (power lost mid-script): the script is killed there whatever it ignores (init kills
    every process at a reboot), the phone comes back locked with ``adb tcpip`` off, and the
    next command of the script never ran."""
    phone = await phone_factory()
    phone.drop_after_command("am", reboot=True)
    device = await connect(phone, adb_signer)
    with contextlib.suppress(Exception):
        await device.shell(IGNORE_HUP + send_command("+15550100", BODY) + f"; echo x > {LOG}")
    with contextlib.suppress(Exception):
        await device.close()
    await phone.wait_idle()
    assert (1, False, False) == (phone.reboots, phone.user_unlocked, phone.tcpip_enabled)
    assert not phone.files.exists(LOG)
    assert [] == stored(phone.store_path)


async def noticed(client: RawClient, phone: SimulatedPhone, how: str) -> None:
    """Wait until the phone has noticed the client leave: its CLSE answer to the client's
    CLSE, or the connection gone."""
    if how == "stream":
        async with asyncio.timeout(5):
            while (await client.read())[0] != CLSE:
                pass
        return
    async with asyncio.timeout(5):
        while phone.connections:  # noqa: ASYNC110 (the phone has no event for it)
            await asyncio.sleep(0.01)


def log_of(phone: SimulatedPhone) -> str:
    """What the script wrote to its log file on the phone (empty when it wrote none)."""
    return (phone.files.read_bytes(LOG) or b"").decode()


@pytest.mark.parametrize("android", [10, 15])
async def test_a_script_that_ignores_sighup_runs_on_after_a_drop(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The drop right after ``am`` hangs the script up, but its ``sh`` ignores SIGHUP: the
    keys are pressed, the message goes out, and every later step runs; only the writes to the
    hung-up terminal fail (``echo`` exits 1, its text is lost). Sources: mksh ``histrap.c``
    ``settrap`` (``''`` is ``SIG_IGN``, kept across exec), ``funcs.c`` ``c_print`` (status 1 on
    a failed write), R57 at android-10.0.0_r30 and 11, R59 to R59c at 12 to 15; Linux
    ``tty_signal_session_leader``, ``hung_up_tty_write`` (EIO), Android common kernel."""
    phone = await phone_factory(android=android)
    phone.drop_after_command("am")
    device = await connect(phone, adb_signer)
    command = (
        IGNORE_HUP
        + send_command("+15550100", BODY)
        + f'; echo "keys=$?" >>{LOG}; echo lost; echo "echo=$?" >>{LOG}'
    )
    with pytest.raises(ConnectionResetError):
        await device.shell(command)
    await device.close()
    await phone.wait_idle()
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)
    assert [BODY] == [message.body for message in phone.transmissions]
    # the hung-up terminal fails send_command's own last echo too
    assert "keys=1\necho=1\n" == log_of(phone)


@pytest.mark.parametrize("android", [10, 15])
async def test_drop_after_send_hangs_up_a_script_right_after_the_key(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """``drop-after-send``: the message is sent, the connection resets right after the key;
    without the trap nothing after the key runs (mksh ``histrap.c``: SIGHUP is ``TF_FATAL``;
    ``jobs.c`` ``j_exit``), with it the rest of the script does (``settrap``: ``SIG_IGN``);
    mksh R57 (android-10.0.0_r30, 11) and R59 to R59c (12 to 15), the same text."""
    phone = await phone_factory(android=android, faults=["drop-after-send"])
    device = await connect(phone, adb_signer)
    tail = f"; echo after >>{LOG}"
    with pytest.raises(ConnectionResetError):
        await device.shell(send_command("+15550100", BODY) + tail)
    await device.close()
    assert "" == log_of(phone)
    phone.inject_fault("drop-after-send")
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(IGNORE_HUP + send_command("+15550100", BODY) + tail)
    await device.close()
    await phone.wait_idle()
    assert "after\n" == log_of(phone)
    assert 2 == len(phone.transmissions)


@pytest.mark.parametrize("android", [10, 15])
@pytest.mark.parametrize("how", ["connection", "stream"])
async def test_a_client_going_away_does_not_end_a_script_that_ignores_sighup(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, how: str, android: int
) -> None:
    """The client closes the connection (or only the stream) mid-script: adbd closes the PTY's
    master (``close_all_sockets``/``local_socket_destroy``/``deferred_close``, system/core
    ``adb/`` android-10.0.0_r30, packages/modules/adb android-11.0.0_r1 to 15.0.0_r1) and the
    kernel hangs the terminal up; a script whose ``sh`` ignores SIGHUP (mksh ``settrap``, R57
    to R59c) opens the compose window and presses the keys all the same."""
    phone = await phone_factory(android=android)
    script = (
        f"{IGNORE_HUP}echo started; sleep 0.2; am start -W -a android.intent.action.SENDTO"
        f" -d smsto:+15550100 --es sms_body '{BODY}'; input keyevent 22; input keyevent 66;"
        f' echo gone; echo "echo=$?" >>{LOG}'
    )
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"shell:{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        kind, _, _, payload, _ = await client.read()
        assert (WRTE, b"started\n") == (kind, payload)
        if how == "stream":
            await client.send(CLSE, 5, remote_id)
        else:
            client.close()
        await noticed(client, phone, how)
    finally:
        client.close()
    await phone.wait_idle()
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)
    assert "echo=1\n" == log_of(phone)


@pytest.mark.parametrize("android", [10, 15])
async def test_sighup_counts_as_the_script_ignores_it_when_it_comes(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """The SIGHUP comes once, when the terminal is hung up (Linux ``__tty_hangup``,
    ``tty_signal_session_leader``, Android common kernel): a script that stopped ignoring it
    before (``trap - HUP``) ends there; one that stops ignoring it after runs on (mksh
    ``histrap.c`` ``settrap``/``trapsig``, R57 to R59c, android-10.0.0_r30 to 15.0.0_r1)."""
    phone = await phone_factory(android=android)
    phone.drop_after_command("true")
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(f"{IGNORE_HUP}trap - HUP; true; echo one >>{LOG}")
    await device.close()
    phone.drop_after_command("true")
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(f"{IGNORE_HUP}true; trap - HUP; echo two >>{LOG}")
    await device.close()
    await phone.wait_idle()
    assert "two\n" == log_of(phone)


@pytest.mark.parametrize("android", [10, 15])
async def test_an_adbd_restart_kills_a_script_that_ignores_sighup(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """adbd restarting (a crash, ``adb root``/``usb``/``tcpip``) right after ``am``: init
    SIGKILLs everything it started (``Service::Reap``: ``KillProcessGroup(SIGKILL)``,
    system/core ``init/service.cpp`` android-10.0.0_r30 and android-15.0.0_r1), so no key is
    pressed, trap or not; adbd listens again at once."""
    phone = await phone_factory(android=android)
    phone.drop_after_command("am", adbd_restarts=True)
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(IGNORE_HUP + send_command("+15550100", BODY) + f"; echo x >>{LOG}")
    await device.close()
    await phone.wait_idle()
    compose = phone.compose
    assert compose is not None and BODY == compose.body
    assert ([], "") == (stored(phone.store_path), log_of(phone))
    fresh = await connect(phone, adb_signer)
    assert "back\n" == await fresh.shell("echo back")
    await fresh.close()


async def test_a_reboot_kills_a_script_that_ignores_sighup(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """The ``reboot`` fault at the send key: every process is gone (init's shutdown
    terminates, then stops, every service not critical to shutdown, adbd's process group
    with it, and kills what is left: ``DoReboot``, ``KillAllProcesses``, system/core
    ``init/reboot.cpp`` android-10.0.0_r30 and 15.0.0_r1), the script's rest never runs (the
    send itself completes, as ``reboot_completes_sends`` says)."""
    phone = await phone_factory(faults=["reboot"], tcpip_survives_reboot=True)
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(IGNORE_HUP + send_command("+15550100", BODY) + f"; echo x >>{LOG}")
    await device.close()
    await phone.wait_idle()
    assert "" == log_of(phone)


async def test_a_script_that_ignores_sighup_still_writes_its_files_after_a_hang_up(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """After the hang-up the script's redirections to files, its command substitutions and
    the tools reading them work; only the terminal is gone (a ``cat`` to it fails: EIO from
    ``hung_up_tty_write``, Android common kernel; toybox ``xwrite`` exits 1, 0.8.0 to
    0.8.11; mksh ``exec.c`` ``iosetup`` for the redirections, R57 to R59c)."""
    phone.drop_after_command("true")
    device = await connect(phone, adb_signer)
    script = (
        f"{IGNORE_HUP}true; {{ echo a; o=$(echo b); echo $o; echo c >&2; }} >{LOG} 2>&1;"
        f' cat {LOG}; echo "cat=$?" >>{LOG}'
    )
    with pytest.raises(ConnectionResetError):
        await device.shell(script)
    await device.close()
    await phone.wait_idle()
    assert "a\nb\nc\ncat=1\n" == log_of(phone)


async def test_a_hung_up_shell_protocol_script_dies_writing_to_its_pipes(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """``shell,v2:`` (pipes): adbd's SIGHUP (``PassDataStreams``: "protocol FD died, sending
    SIGHUP") is ignored like the PTY's, but the script's own ``echo`` to its closed stdout
    raises SIGPIPE, which adbd's child restores to its default (``signal(SIGPIPE,
    SIG_DFL)``, ``shell_service.cpp``, system/core ``adb/daemon`` android-10.0.0_r30,
    packages/modules/adb android-11.0.0_r1 to 15.0.0_r1): it dies there; a tool that writes
    dies alone (141)."""
    script = (
        f'{IGNORE_HUP}echo started; sleep 0.2; cat /nonexistent; echo "cat=$?" >>{LOG};'
        f" echo lost; echo never >>{LOG}"
    )
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"shell,v2,raw:{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        kind, _, _, _payload, _ = await client.read()
        assert WRTE == kind
        await client.send(CLSE, 5, remote_id)
        await noticed(client, phone, "stream")
    finally:
        client.close()
    await phone.wait_idle()
    assert "cat=141\n" == log_of(phone)


@pytest.mark.parametrize("android", [10, 15])
async def test_drop_before_send_kills_the_key_only_of_a_script_that_does_not_ignore_sighup(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner, android: int
) -> None:
    """``drop-before-send``: the connection resets as the send key is being injected. Without
    the trap mksh kills ``input`` (``jobs.c`` ``j_exit``) before the key reaches the app:
    nothing sent (on a phone a race the key may win: this is the kinder answer, met only by
    scripts without the trap, which the product never sends). With
    it, ``input`` (SIGHUP ignored, inherited: ``histrap.c`` ``cleartraps``/``restoresigs``)
    delivers the key: the app sends. mksh R57 to R59c, android-10.0.0_r30 to 15.0.0_r1."""
    phone = await phone_factory(android=android, faults=["drop-before-send"])
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(send_command("+15550100", BODY))
    await device.close()
    await phone.wait_idle()
    assert [] == stored(phone.store_path)
    phone.inject_fault("drop-before-send")
    device = await connect(phone, adb_signer)
    with pytest.raises(ConnectionResetError):
        await device.shell(IGNORE_HUP + send_command("+15550100", BODY))
    await device.close()
    await phone.wait_idle()
    assert [("+15550100", BODY, 2)] == stored(phone.store_path)


@pytest.mark.parametrize("how", ["restart_adbd", "disable_tcpip"])
async def test_adbd_restarting_mid_script_kills_it_whatever_it_ignores(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, how: str
) -> None:
    """adbd exiting (a crash, ``adb root``/``unroot``/``tcpip``, or ``adb usb``:
    ``restart_usb_service`` sets ``service.adb.tcp.port`` 0 and adbd restarts) makes init kill
    its service's whole process group with SIGKILL (``Service::Reap``:
    ``KillProcessGroup(SIGKILL)``, system/core ``init/service.cpp`` android-10.0.0_r30 and
    android-15.0.0_r1): a script sleeping between two steps never takes the second, ``trap
    '' HUP`` or not."""
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        script = f"{IGNORE_HUP}echo started; sleep 0.3; echo second >>{LOG}"
        await client.send(OPEN, 5, 0, f"shell:{script}\0".encode())
        assert OKAY == (await client.read())[0]
        kind, _, _, payload, _ = await client.read()
        assert (WRTE, b"started\n") == (kind, payload)
        getattr(phone, how)()
        await asyncio.sleep(0.5)
    finally:
        client.close()
    await phone.wait_idle()
    assert "" == log_of(phone)


async def test_a_command_reading_the_terminal_waits_for_the_hang_up(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """Nobody types into adbd's PTY, the stdin of a ``shell:`` command (``shell_service.cpp``,
    system/core ``adb/`` android-10.0.0_r30, packages/modules/adb 11.0.0_r1 to 15.0.0_r1):
    ``cat`` with no operand waits, the script goes no further and no reply comes. Once the
    client goes, the terminal is hung up: the waiting read fails with EIO (``n_tty_read``
    after ``pty_close``, Android common kernel; toybox ``cat`` exits 1), later reads see EOF
    (``hung_up_tty_read``): ``grep`` finds nothing (1), ``awk`` runs its END (3)."""
    script = (
        f'{IGNORE_HUP}echo started; cat; echo "cat=$?" >>{LOG}; grep -q x; echo "grep=$?" >>{LOG};'
        f" awk 'END{{exit 3}}'; echo \"awk=$?\" >>{LOG}"
    )
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"shell:{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        kind, _, _, payload, _ = await client.read()
        assert (WRTE, b"started\n") == (kind, payload)
        await client.send(OKAY, 5, remote_id)  # the output is taken: the script goes on
        await asyncio.sleep(0.3)
        assert "" == log_of(phone)  # cat still waits
        await client.send(CLSE, 5, remote_id)
        await noticed(client, phone, "stream")
    finally:
        client.close()
    await phone.wait_idle()
    assert "cat=1\ngrep=1\nawk=3\n" == log_of(phone)


async def test_grep_and_awk_take_a_failed_read_of_the_terminal_for_its_end() -> None:
    """A read of the terminal waiting when it is hung up fails with EIO. toybox ``grep``
    reports it (``getdelim`` then ``perror_msg``: ``grep: (standard input): I/O error``) and
    still exits by what it matched (``toys.exitval = !TT.found``; toybox 0.8.0 at
    android-10.0.0_r30 to 0.8.11 at 15.0.0_r1); one-true-awk's ``readrec`` reads with
    ``getc``, which gives EOF for the error: it runs its END (external/one-true-awk ``lib.c``,
    android-10.0.0_r30 to 15.0.0_r1)."""
    session = Session()
    shell = Shell({"grep": toybox_grep, "awk": awk}, session=session, leader=True)
    asyncio.get_running_loop().call_later(0.1, session.hang_up)
    await shell.run_chunks(
        "trap '' HUP; g=$(grep -c x 2>&1); s=$?; a=$(awk 'END{print \"end\"}' 2>&1)"
    )
    assert ("grep: (standard input): I/O error\n0", "1", "end") == (
        shell.variables["g"],
        shell.variables["s"],
        shell.variables["a"],
    )


async def test_an_rm_prompt_waits_for_the_hang_up_and_takes_no_for_an_answer(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """``rm -i`` asks on stderr and reads the answer from stdin, the terminal nobody types
    into (toybox ``rm.c`` ``do_rm``, ``yesno`` in ``lib/lib.c``, 0.8.0 at android-10.0.0_r30
    to 0.8.11 at 15.0.0_r1): it waits, and once the client goes and the terminal is hung up
    it reads nothing, which is no: the file stays."""
    target = "/data/local/tmp/keep"
    script = f'{IGNORE_HUP}touch {target}; echo started; rm -i {target}; echo "rm=$?" >>{LOG}'
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"shell:{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        kind, _, _, payload, _ = await client.read()
        assert (WRTE, b"started\n") == (kind, payload)
        await client.send(OKAY, 5, remote_id)
        await asyncio.sleep(0.3)
        assert "" == log_of(phone)  # rm still waits for its answer
        await client.send(CLSE, 5, remote_id)
        await noticed(client, phone, "stream")
    finally:
        client.close()
    await phone.wait_idle()
    # a phone's rm wrote its prompt before it waited and exits 0; the simulator hands a
    # command's output over when it ends, so the prompt meets the hung-up terminal and rm
    # exits 1 (EIO): harsher, never kinder
    assert "rm=1\n" == log_of(phone)
    assert phone.files.stat(target) is not None
