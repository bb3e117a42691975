"""toybox grep as the send script uses it, through the real ADB protocol, checked against the
host's GNU grep where both must agree (exit statuses and selected lines)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge.simulator import SimulatedPhone
from tests.simulator.sim_helpers import connect

TEXT = "Starting: Intent { act=x }\nStatus: ok\nWarning: Activity not started\n"
CASES = [
    ("grep -qx 'Status: ok'", 0),
    ("grep -qx 'Status'", 1),
    ("grep -cvE '^(Starting: Intent \\{.*\\}|Status: ok)$'", 0),
    ("grep -cE '^Activity: android/'", 1),
    ("grep -e Status -e Warning", 0),
    ("grep -F '{ act'", 0),
    ("grep -i 'status: OK'", 0),
    ("grep -v Status", 0),
]


@pytest.mark.parametrize(("command", "status"), CASES)
async def test_grep_selects_and_exits_as_toybox_does(
    phone: SimulatedPhone, adb_signer: PythonRSASigner, command: str, status: int
) -> None:
    """Exit 0 when a line is selected, 1 when none is; -c prints the count and still exits 1
    on 0; -q prints nothing (toybox toys/posix/grep.c, toybox 0.8.0 to 0.8.11 in Android 10
    to 15)."""
    device = await connect(phone, adb_signer)
    try:
        script = f"printf '%s' '{TEXT}' | {command}; echo \"__X:$?\""
        output = str(await device.shell(script))
    finally:
        await device.close()
    assert output.endswith(f"__X:{status}\n"), output
    host = shutil.which("grep")
    if host is not None:
        expected = subprocess.run(
            ["sh", "-c", f"printf '%s' '{TEXT}' | {command}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (expected.stdout, expected.returncode) == (output[: -len(f"__X:{status}\n")], status)
