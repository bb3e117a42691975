"""`starebrain send` without `--action-id` against the simulated phone (issue 21, item 8): a
rerun inside the window is the earlier message and sends nothing, says so, and says when it
went out; past the window the same text is a new action, `sms-…-2`, and a second SMS; an
action whose outcome is not settled is resumed however old. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import (
    Ledger,
    MatchVerdict,
    RetryPolicy,
    SmsIntent,
    confirm_delivery,
    try_accept,
)
from starebrain_actions.cli.main import main
from starebrain_actions.core.derived_ids import derive_action_id
from tests.e2e.conftest import BODY, RECIPIENT, Target

SENT = 2
INTENT = SmsIntent(recipient=RECIPIENT, body=BODY)
DERIVED = derive_action_id(INTENT)
ARGS = ("--to", RECIPIENT, "--body", BODY, "--wait", "10")
EARLIER = "this is the earlier message of action"


async def transmitted(phone: SimulatedPhone, count: int) -> int:
    """How many messages left the phone, counted once ``count`` have (the radio sends after
    the row) and nothing more is on its way."""
    return len(await phone.wait_transmissions(count=count, then_idle=True))


async def send(ledger: Target, key: Path, serial: str, *args: str) -> Result:
    """`starebrain --db L send --device SERIAL --key KEY ARGS`, off the phone's loop."""
    argv = ["--db", str(ledger), "send", "--device", serial, "--key", str(key), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


def sent_rows(phone: SimulatedPhone) -> list[str | None]:
    """Bodies of the rows in the phone's own sent box."""
    return [row.body for row in phone.store.rows(types=[SENT])]


def action_id_of(result: Result) -> str:
    """The action id `send` printed first (`action id ID (derived …)`)."""
    match = re.match(r"action id (\S+) \(derived from the intent", result.stdout)
    assert match is not None, result.stdout
    return match.group(1)


async def sent_long_ago(ledger: Target, action_id: str, age: timedelta) -> None:
    """``action_id`` holding INTENT, created, sent and accepted ``age`` ago on another phone
    (through the ledger's API, with its times in the past)."""
    then = datetime.now(UTC) - age
    async with Ledger.open(ledger) as opened:
        await opened.create_action(action_id, INTENT, now=then)
        record = await opened.begin_attempt(action_id, "10.0.0.1:5555", now=then)
        confirmed = confirm_delivery(record, provider_object_id=7, now=then)
        await opened.apply(confirmed)
        await opened.apply(try_accept(confirmed.after, MatchVerdict(matched=True), now=then))


async def test_a_rerun_inside_the_window_is_the_earlier_message_and_past_it_a_new_action(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """The first send goes out under `sms-<16 hex>`; a rerun resumes it, sends nothing and
    says it is the earlier message, with its time (also in --json); once the window (1 s
    here) has passed since that send, the same command is a new action `sms-<16 hex>-2` and
    a second SMS, which a rerun with the default window then resumes."""
    first = await send(ledger_target, adb_key_path, phone.serial, *ARGS)
    assert 0 == first.exit_code, first.output
    assert (DERIVED, 1) == (action_id_of(first), await transmitted(phone, 1))
    assert EARLIER not in first.stdout

    again = await send(ledger_target, adb_key_path, phone.serial, *ARGS)
    assert 0 == again.exit_code, again.output
    assert DERIVED == action_id_of(again)
    line = again.stdout.splitlines()[1]
    assert line.startswith(f"{EARLIER} {DERIVED}, first sent at "), line
    assert "s ago); nothing was sent now." in line
    assert "To send the same text again as a new message, pass a new --action-id." in line
    as_json = json.loads(
        (await send(ledger_target, adb_key_path, phone.serial, *ARGS, "--json")).stdout
    )
    assert (DERIVED, True, True, 0) == (
        as_json["action"]["action_id"],
        as_json["action_id_derived"],
        as_json["earlier_message"],
        as_json["exit_code"],
    )
    assert as_json["attempts"][0]["dispatched_at"] == as_json["first_sent_at"]
    assert as_json["first_sent_at"] in line
    assert [BODY] == sent_rows(phone) and 1 == await transmitted(phone, 1)

    # still inside a 5 s window: resumed; then past a 1 s window: a new action
    inside = await send(
        ledger_target, adb_key_path, phone.serial, *ARGS, "--derived-id-window", "5"
    )
    assert (DERIVED, True) == (action_id_of(inside), EARLIER in inside.stdout)
    await asyncio.sleep(1.1)
    later = await send(ledger_target, adb_key_path, phone.serial, *ARGS, "--derived-id-window", "1")
    assert 0 == later.exit_code, later.output
    assert f"{DERIVED}-2" == action_id_of(later)
    assert EARLIER not in later.stdout
    assert [BODY, BODY] == sent_rows(phone) and 2 == await transmitted(phone, 2)

    resumed = await send(ledger_target, adb_key_path, phone.serial, *ARGS, "--json")
    data = json.loads(resumed.stdout)
    assert (f"{DERIVED}-2", True, 1) == (
        data["action"]["action_id"],
        data["earlier_message"],
        len(data["attempts"]),
    )
    assert 2 == await transmitted(phone, 2)


async def test_a_day_old_settled_action_is_not_the_answer_any_more(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """The default window is 24 hours: "Meeting at 5" sent and accepted 25 hours ago is not
    the answer to today's send; today's is a new action and the phone sends it."""
    await sent_long_ago(ledger_target, DERIVED, timedelta(hours=25))
    result = await send(ledger_target, adb_key_path, phone.serial, *ARGS)
    assert 0 == result.exit_code, result.output
    assert f"{DERIVED}-2" == action_id_of(result)
    assert [BODY] == sent_rows(phone)


async def test_an_action_sent_23_hours_ago_is_still_the_answer(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """Inside the default window, the earlier message answers, with its age, and the phone
    is not even asked to send."""
    await sent_long_ago(ledger_target, DERIVED, timedelta(hours=23))
    result = await send(ledger_target, adb_key_path, phone.serial, *ARGS)
    assert 0 == result.exit_code, result.output
    assert DERIVED == action_id_of(result)
    assert "(23h ago); nothing was sent now." in result.stdout
    assert [] == sent_rows(phone) and 0 == await transmitted(phone, 0)


async def test_an_unresolved_old_action_is_resumed_past_the_window(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """An attempt three days old whose outcome was never proven (the phone shows nothing of
    it) is resumed, not replaced: a new action could be a second SMS. Nothing is sent; the
    reply says it is the earlier message and warns against a new id."""
    then = datetime.now(UTC) - timedelta(days=3)
    async with Ledger.open(ledger_target) as opened:
        await opened.create_action(DERIVED, INTENT, now=then)
        await opened.begin_attempt(DERIVED, phone.serial, now=then)
    result = await send(
        ledger_target, adb_key_path, phone.serial, *ARGS, "--wait", "3", "--derived-id-window", "1"
    )
    assert 3 == result.exit_code, result.output
    assert DERIVED == action_id_of(result)
    assert "(3d ago); nothing was sent now. Its outcome is not settled yet" in result.stdout
    assert "never with a new --action-id" in result.stdout
    assert 0 == await transmitted(phone, 0)


async def test_a_planned_old_action_is_resumed_and_sent_once(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """An action recorded three days ago whose send never started (PLANNED) is resumed, not
    replaced, and sent now: one SMS under the first id, and no "earlier message" (nothing
    went out before)."""
    async with Ledger.open(ledger_target) as opened:
        await opened.create_action(
            DERIVED,
            INTENT,
            RetryPolicy(settle_after=timedelta(milliseconds=300)),
            now=datetime.now(UTC) - timedelta(days=3),
        )
    result = await send(ledger_target, adb_key_path, phone.serial, *ARGS, "--json")
    data = json.loads(result.stdout)
    assert (0, DERIVED, False, 1) == (
        result.exit_code,
        data["action"]["action_id"],
        data["earlier_message"],
        len(data["attempts"]),
    )
    assert [BODY] == sent_rows(phone)


async def test_an_explicit_id_never_expires_and_its_rerun_says_so(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """`--action-id` sent three days ago: the rerun is still that action, sends nothing, and
    says it is the earlier message; --derived-id-window does not apply to it."""
    await sent_long_ago(ledger_target, "meeting-5pm", timedelta(days=3))
    result = await send(
        ledger_target, adb_key_path, phone.serial, *ARGS, "--action-id", "meeting-5pm",
        "--derived-id-window", "0",
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert result.stdout.startswith(f"{EARLIER} meeting-5pm, first sent at "), result.stdout
    assert "(3d ago); nothing was sent now." in result.stdout
    assert 0 == await transmitted(phone, 0)


async def test_a_bad_window_is_a_usage_error(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """A negative or non-finite window is exit 2, and nothing is sent."""
    for value in ("-1", "nan", "inf"):
        result = await send(
            ledger_target, adb_key_path, phone.serial, *ARGS, "--derived-id-window", value
        )
        assert 2 == result.exit_code, (value, result.output)
    assert [] == phone.transmissions
