"""A dropped connection under each of adbd's shell services, as adbd hangs the script up.

Legacy ``shell:`` and ``exec:`` run the script on a PTY, and adbd signals nothing: it closes
the PTY's master and the kernel hangs the terminal up (SIGHUP to the session leader, writes
fail with EIO, no signal). The shell protocol without ``pty`` (``shell,v2,raw:``) runs it on
two Unix socket pairs, and when the stream dies adbd itself sends ``kill(pid, SIGHUP)`` to the
script's ``sh``, then closes its ends of both sockets: a write after that raises SIGPIPE,
whose default adbd's child restored, and a waiting read sees EOF
(``Subprocess::PassDataStreams``, ``ForkAndExec``: system/core
``adb/daemon/shell_service.cpp`` android-10.0.0_r30 and android-11.0.0_r1, packages/modules/adb
``daemon/shell_service.cpp`` unchanged from 2020-05-19 to branch 15-qpr2). With
``shell,v2,pty:`` adbd sends that SIGHUP and closes the PTY's master: the PTY rules. Each test
would fail on a simulator kinder than that.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.simulator.sim_helpers import (
    CLSE,
    OKAY,
    OPEN,
    WRTE,
    RawClient,
    run_until_dropped,
    send_command,
)

BODY = "Your code is 4821"
LOG = "/data/local/tmp/log"
IGNORE_HUP = "trap '' HUP; "
#: Services whose script writes to a PTY (EIO once hung up) or to sockets (SIGPIPE).
ON_A_PTY = ("shell:", "exec:", "shell,v2,pty:")
ON_SOCKETS = "shell,v2,raw:"


def sent_rows(path: Path) -> list[tuple[str, str, int]]:
    """(address, body, type) of every row, read straight from the SQLite file."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT address, body, type FROM sms ORDER BY _id").fetchall()


def log_of(phone: SimulatedPhone) -> str:
    """What the script wrote to its log file on the phone (empty when it wrote none)."""
    return (phone.files.read_bytes(LOG) or b"").decode()


@pytest.mark.parametrize("service", [*ON_A_PTY, ON_SOCKETS])
async def test_after_a_drop_a_builtin_writing_to_the_shell_protocol_kills_the_script(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, service: str
) -> None:
    """The connection drops right after the send key; the script ignores SIGHUP, so the
    message goes out whatever the service. Its next ``echo`` to stdout fails: on a PTY with
    EIO and status 1, the script going on; on the shell protocol's closed socket with SIGPIPE,
    which kills the ``sh`` itself there (mksh ``c_print`` blocks SIGPIPE only for a
    co-process, ``funcs.c`` R57 and R59c), so the line after it never runs."""
    phone.drop_after_command("input", nth=2)
    script = IGNORE_HUP + send_command("+15550100", BODY) + f'; echo "after=$?" >>{LOG}'
    await run_until_dropped(phone, adb_signer, service, script)
    assert [("+15550100", BODY, 2)] == sent_rows(phone.store_path)
    assert ("" if service == ON_SOCKETS else "after=1\n") == log_of(phone)


@pytest.mark.parametrize("service", [*ON_A_PTY, ON_SOCKETS])
async def test_after_a_drop_files_work_and_a_tool_writing_to_the_shell_protocol_dies_alone(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, service: str
) -> None:
    """After the drop the script's writes to files work under every service; ``cat`` to the
    hung-up terminal exits 1 on a PTY (toybox ``xwrite``: EIO) and dies of SIGPIPE on the
    shell protocol's socket (141, the script going on), then the rest runs."""
    phone.drop_after_command("true")
    script = (
        f'{IGNORE_HUP}true; echo a >>{LOG}; cat {LOG}; echo "cat=$?" >>{LOG};'
        f' grep -q a <{LOG}; echo "grep=$?" >>{LOG}'
    )
    await run_until_dropped(phone, adb_signer, service, script)
    status = 141 if service == ON_SOCKETS else 1
    assert f"a\ncat={status}\ngrep=0\n" == log_of(phone)


async def test_a_drop_ends_a_shell_protocol_script_that_does_not_ignore_sighup(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """adbd's ``kill(pid, SIGHUP)`` reaches a ``sh`` without the trap: it stops right after
    ``am`` (mksh ``histrap.c``: SIGHUP is ``TF_FATAL``), no key is pressed, nothing sent."""
    phone.drop_after_command("am")
    script = send_command("+15550100", BODY) + f"; echo after >>{LOG}"
    await run_until_dropped(phone, adb_signer, ON_SOCKETS, script)
    compose = phone.compose
    assert compose is not None and BODY == compose.body
    assert ([], "") == (sent_rows(phone.store_path), log_of(phone))


@pytest.mark.parametrize(("service", "status"), [("shell:", 1), (ON_SOCKETS, 0)])
async def test_a_read_waiting_when_the_stream_dies_fails_on_a_pty_and_ends_on_a_socket(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, service: str, status: int
) -> None:
    """``cat`` reads stdin, which nobody writes to. When the client closes the stream, a read
    of the PTY fails with EIO (``n_tty_read``; toybox ``cat`` exits 1), while the shell
    protocol's stdin socket, whose other end adbd closed (``stdinout_sfd_.reset()``), gives
    EOF: ``cat`` exits 0."""
    script = f'{IGNORE_HUP}echo started; cat; echo "cat=$?" >>{LOG}'
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        await client.send(OPEN, 5, 0, f"{service}{script}\0".encode())
        kind, remote_id, _, _, _ = await client.read()
        assert OKAY == kind
        kind, _, _, payload, _ = await client.read()
        assert WRTE == kind and b"started\n" in payload
        await client.send(OKAY, 5, remote_id)
        await phone.wait_terminal_read()  # cat waits on its read, which nobody feeds
        assert "" == log_of(phone)
        await client.send(CLSE, 5, remote_id)
        async with asyncio.timeout(5):
            while (await client.read())[0] != CLSE:
                pass
    finally:
        client.close()
    await phone.wait_idle()
    assert f"cat={status}\n" == log_of(phone)


async def test_the_drop_sigpipe_meets_writes_to_stderr_too(
    phone_factory: PhoneFactory, adb_signer: PythonRSASigner
) -> None:
    """adbd closes the stderr socket with the stdout one (``stderr_sfd_.reset()``): a builtin
    writing to stderr after the drop kills the shell as well, on 10 and on 15."""
    for android in (10, 15):
        phone = await phone_factory(android=android)
        phone.drop_after_command("true")
        script = f"{IGNORE_HUP}true; echo a >>{LOG}; echo oops >&2; echo b >>{LOG}"
        await run_until_dropped(phone, adb_signer, ON_SOCKETS, script)
        assert "a\n" == log_of(phone)
