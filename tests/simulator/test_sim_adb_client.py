"""Google's ``adb`` client against the simulated phone: connect, shell, content query, am start.

Each test runs a private adb server (its own ``ANDROID_ADB_SERVER_PORT`` and ``HOME``, holding
the test's key as ``$HOME/.android/adbkey``), connects it to a phone listening outside
5555-5585 (the ports the server scans for emulators), and kills the server afterwards. The
adb client uses ``shell,v2:`` because the phone announces ``shell_v2``, so exit statuses and
stderr come through as from a real phone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from android_bridge import FENCE_ROOT, Device, MessagingApp, ensure_epoch
from android_bridge._dispatcher import send_command, send_round_trip_steps
from android_bridge._shell import frame_script
from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory

ADB = shutil.which("adb")

pytestmark = pytest.mark.skipif(
    ADB is None and os.environ.get("CI") != "true",
    reason="Google's adb is not installed (.ci/run installs it; in CI its absence fails)",
)

#: The adb server scans these ports for emulators; a phone there would be found twice.
_EMULATOR_PORTS = range(5555, 5586)


@attrs.frozen(kw_only=True)
class AdbResult:
    """What one ``adb`` invocation returned."""

    #: Exit status of the adb client.
    status: int
    #: Its stdout, decoded.
    stdout: str
    #: Its stderr, decoded.
    stderr: str


@attrs.frozen(kw_only=True)
class AdbClient:
    """Google's adb with a private server and home."""

    #: The environment every invocation gets.
    env: dict[str, str]

    async def run(self, *args: str, timeout_s: float = 30) -> AdbResult:
        """Run ``adb ARGS`` without blocking the event loop the phone runs on."""
        assert ADB is not None, "Google's adb is missing: install the Debian package adb"
        process = await asyncio.create_subprocess_exec(
            ADB,
            *args,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(timeout_s):
                stdout, stderr = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        assert process.returncode is not None
        return AdbResult(
            status=process.returncode,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def adb(tmp_path: Path, adb_key_path: Path) -> AsyncIterator[AdbClient]:
    """An adb client whose server runs on a free port with a private home; killed afterwards."""
    android_dir = tmp_path / "home" / ".android"
    android_dir.mkdir(parents=True)
    shutil.copyfile(adb_key_path, android_dir / "adbkey")
    shutil.copyfile(f"{adb_key_path}.pub", android_dir / "adbkey.pub")
    (android_dir / "adbkey").chmod(0o600)
    client = AdbClient(
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path / "home"),
            "ANDROID_ADB_SERVER_PORT": str(_free_port()),
            "TMPDIR": str(tmp_path),
        }
    )
    yield client
    await client.run("kill-server")


async def connected(adb: AdbClient, phone: SimulatedPhone) -> str:
    """``adb connect`` the phone; return its serial."""
    assert phone.port not in _EMULATOR_PORTS
    result = await adb.run("connect", phone.serial)
    assert (0, f"connected to {phone.serial}\n") == (result.status, result.stdout)
    state = await adb.run("-s", phone.serial, "get-state")
    assert "device\n" == state.stdout
    return phone.serial


async def test_adb_connects_and_reads_sms_as_the_shell_user(
    phone: SimulatedPhone, adb: AdbClient
) -> None:
    """``adb shell content query`` prints one raw ``Row:`` line per visible row, newest first,
    inbox and sent only (``Content.java`` query, ``SmsProvider`` default sort ``date DESC``,
    ``ProviderUtil.isAccessRestricted``, TelephonyProvider android-15.0.0_r1)."""
    phone.store.insert_incoming("+15550100", "Hi, x=1\nRow: 7 fake", date_ms=1_700_000_000_000)
    phone.store.insert_outgoing("+15550111", "sent one", date_ms=1_700_000_001_000, message_type=2)
    phone.store.insert_outgoing("+15550122", "stuck", date_ms=1_700_000_002_000)
    serial = await connected(adb, phone)
    result = await adb.run(
        "-s",
        serial,
        "shell",
        "content query --uri content://sms --projection _id:address:body:type",
    )
    assert (0, "") == (result.status, result.stderr)
    assert (
        "Row: 0 _id=2, address=+15550111, body=sent one, type=2\n"
        "Row: 1 _id=1, address=+15550100, body=Hi, x=1\nRow: 7 fake, type=1\n"
    ) == result.stdout
    empty = await adb.run("-s", serial, "shell", "content query --uri content://sms/outbox")
    assert (0, "No result found.\n") == (empty.status, empty.stdout)


async def test_adb_shell_returns_exit_status_and_keeps_stderr_apart(
    phone: SimulatedPhone, adb: AdbClient
) -> None:
    """Through ``shell,v2:`` ``adb shell false`` exits 1, ``exit 3`` exits 3, and stderr stays on
    stderr (``shell_protocol.h``, ``shell_service.cpp`` android-10.0.0_r1 to 15)."""
    serial = await connected(adb, phone)
    false = await adb.run("-s", serial, "shell", "false")
    assert (1, "", "") == (false.status, false.stdout, false.stderr)
    three = await adb.run("-s", serial, "shell", "echo hi; exit 3")
    assert (3, "hi\n", "") == (three.status, three.stdout, three.stderr)
    mixed = await adb.run("-s", serial, "shell", "echo out; nosuch; echo more")
    assert (
        0,
        "out\nmore\n",
        "/system/bin/sh: nosuch: inaccessible or not found\n",
    ) == (mixed.status, mixed.stdout, mixed.stderr)
    assert ["false", "echo hi; exit 3", "echo out; nosuch; echo more"] == phone.commands_run


@pytest.mark.parametrize(("android", "unresolved_exit"), [(10, 0), (15, 1)])
async def test_adb_shell_am_start_prints_as_the_activity_manager(
    phone_factory: PhoneFactory, adb: AdbClient, android: int, unresolved_exit: int
) -> None:
    """``am start`` prints ``Starting: Intent { … }`` on stdout with the number masked
    (``Uri.toSafeString``); an intent nothing resolves adds ``Error: …`` on stderr and exits 0
    on Android 10, 1 on some 15 builds (``ActivityManagerShellCommand``)."""
    phone = await phone_factory(android=android)
    serial = await connected(adb, phone)
    sendto = await adb.run(
        "-s",
        serial,
        "shell",
        "am start -a android.intent.action.SENDTO -d smsto:+15550100 --es sms_body hello",
    )
    assert (
        0,
        "Starting: Intent { act=android.intent.action.SENDTO dat=smsto:xxxxxxxxx (has extras) }\n",
        "",
    ) == (sendto.status, sendto.stdout, sendto.stderr)
    nowhere = await adb.run(
        "-s", serial, "shell", "am start -a android.intent.action.VIEW -d nope:x"
    )
    intent = "Intent { act=android.intent.action.VIEW dat=nope:x }"
    assert (
        unresolved_exit,
        f"Starting: {intent}\n",
        f"Error: Activity not started, unable to resolve {intent}\n",
    ) == (nowhere.status, nowhere.stdout, nowhere.stderr)


async def test_the_send_round_trip_survives_a_drop_under_googles_adb_shell_v2(
    phone: SimulatedPhone, adb: AdbClient, adb_key_path: Path
) -> None:
    """Google's ``adb shell`` (``shell,v2:``, the phone announcing ``shell_v2``) runs the
    product's send round trip, and the connection drops right after the send key: adbd's own
    ``kill(pid, SIGHUP)`` is ignored (``trap '' HUP``) and the step writes only to its file,
    so the keys are pressed and recorded, one SMS goes out, the file is removed; the ``sh``
    dies of SIGPIPE at the last frame's ``echo``, so the probe after it never runs
    (``PassDataStreams``, ``ForkAndExec``: system/core ``adb/daemon/shell_service.cpp``
    android-10.0.0_r30 and 11.0.0_r1, packages/modules/adb to 15-qpr2)."""
    async with await Device.connect(
        phone.serial, key_path=adb_key_path, connect_timeout_s=2, command_timeout_s=5
    ) as device:
        epoch = await ensure_epoch(device)
    fence = ("d-1", epoch.epoch)
    step = send_command("+12025550143", "Your code is 4821", MessagingApp(), "00ff", fence=fence)
    script = frame_script(send_round_trip_steps(step, "")).command
    serial = await connected(adb, phone)
    phone.drop_after_command("input", nth=2)
    probe = "/data/local/tmp/after"
    result = await adb.run("-s", serial, "shell", f'{script}; echo "after=$?" >>{probe}')
    # the reply ends where the drop cut it (adb 29.0.6 then exits 0, as for a clean end)
    assert result.stdout.endswith(":3:begin\n")
    await phone.wait_idle()
    assert ["Your code is 4821"] == [message.body for message in phone.transmissions]
    assert [".epoch-" + epoch.epoch, "d-1", "d-1.am", "d-1.go", "d-1.keys"] == (
        phone.files.listdir(FENCE_ROOT)
    )
    assert phone.files.read_bytes(probe) is None
