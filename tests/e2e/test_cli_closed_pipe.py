"""A reader that goes is no error (issue 36): `starebrain status X | head -1`, `history`,
`list`, `doctor` exit with their own status when their stdout is a pipe whose reader has
closed it, as `set -o pipefail` scripts need, and say nothing about it on stderr."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from android_bridge.simulator import SimulatedPhone
from tests.e2e.conftest import Target, starebrain_command


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the installed command with stdout a real pipe whose read end is closed before
    the command starts: its first write meets EPIPE, as `| head -1` gives one once head has
    read its line and exited."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {key: value for key, value in os.environ.items() if key != "STAREBRAIN_DB"}
    env.pop("STAREBRAIN_DEVICE", None)
    try:
        return subprocess.run(
            [*starebrain_command(), *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "command",
    [
        ("status", "ok-1"),
        ("status", "ok-1", "--json"),
        ("history", "ok-1"),
        ("list",),
        ("list", "--json"),
        ("review",),
        ("events",),
    ],
)
async def test_a_closed_pipe_is_exit_0(seeded_ledger: Target, command: tuple[str, ...]) -> None:
    """Each read command exits 0, with an empty stderr, into a pipe nobody reads."""
    done = await asyncio.to_thread(run_into_closed_pipe, "--db", str(seeded_ledger), *command)
    assert (0, b"") == (done.returncode, done.stderr)


async def test_a_closed_pipe_keeps_a_failure_a_failure(seeded_ledger: Target) -> None:
    """A command that fails still says so: its own status (1) and its message on stderr."""
    done = await asyncio.to_thread(
        run_into_closed_pipe, "--db", str(seeded_ledger), "status", "no-such-action"
    )
    assert 1 == done.returncode
    assert b"no-such-action" in done.stderr


async def test_doctor_into_a_closed_pipe_is_its_own_status(
    phone: SimulatedPhone, adb_key_path: Path, seeded_ledger: Target
) -> None:
    """doctor on a phone where no check fails exits 0 into a closed pipe (it exited 1)."""
    done = await asyncio.to_thread(
        run_into_closed_pipe,
        "--db", str(seeded_ledger), "doctor", "--device", phone.serial, "--key", str(adb_key_path),
    )  # fmt: skip
    assert 0 == done.returncode, done.stderr
    assert b"Traceback" not in done.stderr
    assert b"BrokenPipe" not in done.stderr
