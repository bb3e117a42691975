"""The library is a good citizen: imported without any logging set-up it writes nothing on
stdout or stderr; its events reach the standard logging tree once the application configures
it; the ``starebrain`` command (an application) logs to stderr at ``--log-level``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from android_bridge.simulator import SimulatedPhone
from tests.conftest import PhoneFactory
from tests.e2e.conftest import starebrain_command

pytestmark = pytest.mark.slow

RECIPIENT_DIGITS = "2025550143"
#: The body's secret: letters no log line holds by chance ("4821" did: a port, a time's
#: microseconds or a dispatch id holds four given digits often enough to fail a `.ci/run`).
SECRET = "quokka-4821"

#: An agent program: starts a simulated phone whose link stalls after its first send (the
#: command times out, so the bridge logs a WARNING), sends one SMS through SmsAgent (through
#: the messaging app, whose send the stall follows), and exits
#: 0 only when the send SUCCEEDED. ``argv[1]``, when given, is the level for
#: ``logging.basicConfig``.
AGENT_PROGRAM = """
import asyncio, logging, sys, tempfile
from datetime import timedelta
from pathlib import Path

if len(sys.argv) > 1:
    logging.basicConfig(level=sys.argv[1], stream=sys.stderr)

from android_bridge import ensure_key
from android_bridge.simulator import Fault, SimulatedPhone
from starebrain_actions import RetryPolicy
from starebrain_actions.orchestration.agent import SmsAgent


async def main() -> int:
    folder = Path(tempfile.mkdtemp())
    key = ensure_key(folder / "adbkey")
    (folder / "adb_keys").write_text(Path(f"{key}.pub").read_text())
    phone = SimulatedPhone(
        store_path=folder / "sms.db",
        authorized_keys_path=folder / "adb_keys",
        port=0,
        faults=[(Fault.HANG_AFTER_SEND, 1)],
    )
    await phone.start()
    try:
        async with SmsAgent.open(
            db=folder / "ledger.db",
            device=phone.serial,
            key_path=key,
            policy=RetryPolicy(
                settle_after=timedelta(milliseconds=300),
                framework_settle_after=timedelta(milliseconds=200),
                maximum_attempts=2,
                grace_window=timedelta(seconds=1),
            ),
            poll_interval_s=0.05,
            command_timeout_s=1,
            send_path="ui",
        ) as agent:
            outcome = await agent.send(
                "otp-1", "+1 202 555 0143", "Your code is quokka-4821", wait=30
            )
    finally:
        await phone.stop()
    return 0 if outcome.status.value == "SUCCEEDED" else 9


raise SystemExit(asyncio.run(main()))
"""


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("STAREBRAIN_LOG_SENSITIVE", "STAREBRAIN_DB", "STAREBRAIN_ADB_KEY"):
        env.pop(name, None)
    return env


async def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env or _clean_env(),
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=90)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_a_send_without_logging_configured_prints_nothing() -> None:
    """An agent that never configures logging sends an SMS (through a dropped connection,
    which the bridge logs as a warning) and sees nothing on stdout or stderr."""
    assert (0, "", "") == await _run(sys.executable, "-c", AGENT_PROGRAM)


async def test_events_reach_the_standard_logging_tree_once_configured() -> None:
    """With ``logging.basicConfig`` the same send's events come out on the application's
    handler, under ``starebrain.*`` and ``android_bridge.*``, without the number or body,
    and stdout stays empty."""
    code, stdout, stderr = await _run(sys.executable, "-c", AGENT_PROGRAM, "INFO")
    assert (0, "") == (code, stdout)
    assert "INFO:starebrain.ledger:event=delivery_confirmed" in stderr
    assert "WARNING:android_bridge.device:event=adb_command_failed" in stderr
    assert (False, False) == (RECIPIENT_DIGITS in stderr, SECRET in stderr)


async def test_warnings_only_at_warning_level() -> None:
    """The application's level applies: at WARNING the send shows its warning, no INFO."""
    code, stdout, stderr = await _run(sys.executable, "-c", AGENT_PROGRAM, "WARNING")
    assert (0, "", False) == (code, stdout, "delivery_confirmed" in stderr)
    assert "adb_command_failed" in stderr


@pytest.fixture
async def cli_phone(phone_factory: PhoneFactory) -> SimulatedPhone:
    """A simulated phone the command line can send through (its key is ``adb_key_path``)."""
    return await phone_factory()


async def test_cli_logs_to_stderr_at_its_log_level(
    cli_phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """``starebrain --log-level info send --json`` writes the library's events (redacted) on
    stderr and only the JSON record on stdout; at the default level a clean send logs
    nothing."""

    def send(action_id: str, *log_level: str) -> list[str]:
        return [
            *starebrain_command(),
            "--db", str(tmp_path / "ledger.db"), *log_level,
            "send", "--device", cli_phone.serial, "--to", "+12025550143",
            "--body", f"Your code is {SECRET}", "--action-id", action_id,
            "--key", str(adb_key_path), "--json",
        ]  # fmt: skip

    code, stdout, stderr = await _run(*send("loud", "--log-level", "info"))
    assert 0 == code, stderr
    assert "SUCCEEDED" == json.loads(stdout)["status"]
    events = [json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")]
    assert {"attempt_created", "sms_dispatched", "delivery_confirmed"} <= set(events)
    assert (False, False) == (RECIPIENT_DIGITS in stderr, SECRET in stderr)

    code, stdout, stderr = await _run(*send("quiet"))
    assert (0, "") == (code, stderr)
    assert "SUCCEEDED" == json.loads(stdout)["status"]


#: ``starebrain ARGS`` as the console script runs it, then which of structlog and cattrs it
#: imported, on stderr's last line.
_SEND_PROBE = """
import json, sys
from starebrain_actions.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps([name for name in ("structlog", "cattrs") if name in sys.modules]),
      file=sys.stderr)
sys.exit(code)
"""


async def test_a_clean_cli_send_imports_neither_structlog_nor_cattrs(
    cli_phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """A send that has nothing to log at the default level (warning) stores and proves its
    message without importing structlog (its console renderer imports rich and pygments) or
    cattrs; at ``--log-level info`` its events are written as before."""

    def send(action_id: str, *log_level: str) -> list[str]:
        return [
            sys.executable, "-c", _SEND_PROBE,
            "--db", str(tmp_path / "ledger.db"), *log_level,
            "send", "--device", cli_phone.serial, "--to", "+12025550143",
            "--body", "hello", "--action-id", action_id, "--key", str(adb_key_path),
        ]  # fmt: skip

    code, _stdout, stderr = await _run(*send("quiet"))
    assert (0, []) == (code, json.loads(stderr.splitlines()[-1])), stderr
    code, _stdout, stderr = await _run(*send("loud", "--log-level", "info"))
    assert (0, ["structlog"]) == (code, json.loads(stderr.splitlines()[-1])), stderr
    events = [json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")]
    assert "delivery_confirmed" in events
