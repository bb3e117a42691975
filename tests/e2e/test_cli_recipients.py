"""An invalid recipient is refused before anything is recorded or sent (issue 9, section 5)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import InvalidInput, Ledger
from starebrain_actions.cli.main import main
from starebrain_actions.orchestration.agent import SmsAgent
from tests.core.test_core_recipients import ARABIC_INDIC, FULLWIDTH, REPORTED, in_script

BODY = "Your code is 4821"
SENT = 2


async def send(ledger_path: Path, key: Path, serial: str, *args: str) -> Result:
    """Run `starebrain --db L send --device SERIAL --key KEY ARGS` off the phone's loop."""
    argv = ["--db", str(ledger_path), "send", "--device", serial, "--key", str(key), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


async def recorded_actions(ledger_path: Path) -> list[str]:
    """Ids of every action the ledger holds."""
    async with Ledger.open(ledger_path) as ledger:
        return [summary.action.action_id for summary in await ledger.summaries()]


def sent_commands(phone: SimulatedPhone) -> list[str]:
    """Shell commands that could send: ``am`` launches and key events."""
    return [c for c in phone.commands_run if "am start" in c or "input keyevent" in c]


@pytest.mark.parametrize("number", REPORTED)
async def test_cli_refuses_a_reported_number_with_exit_2_and_records_nothing(
    number: str, phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """`starebrain send` exits 2 on each reported number; no action, no am, no SMS."""
    assert [] == await recorded_actions(ledger_path)  # the ledger exists, empty
    result = await send(ledger_path, adb_key_path, phone.serial, "--to", number, "--body", BODY)
    assert 2 == result.exit_code, result.output
    assert "not a phone number or short code" in result.stderr
    assert [] == await recorded_actions(ledger_path)
    assert [] == sent_commands(phone)
    assert [] == phone.transmissions


async def test_cli_refuses_a_national_number_without_a_region(
    phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """A national number with no --region is refused (exit 2) rather than read in some region."""
    result = await send(
        ledger_path, adb_key_path, phone.serial, "--to", "(202) 555-0143", "--body", BODY
    )
    assert 2 == result.exit_code, result.output
    assert "needs a region" in result.stderr
    assert [] == sent_commands(phone)
    assert [] == phone.transmissions


@pytest.mark.parametrize(
    ("number", "region"),
    [
        pytest.param(in_script("+1 202 555 0143", ARABIC_INDIC), None, id="arabic-indic"),
        pytest.param(in_script("\uff0b1 202 555 0143", FULLWIDTH), None, id="fullwidth"),
        pytest.param("(202) 555-0143", "US", id="national-with-region"),
    ],
)
async def test_cli_sends_to_the_ascii_number_once_and_a_rerun_spelled_in_ascii_is_the_same(
    number: str,
    region: str | None,
    phone: SimulatedPhone,
    ledger_path: Path,
    adb_key_path: Path,
) -> None:
    """Other scripts' digits and national numbers are sent as ASCII E.164 and succeed (through
    the messaging app, whose `smsto:` intent shows the number); the same number spelled in
    ASCII is the same action, so the rerun sends nothing."""
    where = ("--region", region) if region else ()
    app = ("--send-path", "ui")
    first = await send(
        ledger_path, adb_key_path, phone.serial, "--to", number, "--body", BODY, *where, *app
    )
    assert 0 == first.exit_code, first.output
    again = await send(
        ledger_path, adb_key_path, phone.serial, "--to", "+1 202 555 0143", "--body", BODY, *app
    )
    assert 0 == again.exit_code, again.output
    assert first.stdout.split()[2] == again.stdout.split()[2]  # the derived action id
    assert 1 == len(await recorded_actions(ledger_path))
    assert ["+12025550143"] == [row.address for row in phone.store.rows(types=[SENT])]
    assert ["smsto:+12025550143"] == [
        word.strip("'") for command in sent_commands(phone) for word in command.split()
        if "smsto:" in word
    ]  # fmt: skip


@pytest.mark.parametrize("number", REPORTED)
async def test_agent_send_raises_invalid_input_before_any_write_or_command(
    number: str, phone: SimulatedPhone, ledger_path: Path, adb_key_path: Path
) -> None:
    """SmsAgent.send raises InvalidInput on each reported number: the ledger has no action and
    the phone gets no command at all from the call."""
    async with SmsAgent.open(
        db=ledger_path, device=phone.serial, key_path=adb_key_path, command_timeout_s=2.0
    ) as agent:
        before = list(phone.commands_run)
        with pytest.raises(InvalidInput, match="not a phone number or short code"):
            await agent.send("A-1", number, BODY, wait=1)
        assert before == phone.commands_run
        assert [] == await agent.ledger.summaries()
    assert (0, []) == (agent.dispatches, phone.transmissions)
