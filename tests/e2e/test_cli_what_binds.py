"""What an action must obey is data (DESIGN.md invariant 9, issue 32), through the real
``starebrain`` processes against simulated phones, on SQLite and PostgreSQL: once a policy has
judged an action, no later path (`resume`, `nightly --resume`, a rerun of `send`, a worker)
run without that policy sends what it denied, held, limited or kept for quiet hours; a DENY is
final; a HOLD waits for `starebrain approve`; an action keeps the phone its sender named.
Whether an SMS went out is counted in the simulated phone's own store, never in the ledger."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import pytest

from android_bridge.simulator import SimulatedPhone
from starebrain_actions.core.convert import parse_time
from starebrain_actions.ledger.queue import RECHECK
from tests.conftest import PhoneFactory
from tests.e2e.conftest import RECIPIENT, Target, starebrain_command

#: ``type`` of a sent row in the phone's ``sms`` table
SENT = 2
#: how long one CLI process may take before the test fails (never a wait on time itself)
PROCESS_LIMIT_S = 90.0
#: exit statuses of the CLI (``cli/context.py``)
EXIT_HELD = 8
EXIT_REFUSED = 9
#: how long a queued action refused over a limit waits before a worker judges it again
RECHECK_S = RECHECK.total_seconds()
#: the recipient's time zone (``+1 202``: Washington, DC), for quiet hours at the recipient
RECIPIENT_ZONE = ZoneInfo("America/New_York")


@attrs.frozen
class Ran:
    """What a finished ``starebrain`` process left: its exit status, stdout and stderr."""

    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


Starebrain = Callable[..., Awaitable[Ran]]


@pytest.fixture
def starebrain(ledger_target: Target, tmp_path: Path) -> Starebrain:
    """Run ``starebrain --db <ledger> ARGS...`` as a real process to its end, with a config
    and data directory of the test's own (no ``policy.toml`` of the machine applies)."""
    env = cli_env(tmp_path)

    async def run(*args: str) -> Ran:
        process = await asyncio.create_subprocess_exec(
            *starebrain_command(), "--db", str(ledger_target), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), PROCESS_LIMIT_S)
        assert process.returncode is not None
        return Ran(process.returncode, out.decode(), err.decode())

    return run


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child ``starebrain``: the test's (its settle windows for the
    simulated phones), no ``STAREBRAIN_DB``, and config and data directories of its own."""
    env = {k: v for k, v in os.environ.items() if k != "STAREBRAIN_DB"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    return env


def policy(tmp_path: Path, name: str, text: str) -> str:
    """A policy file ``name`` holding ``text``; its path."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def on(phone: SimulatedPhone, key: Path) -> tuple[str, ...]:
    """The options that reach ``phone``."""
    return ("--device", phone.serial, "--key", str(key))


def copies(phone: SimulatedPhone, body: str) -> list[int]:
    """The ``type`` of every row of the phone's own store holding ``body`` (any box: a row
    in the outbox or failed is an SMS the app was asked to send)."""
    return [row.type or 0 for row in phone.store.rows() if row.body == body]


def to_recipient(phone: SimulatedPhone) -> list[str]:
    """The bodies of every row of the phone's store addressed to ``RECIPIENT``."""
    digits = re.sub(r"\D", "", RECIPIENT)
    return [
        row.body or ""
        for row in phone.store.rows()
        if re.sub(r"\D", "", row.address or "").endswith(digits[1:])
    ]


def whole_day_quiet() -> str:
    """Quiet hours that hold at the recipient now and for hours yet: ``00:00-23:59``, or in
    the last minutes of its day (whose 23:59 would end them) a window spanning that
    midnight."""
    local = datetime.now(RECIPIENT_ZONE)
    if (local.hour, local.minute) >= (23, 50):
        return "12:00-11:59"
    return "00:00-23:59"


#: The paths that send an action after the one that judged it, as `later_paths` runs them.
LATER_PATHS = ("resume", "nightly --resume", "send", "send --policy allow.toml")


async def later_paths(
    starebrain: Starebrain, phone: SimulatedPhone, key: Path, send: tuple[str, ...], allow: str
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Run, in turn and with no --policy: `resume --device`, `nightly --resume` and a rerun
    of `send` (``send``: its options after the phone's), then that rerun with ``allow``, a
    policy that allows everything. The rows of the action's body (``send``'s ``--body``) the
    phone's store holds after each path, and the exit status of both sends."""
    body = send[send.index("--body") + 1]
    rows: dict[str, list[int]] = {}
    resumed = await starebrain("resume", *on(phone, key), "--wait", "5")
    assert resumed.code in (0, 3), resumed.output
    rows["resume"] = copies(phone, body)
    night = await starebrain(
        "nightly", "--resume", *on(phone, key), "--unsent-after", "0", "--resume-wait", "5",
    )  # fmt: skip
    assert night.code in (0, 1), night.output
    rows["nightly --resume"] = copies(phone, body)
    codes: dict[str, int] = {}
    for path, extra in (("send", ()), ("send --policy allow.toml", ("--policy", allow))):
        sent = await starebrain("send", *on(phone, key), *extra, *send)
        codes[path] = sent.code
        rows[path] = copies(phone, body)
    return rows, codes


def allow_all(tmp_path: Path) -> str:
    """A policy file that allows every number of the test (+1...), with no approval."""
    return policy(tmp_path, "allow.toml", '[recipients]\nallow = ["+1*"]\napprove = "never"\n')


#: what the phone holds of the action after each of ``LATER_PATHS``: nothing
NOTHING: dict[str, list[int]] = {path: [] for path in LATER_PATHS}


# --------------------------------------------------------------------------- DENY


async def test_a_deny_is_final_on_every_path(
    starebrain: Starebrain, phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """A recipient the deny list names: `send --policy` exits 9, and no later `resume`,
    `nightly --resume`, rerun of `send` with no policy or with one allowing everything sends
    it (both sends exit 9); `status` and `list` say DENIED with its rule, and `approve` is
    refused as final."""
    denying = policy(tmp_path, "deny.toml", '[recipients]\ndeny = ["+1202555*"]\n')
    body = "denied text"
    args = ("--to", RECIPIENT, "--body", body, "--action-id", "DENY-1", "--wait", "5")
    refused = await starebrain("send", *on(phone, adb_key_path), "--policy", denying, *args)
    assert (EXIT_REFUSED, []) == (refused.code, copies(phone, body)), refused.output
    assert "recipients.deny" in refused.err
    rows, codes = await later_paths(starebrain, phone, adb_key_path, args, allow_all(tmp_path))
    assert (NOTHING, dict.fromkeys(LATER_PATHS[2:], EXIT_REFUSED)) == (rows, codes)
    status = await starebrain("status", "DENY-1", "--json")
    data = json.loads(status.out)
    assert ("DENIED", "DENY", "recipients.deny") == (
        data["status"],
        data["action"]["gate"]["verdict"],
        data["action"]["gate"]["rule"],
    ), status.output
    listed = await starebrain("list")
    assert [["DENIED"]] == [
        [word for word in line.split() if word == "DENIED"]
        for line in listed.out.splitlines()
        if "DENY-1" in line.split()
    ], listed.output
    approved = await starebrain("approve", "DENY-1", "--operator", "ana")
    assert 0 != approved.code and "a DENY is final" in approved.err, approved.output
    assert [] == copies(phone, body)
    assert "DENIED" == json.loads((await starebrain("status", "DENY-1", "--json")).out)["status"]


# --------------------------------------------------------------------------- limits


async def test_a_daily_limit_binds_every_later_path(
    starebrain: Starebrain, phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """per_recipient_per_day = 1: the first send goes, the second to the same number exits 9,
    and no `resume`, `nightly --resume` or rerun of `send` (with no policy, or one allowing
    everything) sends the second: the phone holds one SMS to the number."""
    limited = policy(tmp_path, "limit.toml", "[limits]\nper_recipient_per_day = 1\n")

    def args(action_id: str) -> tuple[str, ...]:
        return (
            "--to", RECIPIENT, "--body", f"text of {action_id}", "--action-id", action_id,
            "--wait", "5",
        )  # fmt: skip

    first = await starebrain("send", *on(phone, adb_key_path), "--policy", limited, *args("A-1"))
    assert 0 == first.code, first.output
    second = await starebrain("send", *on(phone, adb_key_path), "--policy", limited, *args("A-2"))
    assert EXIT_REFUSED == second.code, second.output
    assert "per_recipient_per_day" in second.err
    rows, codes = await later_paths(
        starebrain, phone, adb_key_path, args("A-2"), allow_all(tmp_path)
    )
    assert (NOTHING, dict.fromkeys(LATER_PATHS[2:], EXIT_REFUSED)) == (rows, codes)
    assert ["text of A-1"] == to_recipient(phone)


# --------------------------------------------------------------------------- quiet hours


async def test_quiet_hours_bind_every_later_path(
    starebrain: Starebrain, phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """Quiet hours all day at the recipient: `send` exits 8, and no `resume`, `nightly
    --resume` or rerun of `send` (with no policy, or one allowing everything; both exit 8)
    sends it."""
    quiet = policy(tmp_path, "quiet.toml", f'[limits]\nquiet_hours = "{whole_day_quiet()}"\n')
    body = "quiet text"
    args = ("--to", RECIPIENT, "--body", body, "--action-id", "Q-1", "--wait", "5")
    held = await starebrain("send", *on(phone, adb_key_path), "--policy", quiet, *args, "--json")
    gate = json.loads(held.out)["gate"]
    assert (EXIT_HELD, "WAIT", "limits.quiet_hours") == (
        held.code,
        gate["verdict"],
        gate["rule"],
    ), held.output
    rows, codes = await later_paths(starebrain, phone, adb_key_path, args, allow_all(tmp_path))
    assert (NOTHING, dict.fromkeys(LATER_PATHS[2:], EXIT_HELD)) == (rows, codes)
    assert [] == to_recipient(phone)


# --------------------------------------------------------------------------- HOLD


async def test_a_hold_waits_for_approve_then_resume_sends_it_once(
    starebrain: Starebrain, phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """approve = "always": `send` exits 8; no `resume`, `nightly --resume` or rerun of `send`
    (with no policy, or one allowing everything; both exit 8) sends it; after `starebrain
    approve`, `resume` without --policy sends it exactly once."""
    holding = policy(tmp_path, "hold.toml", '[recipients]\napprove = "always"\n')
    body = "held text"
    args = ("--to", RECIPIENT, "--body", body, "--action-id", "H-1", "--wait", "5")
    held = await starebrain("send", *on(phone, adb_key_path), "--policy", holding, *args)
    assert (EXIT_HELD, []) == (held.code, copies(phone, body)), held.output
    rows, codes = await later_paths(starebrain, phone, adb_key_path, args, allow_all(tmp_path))
    assert (NOTHING, dict.fromkeys(LATER_PATHS[2:], EXIT_HELD)) == (rows, codes)
    approved = await starebrain("approve", "H-1", "--operator", "ana")
    assert 0 == approved.code, approved.output
    resumed = await starebrain("resume", *on(phone, adb_key_path), "--wait", "5")
    assert 0 == resumed.code, resumed.output
    again = await starebrain("resume", *on(phone, adb_key_path), "--wait", "5")
    assert 0 == again.code, again.output
    assert [SENT] == copies(phone, body)


# --------------------------------------------------------------------------- worker


class Worker:
    """``starebrain worker --json`` as a child process, its events read as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.changed = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            async with self.changed:
                self.events.append(json.loads(line))
                self.changed.notify_all()
        async with self.changed:
            self.changed.notify_all()

    async def done(self, action_id: str, *, within: float = PROCESS_LIMIT_S) -> dict[str, Any]:
        """The worker's "done" event of ``action_id``, once it comes (fails if the worker
        ends first, or ``within`` seconds pass)."""

        def found() -> dict[str, Any] | None:
            return next(
                (e for e in self.events if (e["event"], e.get("action_id")) == ("done", action_id)),
                None,
            )

        try:
            async with asyncio.timeout(within), self.changed:
                await self.changed.wait_for(lambda: found() is not None or self.reader.done())
        except TimeoutError:
            pass
        event = found()
        assert event is not None, (
            f"no done event of {action_id} within {within:.0f} s: {self.events}"
        )
        return event

    async def stop(self) -> int:
        """SIGTERM, and its exit status once it has ended."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), PROCESS_LIMIT_S)
        await self.reader
        return code


async def start_worker(ledger: Target, phone: SimulatedPhone, key: Path, tmp_path: Path) -> Worker:
    """`starebrain worker --pool north --json` on ``phone``, with no --policy."""
    process = await asyncio.create_subprocess_exec(
        *starebrain_command(), "--db", str(ledger), "worker", *on(phone, key),
        "--pool", "north", "--json", "--stale-after", "3", "--wait", "5",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=cli_env(tmp_path),
    )  # fmt: skip
    return Worker(process)


def queue_in(starebrain: Starebrain) -> Callable[..., Awaitable[Ran]]:
    """`send --queue --pool north` of ``text of ID`` to ``RECIPIENT`` as ``ID``."""

    async def queue(action_id: str, *extra: str) -> Ran:
        return await starebrain(
            "send", "--queue", "--pool", "north", "--to", RECIPIENT,
            "--body", f"text of {action_id}", "--action-id", action_id, *extra,
        )  # fmt: skip

    return queue


async def test_a_worker_with_no_policy_sends_neither_a_denied_nor_a_held_action(
    starebrain: Starebrain,
    ledger_target: Target,
    phone: SimulatedPhone,
    adb_key_path: Path,
    tmp_path: Path,
) -> None:
    """`send --queue --policy` of a denied (exit 9) and a held (exit 8) action, then a
    message queued after them: a worker of the pool with no --policy sends that message and
    neither of the others; once a person approves the held one, the worker sends it once."""
    denying = policy(tmp_path, "deny.toml", '[recipients]\ndeny = ["+1202555*"]\n')
    holding = policy(tmp_path, "hold.toml", '[recipients]\napprove = "always"\n')
    ids = ("W-1-denied", "W-2-held", "W-3-last")
    queue = queue_in(starebrain)

    def on_phone() -> tuple[list[int], ...]:
        return tuple(copies(phone, f"text of {action_id}") for action_id in ids)

    denied = await queue("W-1-denied", "--policy", denying)
    assert EXIT_REFUSED == denied.code, denied.output
    held = await queue("W-2-held", "--policy", holding)
    assert EXIT_HELD == held.code, held.output
    last = await queue("W-3-last")
    assert 0 == last.code, last.output
    worker = await start_worker(ledger_target, phone, adb_key_path, tmp_path)
    try:
        # queued after the other two, and the queue is taken in order: once it is done, the
        # worker has looked at both (or found them out of the queue)
        await worker.done("W-3-last")
        assert ([], [], [SENT]) == on_phone(), worker.events
        approved = await starebrain("approve", "W-2-held", "--operator", "ana")
        assert 0 == approved.code, approved.output
        await worker.done("W-2-held")
    finally:
        code = await worker.stop()
    assert 0 == code, worker.events
    assert ([], [SENT], [SENT]) == on_phone(), worker.events
    assert [] == [e for e in worker.events if e.get("action_id") == "W-1-denied"]


@pytest.mark.long(12)
async def test_a_worker_judges_a_message_queued_over_a_limit_again_and_keeps_the_limit(
    starebrain: Starebrain,
    ledger_target: Target,
    phone: SimulatedPhone,
    adb_key_path: Path,
    tmp_path: Path,
) -> None:
    """per_recipient_per_day = 1 and a message already sent to the number today: `send
    --queue --policy` of another exits 9 and leaves it queued; a worker with no --policy
    judges it again within a recheck (as `send --queue --help` says) and does not send it."""
    limited = policy(tmp_path, "limit.toml", "[limits]\nper_recipient_per_day = 1\n")
    queue = queue_in(starebrain)
    first = await queue("L-1", "--policy", limited)
    assert 0 == first.code, first.output
    worker = await start_worker(ledger_target, phone, adb_key_path, tmp_path)
    try:
        await worker.done("L-1")
        over = await queue("L-2", "--policy", limited)
        assert EXIT_REFUSED == over.code, over.output
        assert "per_recipient_per_day" in over.err
        # a limit is judged again after RECHECK (10 s): three of them at most
        done = await worker.done("L-2", within=3 * RECHECK_S)
    finally:
        code = await worker.stop()
    assert (0, "PLANNED") == (code, done["status"]), worker.events
    assert (["text of L-1"], [SENT], []) == (
        to_recipient(phone),
        copies(phone, "text of L-1"),
        copies(phone, "text of L-2"),
    ), worker.events


# --------------------------------------------------------------------------- the phone


@pytest.mark.long(12)
async def test_an_action_keeps_the_phone_its_sender_named(
    starebrain: Starebrain, phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """`send --device A` held for approval, then approved: `resume --device B` sends nothing
    on either phone and says the action is meant for phone A; `resume --device A` sends it
    once, on A."""
    a, b = await phone_factory(), await phone_factory()
    holding = policy(tmp_path, "hold.toml", '[recipients]\napprove = "always"\n')
    body = "meant for A"
    held = await starebrain(
        "send", *on(a, adb_key_path), "--policy", holding, "--to", RECIPIENT, "--body", body,
        "--action-id", "P-1", "--wait", "5",
    )  # fmt: skip
    assert EXIT_HELD == held.code, held.output
    approved = await starebrain("approve", "P-1", "--operator", "ana")
    assert 0 == approved.code, approved.output
    elsewhere = await starebrain("resume", *on(b, adb_key_path), "--wait", "5")
    assert ([], []) == (copies(a, body), copies(b, body)), elsewhere.output
    said = [line for line in elsewhere.out.splitlines() if "P-1" in line]
    assert 1 == len(said) and f"meant for phone {a.serial}" in said[0], elsewhere.output
    home = await starebrain("resume", *on(a, adb_key_path), "--wait", "5")
    assert 0 == home.code, home.output
    assert ([SENT], []) == (copies(a, body), copies(b, body)), home.output


async def test_a_send_through_another_phone_sends_nothing_and_names_the_phone(
    starebrain: Starebrain, phone_factory: PhoneFactory, adb_key_path: Path, tmp_path: Path
) -> None:
    """A rerun of `send --device B` of an approved action whose sender named phone A sends
    nothing on either phone and says, as `resume` does, that it is meant for phone A (not a
    bare exit 3 that a rerun never settles); `send --device A` then sends it once."""
    a, b = await phone_factory(), await phone_factory()
    holding = policy(tmp_path, "hold.toml", '[recipients]\napprove = "always"\n')
    body = "only through A"
    args = ("--to", RECIPIENT, "--body", body, "--action-id", "P-2", "--wait", "5")
    held = await starebrain("send", *on(a, adb_key_path), "--policy", holding, *args)
    assert EXIT_HELD == held.code, held.output
    approved = await starebrain("approve", "P-2", "--operator", "ana")
    assert 0 == approved.code, approved.output
    other = await starebrain("send", *on(b, adb_key_path), *args)
    assert ([], []) == (copies(a, body), copies(b, body)), other.output
    home = await starebrain("send", *on(a, adb_key_path), *args)
    assert (0, [SENT], []) == (home.code, copies(a, body), copies(b, body)), home.output
    # what B's send said, checked last: a failure here still shows that the sends are right
    assert f"meant for phone {a.serial}" in other.output, other.output
    assert 0 != other.code, other.output


# --------------------------------------------------------------------------- a race


async def test_approve_racing_resume_sends_once_and_never_before_the_approval(
    starebrain: Starebrain, phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """`approve ID` and `resume --device` started together on a held action, three times
    with fresh actions: each leaves the phone at most once, never before the approval was
    written, and after a final resume exactly once."""
    holding = policy(tmp_path, "hold.toml", '[recipients]\napprove = "always"\n')
    ids = [f"R-{n}" for n in range(3)]
    for action_id in ids:
        held = await starebrain(
            "send", *on(phone, adb_key_path), "--policy", holding, "--to", RECIPIENT,
            "--body", f"text of {action_id}", "--action-id", action_id, "--wait", "5",
        )  # fmt: skip
        assert EXIT_HELD == held.code, held.output
        approved, resumed = await asyncio.gather(
            starebrain("approve", action_id, "--operator", "ana"),
            starebrain("resume", *on(phone, adb_key_path), "--wait", "5"),
        )
        assert (0, True) == (approved.code, resumed.code in (0, 3)), (
            approved.output,
            resumed.output,
        )
        assert len(copies(phone, f"text of {action_id}")) <= 1, resumed.output
    final = await starebrain("resume", *on(phone, adb_key_path), "--wait", "5")
    assert 0 == final.code, final.output
    assert {i: [SENT] for i in ids} == {i: copies(phone, f"text of {i}") for i in ids}
    for action_id in ids:
        history = json.loads((await starebrain("history", action_id, "--json")).out)
        approval = next(row for row in history if row["event"] == "approved")
        receipt = next(row for row in history if row["event"] == "created")
        (row,) = [r for r in phone.store.rows() if r.body == f"text of {action_id}"]
        approved_ms = int(parse_time(approval["at"]).timestamp() * 1000)
        assert (True, True) == (
            approval["sequence"] < receipt["sequence"],
            (row.date or 0) >= approved_ms,
        ), (action_id, approval, receipt, row)


async def test_deny_racing_resume_never_sends_after_the_denial(
    starebrain: Starebrain, phone: SimulatedPhone, adb_key_path: Path, tmp_path: Path
) -> None:
    """`deny ID` and `resume --device` started together on an approved action not sent yet,
    three times with fresh actions: each leaves the phone at most once, and only if its
    receipt was written before the denial; a final resume sends none of the unsent ones."""
    holding = policy(tmp_path, "hold.toml", '[recipients]\napprove = "always"\n')
    ids = [f"D-{n}" for n in range(3)]
    for action_id in ids:
        held = await starebrain(
            "send", *on(phone, adb_key_path), "--policy", holding, "--to", RECIPIENT,
            "--body", f"text of {action_id}", "--action-id", action_id, "--wait", "5",
        )  # fmt: skip
        assert EXIT_HELD == held.code, held.output
        approved = await starebrain("approve", action_id, "--operator", "ana")
        assert 0 == approved.code, approved.output
        denied, resumed = await asyncio.gather(
            starebrain("deny", action_id, "--operator", "bo", "--reason", "changed our mind"),
            starebrain("resume", *on(phone, adb_key_path), "--wait", "5"),
        )
        assert (0, True) == (denied.code, resumed.code in (0, 3)), (
            denied.output,
            resumed.output,
        )
    before = {i: copies(phone, f"text of {i}") for i in ids}
    final = await starebrain("resume", *on(phone, adb_key_path), "--wait", "5")
    assert final.code in (0, 3), final.output
    assert before == {i: copies(phone, f"text of {i}") for i in ids}
    for action_id in ids:
        history = json.loads((await starebrain("history", action_id, "--json")).out)
        denial = next(row for row in history if row["event"] == "denied")
        receipts = [row for row in history if row["event"] == "created"]
        assert (True, True) == (
            len(before[action_id]) == len(receipts) <= 1,
            all(row["sequence"] < denial["sequence"] for row in receipts),
        ), (action_id, before[action_id], history)
