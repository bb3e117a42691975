"""``starebrain simulator`` as a real process: it listens, answers, and stops on signals."""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from adb_shell.adb_device_async import AdbDeviceTcpAsync
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from tests.simulator.sim_helpers import send_command

_LAUNCH = "from starebrain_actions.cli.main import main; main(prog_name='starebrain')"
_LISTENING = re.compile(r"^listening on 127\.0\.0\.1:(\d+) serial=127\.0\.0\.1:(\d+) ")

pytestmark = pytest.mark.slow


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LAUNCH,
        "simulator",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_runs_standalone_and_stops_on_signal(
    tmp_path: Path, authorized_keys_path: Path, adb_signer: PythonRSASigner, signum: int
) -> None:
    """The command prints where it listens, serves adb-shell, and exits cleanly on a signal."""
    store = tmp_path / "cli.db"
    process = await _spawn(
        "--port", "0", "--store", str(store), "--authorized-keys", str(authorized_keys_path),
        "--fault", "send-fails:1",
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(20):
            first_line = (await process.stdout.readline()).decode()
        match = _LISTENING.match(first_line)
        assert match is not None, first_line
        assert match.group(1) == match.group(2)
        device = AdbDeviceTcpAsync("127.0.0.1", int(match.group(1)), default_transport_timeout_s=5)
        await device.connect(rsa_keys=[adb_signer], auth_timeout_s=5)
        assert "standalone\n" == await device.shell("echo standalone")
        await device.shell(send_command("+15550100", "hello"))
        await device.close()
        with sqlite3.connect(store) as db:
            assert [(5,)] == db.execute("SELECT type FROM sms").fetchall()
        process.send_signal(signum)
        async with asyncio.timeout(20):
            rest, _ = await process.communicate()
        assert 0 == process.returncode
        assert rest.decode().endswith("stopped\n")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_unknown_fault_is_a_usage_error(tmp_path: Path, authorized_keys_path: Path) -> None:
    """An unknown --fault exits 2 and lists the valid fault names."""
    process = await _spawn("--port", "0", "--authorized-keys", str(authorized_keys_path),
                           "--fault", "explode")  # fmt: skip
    async with asyncio.timeout(20):
        _, stderr = await process.communicate()
    assert 2 == process.returncode
    assert "unknown fault 'explode'; valid faults: drop-after-send" in stderr.decode()


async def test_missing_authorized_keys_explains_how_to_create_them(tmp_path: Path) -> None:
    """Without an adb_keys file the command refuses to start and says how to make one."""
    missing = tmp_path / "adb_keys"
    process = await _spawn("--port", "0", "--authorized-keys", str(missing))
    async with asyncio.timeout(20):
        _, stderr = await process.communicate()
    message = " ".join(stderr.decode().split())
    assert 2 == process.returncode
    assert f"authorized keys file {missing} does not exist" in message
    assert "--allow-new-keys" in message


async def test_role_options_reach_the_phone(
    tmp_path: Path, authorized_keys_path: Path, adb_signer: PythonRSASigner
) -> None:
    """--permission-module-updated (cmd role answers on 13: RoleShellCommand's
    get-role-holders, Permission commit 2e97608b, in android-14.0.0_r11 and a module of that
    line), --sms-default-setting (a stale package, not the holder: nothing writes the setting
    from Android 10 on, frameworks/base SmsApplication, untagged copies), --work-profile and
    --secondary-user-sms-app (three users in dumpsys role: RoleUserState.dump per user)
    change what the phone answers."""
    process = await _spawn(
        "--port", "0", "--store", str(tmp_path / "cli.db"),
        "--authorized-keys", str(authorized_keys_path), "--android", "13",
        "--permission-module-updated", "--sms-default-setting", "org.example.old",
        "--work-profile", "--secondary-user-sms-app", "org.example.other",
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(20):
            match = _LISTENING.match((await process.stdout.readline()).decode())
        assert match is not None
        device = AdbDeviceTcpAsync("127.0.0.1", int(match.group(1)), default_transport_timeout_s=5)
        await device.connect(rsa_keys=[adb_signer], auth_timeout_s=5)
        output = await device.shell(
            "cmd role get-role-holders android.app.role.SMS; echo $?;"
            " settings get secure sms_default_application; dumpsys role | grep -c user_id="
        )
        await device.close()
        assert "com.google.android.apps.messaging\n0\norg.example.old\n3\n" == output
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await process.communicate()
