"""``starebrain demo``: why two axes matter, on a simulated phone, in under 30 seconds.

Two identical simulated phones (userdebug builds, as an emulator's Google APIs image, read
through ``su 1000`` so that failed and queued rows are visible) get the same fault
on the first send of each message: a lost reply, a hang, a failed send, a body the app
mangles, a duplicate the app sends by itself. The ledger agent sends the batch through
``SmsAgent`` on one; a naive agent that calls every timeout a failure and retries sends the
same batch on the other. Then both phones' sent boxes are counted.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import attrs
import click

from android_bridge import BridgeError, Device, SmsDispatcher, ensure_key
from android_bridge.simulator import SimulatedPhone
from starebrain_actions._logging import configure_logging
from starebrain_actions.core.model import ActionSummary, ProviderKind, RetryPolicy, ReviewReason
from starebrain_actions.ledger.store import Ledger
from starebrain_actions.orchestration.agent import SmsAgent
from starebrain_actions.orchestration.reconciler import reconcile_pending
from starebrain_actions.phone.android import AndroidPhone
from starebrain_actions.render.output import Output

SENT = 2


@attrs.frozen(kw_only=True)
class DemoMessage:
    """One message of the batch and the fault its first send meets."""

    action_id: str
    to: str
    body: str
    fault: str | None
    what: str


BATCH: tuple[DemoMessage, ...] = (
    DemoMessage(
        action_id="otp-1001",
        to="+1 202 555 0100",
        body="Your code is 4821",
        fault=None,
        what="no fault",
    ),
    DemoMessage(
        action_id="otp-1002",
        to="+1 202 555 0101",
        body="Your code is 1945",
        fault="drop-after-send",
        what="reply lost after the send",
    ),
    DemoMessage(
        action_id="otp-1003",
        to="+1 202 555 0102",
        body="Your code is 7302",
        fault="hang-after-send",
        what="sent, then the command hangs",
    ),
    DemoMessage(
        action_id="otp-1004",
        to="+1 202 555 0113",
        body="Your code is 5517",
        fault="wrong-recipient",
        what="the app sends it to another number",
    ),
    DemoMessage(
        action_id="otp-1005",
        to="+1 202 555 0104",
        body="Your code is 6088",
        fault="send-fails",
        what="the radio fails the send",
    ),
    DemoMessage(
        action_id="otp-1006",
        to="+1 202 555 0105",
        body="Meet at 10:30, gate B",
        fault="mangle-body",
        what="the app autocorrects the text",
    ),
    DemoMessage(
        action_id="otp-1007",
        to="+1 202 555 0106",
        body="Your code is 9124",
        fault="duplicate-send",
        what="the app sends it twice",
    ),
    DemoMessage(
        action_id="otp-1008",
        to="+1 202 555 0107",
        body="Your code is 3370",
        fault="drop-after-send",
        what="reply lost after the send",
    ),
    DemoMessage(
        action_id="otp-1009",
        to="+1 202 555 0108",
        body="Your code is 8046",
        fault="hang",
        what="the command hangs, nothing sent",
    ),
)

#: The simulated phones' radios answer within 50 ms (``send_delay_ms``): their app's SENT row
#: settles well within a second here (a real app's may still turn FAILED for 30 minutes:
#: ``RetryPolicy.settle_after``'s default).
_POLICY = RetryPolicy(
    maximum_attempts=3,
    grace_window=timedelta(seconds=1.5),
    settle_after=timedelta(milliseconds=500),
    framework_settle_after=timedelta(milliseconds=300),
)
_COMMAND_TIMEOUT_S = 1.5


@attrs.frozen(kw_only=True)
class Tally:
    """What one phone's sent box shows about one agent's batch."""

    sent: int  #: SENT rows for the batch
    caused_duplicates: int  #: extra correct copies beyond the first and the app's own
    app_duplicates: int  #: extra copies the messaging app made by itself
    wrong: int  #: SENT rows carrying something else than any intent
    undelivered: int  #: messages with no correct SENT copy


def tally(phone: SimulatedPhone, batch: Sequence[DemoMessage], seeded: int) -> Tally:
    """Count one phone's sent box against the batch."""
    rows = [row for row in phone.store.rows(types=[SENT]) if row._id > seeded]
    intended = {(m.to.replace(" ", ""), m.body): m for m in batch}
    correct: dict[str, int] = {m.action_id: 0 for m in batch}
    wrong = 0
    for row in rows:
        message = intended.get(((row.address or "").replace(" ", ""), row.body or ""))
        if message is None:
            wrong += 1
        else:
            correct[message.action_id] += 1
    app = sum(1 for m in batch if m.fault == "duplicate-send" and correct[m.action_id] > 1)
    caused = sum(
        max(0, count - 1 - (1 if m.fault == "duplicate-send" else 0))
        for m in batch
        for count in [correct[m.action_id]]
    )
    return Tally(
        sent=len(rows),
        caused_duplicates=caused,
        app_duplicates=app,
        wrong=wrong,
        undelivered=sum(1 for count in correct.values() if count == 0),
    )


def seed_history(phone: SimulatedPhone) -> int:
    """Give the phone some history, as a real one has; return the highest id."""
    now = phone.now_ms()
    phone.store.insert_incoming("+12025550199", "Are we still on for Friday?", date_ms=now - 90_000)
    phone.store.insert_outgoing(
        "+12025550199", "Yes, see you there", date_ms=now - 60_000, message_type=SENT
    )
    return phone.store.max_id()


async def _ledger_agent(
    phone: SimulatedPhone, db: Path, key: Path, batch: Sequence[DemoMessage]
) -> tuple[list[ActionSummary], int]:
    async with Ledger.open(db) as ledger:
        android = await AndroidPhone.connect(
            phone.serial, key_path=key, command_timeout_s=_COMMAND_TIMEOUT_S, read_as_system=True
        )
        agent = SmsAgent(ledger, android, policy=_POLICY, poll_interval_s=0.1)
        try:
            for message in batch:
                if message.fault:
                    phone.inject_fault(message.fault)
                await agent.send(message.action_id, message.to, message.body, wait=8.0)
        finally:
            await android.close()
        await phone.wait_idle()
        await reconcile_pending(ledger, [phone.serial], key_path=str(key), read_as_system=True)
        summaries = [await ledger.summary(message.action_id) for message in batch]
        return summaries, agent.dispatches


#: The replies the demo's recipients send once the batch is out: an answer, and a STOP.
REPLIES: tuple[tuple[str, str], ...] = (
    ("+1 202 555 0100", "Got it, thanks"),
    ("+1 202 555 0101", "STOP"),
)
#: The message the demo then tries to send to the number that replied STOP.
AFTER_STOP = DemoMessage(
    action_id="otp-1010",
    to="+1 202 555 0101",
    body="Your code is 2290",
    fault=None,
    what="to a number that replied STOP",
)


@attrs.frozen(kw_only=True)
class RepliesSeen:
    """What the ledger made of the recipients' replies, and of a send after a STOP."""

    #: (action id the reply is linked to, its text, its keyword) per reply recorded
    linked: tuple[tuple[str | None, str, str | None], ...]
    #: the gate's rule that refused the send after the STOP (None: not refused)
    refused_by: str | None
    #: SENT rows to the opted-out number before and after that send (the phone's own store)
    sent_before: int
    sent_after: int


async def _replies(phone: SimulatedPhone, db: Path, key: Path) -> RepliesSeen:
    """The recipients reply (the phone receives them as AOSP writes inbox rows); one read
    records and links them; then a send to the number that said STOP is refused."""
    for sender, text in REPLIES:
        phone.receive_sms(sender, text)
    sent_before = _sent_to(phone, AFTER_STOP.to)
    async with Ledger.open(db) as ledger:
        android = await AndroidPhone.connect(
            phone.serial, key_path=key, command_timeout_s=_COMMAND_TIMEOUT_S, read_as_system=True
        )
        agent = SmsAgent(ledger, android, policy=_POLICY, poll_interval_s=0.1)
        try:
            await agent.reconcile()
            linked = tuple(
                (reply.action_id, reply.body, reply.keyword) for reply in await agent.replies()
            )
            outcome = await agent.send(
                AFTER_STOP.action_id, AFTER_STOP.to, AFTER_STOP.body, wait=3.0
            )
        finally:
            await android.close()
    await phone.wait_idle()
    return RepliesSeen(
        linked=linked,
        refused_by=outcome.gate.rule if outcome.gate is not None else None,
        sent_before=sent_before,
        sent_after=_sent_to(phone, AFTER_STOP.to),
    )


def _sent_to(phone: SimulatedPhone, number: str) -> int:
    wanted = number.replace(" ", "")
    return sum(
        1
        for row in phone.store.rows(types=[SENT])
        if (row.address or "").replace(" ", "") == wanted
    )


async def _naive_agent(phone: SimulatedPhone, key: Path, batch: Sequence[DemoMessage]) -> int:
    """Retry on any error, as a tracker that calls a timeout 'failed' does."""
    dispatches = 0
    device = await Device.connect(phone.serial, key_path=key, command_timeout_s=_COMMAND_TIMEOUT_S)
    try:
        dispatcher = SmsDispatcher(device)
        for message in batch:
            if message.fault:
                phone.inject_fault(message.fault)
            for _try in range(_POLICY.maximum_attempts):
                dispatches += 1
                try:
                    await dispatcher.send(message.to, message.body)
                except BridgeError:
                    continue  # "failed": send it again
                break
    finally:
        await device.close()
    await phone.wait_idle()
    return dispatches


def _keys(folder: Path) -> tuple[Path, Path]:
    """An ADB key pair and an ``adb_keys`` file that authorizes it."""
    key = ensure_key(folder / "adbkey")
    keys = folder / "adb_keys"
    keys.write_text(Path(f"{key}.pub").read_text(encoding="utf-8"), encoding="utf-8")
    return key, keys


def _phone(store: Path, keys: Path) -> SimulatedPhone:
    return SimulatedPhone(
        store_path=store,
        authorized_keys_path=keys,
        build_type="userdebug",
        send_delay_ms=50,
        seed=7,
    )


async def _run(out: Output, folder: Path) -> int:
    key, keys = _keys(folder)
    started = time.monotonic()
    async with (
        _phone(folder / "ledger-phone.db", keys) as ledger_phone,
        _phone(folder / "naive-phone.db", keys) as naive_phone,
    ):
        seeded = seed_history(ledger_phone)
        seed_history(naive_phone)
        out.line(
            f"Simulated phones on {ledger_phone.serial} and {naive_phone.serial}"
            " (userdebug builds, read through su 1000)."
        )
        out.line(f"Sending {len(BATCH)} messages, each first send meeting one fault ...")
        (summaries, ledger_dispatches), naive_dispatches = await asyncio.gather(
            _ledger_agent(ledger_phone, folder / "ledger.db", key, BATCH),
            _naive_agent(naive_phone, key, BATCH),
        )
        ledger_tally = tally(ledger_phone, BATCH, seeded)
        naive_tally = tally(naive_phone, BATCH, seeded)
        _show_axes(out, summaries)
        _show_fenced(out, summaries)
        _show_sent_box(out, ledger_phone, seeded, summaries)
        replies = await _replies(ledger_phone, folder / "ledger.db", key)
        _show_replies(out, replies)
    _show_comparison(out, ledger_tally, naive_tally, ledger_dispatches, naive_dispatches)
    elapsed = time.monotonic() - started
    out.line()
    out.line(
        f"Ledger agent: {ledger_tally.caused_duplicates} duplicate SMS caused by retries;"
        f" naive agent: {naive_tally.caused_duplicates}. ({elapsed:.1f} s)"
    )
    stop_held = replies.refused_by == "opted_out" and replies.sent_after == replies.sent_before
    return 0 if ledger_tally.caused_duplicates == 0 and stop_held else 1


def _show_replies(out: Output, seen: RepliesSeen) -> None:
    out.line()
    out.heading("Replies, and a STOP")
    out.line(
        "Two recipients answer. The ledger's next read of the phone records each reply and"
        " links it to the latest action sent to that number before it:"
    )
    out.table(
        ["reply", "linked to", "keyword"],
        [[text, action or "-", keyword or "-"] for action, text, keyword in seen.linked],
    )
    refused = (
        f"refused by the gate (rule {seen.refused_by}), nothing sent"
        if seen.refused_by is not None
        else "NOT refused"
    )
    out.line(
        f"Then {AFTER_STOP.action_id}, {AFTER_STOP.what}: {refused}. The phone's sent box holds"
        f" {seen.sent_after} message(s) to that number, as before ({seen.sent_before});"
        " `starebrain optouts` lists it until it replies START."
    )


def _show_axes(out: Output, summaries: Sequence[ActionSummary]) -> None:
    rows = []
    for message, summary in zip(BATCH, summaries, strict=True):
        for record in summary.attempts:
            rows.append(
                [
                    message.action_id,
                    str(record.attempt),
                    record.delivery.value,
                    record.acceptance.value,
                    "" if record.provider_object_id is None else str(record.provider_object_id),
                    message.what if record.attempt == 1 else "",
                ]
            )
        rows.append(
            [
                "",
                "",
                "",
                "",
                "",
                f"=> {summary.status.value}"
                + (
                    f", review: {', '.join(r.value for r in summary.review_reasons)}"
                    if summary.review_reasons
                    else ""
                )
                + (f", {summary.duplicates} duplicate(s) seen" if summary.duplicates else ""),
            ]
        )
    out.line()
    out.table(
        ["action", "attempt", "delivery", "acceptance", "_id", "fault on the first send"],
        rows,
        title="The ledger agent's attempts: two axes each",
    )


def _show_fenced(out: Output, summaries: Sequence[ActionSummary]) -> None:
    """The attempts the fence on the phone settled: no read could have."""
    fenced = [
        (summary.action.action_id, record)
        for summary in summaries
        for record in summary.attempts
        if record.evidence.get("fence") == "voided"
    ]
    if not fenced:
        return
    out.line()
    out.line("Settled by the fence on the phone (no read can see a send that never happened):")
    for action_id, record in fenced:
        out.line(f"  {action_id} attempt {record.attempt}: {record.last_error}")


def _show_sent_box(
    out: Output, phone: SimulatedPhone, seeded: int, summaries: Sequence[ActionSummary]
) -> None:
    owner: dict[int, str] = {}
    for summary in summaries:
        for record in summary.attempts:
            if record.provider_kind is ProviderKind.MMS:
                continue  # the sent box shown is content://sms; MMS ids are another space
            provider_id = record.provider_object_id or record.evidence.get("provider_object_id")
            label = summary.action.action_id
            if isinstance(provider_id, int):
                owner[provider_id] = label if record.provider_object_id else f"{label} (failed)"
            elif record.review_reason is ReviewReason.AMBIGUOUS:
                # rows that may be this attempt's or the owner's: a person rules
                for row_id in record.evidence.get("identical_rows") or []:
                    owner.setdefault(row_id, f"{label}? (review)")
    type_names = {2: "sent", 4: "outbox", 5: "failed", 6: "queued"}
    rows = [
        [
            str(row._id),
            type_names.get(row.type or 0, str(row.type)),
            row.address or "",
            (row.body or "")[:40],
            owner.get(row._id, "duplicate (app)" if row.type == SENT else ""),
        ]
        for row in phone.store.rows(types=[2, 4, 5, 6])
        if row._id > seeded
    ]
    out.line()
    out.table(
        ["_id", "type", "to", "body", "confirms"],
        rows,
        title="The phone's own sent box (ledger agent)",
    )


def _show_comparison(
    out: Output, ledger: Tally, naive: Tally, ledger_dispatches: int, naive_dispatches: int
) -> None:
    rows = [
        ["send commands issued", str(ledger_dispatches), str(naive_dispatches)],
        ["SMS that went out", str(ledger.sent), str(naive.sent)],
        [
            "duplicate SMS caused by retries",
            str(ledger.caused_duplicates),
            str(naive.caused_duplicates),
        ],
        [
            "duplicates made by the app itself",
            f"{ledger.app_duplicates} (flagged for review)",
            f"{naive.app_duplicates} (unnoticed)",
        ],
        [
            "wrong message sent by the app",
            f"{ledger.wrong} (MISMATCH, resent)",
            f"{naive.wrong} (unnoticed)",
        ],
        ["messages never delivered", str(ledger.undelivered), str(naive.undelivered)],
    ]
    out.line()
    out.table(["", "ledger agent", "naive agent"], rows, title="Same faults, two agents")


def run_demo(*, rich: bool | None = None) -> int:
    """Run the demo; return the exit status (0 when the ledger agent caused no duplicate)."""
    configure_logging(level=logging.ERROR)
    out = Output(rich=rich)
    with tempfile.TemporaryDirectory(prefix="starebrain-demo-") as folder:
        return asyncio.run(_run(out, Path(folder)))


@click.command("demo")
@click.option(
    "--rich/--plain",
    "rich",
    default=None,
    help="Rich tables or plain text (default: rich on a terminal).",
)
def demo_command(rich: bool | None) -> None:
    """Show, on two simulated phones with the same faults, how many duplicate SMS the ledger
    agent and a naive retry-on-timeout agent send (no phone needed; about 10 seconds)."""
    raise SystemExit(run_demo(rich=rich))
