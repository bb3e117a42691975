"""The seed's fourth case through the CLI: two `starebrain send` processes, one SMS."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import sent_rows

TO, BODY = "+1 202 555 0100", "Your code is 4821"


@pytest.mark.slow
async def test_two_cli_senders_of_one_action_send_one_sms(
    sms_phone: Any, db_path: Path, adb_key_path: Path
) -> None:
    """Two concurrent `starebrain send` runs with the same action id, through the messaging
    app: both exit 0, one SMS, one launch of the app."""
    phone = await sms_phone(send_delay_ms=200)
    command = [
        str(Path(sys.executable).parent / "starebrain"),
        "--db",
        str(db_path),
        "send",
        "--device",
        phone.serial,
        "--to",
        TO,
        "--body",
        BODY,
        "--action-id",
        "A-17",
        "--key",
        str(adb_key_path),
        "--grace",
        "2",
        "--wait",
        "15",
        "--send-path",
        "ui",
    ]
    processes = [
        await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ},
        )
        for _ in range(2)
    ]
    outputs = await asyncio.wait_for(
        asyncio.gather(*(process.communicate() for process in processes)), timeout=60
    )
    for process, (output, _) in zip(processes, outputs, strict=True):
        assert 0 == process.returncode, output.decode()
    assert 1 == len(sent_rows(phone, TO, BODY))
    assert 1 == sum(1 for command in phone.commands_run if "am start" in command)
