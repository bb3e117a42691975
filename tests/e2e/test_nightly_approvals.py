"""The nightly report and the policy gate, on SQLite and PostgreSQL: an action the gate holds
for a person's approval needs a person (with `starebrain approve` and `starebrain deny`, as
`review` lists it), and neither a held action nor a denied one is "not sent" for `resume`,
which sends neither."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions import Ledger, SmsIntent, fail_delivery
from starebrain_actions.cli.main import main
from starebrain_actions.core.convert import format_time
from starebrain_actions.core.exceptions import PolicyRefused
from starebrain_actions.core.policy import Policy
from tests.e2e.conftest import BODY, RECIPIENT, Target

SENT = 2
PHONE = "10.0.0.1:5555"
HOLDING = Policy(approve="always")
ROOT = Path(__file__).resolve().parents[2]
#: what the gate says of an action it holds under ``approve = "always"``
HELD_DETAIL = "every SMS needs a person's approval"


async def cli(ledger: Target, *args: str) -> Result:
    """``starebrain --db LEDGER ARGS`` off the test's event loop."""
    argv = ["--db", str(ledger), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


async def hold(ledger: Ledger, action_id: str, *, now: datetime, body: str = BODY) -> None:
    """Create ``action_id`` at ``now`` and have the gate hold it for approval, as `send
    --policy` with `approve = "always"` does: nothing reaches a phone."""
    await ledger.create_action(action_id, SmsIntent(recipient=RECIPIENT, body=body), now=now)
    with pytest.raises(PolicyRefused):
        await ledger.begin_attempt(action_id, PHONE, now=now, gate=HOLDING)


async def seed(target: Target) -> None:
    """A ledger with, all idle for hours: a plain PLANNED action, two held for approval
    (one PLANNED, one after a FAILED attempt), one a person denied, one the gate denied
    (`recipients.deny`), and one a person approved."""
    async with Ledger.open(target) as ledger:
        start = ledger.now() - timedelta(hours=5)
        at = [start + timedelta(minutes=minute) for minute in range(6)]
        intent = SmsIntent(recipient=RECIPIENT, body=BODY)
        await ledger.create_action("plain", intent, now=at[0])
        await hold(ledger, "held", now=at[1])
        await ledger.create_action("held-after-fail", intent, now=at[2])
        record = await ledger.begin_attempt("held-after-fail", PHONE, now=at[2])
        await ledger.apply(fail_delivery(record, reason="the phone refused it", now=at[2]))
        with pytest.raises(PolicyRefused):
            await ledger.begin_attempt("held-after-fail", PHONE, now=at[3], gate=HOLDING)
        await hold(ledger, "denied", now=at[3])
        await ledger.deny("denied", operator="bo", reason="not wanted", now=at[4])
        await ledger.create_action("refused", intent, now=at[4])
        with pytest.raises(PolicyRefused):
            await ledger.begin_attempt("refused", PHONE, now=at[4], gate=Policy(deny=("+1202*",)))
        await hold(ledger, "approved", now=at[5])
        await ledger.approve("approved", operator="bo", now=at[5])


async def test_a_held_action_needs_a_person_with_both_commands(ledger_target: Target) -> None:
    """An action the gate holds is listed as waiting for a person's approval (text and JSON)
    with its rule, since when, `starebrain approve ID` and `starebrain deny ID --reason
    TEXT`, and NEEDS A PERSON counts it with the commands: exit 1, no number, no body."""
    async with Ledger.open(ledger_target) as ledger:
        held_at = ledger.now() - timedelta(minutes=5)
        await hold(ledger, "H-1", now=held_at)
    data = await cli(ledger_target, "nightly", "--json")
    assert 1 == data.exit_code, data.output
    report = json.loads(data.stdout)
    assert [
        {
            "action_id": "H-1",
            "rule": "recipients.approve",
            "detail": HELD_DETAIL,
            "since": format_time(held_at),
            "commands": ["starebrain approve H-1", "starebrain deny H-1 --reason TEXT"],
        }
    ] == report["awaiting_approval"]
    assert [
        "1 action(s) wait for a person's approval (the policy gate holds them; nothing was"
        " sent): `starebrain approve ID` lets one go, `starebrain deny ID --reason TEXT`"
        " stops it"
    ] == report["attention"]
    assert [] == report["unsent"]
    text = await cli(ledger_target, "nightly")
    assert 1 == text.exit_code, text.output
    lines = text.stdout.splitlines()
    assert [
        "waiting for a person's approval: 1",
        f"  H-1: held by recipients.approve since {format_time(held_at)} ({HELD_DETAIL});"
        " `starebrain approve H-1` or `starebrain deny H-1 --reason TEXT`",
    ] == lines[lines.index("waiting for a person's approval: 1") :][:2]
    needs = lines[-1]
    assert needs.startswith("NEEDS A PERSON: 1 action(s) wait for a person's approval")
    assert "`starebrain deny ID --reason TEXT`" in needs
    for shown in (data.stdout, text.stdout):
        assert RECIPIENT not in shown and BODY not in shown


async def test_the_documented_lines_are_what_nightly_prints(ledger_path: Path) -> None:
    """The held action's lines docs/nightly.md shows are those `nightly` prints, but for the
    time."""
    async with Ledger.open(ledger_path) as ledger:
        await hold(ledger, "otp-2001", now=ledger.now())
    result = await cli(ledger_path, "nightly", "--dry-run")
    printed = result.stdout.splitlines()
    start = printed.index("waiting for a person's approval: 1")
    doc = (ROOT / "docs" / "nightly.md").read_text(encoding="utf-8")
    marker = f"::{test_the_documented_lines_are_what_nightly_prints.__name__} -->\n```text\n"
    shown = doc[doc.index(marker) + len(marker) :].split("\n```")[0]
    assert untimed(shown) == untimed("\n".join([*printed[start : start + 2], printed[-1]]))


def untimed(text: str) -> str:
    """``text`` with its times as ``<time>``."""
    return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", text)


async def test_the_archive_lists_held_actions_with_their_commands(
    ledger_target: Target, tmp_path: Path
) -> None:
    """The Markdown archive has a "Waiting for a person's approval" table: the action, its
    rule, why, since when and both commands, as plain text."""
    async with Ledger.open(ledger_target) as ledger:
        held_at = ledger.now() - timedelta(minutes=5)
        await hold(ledger, "H-2", now=held_at)
    archive = tmp_path / "archive"
    result = await cli(ledger_target, "nightly", "--archive", str(archive))
    assert 1 == result.exit_code, result.output
    (written,) = archive.iterdir()
    text = written.read_text(encoding="utf-8")
    section = text[text.index("## Waiting for a person's approval") :]
    assert (
        f"| H-2 | recipients.approve | {HELD_DETAIL} | {format_time(held_at)} |"
        " starebrain approve H-2 or starebrain deny H-2 --reason TEXT |"
    ) in section.split("\n## ")[0]
    assert RECIPIENT not in text and BODY not in text


async def test_unsent_lists_neither_held_nor_denied_actions(ledger_target: Target) -> None:
    """With `--unsent-after 0`, "not sent" lists only what `resume` sends (the plain PLANNED
    action and the approved one); the two held ones wait for approval, and the ones a person
    or the gate denied are in neither list."""
    await seed(ledger_target)
    result = await cli(ledger_target, "nightly", "--unsent-after", "0", "--json")
    assert 1 == result.exit_code, result.output
    report = json.loads(result.stdout)
    assert ["plain", "approved"] == [line["action_id"] for line in report["unsent"]]
    assert ["held", "held-after-fail"] == [
        line["action_id"] for line in report["awaiting_approval"]
    ]
    text = await cli(ledger_target, "nightly", "--unsent-after", "0", "--dry-run")
    assert "not sent: 2" in text.stdout and "waiting for a person's approval: 2" in text.stdout
    not_sent = text.stdout[text.stdout.index("not sent: 2") :].split("NEEDS A PERSON")[0]
    for action_id in ("held", "held-after-fail", "denied", "refused"):
        assert f"  {action_id} (" not in not_sent


async def test_review_and_nightly_list_the_same_held_actions(ledger_target: Target) -> None:
    """`review` and the nightly report list the same actions as waiting for approval, with
    the same rule and the same two commands."""
    await seed(ledger_target)
    review = json.loads((await cli(ledger_target, "review", "--json")).stdout)
    waiting = [item for item in review if item["awaits_approval"]]
    report = json.loads((await cli(ledger_target, "nightly", "--dry-run", "--json")).stdout)
    assert [
        (item["action"]["action_id"], item["action"]["gate"]["rule"], item["action"]["gate"]["at"])
        for item in waiting
    ] == [(line["action_id"], line["rule"], line["since"]) for line in report["awaiting_approval"]]
    assert ["held", "held-after-fail"] == [
        line["action_id"] for line in report["awaiting_approval"]
    ]
    review_text = (await cli(ledger_target, "review")).stdout
    assert (
        "`starebrain approve ID` lets one go; `starebrain deny ID --reason TEXT` stops it"
        in review_text
    )
    for line in report["awaiting_approval"]:
        action_id = line["action_id"]
        assert [
            f"starebrain approve {action_id}",
            f"starebrain deny {action_id} --reason TEXT",
        ] == line["commands"]
        assert any(
            row.split()[:1] == [action_id] and line["rule"] in row
            for row in review_text.splitlines()
        )


async def test_nightly_resume_sends_what_it_lists_and_neither_held_nor_denied(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path
) -> None:
    """`nightly --resume --device` sends the plain PLANNED action once and never the held or
    the denied one; the held one still needs a person afterwards, and nothing is "not
    sent"."""
    async with Ledger.open(ledger_target) as ledger:
        old = ledger.now() - timedelta(hours=2)
        intent = SmsIntent(recipient=RECIPIENT, body="plain text")
        await ledger.create_action("plain", intent, now=old)
        await hold(ledger, "held", now=old, body="held text")
        await hold(ledger, "denied", now=old, body="denied text")
        await ledger.deny("denied", operator="bo", reason="not wanted")
    night = await cli(
        ledger_target, "nightly", "--resume", "--device", phone.serial,
        "--key", str(adb_key_path), "--unsent-after", "0", "--json",
    )  # fmt: skip
    report = json.loads(night.stdout)
    assert (1, [], ["held"]) == (
        night.exit_code,
        report["unsent"],
        [line["action_id"] for line in report["awaiting_approval"]],
    )
    assert {"plain text": 1, "held text": 0, "denied text": 0} == {
        body: sum(1 for row in phone.store.rows(types=[SENT]) if row.body == body)
        for body in ("plain text", "held text", "denied text")
    }


async def test_the_commands_work_as_pasted_for_any_id(
    ledger_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commands the report gives for ids with shell characters or a leading `-` work as
    pasted into a shell: one approves its action, the other denies its own, and neither is
    waiting afterwards."""
    monkeypatch.setenv("USER", "bo")
    async with Ledger.open(ledger_target) as ledger:
        await hold(ledger, "-x;y", now=ledger.now())
        await hold(ledger, "it's$HOME", now=ledger.now())
    report = json.loads((await cli(ledger_target, "nightly", "--json")).stdout)
    commands = {line["action_id"]: line["commands"] for line in report["awaiting_approval"]}
    approve, _ = commands["-x;y"]
    _, deny = commands["it's$HOME"]
    for command in (approve, deny):
        argv = shlex.split(command)
        assert "starebrain" == argv[0]
        done = await cli(ledger_target, *argv[1:])
        assert 0 == done.exit_code, done.output
    after = json.loads((await cli(ledger_target, "nightly", "--json")).stdout)
    assert [] == after["awaiting_approval"]
    async with Ledger.open(ledger_target) as ledger:
        rulings = [(await ledger.summary(i)).action.approval for i in ("-x;y", "it's$HOME")]
    assert ["APPROVED", "DENIED"] == rulings
