"""Issue 11, "Deadlines and feedback": `--wait` is a deadline for every step, a long send shows
its step on a terminal (and only there), and Ctrl-C says what may have happened."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
import time
from pathlib import Path

import pytest

from android_bridge.simulator import SimulatedPhone
from tests.conftest import OUTBOX_FIRST
from tests.e2e.conftest import BODY, RECIPIENT, spawn_interruptible

PhoneFactory = object
STAREBRAIN = str(Path(sys.executable).parent / "starebrain")


def send_argv(ledger: Path, key: Path, serial: str, *args: str) -> list[str]:
    """`starebrain send` of the test intent through ``serial``."""
    return [
        STAREBRAIN, "--db", str(ledger), "send", "--device", serial, "--key", str(key),
        "--to", RECIPIENT, "--body", BODY, "--action-id", "A-17", *args,
    ]  # fmt: skip


async def run(argv: list[str], limit_s: float = 60) -> tuple[int, str, str, float]:
    """Run a command off the phone's loop; its exit code, stdout, stderr and duration."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), limit_s)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode(), time.monotonic() - started


async def ours(phone: SimulatedPhone, expected: int) -> int:
    """How many times the phone transmitted the test body, counted once the ``expected``
    transmissions have come (the radio sends after the row) and nothing more can."""
    sent = await phone.wait_transmissions(lambda t: t.body == BODY, count=expected, then_idle=True)
    return len(sent)


@pytest.mark.slow
async def test_wait_bounds_a_send_whose_command_hangs(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """The phone sends through the messaging app, then its command never answers: with the
    default 20 s command timeout
    `send --wait 3` still ends within about 3 s (exit 3: unresolved, never FAILED); a rerun
    settles it by reading, and exactly one SMS went out."""
    phone = await phone_factory(faults=["hang-after-send"])  # type: ignore[operator]
    send = asyncio.create_task(
        run(send_argv(ledger_path, adb_key_path, phone.serial, "--send-path", "ui", "--wait", "3"))
    )
    # the wait is the send's, counted once the command has started: from the phone's first
    # command on (Python's start-up before it is no part of it, and takes seconds beside a
    # loaded machine's other work)
    for _ in range(6000):
        if phone.commands_run or send.done():
            break
        await asyncio.sleep(0.01)
    first_command = time.monotonic()
    code, out, err, _ = await send
    took = time.monotonic() - first_command
    assert 3 == code, out + err
    assert took < 5.0, f"--wait 3 took {took:.1f} s from the first command"
    again = await run(
        send_argv(ledger_path, adb_key_path, phone.serial, "--send-path", "ui", "--wait", "10")
    )
    assert 0 == again[0], again[1] + again[2]
    assert "SUCCEEDED" in again[1]
    assert 1 == await ours(phone, 1)


@pytest.mark.slow
async def test_wait_bounds_connecting_to_a_phone_that_never_answers(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """Every command hangs from the first one (the phone's shell never answers): connecting
    is tried again until the deadline, then one line saying so, exit 7 (the phone is not
    ready), nothing recorded or sent."""
    phone = await phone_factory(faults=[("hang", 50)])  # type: ignore[operator]
    code, out, err, took = await run(
        send_argv(ledger_path, adb_key_path, phone.serial, "--wait", "2")
    )
    assert 7 == code, out + err
    assert took < 5.0, f"--wait 2 took {took:.1f} s"
    assert "Traceback" not in err
    assert 0 == await ours(phone, 0)


@pytest.mark.slow
async def test_a_long_send_shows_its_step_on_a_terminal_only(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path, tmp_path: Path
) -> None:
    """The message stays in the outbox: on a terminal the send shows what it waits for after a
    second; piped, stderr and stdout carry no escape sequence and no status line."""
    phone = await phone_factory(faults=["stuck-outbox"], app=OUTBOX_FIRST)  # type: ignore[operator]
    argv = send_argv(ledger_path, adb_key_path, phone.serial, "--wait", "2.5")
    master, slave = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "TERM": "xterm"}
    )
    os.close(slave)
    captured = bytearray()
    loop = asyncio.get_running_loop()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            captured.extend(chunk)

    reader = loop.run_in_executor(None, drain)
    await asyncio.wait_for(process.wait(), 30)
    await asyncio.wait_for(reader, 10)
    os.close(master)
    shown = captured.decode(errors="replace")
    assert 3 == process.returncode, shown
    assert "waiting for the phone's row" in shown
    piped = await run(send_argv(ledger_path, adb_key_path, phone.serial, "--wait", "2"))
    assert "\x1b[" not in piped[1] + piped[2]
    assert "waiting for the phone's row" not in piped[1] + piped[2]


@pytest.mark.slow
async def test_ctrl_c_says_an_sms_may_be_out_and_a_rerun_is_safe(
    phone_factory: PhoneFactory, ledger_path: Path, adb_key_path: Path
) -> None:
    """Ctrl-C while a send through the messaging app waits for the phone's row: exit 130 and
    a message that this run handed a send to the phone (the SMS may already be out) and
    rerunning the same command is safe; the rerun sends nothing more."""
    phone = await phone_factory(faults=["stuck-outbox"], app=OUTBOX_FIRST)  # type: ignore[operator]
    argv = send_argv(ledger_path, adb_key_path, phone.serial, "--send-path", "ui", "--wait", "30")
    process = await spawn_interruptible(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    for _ in range(100):
        if phone.transmissions or phone.store.max_id():
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    text = err.decode()
    assert 130 == process.returncode, out.decode() + text
    assert "This run handed a send to the phone: the SMS may already be out" in text
    assert "Rerunning the same command is safe" in text and "A-17" in text
    assert "Traceback" not in text
    rerun = await run(
        send_argv(ledger_path, adb_key_path, phone.serial, "--send-path", "ui", "--wait", "1.5")
    )
    assert 3 == rerun[0], rerun[1] + rerun[2]
    assert 1 == sum(1 for command in phone.commands_run if "am start" in command)


@pytest.mark.parametrize("spawn", ["spawn_interruptible", "create_subprocess_exec"])
async def test_a_ctrl_c_test_can_interrupt_its_child_when_this_run_ignores_sigint(
    spawn: str,
) -> None:
    """A run started as a background job of a shell without job control ignores SIGINT, and so
    would every child it starts: the Ctrl-C tests start theirs with ``spawn_interruptible``,
    whose child gets Python's KeyboardInterrupt handler, while this process keeps ignoring it
    (as a plain ``create_subprocess_exec`` shows, its child inherits ``SIG_IGN``)."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if spawn == "spawn_interruptible":
            process = await spawn_interruptible(
                sys.executable, "-c", probe, stdout=asyncio.subprocess.PIPE
            )
        else:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", probe, stdout=asyncio.subprocess.PIPE
            )
        out, _err = await asyncio.wait_for(process.communicate(), 30)
        assert signal.SIG_IGN is signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    assert (spawn == "spawn_interruptible") == ("True" == out.decode().strip())
