"""The policy gate through the CLI, on SQLite and PostgreSQL: `send --policy` stops before the
phone with exit 8 (held) or 9 (refused), `review` lists what waits for approval, a person's
`approve` lets `resume` send it once, `deny` stops it for good, and `history` says why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.cli.main import main
from tests.e2e.conftest import RECIPIENT, Target, starebrain_command

SENT = 2


async def cli(ledger: Target, *args: str) -> Result:
    argv = ["--db", str(ledger), *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, catch_exceptions=False)


def sent(phone: SimulatedPhone, body: str) -> int:
    return sum(1 for row in phone.store.rows(types=[SENT]) if row.body == body)


def policy_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


async def test_held_for_approval_then_approved_and_resumed_once(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """approve = "always": `send` exits 8 saying it waits for approval, nothing sent;
    `review` lists it; `approve` records who; `resume --policy` sends it once; `history`
    shows the verdict, its rule and the file's digest, and the approval."""
    policy = policy_file(tmp_path, '[recipients]\napprove = "always"\n')
    args = ("--to", RECIPIENT, "--body", "approve me", "--action-id", "P-1", "--wait", "5")
    held = await cli(
        ledger_target, "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--policy", policy, *args, "--json",
    )  # fmt: skip
    data = json.loads(held.stdout)
    assert (8, "HOLD", "recipients.approve") == (
        held.exit_code,
        data["gate"]["verdict"],
        data["gate"]["rule"],
    )
    assert 0 == sent(phone, "approve me")
    review = await cli(ledger_target, "review")
    assert "waiting for a person's approval" in review.stdout and "P-1" in review.stdout
    approved = await cli(ledger_target, "approve", "P-1", "--operator", "bo")
    assert 0 == approved.exit_code, approved.output
    resumed = await cli(
        ledger_target, "resume", "--device", phone.serial, "--key", str(adb_key_path),
        "--policy", policy, "--wait", "10",
    )  # fmt: skip
    assert resumed.exit_code in (0, 3), resumed.output
    assert 1 == sent(phone, "approve me")
    history = json.loads((await cli(ledger_target, "history", "P-1", "--json")).stdout)
    events = [(row["event"], row["actor"]) for row in history]
    assert ("policy_verdict", "policy") in events and ("approved", "operator:bo") in events
    verdict = next(row for row in history if row["event"] == "policy_verdict")
    assert verdict["evidence"]["digest"].startswith("sha256:")


async def test_a_denied_recipient_is_exit_9_and_a_persons_denial_is_final(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """recipients.deny: exit 9, never sent; a held action a person denies stays unsent and
    cannot be approved afterwards (exit 1)."""
    denying = policy_file(tmp_path, '[recipients]\ndeny = ["+1202*"]\n')
    refused = await cli(
        ledger_target, "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--policy", denying, "--to", RECIPIENT, "--body", "nope", "--wait", "3",
    )  # fmt: skip
    assert 9 == refused.exit_code, refused.output
    assert "recipients.deny" in refused.stderr and "nothing is ever sent" in refused.stderr
    holding = str(tmp_path / "hold.toml")
    Path(holding).write_text('[recipients]\napprove = "always"\n', encoding="utf-8")
    args = ("--to", RECIPIENT, "--body", "denied later", "--action-id", "D-1", "--wait", "3")
    await cli(
        ledger_target, "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--policy", holding, *args,
    )  # fmt: skip
    denied = await cli(ledger_target, "deny", "D-1", "--reason", "not wanted", "--operator", "bo")
    assert 0 == denied.exit_code, denied.output
    late = await cli(ledger_target, "approve", "D-1", "--operator", "al")
    assert 1 == late.exit_code and "a denial is final" in late.stderr
    again = await cli(
        ledger_target, "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--policy", holding, *args,
    )  # fmt: skip
    assert 9 == again.exit_code, again.output
    assert (0, 0) == (sent(phone, "nope"), sent(phone, "denied later"))


async def test_a_bad_policy_file_is_a_usage_error_and_nothing_is_recorded(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """An unknown key in the policy file: exit 2 naming it, before anything is recorded."""
    bad = policy_file(tmp_path, "[limits]\nper_minute = 3\n")
    result = await cli(
        ledger_target, "send", "--device", phone.serial, "--key", str(adb_key_path),
        "--policy", bad, "--to", RECIPIENT, "--body", "x", "--action-id", "B-1",
    )  # fmt: skip
    assert 2 == result.exit_code and "limits.per_minute" in result.stderr
    listed = json.loads((await cli(ledger_target, "list", "--json")).stdout)
    # no ledger was even made (the file, or the schema's tables), or it holds nothing
    assert [] == listed or "ledger" in listed["error"]


async def test_the_hourly_limit_holds_across_two_processes(
    phone_factory: Any, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """per_hour = 1, two `starebrain send` processes of two actions started together: one
    goes out, the other is refused (exit 9): the count is the ledger's, under its lock."""
    phone = await phone_factory(send_delay_ms=100)
    policy = policy_file(tmp_path, "[limits]\nper_hour = 1\n")

    async def one(number: int) -> int:
        process = await asyncio.create_subprocess_exec(
            *starebrain_command(), "--db", str(ledger_target), "send",
            "--device", phone.serial, "--key", str(adb_key_path), "--policy", policy,
            "--to", RECIPIENT, "--body", f"limited {number}", "--action-id", f"L-{number}",
            "--wait", "10",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return await asyncio.wait_for(process.wait(), 60)

    codes = sorted(await asyncio.gather(one(1), one(2)))
    assert [0, 9] == codes
    assert 1 == sent(phone, "limited 1") + sent(phone, "limited 2")


async def test_policy_show_and_a_persons_policy_set(
    phone: SimulatedPhone, ledger_target: Target, adb_key_path: Path, tmp_path: Path
) -> None:
    """`policy show` prints the rules pinned by the gate that first judged the action (none
    before); a daily cap stops the second action even for a `send` with no policy; a person's
    `policy set` to looser rules (kept in the history with who and why) lets it go once;
    `policy set` on a denied action is refused and changes nothing."""
    cap = policy_file(tmp_path, "[limits]\nper_recipient_per_day = 1\n")
    loose = tmp_path / "loose.toml"
    loose.write_text("[limits]\nper_recipient_per_day = 5\n", encoding="utf-8")
    send = ("send", "--device", phone.serial, "--key", str(adb_key_path), "--wait", "10")
    none_yet = await cli(ledger_target, "policy", "show", "X-1")
    assert 1 == none_yet.exit_code  # no such action
    first = await cli(
        ledger_target, *send, "--policy", cap, "--to", RECIPIENT, "--body", "one",
        "--action-id", "C-1",
    )  # fmt: skip
    assert 0 == first.exit_code, first.output
    capped = await cli(
        ledger_target, *send, "--policy", cap, "--to", RECIPIENT, "--body", "two",
        "--action-id", "C-2",
    )  # fmt: skip
    shown = json.loads((await cli(ledger_target, "policy", "show", "C-2", "--json")).stdout)
    again = await cli(
        ledger_target, *send, "--to", RECIPIENT, "--body", "two", "--action-id", "C-2"
    )
    assert (9, 9, 0) == (capped.exit_code, again.exit_code, sent(phone, "two"))
    assert {"per_recipient_per_day": 1} == shown["rules"]["limits"]
    assert shown["source"] == cap and shown["pin"].startswith("sha256:")
    no_reason = await cli(ledger_target, "policy", "set", "C-2", str(loose), "--reason", " ")
    assert 2 == no_reason.exit_code
    changed = await cli(
        ledger_target, "policy", "set", "C-2", str(loose), "--reason", "a second one today is"
        " fine", "--operator", "ana",
    )  # fmt: skip
    assert 0 == changed.exit_code, changed.output
    after = json.loads((await cli(ledger_target, "policy", "show", "C-2", "--json")).stdout)
    assert {"per_recipient_per_day": 5} == after["rules"]["limits"]
    went = await cli(ledger_target, *send, "--to", RECIPIENT, "--body", "two", "--action-id", "C-2")
    assert (0, 1) == (went.exit_code, sent(phone, "two")), went.output
    history = json.loads((await cli(ledger_target, "history", "C-2", "--json")).stdout)
    pinned = [row for row in history if row["event"] == "policy_pinned"]
    assert ["policy", "operator:ana"] == [row["actor"] for row in pinned]
    assert "a second one today is fine" == pinned[-1]["evidence"]["reason"]
    denying = policy_file(tmp_path, '[recipients]\ndeny = ["+1202*"]\n')
    denied = await cli(
        ledger_target, *send, "--policy", denying, "--to", RECIPIENT, "--body", "three",
        "--action-id", "C-3",
    )  # fmt: skip
    refused = await cli(ledger_target, "policy", "set", "C-3", str(loose), "--reason", "please")
    assert (9, 1) == (denied.exit_code, refused.exit_code)
    assert "a DENY is final" in refused.output
