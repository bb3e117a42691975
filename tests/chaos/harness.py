"""A chaos workload for starebrain-actions, measured from the phones' own stores.

One real SQLite ledger, one or two simulated phones (real ADB over loopback), and several
agent processes sending a seeded set of actions while the harness:

* ``kill -9``s random agent and reconcile processes and restarts them with the same action
  ids (a rerun is promised to be safe);
* runs reconcile passes concurrently (a child looping on ``reconcile_device``, and
  ``starebrain reconcile`` now and then);
* types "human" messages on the phones to the same recipients, some with an action's very
  text, some with other text (rows written as the messaging app writes them: SENT at once,
  before its radio has sent anything);
* acts as the owner deleting the latest conversation now and then (the next message may take
  a deleted row's ``_id``: ids are reused), and factory-resets phone 0 once, then sets it up
  again at the same address (a new identity, empty stores, the key allowed again);
* has some senders reach their phone by another address (``localhost:PORT``): one phone
  under two addresses;
* includes twins (two action ids, one intent) and actions given to two senders at once;
* cuts a phone off for a second or two (``adb usb``: connections refused), and arms every
  fault of the simulator, one of each class at a time, in a seeded order;
* acts as the phone's owner: wakes a screen that went off, and lets the radio settle a send
  stuck on it after a few seconds (sent, or failed: the app rewrites its optimistic SENT row
  FAILED), as a real radio and app eventually do, before the rows' settle time.

Then it stops the chaos, lets the agents finish, runs final reconcile passes, and measures
from ground truth, not from what the ledger says:

* **sends**: every send the phone performed is recorded as it happens, on either path: the
  messaging app's (``--send-path ui``: key presses) and the telephony framework's
  (``service call isms`` as the shell, which ``auto`` takes where the phone's framework jar
  proves the code: its row's ``creator`` and its transmission's app are
  ``com.android.shell``), with the text it was asked to send, the faults it met, the
  provider rows it wrote, each by ``_id`` and date, and (framework) the transmissions it made
  (test hooks on the simulator; see :class:`PhoneRig`); rows the owner deleted or a wipe
  removed are kept as they were then. Every transmission and SENT row of the shell package
  must belong to a recorded framework send (else it is a lost receipt: the hook missed a
  send). Human rows are known by id and date.
* **tracker-caused duplicates**: per intent (twins share one), the sends whose exact text went
  out (SENT or still queued, SMS, MMS or RCS), beyond one per action. A send the app itself
  doubled (``duplicate-send``) counts once; human rows are never sends.
* **lost receipts**: a send of an intent with more sends than the ledger has attempts for it
  on that phone, a send of a text no action asked for, or a fence name claimed by a send
  script on the phone whose dispatch id the ledger does not know.
* **invariant violations**: SQLite's own checks plus SQL checks of the design's invariants
  (see :func:`ledger_invariant_violations`).
* **lies**: SUCCEEDED actions with no send of theirs out (the confirming row missing, not
  sent, not the intent, or more SUCCEEDED twins than sends), and FAILED actions while a send
  of their intent went out that no other action of the intent accounts for.

**Worker mode** (``ChaosConfig(agent="worker")``, issue 26): the actions are queued in the
ledger for one pool (half of them up front, the rest by a queueing child, killed and restarted
like the rest, which queues some again), and the sender slots are ``starebrain worker``
processes (``--json``), each given its phones: one phone alone, or both, so that a worker
waits as a standby for a phone another holds, and takes it over when its holder is killed. The
killer ``kill -9``s them and they are restarted; outages, faults, owners texting, deletions and
the wipe go on as in the ledger mode; a reconcile child and ``starebrain reconcile`` run beside
them. An action may leave any phone of the pool, so its intent has no phone (``ANY_PHONE``):
each send is mapped to its action through the fence claim's dispatch id and counted across
phones (a duplicate is an action's text sent by its attempts more than once, on one phone or
on two); receipts are checked per phone (sends of an intent on a phone against the ledger's
attempts there), and a SUCCEEDED action's confirming row is read on the phone its attempt
names. The harness stops the workers (SIGTERM: they finish the send in hand) once every action
is settled, or before the end of the settle phase.

Run it through ``tests/chaos/test_chaos.py`` or ``benchmarks/chaos.py``. The harness also runs
its own children: ``python -m tests.chaos.harness agent|naive|reconcile|queue SPEC.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import itertools
import json
import logging
import os
import random
import re
import signal
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import attrs

from android_bridge import BridgeError, Device, SmsDispatcher, ensure_key
from android_bridge._fence import FENCE_ROOT, SCRIPT
from android_bridge.recipients import normalize_recipient
from android_bridge.simulator import Fault, SimulatedPhone
from android_bridge.simulator._faults import AM_FAULTS, LONG_TEXT_FAULTS, SEND_FAULTS
from android_bridge.simulator._isms import SHELL_PACKAGE
from starebrain_actions.core import decisions as _decisions
from starebrain_actions.core.model import (
    LEASE_RELEASING_REVIEWS,
    ActionSummary,
    RedispatchReason,
    RetryPolicy,
    Status,
    canonical_body,
)

ROOT: Final = Path(__file__).resolve().parents[2]
#: A sender child's exit status when its deadline came before every action settled.
_UNSETTLED: Final = 3
SENT, OUTBOX, FAILED_TYPE, QUEUED = 2, 4, 5, 6
MMS_SENT, MMS_OUTBOX = 2, 4
#: Texts the phone's owner sends that are no action's.
HUMAN_TEXTS: Final = (
    "Call me back pls",
    "On my way",
    "Running 10 min late, sorry!",
    "ok",
    "Dinner at 7?",
    "Thanks!",
)
#: An intent's phone in worker mode: any phone of the pool may send it.
ANY_PHONE: Final = -1
#: What a worker-mode run's ledger agents are (the ledger's metrics apply to them).
LEDGER_AGENTS: Final = ("ledger", "worker")
#: Action texts: each one meets a fault that changes it (autocorrect, accents) visibly.
BODY_TEMPLATES: Final = (
    "Your code is {code}",
    "Café à {hour}h{minute}, table {code}",
    "pls call back about ticket {code}",
    "Meeting moved to {hour}:{minute}, room {code}",
    # two SMS segments (issue 33: a long text whose last part fails, its first delivered)
    "Reminder: appointment {code} is confirmed for {hour}:{minute} tomorrow. Please come ten"
    " minutes early with your card and a photo ID, and call the front desk if you need to"
    " change the time or cancel.",
)


# --------------------------------------------------------------------------- workload


@attrs.frozen(kw_only=True)
class ChaosConfig:
    """What the chaos run does; every choice is drawn from ``random.Random`` seeded here."""

    seed: int = 7
    #: actions in all, twins included
    actions: int = 16
    #: pairs of actions with one intent and two ids (on one phone, given to two senders)
    twins: int = 2
    phones: int = 2
    #: agent processes (each sends its share of the actions, in a loop, until settled)
    workers: int = 3
    #: share of the actions given to a second sender as well (same id, sent concurrently)
    shared: float = 0.2
    #: share of the worker slots that send through ``starebrain send`` (one process per
    #: action) instead of a child holding ``SmsAgent.open``
    cli_senders: float = 0.0
    #: "ledger" (SmsAgent), "naive" (SmsDispatcher, retry on any error, no ledger) or
    #: "worker" (actions queued for one pool, sent by ``starebrain worker`` processes)
    agent: str = "ledger"
    #: worker mode: the pool the actions are queued for
    pool: str = "chaos"
    #: worker mode: the share of the actions queued before the workers start (the rest by a
    #: queueing child during the chaos)
    queued_up_front: float = 0.5
    #: worker mode: ``starebrain worker --stale-after`` (3 s at least)
    stale_after_s: float = 3.0
    #: tries per action of the naive agent
    naive_tries: int = 3
    #: the chaos lasts this long at most (less when every sender is done sooner), unless
    #: ``send_fault_kinds`` holds it longer
    chaos_s: float = 25.0
    #: the chaos goes on past ``chaos_s`` until this many kinds of send fault have been met
    #: on the phones (a loaded machine sends less in a given time), up to ``chaos_cap_s``
    send_fault_kinds: int = 0
    chaos_cap_s: float = 60.0
    #: after the chaos, the senders get this long to finish
    settle_s: float = 40.0
    #: mean seconds between two ``kill -9`` (exponential)
    kill_every_s: float = 2.0
    #: a killed process is restarted after this many seconds (uniform)
    restart_after_s: tuple[float, float] = (0.1, 0.8)
    #: mean seconds between two outages over all phones (exponential)
    outage_every_s: float = 8.0
    #: how long an outage lasts (uniform)
    outage_s: tuple[float, float] = (1.0, 2.0)
    #: mean seconds between two human messages over all phones (exponential)
    human_every_s: float = 1.0
    #: share of human messages carrying an action's very text
    human_same_text: float = 0.5
    #: a consumed fault is followed by the next one of its class after this long (uniform)
    fault_gap_s: tuple[float, float] = (0.2, 1.5)
    #: a send stuck on the radio is settled (sent or failed) after this long
    stuck_s: float = 3.0
    #: mean seconds between two deletions of a phone's latest conversation by its owner
    #: (None: never)
    delete_every_s: float | None = 6.0
    #: phone 0 is factory-reset this long into the chaos, then set up again at the same
    #: address (None: never)
    wipe_at_s: float | None = 9.0
    #: share of the sender slots that reach their phones by ``localhost:PORT`` (the others by
    #: ``127.0.0.1:PORT``)
    alias_senders: float = 0.5
    #: a messaging app's row settles this long after its dispatch: longer than ``stuck_s``
    #: plus the radio, as the default (30 minutes) is longer than a real app takes to give up
    settle_after_s: float = 5.0
    framework_settle_after_s: float = 0.5
    #: the messaging app's own send timeout (5 minutes on a phone, ``app-timeout``), the
    #: phones' and the actions' policy alike: below the settle window, so that the app's late
    #: FAILED comes before the row settles, and well above a send script's run on a loaded
    #: machine (the policy counts it from the receipt, the app from its key: on a phone 5
    #: minutes dwarf the seconds between; at 2 s a loaded run sent ordinary radio failures to
    #: review as late ones)
    app_send_timeout_s: float = 3.5
    #: faults every phone arms before the seeded order (issue 33's rows that may hide a
    #: send: a long text's last part failing, the app's own timeout, an MMS's network wait)
    first_faults: tuple[Fault, ...] = (
        Fault.PART_FAILS,
        Fault.APP_TIMEOUT,
        Fault.MMS_NETWORK_TIMEOUT,
    )
    #: deal the send faults of ``first_faults`` between the phones (phone i arms every
    #: ``phones``-th of them first, the others after its seeded order) instead of arming them
    #: all first on every phone: a run with few sends (worker mode: one per queued action)
    #: then still meets as many kinds of send fault as it did before them (the long-text
    #: ones take no send from the others and stay first everywhere)
    deal_first_faults: bool = False
    #: an MMS that never gets its network turns FAILED this long after the send
    #: (``mms-network-timeout``: about 50 minutes on a phone; never settled by time anyway)
    mms_fail_after_s: float = 3.0
    #: each phone's ``/system/framework/framework.jar`` (the simulator's ``framework_jar``):
    #: "aosp" proves the ``isms`` code, so ``--send-path auto`` sends through the framework
    #: there from the first send; "stripped" proves nothing, so auto stays on the messaging
    #: app (the UI path). Both paths run in one chaos run: phone 0 (wiped, read through su)
    #: the framework's, phone 1 (a user build in the restricted view) the app's. The two
    #: phones' builds differ (``ro.build.type``), and the codes are kept per build.
    framework_jars: tuple[str, ...] = ("aosp", "stripped")
    #: the reconcile child's pause between passes
    reconcile_every_s: float = 0.5
    #: ``starebrain reconcile`` runs this often per phone (None: never)
    cli_reconcile_every_s: float | None = 5.0
    #: an operator rules (``starebrain resolve --expect``, from the phones' ground truth) on
    #: an attempt that holds its phone in review (AMBIGUOUS, STUCK) this long (None: never;
    #: the phone then waits for a person, which the design allows, and its other actions stay
    #: PLANNED)
    operator_after_s: float | None = None
    #: the retry policy of every action
    max_attempts: int = 3
    initial_interval_s: float = 0.2
    maximum_interval_s: float = 1.0
    grace_s: float = 3.0
    unverified_after_s: float = 3.0
    #: agents' ADB command timeout and voiding age (another sender's attempt)
    command_timeout_s: float = 2.0
    void_after_s: float = 2.5
    poll_s: float = 0.25
    #: how long one ``send`` call waits before the sender moves to its next action
    send_wait_s: float = 3.0
    #: ``starebrain resume`` runs this often per phone (killable like the rest): it re-drives
    #: what the CLI senders, which send each action once, left PLANNED or FAILED with
    #: attempts left; it runs once more per phone when the chaos is over (None: never)
    resume_every_s: float | None = 4.0

    def __attrs_post_init__(self) -> None:
        if self.agent not in ("ledger", "naive", "worker"):
            raise ValueError("agent must be 'ledger', 'naive' or 'worker'")
        if not 1 <= self.phones <= 2:
            raise ValueError("one or two phones")
        if self.actions < 2 * self.twins + 1 or self.workers < 1:
            raise ValueError("too few actions or workers")
        if self.settle_after_s <= self.stuck_s + 1:
            raise ValueError("settle_after_s must exceed stuck_s by more than a second")

    @property
    def longest_chaos_s(self) -> float:
        """The longest the chaos can last: ``chaos_s``, or up to ``chaos_cap_s`` while it
        waits for ``send_fault_kinds``."""
        return max(self.chaos_s, self.chaos_cap_s) if self.send_fault_kinds else self.chaos_s


@attrs.frozen(kw_only=True)
class ActionSpec:
    """One action of the workload."""

    action_id: str
    #: E.164
    recipient: str
    body: str
    #: index of the phone it is sent through (``ANY_PHONE``: any phone of the pool)
    phone: int
    #: the action whose intent this twin shares
    twin_of: str | None = None

    @property
    def intent_key(self) -> tuple[int, str, str]:
        """Phone (``ANY_PHONE`` in worker mode), recipient and canonical body: twins share
        it."""
        return (self.phone, self.recipient, canonical_body(self.body))


def plan_actions(config: ChaosConfig) -> tuple[ActionSpec, ...]:
    """The seeded actions: unique texts to a few shared recipients, then the twins."""
    rng = random.Random(f"{config.seed}:actions")
    singles = config.actions - config.twins
    recipients = [f"+1202555{n:04d}" for n in rng.sample(range(100, 200), k=max(3, singles // 3))]
    codes = rng.sample(range(1000, 10000), k=singles)
    specs: list[ActionSpec] = []
    for index in range(singles):
        template = BODY_TEMPLATES[index % len(BODY_TEMPLATES)]
        body = template.format(
            code=codes[index], hour=rng.randrange(7, 22), minute=f"{rng.randrange(0, 60):02d}"
        )
        specs.append(
            ActionSpec(
                action_id=f"chaos-{config.seed}-{index:04d}",
                recipient=rng.choice(recipients),
                body=body,
                phone=ANY_PHONE if config.agent == "worker" else index % config.phones,
            )
        )
    for index, original in enumerate(rng.sample(specs, k=config.twins)):
        specs.append(
            attrs.evolve(
                original, action_id=f"{original.action_id}-twin{index}", twin_of=original.action_id
            )
        )
    return tuple(specs)


def plan_workers(config: ChaosConfig, actions: Sequence[ActionSpec]) -> tuple[tuple[str, ...], ...]:
    """Which action ids each sender sends, in its order: round robin over a seeded shuffle,
    twins with another sender than their original, some actions with two senders."""
    rng = random.Random(f"{config.seed}:workers")
    lists: list[list[str]] = [[] for _ in range(config.workers)]
    home: dict[str, int] = {}
    order = list(actions)
    rng.shuffle(order)
    for position, spec in enumerate(order):
        worker = position % config.workers
        if spec.twin_of is not None and config.workers > 1 and home.get(spec.twin_of) == worker:
            worker = (worker + 1) % config.workers
        home[spec.action_id] = worker
        lists[worker].append(spec.action_id)
    for spec in actions:
        if config.workers > 1 and rng.random() < config.shared:
            other = (home[spec.action_id] + rng.randrange(1, config.workers)) % config.workers
            lists[other].insert(rng.randrange(len(lists[other]) + 1), spec.action_id)
    return tuple(tuple(items) for items in lists)


def plan_worker_phones(config: ChaosConfig) -> tuple[tuple[int, ...], ...]:
    """Worker mode: the phones each worker slot is given. With two phones, slot 0 holds phone
    0 alone (read through su), slot 1 phone 1 alone, slot 2 both (a standby for whichever is
    free or whose holder was killed), and so on round; with one phone, every slot has it."""
    if config.phones == 1:
        return tuple((0,) for _ in range(config.workers))
    shapes = ((0,), (1,), (0, 1))
    return tuple(shapes[index % len(shapes)] for index in range(config.workers))


def plan_queue(config: ChaosConfig, actions: Sequence[ActionSpec]) -> tuple[list[str], list[str]]:
    """Worker mode: the action ids queued up front, and those the queueing child queues during
    the chaos, in its order (with a few of the first queued again: ``enqueue`` keeps them)."""
    rng = random.Random(f"{config.seed}:queue")
    order = [spec.action_id for spec in actions]
    rng.shuffle(order)
    split = round(len(order) * config.queued_up_front)
    first, later = order[:split], order[split:]
    again = [action_id for action_id in first if rng.random() < config.shared]
    for action_id in again:
        later.insert(rng.randrange(len(later) + 1), action_id)
    return first, later


def fault_order(config: ChaosConfig, phone: int) -> list[Fault]:
    """Every fault of the simulator in a seeded order, ``config.first_faults`` first (or, with
    ``deal_first_faults``, the send faults among them dealt between the phones); each phone
    starts elsewhere in the rest, so that two phones together meet every fault early."""
    order = [fault for fault in Fault if fault not in config.first_faults]
    random.Random(f"{config.seed}:faults").shuffle(order)
    shift = phone * len(order) // config.phones
    rest = [*order[shift:], *order[:shift]]
    if not config.deal_first_faults:
        return [*config.first_faults, *rest]
    everywhere = [fault for fault in config.first_faults if fault in LONG_TEXT_FAULTS]
    dealt = [fault for fault in config.first_faults if fault not in LONG_TEXT_FAULTS]
    mine = dealt[phone % config.phones :: config.phones]
    return [*everywhere, *mine, *rest, *(fault for fault in dealt if fault not in mine)]


# --------------------------------------------------------------------------- ground truth


@dataclasses.dataclass
class AppSend:
    """One send the phone performed: a key press that reached its messaging app (``path``
    "app"), or a ``service call isms`` that reached the framework's send (``path``
    "framework": past its permission, text and usage checks, when it takes the send faults)."""

    #: what the app was asked to send (before any fault changed it)
    address: str
    body: str
    #: ``len(phone.transmissions)`` just before (an RCS send is appended at once)
    transmissions_before: int
    #: the attempt whose send script pressed the keys (the fence name the command claimed;
    #: None for a command without a fence: the naive agent's)
    dispatch_id: str | None = None
    #: the send faults it met
    faults: frozenset[Fault] = frozenset()
    #: the rows it wrote: (``sms`` or ``mms``, ``_id``, ``date`` as stored)
    rows: list[tuple[str, int, int | None]] = dataclasses.field(default_factory=list)
    #: the harness's radio settled it (a send stuck on the radio)
    radio_settled: bool = False
    #: "app" (the messaging app, the UI path) or "framework" (``service call isms``)
    path: str = "app"
    #: the transmissions it made (framework sends; an app send's are found by position)
    transmitted: list[Any] = dataclasses.field(default_factory=list)


#: The command line the current stream of the simulated phone runs (each ADB stream is a task
#: of its own, so a key press knows which command pressed it).
_COMMAND: contextvars.ContextVar[str] = contextvars.ContextVar("chaos_command", default="")
#: The send the messaging app is performing in this task (its rows are noted on it).
_SENDING: contextvars.ContextVar[AppSend | None] = contextvars.ContextVar(
    "chaos_sending", default=None
)
_CLAIM: Final = re.compile(
    rf"ln -s {re.escape(SCRIPT)} {re.escape(FENCE_ROOT)}/([A-Za-z0-9][A-Za-z0-9._-]*)"
)


def claimed_dispatch_ids(command: str) -> list[str]:
    """The dispatch ids a command line's send script claims on the phone (fence names)."""
    return list(dict.fromkeys(name.removesuffix(".go") for name in _CLAIM.findall(command)))


class PhoneRig:
    """A simulated phone with what the harness knows about it as ground truth.

    ``attach`` wraps the simulator's messaging app (``phone._messaging._send``: the call a
    key press makes when it sends) and its framework send (``phone._isms._send_text``, the
    send method ``service call isms`` reaches; a send is recorded once it takes its send
    faults, past the checks that refuse it) to record every :class:`AppSend`, the fault plan's
    ``take_send_faults`` to note which faults that send met, and ``phone.run_shell`` to know
    which command line (so which attempt's fence claim) pressed the keys, and the store's
    ``insert_outgoing``/``insert_outgoing_mms`` to note each row the send writes, by ``_id``
    and date (ids are reused once the latest rows are deleted). Rows the harness removes
    (the owner deleting a conversation, a wipe) are kept in ``gone_sms``/``gone_mms`` as they
    were then.
    """

    def __init__(self, index: int, phone: SimulatedPhone, *, read_as_system: bool) -> None:
        self.index = index
        self.phone = phone
        self.read_as_system = read_as_system
        self.sends: list[AppSend] = []
        #: human rows by (``_id``, date): "same" (an action's text) or "other"
        self.human: dict[tuple[int, int | None], str] = {}
        #: rows removed by the owner or a wipe, by (``_id``, date), as they were then
        self.gone_sms: dict[tuple[int, int | None], Any] = {}
        self.gone_mms: dict[tuple[int, int | None], Any] = {}
        self.threads_deleted = 0
        self.wipes = 0
        self.armed: Counter[Fault] = Counter()
        self.outages = 0
        self.screen_wakes = 0
        self.radio_settled = 0

    @property
    def serial(self) -> str:
        return self.phone.serial

    def sms_row(self, row_id: int, date: int | None) -> Any:
        """The SMS row ``row_id`` dated ``date``: in the store now, else as it was when it was
        removed; None when neither (its ``_id`` holds another message)."""
        row = self.phone.store.row(row_id)
        if row is not None and row.date == date:
            return row
        return self.gone_sms.get((row_id, date))

    def mms_message(self, mms_id: int, date: int | None) -> Any:
        """The MMS ``mms_id`` dated ``date`` (seconds), in the store or as removed."""
        for message in self.phone.store.mms_messages():
            if message.id == mms_id and message.date == date:
                return message
        return self.gone_mms.get((mms_id, date))

    def keep_removed(self, rows: Sequence[Any] = (), mms: Sequence[Any] = ()) -> None:
        """Keep rows about to be removed from the phone, as they are now (ground truth)."""
        for row in rows:
            self.gone_sms[(row._id, row.date)] = row
        for message in mms:
            self.gone_mms[(message.id, message.date)] = message

    def attach(self) -> None:
        """Install the recording hooks (test instrumentation, not a behaviour change)."""
        phone = self.phone
        messaging = phone._messaging
        inner = messaging._send

        async def recording(request: Any) -> None:
            claimed = claimed_dispatch_ids(_COMMAND.get())
            send = AppSend(
                dispatch_id=claimed[0] if len(claimed) == 1 else None,
                address=request.addresses[0] if request.addresses else "",
                body=request.body,
                transmissions_before=len(phone.transmissions),
            )
            self.sends.append(send)
            token = _SENDING.set(send)
            try:
                await inner(request)
            finally:
                _SENDING.reset(token)

        messaging._send = recording
        store = phone.store
        insert_sms, insert_mms = store.insert_outgoing, store.insert_outgoing_mms

        def noting_sms(*args: Any, **kwargs: Any) -> int:
            row_id = insert_sms(*args, **kwargs)
            send = _SENDING.get()
            if send is not None:
                row = store.row(row_id)
                send.rows.append(("sms", row_id, row.date if row is not None else None))
            return row_id

        def noting_mms(*args: Any, **kwargs: Any) -> int:
            mms_id = insert_mms(*args, **kwargs)
            send = _SENDING.get()
            if send is not None:
                date = next((m.date for m in store.mms_messages() if m.id == mms_id), None)
                send.rows.append(("mms", mms_id, date))
            return mms_id

        store.insert_outgoing = noting_sms  # type: ignore[method-assign]
        store.insert_outgoing_mms = noting_mms  # type: ignore[method-assign]
        run_shell = phone.run_shell

        async def running(command: str, connection: Any, output: Any, session: Any) -> int:
            _COMMAND.set(command)  # this stream's task only
            return await run_shell(command, connection, output, session)

        phone.run_shell = running  # type: ignore[method-assign]
        take = phone.faults.take_send_faults

        def taking() -> frozenset[Fault]:
            faults = take()
            if self.sends:
                self.sends[-1].faults = faults
            return faults

        phone.faults.take_send_faults = taking  # type: ignore[method-assign]
        self._attach_framework()

    def _attach_framework(self) -> None:
        """Record the framework's sends (``service call isms``): the send the call reaches is
        made ready per call, recorded when it takes its send faults (past the checks that
        refuse it), and notes the row it writes and the transmission it makes, which happen
        in a task of its own started within the call (the context is copied to it)."""
        phone = self.phone
        isms = phone._isms
        host = isms._host
        inner = isms._send_text
        ready: contextvars.ContextVar[AppSend | None] = contextvars.ContextVar(
            "chaos_framework_call", default=None
        )

        async def calling(text: Any) -> bytes:
            claimed = claimed_dispatch_ids(_COMMAND.get())
            send = AppSend(
                dispatch_id=claimed[0] if len(claimed) == 1 else None,
                address=text.address or "",
                body=text.body or "",
                transmissions_before=len(phone.transmissions),
                path="framework",
            )
            token, sending = ready.set(send), _SENDING.set(send)
            try:
                return await inner(text)
            finally:
                _SENDING.reset(sending)
                ready.reset(token)

        take = host.take_send_faults

        def taking() -> frozenset[Fault]:
            faults = take()
            send = ready.get()
            if send is not None:
                send.faults = faults
                self.sends.append(send)
            return faults

        insert, record = host.insert_row, host.record

        def inserting(**columns: Any) -> int:
            row_id = insert(**columns)
            send = _SENDING.get()
            if send is not None:
                row = phone.store.row(row_id)
                send.rows.append(("sms", row_id, row.date if row is not None else None))
            return row_id

        def recording(transmission: Any) -> None:
            record(transmission)
            send = _SENDING.get()
            if send is not None:
                send.transmitted.append(transmission)

        isms._send_text = calling  # type: ignore[method-assign]
        host.take_send_faults = taking
        host.insert_row = inserting
        host.record = recording

    def unrecorded_framework_sends(self) -> list[str]:
        """What the phone's own record shows the framework sent (a transmission by the shell
        package, a SENT row whose ``creator`` is it, kept when removed) that no recorded
        framework send made: empty unless the hooks missed a send."""
        recorded = [send for send in self.sends if send.path == "framework"]
        transmitted = {id(t) for send in recorded for t in send.transmitted}
        rows = {(row_id, date) for send in recorded for kind, row_id, date in send.rows}
        missed = [
            f"phone {self.index}: a framework transmission no recorded send made"
            f" ({t.addresses}, {t.body!r}, row {t.provider_id})"
            for t in self.phone.transmissions
            if t.app == SHELL_PACKAGE and id(t) not in transmitted
        ]
        stored = {(row._id, row.date): row for row in self.gone_sms.values()}
        stored.update({(row._id, row.date): row for row in self.phone.store.rows()})
        missed += [
            f"phone {self.index}: sms _id {row._id}, SENT by the shell, no recorded send wrote it"
            f" ({row.address}, {row.body!r})"
            for key, row in sorted(stored.items(), key=lambda item: (item[0][0], item[0][1] or 0))
            if getattr(row, "creator", None) == SHELL_PACKAGE
            and row.type == SENT
            and key not in rows
        ]
        return missed

    def consumed(self) -> Counter[Fault]:
        """Faults armed and used up."""
        remaining = self.phone.faults.remaining()
        return Counter(
            {fault: count - remaining.get(fault, 0) for fault, count in self.armed.items()}
        )


def _e164(address: str | None) -> str:
    normalized = normalize_recipient(address or "", "US")
    return normalized.value if normalized.kind != "invalid" else (address or "")


@attrs.frozen(kw_only=True)
class SendOutcome:
    """What one recorded send put out, read from the phone's store at the end."""

    phone: int
    #: the intent it was asked for (None: a text no action has)
    intent: tuple[int, str, str] | None
    #: its exact text went out or may still go out (SENT or queued; SMS, MMS or RCS)
    out: bool
    #: its exact text was sent (SENT SMS, sent MMS, RCS)
    sent: bool
    #: the app wrote two copies (duplicate-send; the framework never does)
    doubled: bool
    #: the attempt whose script pressed the keys (None: unknown)
    dispatch_id: str | None
    #: the recorded send
    send: AppSend
    #: the SMS provider ids it wrote
    sms_ids: tuple[int, ...]
    #: the SMS rows it wrote that are SENT (in the store, or when removed), by id and date
    sent_rows: tuple[tuple[int, int | None], ...] = ()


def send_outcomes(rig: PhoneRig, intents: Mapping[tuple[int, str, str], Any]) -> list[SendOutcome]:
    """Each recorded send of one phone with what it put out: the rows it wrote, as the store
    holds them now or as they were when the owner or a wipe removed them."""
    transmissions = rig.phone.transmissions
    outcomes = []
    for position, send in enumerate(rig.sends):
        following = rig.sends[position + 1] if position + 1 < len(rig.sends) else None
        tx_top = following.transmissions_before if following else len(transmissions)
        key = (rig.index, _e164(send.address), canonical_body(send.body))
        # on this phone: its own intent; in worker mode, the intent of any phone
        intent = key if key in intents else (ANY_PHONE, key[1], key[2])
        own_rows = [
            row
            for kind, row_id, date in send.rows
            if kind == "sms" and (row := rig.sms_row(row_id, date)) is not None
        ]
        own_mms = [
            message
            for kind, mms_id, date in send.rows
            if kind == "mms" and (message := rig.mms_message(mms_id, date)) is not None
        ]
        rcs = (
            [t for t in transmissions[send.transmissions_before : tx_top] if t.channel == "rcs"]
            if send.path == "app"
            else []
        )

        def exact(address: str | None, body: str | None, key: tuple[int, str, str] = key) -> bool:
            return (rig.index, _e164(address), canonical_body(body or "")) == key

        out_sms = [
            r for r in own_rows if r.type in (SENT, OUTBOX, QUEUED) and exact(r.address, r.body)
        ]
        sent_sms = [r for r in own_rows if r.type == SENT and exact(r.address, r.body)]
        out_mms = [
            m
            for m in own_mms
            if m.msg_box in (MMS_SENT, MMS_OUTBOX)
            and exact(m.addresses[0] if m.addresses else "", m.body)
        ]
        sent_mms = [m for m in out_mms if m.msg_box == MMS_SENT]
        out_rcs = [t for t in rcs if exact(t.addresses[0] if t.addresses else "", t.body)]
        # the framework writes its row on the radio's result and transmits only when it was
        # sent: what it transmitted is what went out (its row may be deleted, or FAILED)
        out_framework = [
            t for t in send.transmitted if exact(t.addresses[0] if t.addresses else "", t.body)
        ]
        outcomes.append(
            SendOutcome(
                phone=rig.index,
                intent=intent if intent in intents else None,
                out=bool(out_sms or out_mms or out_rcs or out_framework),
                sent=bool(sent_sms or sent_mms or out_rcs or out_framework),
                doubled=send.path == "app" and Fault.DUPLICATE_SEND in send.faults,
                dispatch_id=send.dispatch_id,
                send=send,
                sms_ids=tuple(row._id for row in own_rows),
                sent_rows=tuple((row._id, row.date) for row in sent_sms),
            )
        )
    return outcomes


Intent = tuple[int, str, str]


def _on(key: Intent) -> str:
    """Where an intent is sent, in words: "phone N", or "any phone" (worker mode)."""
    return "any phone" if key[0] == ANY_PHONE else f"phone {key[0]}"


def same_intent(phone: int, address: str | None, body: str | None, key: Intent) -> bool:
    """Is a text to ``address`` on phone ``phone`` the intent ``key`` (of any phone, when
    its phone is ``ANY_PHONE``)?"""
    here = (phone if key[0] != ANY_PHONE else ANY_PHONE, _e164(address), canonical_body(body or ""))
    return here == key


@attrs.frozen(kw_only=True)
class SendTally:
    """Recorded sends counted per intent, and per action where the send's attempt is known."""

    #: sends asked for the intent
    sends: Counter[Intent]
    #: sends whose exact text went out (or may still)
    out: Counter[Intent]
    #: sends whose exact text was sent
    sent: Counter[Intent]
    #: per action: sends of its attempts whose text went out, and was sent
    out_of: Counter[str]
    sent_of: Counter[str]
    #: per intent: sends whose attempt is unknown (the naive agent's, an attempt without a
    #: fence), whose text went out, and was sent
    loose_out: Counter[Intent]
    loose_sent: Counter[Intent]


def tally_sends(
    outcomes: Sequence[SendOutcome],
    owner_of: Mapping[str, str] | None = None,
    intent_of: Mapping[str, Intent] | None = None,
) -> SendTally:
    """Count the sends per intent and, through ``owner_of`` (dispatch id -> action id, from
    the ledger) and ``intent_of`` (action id -> intent), per action. Sends of a text no action
    has are left out (they are lost receipts)."""
    owner_of = owner_of or {}
    intent_of = intent_of or {}
    tally = SendTally(
        sends=Counter(),
        out=Counter(),
        sent=Counter(),
        out_of=Counter(),
        sent_of=Counter(),
        loose_out=Counter(),
        loose_sent=Counter(),
    )
    for outcome in outcomes:
        if outcome.intent is None:
            continue
        tally.sends[outcome.intent] += 1
        tally.out[outcome.intent] += outcome.out
        tally.sent[outcome.intent] += outcome.sent
        action_id = owner_of.get(outcome.dispatch_id or "")
        if action_id is not None and intent_of.get(action_id) == outcome.intent:
            tally.out_of[action_id] += outcome.out
            tally.sent_of[action_id] += outcome.sent
        else:
            tally.loose_out[outcome.intent] += outcome.out
            tally.loose_sent[outcome.intent] += outcome.sent
    return tally


def tracker_duplicates_of(
    groups: Mapping[Intent, Sequence[ActionSpec]], tally: SendTally
) -> tuple[int, list[str]]:
    """Sends whose text went out beyond one per action, and why, in words.

    Per action where its sends are known (the attempt's fence claim pressed the keys); sends
    whose attempt is unknown are counted per intent, against the actions of the intent that
    have none of their own. A send the app doubled by itself counts once (it is one send);
    human rows are no sends.
    """
    total = 0
    explained = []
    for key, specs in groups.items():
        for spec in specs:
            extra = tally.out_of[spec.action_id] - 1
            if extra > 0:
                total += extra
                explained.append(
                    f"{spec.action_id} ({_on(key)}): {tally.out_of[spec.action_id]} sends of"
                    " its attempts went out"
                )
        bare = sum(1 for spec in specs if tally.out_of[spec.action_id] == 0)
        extra = tally.loose_out[key] - bare
        if extra > 0:
            total += extra
            explained.append(
                f"{', '.join(s.action_id for s in specs)} ({_on(key)}):"
                f" {tally.loose_out[key]} sends of the text by unknown attempts went out for"
                f" {bare} action(s) with none of their own"
            )
    return total, explained


def fence_dispatch_ids(rig: PhoneRig) -> set[str]:
    """Dispatch ids a send script claimed on the phone: fence names whose target says the
    script made them, and the claims in every command line the phone received."""
    ids: set[str] = set()
    files = rig.phone.files
    if files.is_dir(FENCE_ROOT):
        for name in files.listdir(FENCE_ROOT):
            if name.startswith("."):
                continue
            if files.readlink(f"{FENCE_ROOT}/{name}") == SCRIPT:
                ids.add(name.removesuffix(".go"))
    for command in rig.phone.commands_run:
        ids.update(claimed_dispatch_ids(command))
    return ids


# --------------------------------------------------------------------------- ledger checks


def _connect_ro(db: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    connection.row_factory = sqlite3.Row
    return connection


def ledger_invariant_violations(db: Path) -> list[str]:
    """Every broken invariant found in the ledger file, in words (empty: none).

    SQLite's ``integrity_check`` and ``foreign_key_check``, then the design's invariants in
    SQL: acceptance needs confirmation; a provider row (its ``_id`` and date: ids are reused)
    confirms at most one attempt and is never also a duplicate; one unresolved attempt per
    action and one lease per device; a duplicate belongs to a confirmed attempt; a confirmed
    artifact lies above its watermark or, its ``_id`` reused, is dated after the dispatch
    (less the clock tolerance), and names a row unless an operator ruled; attempts numbered
    1..n within the budget (attempts failed because the phone was unreachable do not spend
    it); attempt k+1 created
    only after attempt k was proven FAILED or REJECTED; a history that starts at "created",
    chains each row's "from" to the previous "to", never leaves a final state but by an
    operator's ruling, and has one row per version.
    """
    problems: list[str] = []
    with contextlib.closing(_connect_ro(db)) as connection:
        check = [row[0] for row in connection.execute("PRAGMA integrity_check")]
        if check != ["ok"]:
            problems.append(f"integrity_check: {check}")
        for row in connection.execute("PRAGMA foreign_key_check"):
            problems.append(f"foreign key broken: {tuple(row)}")
        queries = {
            "acceptance without confirmation": (
                "SELECT dispatch_id FROM attempts WHERE acceptance != 'PENDING'"
                " AND delivery != 'CONFIRMED'"
            ),
            "provider row confirming two attempts": (
                "SELECT device, provider_kind, provider_object_id, provider_row_date_ms"
                " FROM attempts WHERE provider_object_id IS NOT NULL"
                " GROUP BY 1, 2, 3, coalesce(provider_row_date_ms, -1) HAVING COUNT(*) > 1"
            ),
            "provider row both an artifact and a duplicate": (
                "SELECT d.device, d.provider_kind, d.provider_object_id FROM duplicates d"
                " JOIN attempts a ON a.device = d.device AND a.provider_kind = d.provider_kind"
                " AND a.provider_object_id = d.provider_object_id"
                " AND coalesce(a.provider_row_date_ms, -1) = coalesce(d.provider_row_date_ms, -1)"
            ),
            "two unresolved attempts of one action": (
                "SELECT action_id FROM attempts WHERE delivery = 'PENDING'"
                " GROUP BY action_id HAVING COUNT(*) > 1"
            ),
            # the reviews that release a lease are the product's documented rule
            "two lease holders on one device": (
                "SELECT device FROM attempts WHERE delivery = 'PENDING'"
                " AND coalesce(review_reason, '') NOT IN ("
                + ", ".join(f"'{reason.value}'" for reason in sorted(LEASE_RELEASING_REVIEWS))
                + ") GROUP BY device HAVING COUNT(*) > 1"
            ),
            "duplicate of an attempt that is not confirmed": (
                "SELECT d.provider_object_id FROM duplicates d JOIN attempts a"
                " ON a.dispatch_id = d.dispatch_id WHERE a.delivery != 'CONFIRMED'"
            ),
            "confirmed artifact at or below the attempt's watermark, dated before it": (
                "SELECT dispatch_id FROM attempts WHERE provider_kind = 'sms'"
                " AND watermark_id IS NOT NULL AND provider_object_id <= watermark_id"
                " AND (provider_row_date_ms IS NULL OR device_clock_ms IS NULL"
                " OR provider_row_date_ms < device_clock_ms - 5000)"
            ),
            "confirmed without a row and without an operator": (
                "SELECT dispatch_id FROM attempts WHERE delivery = 'CONFIRMED'"
                " AND provider_object_id IS NULL AND resolved_by IS NULL"
            ),
        }
        for name, sql in queries.items():
            for row in connection.execute(sql):
                problems.append(f"{name}: {tuple(row)}")
        problems += _attempt_order_violations(connection)
        problems += _history_violations(connection)
    return problems


def _attempt_order_violations(connection: sqlite3.Connection) -> list[str]:
    problems = []
    budget = {
        row["action_id"]: row["maximum_attempts"]
        for row in connection.execute("SELECT action_id, maximum_attempts FROM actions")
    }
    # an operator's grant (``starebrain retry``): its own budget, counted after it
    granted_after: dict[str, int] = {}
    for row in connection.execute(
        "SELECT action_id, grant_json FROM actions WHERE grant_json IS NOT NULL"
    ):
        grant = json.loads(row["grant_json"])
        budget[row["action_id"]] = int(grant["attempts"])
        granted_after[row["action_id"]] = int(grant["after_attempt"])
    first_seq = {
        row["dispatch_id"]: row["seq"]
        for row in connection.execute(
            "SELECT dispatch_id, MIN(sequence) AS seq FROM history GROUP BY dispatch_id"
        )
    }
    proof_seq = {
        row["dispatch_id"]: row["seq"]
        for row in connection.execute(
            "SELECT dispatch_id, MIN(sequence) AS seq FROM history"
            " WHERE to_delivery = 'FAILED' OR to_acceptance = 'REJECTED'"
            " OR event IN ('resolve_sent', 'resolve_not_sent') GROUP BY dispatch_id"
        )
    }
    # an attempt failed only because the phone was unreachable or not ready (locked, screen
    # off...) spends no budget (``_decisions.spends_budget``)
    free = {
        row["dispatch_id"]
        for row in connection.execute(
            "SELECT dispatch_id FROM attempts WHERE delivery = 'FAILED'"
            " AND (json_extract(evidence_json, '$.unreachable') = 1"
            " OR json_extract(evidence_json, '$.not_ready') IS NOT NULL)"
        )
    }
    by_action: dict[str, list[sqlite3.Row]] = defaultdict(list)
    for row in connection.execute(
        "SELECT action_id, dispatch_id, attempt FROM attempts ORDER BY action_id, attempt"
    ):
        by_action[row["action_id"]].append(row)
    for action_id, rows in by_action.items():
        numbers = [row["attempt"] for row in rows]
        if numbers != list(range(1, len(rows) + 1)):
            problems.append(f"attempts of {action_id} numbered {numbers}")
        after = granted_after.get(action_id, 0)
        spent = sum(1 for row in rows if row["dispatch_id"] not in free and row["attempt"] > after)
        if spent > budget.get(action_id, 0):
            problems.append(f"{action_id}: {spent} attempts spent, budget {budget.get(action_id)}")
        for before, after in itertools.pairwise(rows):
            proven = proof_seq.get(before["dispatch_id"])
            created = first_seq.get(after["dispatch_id"])
            if proven is None or created is None or proven > created:
                problems.append(
                    f"{action_id}: attempt {after['attempt']} created before attempt"
                    f" {before['attempt']} was proven FAILED or REJECTED"
                )
    return problems


def _history_violations(connection: sqlite3.Connection) -> list[str]:
    problems = []
    versions = {
        row["dispatch_id"]: row["version"]
        for row in connection.execute("SELECT dispatch_id, version FROM attempts")
    }
    entries: dict[str, list[sqlite3.Row]] = defaultdict(list)
    for row in connection.execute("SELECT * FROM history ORDER BY sequence"):
        entries[row["dispatch_id"]].append(row)
    resolutions = ("resolve_sent", "resolve_not_sent")
    for dispatch_id, rows in entries.items():
        first = rows[0]
        if first["event"] != "created" or (first["to_delivery"], first["to_acceptance"]) != (
            "PENDING",
            "PENDING",
        ):
            problems.append(f"history of {dispatch_id} starts with {first['event']}")
        if dispatch_id not in versions:
            problems.append(f"history of {dispatch_id}, an attempt that does not exist")
        elif len(rows) != versions[dispatch_id] + 1:
            problems.append(
                f"{dispatch_id}: {len(rows)} history rows for version {versions[dispatch_id]}"
            )
        for before, after in itertools.pairwise(rows):
            if (after["from_delivery"], after["from_acceptance"]) != (
                before["to_delivery"],
                before["to_acceptance"],
            ):
                problems.append(f"{dispatch_id}: history row {after['sequence']} breaks the chain")
            if after["event"] in resolutions:
                continue
            if before["to_delivery"] != "PENDING" and after["to_delivery"] != before["to_delivery"]:
                problems.append(f"{dispatch_id}: delivery left {before['to_delivery']}")
            if (
                before["to_acceptance"] != "PENDING"
                and after["to_acceptance"] != before["to_acceptance"]
            ):
                problems.append(f"{dispatch_id}: acceptance left {before['to_acceptance']}")
    for dispatch_id in set(versions) - set(entries):
        problems.append(f"{dispatch_id} has no history")
    return problems


# --------------------------------------------------------------------------- the report


@attrs.frozen(kw_only=True)
class ChaosReport:
    """What one chaos run did and what the phones show."""

    config: ChaosConfig
    elapsed_s: float
    #: workload counters: kills, restarts, outages, human rows, sends, ...
    counts: Mapping[str, int]
    #: faults armed and used up, over all phones
    faults_consumed: Mapping[str, int]
    #: derived statuses of the actions at the end (ledger runs), with review reasons
    statuses: Mapping[str, int]
    tracker_duplicates: int
    lost_receipts: int
    invariant_violations: int
    lies: int
    #: explanations, by metric (what to look at in the ledger and on the phones)
    details: Mapping[str, Sequence[str]]
    #: where the ledger, the phones' stores and the children's logs are
    workdir: str

    @property
    def clean(self) -> bool:
        """True when the four metrics are all zero."""
        return not (
            self.tracker_duplicates or self.lost_receipts or self.invariant_violations or self.lies
        )


# --------------------------------------------------------------------------- the run


class ChaosRun:
    """One chaos run: phones, children, chaos actors, then the measurement."""

    def __init__(self, config: ChaosConfig, workdir: Path, *, say: Any = None) -> None:
        self.config = config
        self.workdir = workdir
        self.say = say or (lambda _text: None)
        self.actions = plan_actions(config)
        self.by_id = {spec.action_id: spec for spec in self.actions}
        self.lists = plan_workers(config, self.actions)
        self.db = workdir / "ledger.db"
        self.logs = workdir / "logs"
        self.rigs: list[PhoneRig] = []
        self.counts: Counter[str] = Counter()
        self.details: dict[str, list[str]] = defaultdict(list)
        #: running child processes by slot name
        self.running: dict[str, asyncio.subprocess.Process] = {}
        #: actions the naive agent reported done (a restart skips them)
        self.naive_done: set[str] = set()
        #: worker mode: actions the queueing child reported queued (a restart skips them),
        #: the worker slots, and the end of the workers (SIGTERM once every action settled)
        self.queue_reported: set[str] = set()
        self.worker_slots: list[asyncio.Task[Any]] = []
        self.workers_stop = asyncio.Event()
        #: what the children reported (``events.jsonl`` in the work folder)
        self.events: list[dict[str, Any]] = []
        self.chaos_over = asyncio.Event()
        self.senders_done = asyncio.Event()
        self._rng = {
            name: random.Random(f"{config.seed}:{name}")
            for name in ("kills", "restarts", "outages", "humans", "owner", "faults", "deletes")
        }
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cli_help: str | None = None
        self.key = workdir / "adbkey"
        self.started = time.monotonic()
        #: children stop on their own at this wall-clock time (end of the settle phase)
        self.deadline = time.time() + config.longest_chaos_s + config.settle_s

    # -- set-up ----------------------------------------------------------------------

    async def _start_phones(self) -> None:
        self.key = ensure_key(self.workdir / "adbkey")
        for index in range(self.config.phones):
            # one adb_keys file per phone: a wipe empties its own
            keys = self.workdir / f"adb_keys-{index}"
            self._allow_key(keys)
            # phone 0: a userdebug build read through su 1000 (sees every type); phone 1: a
            # user build in the restricted view (outbox and failed rows are never seen)
            system = index == 0
            phone = SimulatedPhone(
                store_path=self.workdir / f"phone-{index}.db",
                authorized_keys_path=keys,
                build_type="userdebug" if system else "user",
                send_delay_ms=30,
                tcpip_survives_reboot=True,
                unlock_after_boot_ms=600,
                seed=self.config.seed * 10 + index,
                framework_jar=self._framework_jar(index),
                app_send_timeout_ms=int(self.config.app_send_timeout_s * 1000),
                mms_fail_after_ms=int(self.config.mms_fail_after_s * 1000),
            )
            await phone.start()
            rig = PhoneRig(index, phone, read_as_system=system)
            now = phone.now_ms()
            phone.store.insert_incoming(
                "+12025550199", "Are we on for Friday?", date_ms=now - 90_000
            )
            phone.store.insert_outgoing(
                "+12025550199", "Yes, see you there", date_ms=now - 60_000, message_type=SENT
            )
            rig.attach()
            self.rigs.append(rig)

    def _framework_jar(self, index: int) -> Any:
        """Phone ``index``'s framework jar ("aosp" past the configured ones)."""
        jars = self.config.framework_jars
        return jars[index] if index < len(jars) else "aosp"

    def _allow_key(self, keys: Path) -> None:
        """Authorise the harness's key on a phone ("Always allow")."""
        keys.write_text(Path(f"{self.key}.pub").read_text(encoding="utf-8"), encoding="utf-8")

    def _address(self, rig: PhoneRig, alias: bool) -> str:
        """The address a sender reaches ``rig`` at: ``localhost:PORT`` for an alias slot."""
        return f"localhost:{rig.phone.port}" if alias else rig.serial

    def _rig_of(self, device: str) -> PhoneRig | None:
        """The phone a ledger key names (``127.0.0.1:P``, ``localhost:P``, ``…:P#2`` after a
        wipe): by its port."""
        port = device.split("#", 1)[0].rpartition(":")[2]
        return next((rig for rig in self.rigs if str(rig.phone.port) == port), None)

    async def run(self) -> ChaosReport:
        """Run the workload, settle, measure; the phones are stopped before returning."""
        self.logs.mkdir(parents=True, exist_ok=True)
        await self._start_phones()
        self.started = time.monotonic()
        self.deadline = time.time() + self.config.longest_chaos_s + self.config.settle_s
        try:
            return await self._run()
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for process in self.running.values():
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            for rig in self.rigs:
                await rig.phone.stop()

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        return task

    async def _keep_framework_codes(self) -> None:
        """The premise of "both send paths run": each phone's framework codes are read and
        kept in the ledger before the chaos, with time to spare. A reading cut short (a
        loaded machine: the jar's pull timed out) is kept with an hour to retry after, so
        ``auto`` rightly sent everything through the app, and the run proved nothing of the
        framework path (red once in a full run: ``framework_sends`` 0)."""
        from android_bridge import Device
        from starebrain_actions.ledger.store import Ledger
        from starebrain_actions.phone.send_path import build_codes

        async with Ledger.open(self.db) as ledger:
            for rig in self.rigs:
                device = await Device.connect(
                    rig.phone.serial, key_path=self.key, command_timeout_s=60.0
                )
                try:
                    codes = await build_codes(ledger, device)
                finally:
                    await device.close()
                if self._framework_jar(rig.index) == "aosp":
                    assert codes.send_text is not None, codes.reason

    async def _run(self) -> ChaosReport:
        config = self.config
        ledger = config.agent in LEDGER_AGENTS
        if ledger:
            await self._keep_framework_codes()
        self.say(
            f"{config.agent} agent: {len(self.actions)} actions ({config.twins} twin pairs),"
            f" {config.phones} phone(s), {config.workers} senders, seed {config.seed}"
        )
        cli_slots = round(config.workers * config.cli_senders) if config.agent == "ledger" else 0
        alias_slots = round(config.workers * config.alias_senders)
        senders = await self._start_workers(alias_slots) if config.agent == "worker" else []
        for index, action_ids in enumerate(self.lists if config.agent != "worker" else ()):
            kind = "cli" if index < cli_slots else ("agent" if ledger else "naive")
            # the last slots reach the phones by their other address
            alias = index >= config.workers - alias_slots
            self.counts["alias_senders"] += alias
            name = f"{kind}-{index}{'-alias' if alias else ''}"
            senders.append(self._spawn(self._sender_slot(name, kind, action_ids, alias)))
        if ledger:
            self._spawn(self._child_slot("reconcile", "reconcile", ()))
            if config.cli_reconcile_every_s:
                self._spawn(self._cli_reconcile_loop())
        self._spawn(self._killer())
        self._spawn(self._outages())
        self._spawn(self._humans())
        for rig in self.rigs:
            self._spawn(self._fault_plan(rig))
            self._spawn(self._owner(rig))
        if config.delete_every_s is not None:
            self._spawn(self._deletions(config.delete_every_s))
        if config.wipe_at_s is not None:
            self._spawn(self._wipe(self.rigs[0], config.wipe_at_s))
        if ledger and config.operator_after_s is not None:
            self._spawn(self._operator(config.operator_after_s))

        async def all_sent() -> None:
            await asyncio.gather(*senders, return_exceptions=True)
            if resumer is None:
                self.senders_done.set()

        waiting = self._spawn(all_sent())
        resumer = (
            self._spawn(self._resumer(waiting))
            if ledger and cli_slots and config.resume_every_s is not None
            else None
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), config.chaos_s)
        # the workload's reach is a condition, not a time (the faults are used up by sends
        # on the phones, which offer no event for it: looked at every 0.2 s)
        while self._send_fault_kinds_met() < config.send_fault_kinds:
            left = config.chaos_cap_s - (time.monotonic() - self.started)
            if waiting.done() or left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiting), min(0.2, left))
        self.chaos_over.set()
        self.counts["chaos_ms"] = int((time.monotonic() - self.started) * 1000)
        self.say(f"chaos over after {self.counts['chaos_ms'] / 1000:.1f} s; settling")
        for rig in self.rigs:
            await rig.phone.enable_tcpip()
            if rig.phone.user_unlocked:
                rig.phone.screen = "on"
        left = max(0.0, self.deadline - time.time())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), left)
        if resumer is not None:
            # what the senders left open, finished as a person would: `starebrain resume`
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(resumer), max(1.0, left))
            await asyncio.sleep(self.config.void_after_s)
            for rig in self.rigs:
                await self._resume_once(rig, self.config.send_wait_s)
        self.senders_done.set()
        self.counts["settle_ms"] = int((time.monotonic() - self.started) * 1000)
        for name, process in list(self.running.items()):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                if not name.startswith(("reconcile", "clirec")):
                    self.details["notes"].append(f"{name} still running after the settle phase")
        for task in list(self._tasks):
            if task is not waiting and not task.done():
                task.cancel()
        for rig in self.rigs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rig.phone.wait_idle(), 5)
        if ledger:
            await self._final_reconcile()
        return await self._measure()

    # -- children --------------------------------------------------------------------

    def _policy_spec(self) -> dict[str, float]:
        config = self.config
        return {
            "maximum_attempts": config.max_attempts,
            "initial_interval_s": config.initial_interval_s,
            "maximum_interval_s": config.maximum_interval_s,
            "grace_s": config.grace_s,
            "unverified_after_s": config.unverified_after_s,
            "settle_after_s": config.settle_after_s,
            "framework_settle_after_s": config.framework_settle_after_s,
            "app_send_timeout_s": config.app_send_timeout_s,
        }

    def _child_spec(
        self, kind: str, action_ids: Sequence[str], alias: bool = False
    ) -> dict[str, Any]:
        config = self.config
        return {
            "db": str(self.db),
            "key": str(self.key),
            "deadline": self.deadline,
            "phones": [
                {"serial": self._address(rig, alias), "read_as_system": rig.read_as_system}
                for rig in self.rigs
            ],
            "actions": [
                {
                    "action_id": action_id,
                    "to": self.by_id[action_id].recipient,
                    "body": self.by_id[action_id].body,
                    "phone": self.by_id[action_id].phone,
                }
                for action_id in action_ids
            ],
            "policy": self._policy_spec(),
            "command_timeout_s": config.command_timeout_s,
            "void_after_s": config.void_after_s,
            "poll_s": config.poll_s,
            "send_wait_s": config.send_wait_s,
            "reconcile_every_s": config.reconcile_every_s,
            "naive_tries": config.naive_tries,
            "pool": config.pool,
            "queue_every_s": 0.4 * config.chaos_s / max(1, len(action_ids)),
        }

    async def _sender_slot(
        self, name: str, kind: str, action_ids: Sequence[str], alias: bool = False
    ) -> None:
        if kind == "cli":
            await self._cli_sender(name, action_ids, alias)
        else:
            await self._child_slot(name, kind, action_ids, alias)

    async def _child_slot(
        self, name: str, kind: str, action_ids: Sequence[str], alias: bool = False
    ) -> None:
        """Run one child until it exits on its own; restart it when it was killed."""
        runs = 0
        while time.time() < self.deadline:
            if kind == "reconcile" and self.senders_done.is_set():
                return
            ids = (
                [a for a in action_ids if a not in self.naive_done]
                if kind == "naive"
                else [a for a in action_ids if a not in self.queue_reported]
                if kind == "queue"
                else action_ids
            )
            if kind != "reconcile" and not ids:
                return
            runs += 1
            spec = self.workdir / f"{name}-{runs}.json"
            spec.write_text(json.dumps(self._child_spec(kind, ids, alias)), encoding="utf-8")
            command = [sys.executable, "-m", "tests.chaos.harness", kind, str(spec)]
            code = await self._run_process(name, kind, command, self.logs / f"{name}-{runs}.log")
            if code == 0 or (code == _UNSETTLED and time.time() >= self.deadline):
                return
            if code == -signal.SIGKILL:
                self.counts[f"restarts_{kind}"] += 1
                await asyncio.sleep(self._rng["restarts"].uniform(*self.config.restart_after_s))
                continue
            self.details["child errors"].append(f"{name} run {runs} exited {code} (see logs)")
            self.counts["child_crashes"] += 1
            await asyncio.sleep(0.5)

    async def _run_process(
        self, name: str, kind: str, command: Sequence[str], log: Path
    ) -> int | None:
        """Start one process (killable while it runs), read its JSON lines; its exit status."""
        with log.open("a", encoding="utf-8") as stderr:
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
            )
            self.counts[f"started_{kind}"] += 1
            self.running[name] = process
            try:
                assert process.stdout is not None
                async for line in process.stdout:
                    self._child_line(name, kind, line.decode("utf-8", "replace"))
                return await process.wait()
            finally:
                if self.running.get(name) is process:
                    del self.running[name]

    def _child_line(self, name: str, kind: str, line: str) -> None:
        try:
            data = json.loads(line)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        self.events.append({"slot": name, "at": round(time.time(), 3), **data})
        event = data.get("event")
        if kind == "worker" and isinstance(event, str):
            # ``starebrain worker --json``: phone_ready, phone_held, phone_taken, claimed, done...
            self.counts[f"worker_{event}"] += 1
            if event == "done":
                self.counts["send_calls"] += 1
            return
        if kind == "queue" and event == "queued":
            self.queue_reported.add(str(data.get("action_id")))
            self.counts["queued" if data.get("created") else "queued_again"] += 1
            return
        if event == "done" and kind == "naive":
            self.naive_done.add(str(data.get("action_id")))
        elif event == "error":
            self.counts["agent_errors"] += 1
            self.details["agent errors"].append(
                f"{name}: {data.get('action_id')}: {data.get('error')}"
            )
        elif event == "pass":
            self.counts["reconcile_passes"] += 1
            self.counts["reconcile_changes"] += int(data.get("changes", 0))
        elif event == "outcome":
            self.counts["send_calls"] += 1

    # -- worker mode -------------------------------------------------------------------

    async def _start_workers(self, alias_slots: int) -> list[asyncio.Task[Any]]:
        """Queue the first actions, then start the queueing child (the rest) and the worker
        slots, and the watch that stops the workers once every action is settled; the tasks
        the run waits for as its senders."""
        config = self.config
        first, later = plan_queue(config, self.actions)
        await self._enqueue(first)
        self.counts["queued_up_front"] = len(first)
        senders = [self._spawn(self._child_slot("queue-0", "queue", later))]
        for index, phones in enumerate(plan_worker_phones(config)):
            # the last slots reach the phones by their other address
            alias = index >= config.workers - alias_slots
            self.counts["alias_senders"] += alias
            name = f"worker-{index}{'-alias' if alias else ''}"
            self.worker_slots.append(self._spawn(self._worker_slot(name, phones, alias)))
        self._spawn(self._watch_queue(senders[0]))
        return senders + self.worker_slots

    async def _enqueue(self, action_ids: Sequence[str]) -> None:
        """Queue ``action_ids`` for the pool, as an agent would (``send --queue``)."""
        from starebrain_actions.core.model import SmsIntent
        from starebrain_actions.ledger.store import Ledger

        policy = _policy({"policy": self._policy_spec()})
        async with Ledger.open(self.db) as ledger:
            for action_id in action_ids:
                spec = self.by_id[action_id]
                intent = SmsIntent(recipient=spec.recipient, body=spec.body)
                queued = await ledger.enqueue(action_id, intent, policy, pool=self.config.pool)
                self.counts["queued" if queued.created else "queued_again"] += 1

    def _worker_command(self, phones: Sequence[int], alias: bool) -> list[str]:
        rigs = [self.rigs[index] for index in phones]
        config = self.config
        return [
            str(Path(sys.executable).parent / "starebrain"),
            "--db",
            str(self.db),
            # su only where every phone of the worker is a userdebug build (phone 0)
            *(["--read-as-system"] if all(rig.read_as_system for rig in rigs) else []),
            "worker",
            *(arg for rig in rigs for arg in ("--device", self._address(rig, alias))),
            "--pool",
            config.pool,
            "--key",
            str(self.key),
            "--json",
            "--stale-after",
            str(config.stale_after_s),
            "--wait",
            str(config.send_wait_s),
            "--rate-limit",
            "1000",
            "--connect-timeout",
            "1",
            "--command-timeout",
            str(config.command_timeout_s),
        ]

    async def _worker_slot(self, name: str, phones: Sequence[int], alias: bool) -> None:
        """Run one ``starebrain worker`` until the harness stops it (SIGTERM: it finishes the
        send in hand and exits 0); restart it when it was killed."""
        command = self._worker_command(phones, alias)
        runs = 0
        while not self.workers_stop.is_set() and time.time() < self.deadline:
            runs += 1
            code = await self._run_process(name, "worker", command, self.logs / f"{name}.log")
            if self.workers_stop.is_set() and code in (0, -signal.SIGKILL):
                return
            if code == -signal.SIGKILL:
                self.counts["restarts_worker"] += 1
                await asyncio.sleep(self._rng["restarts"].uniform(*self.config.restart_after_s))
                continue
            self.details["child errors"].append(f"{name} run {runs} exited {code} (see logs)")
            self.counts["child_crashes"] += 1
            await asyncio.sleep(0.5)

    async def _watch_queue(self, queueing: asyncio.Task[Any]) -> None:
        """Once everything is queued and every action settled (or shortly before the end of
        the settle phase, leaving the workers time to finish the send in hand), stop the
        workers with SIGTERM, and any worker still starting as it comes up."""
        from starebrain_actions.ledger.store import Ledger

        stop_at = self.deadline - (self.config.send_wait_s + 3.0)
        async with Ledger.open(self.db) as ledger:
            while time.time() < stop_at:
                await asyncio.sleep(0.5)
                if not queueing.done():
                    continue
                try:
                    found = {s.action.action_id: s for s in await ledger.summaries()}
                except Exception:  # the ledger busy with the workers: look again
                    continue
                if all(i in found and settled(found[i]) for i in self.by_id):
                    self.counts["settled_ms"] = int((time.monotonic() - self.started) * 1000)
                    break
        self.workers_stop.set()
        signalled: set[int] = set()
        while not all(slot.done() for slot in self.worker_slots):
            for name, process in list(self.running.items()):
                if name.startswith("worker") and process.pid not in signalled:
                    signalled.add(process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(signal.SIGTERM)
                    self.counts["worker_sigterms"] += 1
            await asyncio.sleep(0.25)

    async def _cli_sender(self, name: str, action_ids: Sequence[str], alias: bool = False) -> None:
        """``starebrain send`` once per action (again when the run was killed: a rerun is
        promised to be safe); what it leaves open is re-driven by ``starebrain resume``
        (``_resumer``), or, without one, by sending again while it is unresolved."""
        pending = list(dict.fromkeys(action_ids))
        runs = 0
        while pending and time.time() < self.deadline:
            for action_id in list(pending):
                if time.time() >= self.deadline:
                    break
                spec = self.by_id[action_id]
                rig = self.rigs[spec.phone]
                wait = max(0.0, min(self.config.send_wait_s, self.deadline - time.time()))
                command = [
                    str(Path(sys.executable).parent / "starebrain"),
                    "--db",
                    str(self.db),
                    *(["--read-as-system"] if rig.read_as_system else []),
                    "send",
                    "--device",
                    self._address(rig, alias),
                    "--to",
                    spec.recipient,
                    "--body",
                    spec.body,
                    "--action-id",
                    action_id,
                    "--key",
                    str(self.key),
                    "--wait",
                    f"{wait:.2f}",
                    "--max-attempts",
                    str(self.config.max_attempts),
                    "--grace",
                    str(self.config.grace_s),
                    "--unverified-after",
                    str(self.config.unverified_after_s),
                    "--settle-after",
                    str(self.config.settle_after_s),
                    "--framework-settle-after",
                    str(self.config.framework_settle_after_s),
                    "--app-send-timeout",
                    str(self.config.app_send_timeout_s),
                    "--rate-limit",
                    "1000",
                    *await self._cli_options(),
                    "--json",
                ]
                runs += 1
                log = self.logs / f"{name}.log"
                code, output = await self._run_cli(name, "cli", command, log)
                if code == -signal.SIGKILL:
                    self.counts["restarts_cli"] += 1
                    await asyncio.sleep(self._rng["restarts"].uniform(*self.config.restart_after_s))
                    continue
                self.counts["send_calls"] += 1
                review = False
                with contextlib.suppress(ValueError):
                    review = bool(json.loads(output).get("needs_review"))
                if code == 7:
                    self.counts["cli_not_ready"] += 1
                if code in (0, 4, 5) or review or self.config.resume_every_s is not None:
                    # done, or (3 unresolved, 6 settling, 7 the phone not ready) left to resume
                    pending.remove(action_id)
                if code not in (0, 3, 4, 5, 6, 7):
                    self.counts["agent_errors"] += 1
                    self.details["agent errors"].append(
                        f"{name}: {action_id}: starebrain send exited {code}"
                    )

    async def _cli_options(self) -> list[str]:
        """The send options of the policy and timeouts that this CLI has (``--backoff``,
        ``--max-backoff``, ``--command-timeout``, ``--connect-timeout`` are recent)."""
        if self._cli_help is None:
            process = await asyncio.create_subprocess_exec(
                str(Path(sys.executable).parent / "starebrain"),
                "send",
                "--help",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            output, _ = await process.communicate()
            self._cli_help = output.decode("utf-8", "replace")
        wanted = {
            "--backoff": self.config.initial_interval_s,
            "--max-backoff": self.config.maximum_interval_s,
            "--command-timeout": self.config.command_timeout_s,
            "--connect-timeout": 1.0,
        }
        options: list[str] = []
        for name, value in wanted.items():
            if re.search(rf"^\s+{re.escape(name)}\b", self._cli_help, re.MULTILINE):
                options += [name, str(value)]
        return options

    async def _run_cli(
        self, name: str, kind: str, command: Sequence[str], log: Path
    ) -> tuple[int | None, str]:
        with log.open("a", encoding="utf-8") as stderr:
            process = await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.PIPE, stderr=stderr
            )
            self.counts[f"started_{kind}"] += 1
            self.running[name] = process
            try:
                output, _ = await process.communicate()
            finally:
                if self.running.get(name) is process:
                    del self.running[name]
        return process.returncode, output.decode("utf-8", "replace")

    async def _cli_reconcile_loop(self) -> None:
        every = self.config.cli_reconcile_every_s or 5.0
        runs = 0
        while not self.senders_done.is_set() and time.time() < self.deadline:
            await asyncio.sleep(every)
            for rig in self.rigs:
                command = [
                    str(Path(sys.executable).parent / "starebrain"),
                    "--db",
                    str(self.db),
                    *(["--read-as-system"] if rig.read_as_system else []),
                    "reconcile",
                    "--device",
                    rig.serial,
                    "--key",
                    str(self.key),
                    "--json",
                ]
                runs += 1
                code, _output = await self._run_cli(
                    f"clirec-{rig.index}", "clirec", command, self.logs / "cli-reconcile.log"
                )
                self.counts["cli_reconcile_runs"] += 1
                if code not in (0, 1, -signal.SIGKILL):
                    self.details["child errors"].append(f"starebrain reconcile exited {code}")

    def _resume_command(self, rig: PhoneRig, wait_s: float) -> list[str]:
        return [
            str(Path(sys.executable).parent / "starebrain"),
            "--db",
            str(self.db),
            *(["--read-as-system"] if rig.read_as_system else []),
            "resume",
            "--device",
            rig.serial,
            "--key",
            str(self.key),
            "--wait",
            f"{wait_s:.2f}",
            "--rate-limit",
            "1000",
            "--connect-timeout",
            "1",
            "--command-timeout",
            str(self.config.command_timeout_s),
            "--json",
        ]

    async def _resume_once(self, rig: PhoneRig, wait_s: float) -> None:
        """One ``starebrain resume`` on ``rig``'s phone: what it drove and how it exited."""
        code, output = await self._run_cli(
            f"resume-{rig.index}",
            "resume",
            self._resume_command(rig, wait_s),
            self.logs / "resume.log",
        )
        self.counts["resume_runs"] += 1
        if code == -signal.SIGKILL:
            self.counts["kills_resume_seen"] += 1
            return
        if code not in (0, 3, 4, 5, 6, 7):
            self.details["child errors"].append(f"starebrain resume exited {code}")
            return
        with contextlib.suppress(ValueError, KeyError, TypeError):
            for device in json.loads(output)["devices"]:
                for item in device["actions"]:
                    self.counts["resume_actions"] += 1
                    self.counts["resume_attempts"] += int(item["attempts_started"])

    async def _resumer(self, senders: asyncio.Task[Any]) -> None:
        """``starebrain resume`` on every phone now and then, until the senders are done."""
        every = self.config.resume_every_s or 4.0
        while not senders.done() and time.time() < self.deadline:
            await asyncio.sleep(every)
            for rig in self.rigs:
                wait = max(0.0, min(self.config.send_wait_s, self.deadline - time.time()))
                await self._resume_once(rig, wait)

    # -- chaos actors ------------------------------------------------------------------

    async def _killer(self) -> None:
        rng = self._rng["kills"]
        while not self.chaos_over.is_set():
            await asyncio.sleep(rng.expovariate(1 / self.config.kill_every_s))
            if self.chaos_over.is_set():
                return
            live = sorted(
                (name, process)
                for name, process in self.running.items()
                if process.returncode is None
            )
            if not live:
                continue
            name, process = live[rng.randrange(len(live))]
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
                self.counts["kills"] += 1
                self.counts[f"kills_{name.split('-')[0]}"] += 1

    async def _outages(self) -> None:
        rng = self._rng["outages"]
        # the first one early (a short run meets at least one), then at random
        pause = rng.uniform(0.2, 0.5) * min(self.config.outage_every_s, self.config.chaos_s)
        while not self.chaos_over.is_set():
            await asyncio.sleep(pause)
            pause = rng.expovariate(1 / self.config.outage_every_s)
            rig = self.rigs[rng.randrange(len(self.rigs))]
            down = rng.uniform(*self.config.outage_s)
            if self.chaos_over.is_set() or not rig.phone.tcpip_enabled:
                continue
            rig.phone.disable_tcpip()
            rig.outages += 1
            try:
                await asyncio.sleep(down)
            finally:
                await rig.phone.enable_tcpip()

    def _in_flight(self, rig: PhoneRig) -> list[str]:
        """Actions with an unresolved attempt on the phone now (from the ledger, read only)."""
        if self.config.agent not in LEDGER_AGENTS or not self.db.exists():
            return []
        try:
            with contextlib.closing(_connect_ro(self.db)) as connection:
                rows = connection.execute(
                    "SELECT action_id, device FROM attempts WHERE delivery = 'PENDING'"
                    " ORDER BY action_id"
                ).fetchall()
        except sqlite3.Error:
            return []
        return [row[0] for row in rows if row[0] in self.by_id and self._rig_of(row[1]) is rig]

    async def _humans(self) -> None:
        """The phones' owners text the same people: the same text as an action, or other."""
        rng = self._rng["humans"]
        while not self.chaos_over.is_set():
            await asyncio.sleep(rng.expovariate(1 / self.config.human_every_s))
            if self.chaos_over.is_set():
                break
            rig = self.rigs[rng.randrange(len(self.rigs))]
            same = rng.random() < self.config.human_same_text
            mine = [spec for spec in self.actions if spec.phone in (rig.index, ANY_PHONE)]
            flying = self._in_flight(rig)
            if flying and rng.random() < 0.6:
                target = self.by_id[flying[rng.randrange(len(flying))]]
            else:
                target = mine[rng.randrange(len(mine))]
            body = target.body if same else HUMAN_TEXTS[rng.randrange(len(HUMAN_TEXTS))]
            phone = rig.phone
            # the owner's app writes its row SENT before its radio sends, as for our sends
            date = phone.now_ms()
            row = phone.store.insert_outgoing(
                target.recipient, body, date_ms=date, creator=phone.app.package, message_type=SENT
            )
            rig.human[(row, date)] = "same" if same else "other"
            self.counts["human_same_text" if same else "human_other_text"] += 1

    def _send_fault_kinds_met(self) -> int:
        """How many kinds of send fault the phones have met (armed and used up) so far."""
        return len(
            {fault for rig in self.rigs for fault, n in rig.consumed().items() if n}
            & set(SEND_FAULTS)
        )

    async def _fault_plan(self, rig: PhoneRig) -> None:
        """Arm the faults in their seeded order, one of each class at a time."""
        rng = self._rng["faults"]
        order = fault_order(self.config, rig.index)
        classes = [
            [f for f in order if f in SEND_FAULTS],
            [f for f in order if f in AM_FAULTS],
            [f for f in order if f not in SEND_FAULTS | LONG_TEXT_FAULTS | AM_FAULTS],
            # waits for a long text, without holding the other send faults back
            [f for f in order if f in LONG_TEXT_FAULTS],
        ]
        position = [0, 0, 0, 0]
        #: when each class may be armed again: ``am start`` faults and the command-level ones
        #: (a hang costs a whole command timeout) come three times less often than send faults
        ready = [0.0, 0.0, 0.0, 0.0]
        spacing = (1.0, 3.0, 3.0, 1.0)
        while not self.chaos_over.is_set():
            await asyncio.sleep(0.1)
            remaining = rig.phone.faults.remaining()
            now = time.monotonic()
            for index, faults in enumerate(classes):
                if any(fault in remaining for fault in faults):
                    ready[index] = now + spacing[index] * rng.uniform(*self.config.fault_gap_s)
                    continue
                if now < ready[index]:
                    continue
                fault = faults[position[index] % len(faults)]
                position[index] += 1
                rig.phone.inject_fault(fault)
                rig.armed[fault] += 1

    async def _owner(self, rig: PhoneRig) -> None:
        """The phone's owner and radio: a screen that went off is woken after a second; a
        send stuck on the radio is sent or failed after ``stuck_s`` (its row, written SENT or
        OUTBOX by the app, stays SENT or becomes so, or turns FAILED)."""
        rng = self._rng["owner"]
        off_since: float | None = None
        while True:
            await asyncio.sleep(0.25)
            phone = rig.phone
            if phone.screen != "on" and phone.user_unlocked:
                off_since = off_since or time.monotonic()
                if time.monotonic() - off_since >= 1.0:
                    phone.screen = "on"
                    rig.screen_wakes += 1
                    off_since = None
            else:
                off_since = None
            cutoff = phone.now_ms() - int(self.config.stuck_s * 1000)
            for send in rig.sends:
                if (
                    send.path != "app"
                    or send.radio_settled
                    or Fault.STUCK_OUTBOX not in send.faults
                ):
                    continue  # a framework send stuck on the radio writes no row, sends nothing
                rows = [(row_id, date) for kind, row_id, date in send.rows if kind == "sms"]
                if any(date is None or date > cutoff for _row_id, date in rows):
                    continue
                send.radio_settled = True
                sent = rng.random() < 0.5
                for row_id, date in rows:
                    row = phone.store.row(row_id)
                    if row is None or row.date != date or row.type not in (OUTBOX, SENT):
                        continue  # deleted or wiped meanwhile
                    if not sent:
                        phone.store.mark_failed(row_id)
                    elif row.type == OUTBOX:
                        phone.store.mark_sent(row_id, date_sent_ms=phone.now_ms())
                rig.radio_settled += 1

    async def _deletions(self, every_s: float) -> None:
        """An owner deletes the latest conversation of a phone now and then: every SMS and MMS
        of the thread of its newest SMS row goes (kept as ground truth first). The next message then
        takes the lowest free ``_id`` above what is left: a deleted row's."""
        rng = self._rng["deletes"]
        while not self.chaos_over.is_set():
            await asyncio.sleep(rng.expovariate(1 / every_s))
            if self.chaos_over.is_set():
                return
            rig = self.rigs[rng.randrange(len(self.rigs))]
            store = rig.phone.store
            rows = store.rows()
            if not rows:
                continue
            thread = max(rows, key=lambda row: row._id).thread_id
            if thread is None:
                continue
            rig.keep_removed(
                [row for row in rows if row.thread_id == thread],
                [message for message in store.mms_messages() if message.thread_id == thread],
            )
            store.delete_conversation(thread)
            rig.threads_deleted += 1
            self.counts["threads_deleted"] += 1

    async def _wipe(self, rig: PhoneRig, at_s: float) -> None:
        """Phone ``rig`` is factory-reset ``at_s`` into the chaos (its stores, fence folder,
        authorised keys and identity gone), and its owner sets it up again at the same address
        a second later: USB debugging on, this host's key allowed, unlocked."""
        await asyncio.sleep(at_s)
        if self.chaos_over.is_set():
            return
        phone = rig.phone
        rig.keep_removed(phone.store.rows(), phone.store.mms_messages())
        await phone.wipe_data()
        rig.wipes += 1
        self.counts["wipes"] += 1
        await asyncio.sleep(1.0)
        self._allow_key(self.workdir / f"adb_keys-{rig.index}")
        await phone.enable_tcpip()

    async def _operator(self, after_s: float) -> None:
        """A person who reads the phone: an attempt holding its phone in review for
        ``after_s`` is ruled from ground truth: sent (naming its row) when a send of its own
        put the text out, not-sent when no send of it ever reached the app."""
        while not self.senders_done.is_set():
            await asyncio.sleep(1.0)
            try:
                with contextlib.closing(_connect_ro(self.db)) as connection:
                    rows = connection.execute(
                        "SELECT dispatch_id, action_id, device, version, dispatched_at,"
                        " evidence_json"
                        " FROM attempts WHERE delivery = 'PENDING'"
                        " AND review_reason IN ('AMBIGUOUS', 'STUCK')"
                    ).fetchall()
            except sqlite3.Error:
                continue
            now = datetime.now(UTC)
            for row in rows:
                age = now - datetime.fromisoformat(row["dispatched_at"])
                rig = self._rig_of(row["device"])
                if rig is None or age < timedelta(seconds=after_s):
                    continue
                fenced = "fence_epoch" in json.loads(row["evidence_json"])
                ruling = self._ruling(rig, row["dispatch_id"], fenced=fenced)
                if ruling is None:
                    continue
                await self._resolve(row, ruling)

    def _ruling(self, rig: PhoneRig, dispatch_id: str, *, fenced: bool) -> list[str] | None:
        """``--as …`` arguments from ground truth, or None (something else went out, the
        text is still queued, or the attempt had no fence to tell its sends by: left to a
        person)."""
        spec_keys = {spec.intent_key for spec in self.actions}
        mine = [
            outcome
            for outcome in send_outcomes(rig, dict.fromkeys(spec_keys))
            if outcome.dispatch_id == dispatch_id
        ]
        if not mine:
            return ["--as", "not-sent"] if fenced else None
        for outcome in mine:
            if not outcome.sent:
                continue
            here = [
                row_id
                for row_id, date in outcome.sent_rows
                if (row := rig.phone.store.row(row_id)) is not None and row.date == date
            ]
            return ["--as", "sent", *(["--row", f"sms:{here[0]}"] if here else [])]
        return None

    async def _resolve(self, row: sqlite3.Row, ruling: Sequence[str]) -> None:
        command = [
            str(Path(sys.executable).parent / "starebrain"),
            "--db",
            str(self.db),
            "resolve",
            row["action_id"],
            *ruling,
            "--reason",
            "chaos operator: what the phone shows",
            "--operator",
            "chaos",
            "--dispatch-id",
            row["dispatch_id"],
            "--expect",
            str(row["version"]),
        ]
        code, _output = await self._run_cli(
            "operator", "operator", command, self.logs / "operator.log"
        )
        verdict = ruling[1].replace("-", "_")
        self.counts[f"operator_{verdict}" if code == 0 else "operator_refused"] += 1

    # -- the end -------------------------------------------------------------------------

    async def _final_reconcile(self) -> None:
        """Reconcile passes until nothing changes (a few at most), then once more after the
        phones are idle."""
        from starebrain_actions.core.exceptions import PhoneError
        from starebrain_actions.ledger.store import Ledger
        from starebrain_actions.orchestration.reconciler import reconcile_device
        from starebrain_actions.phone.android import AndroidPhone

        # the last sends' rows settle first, so that every confirmed one is judged
        await asyncio.sleep(self.config.settle_after_s)
        async with Ledger.open(self.db) as ledger:
            for rig in self.rigs:
                try:
                    phone = await AndroidPhone.connect(
                        rig.serial,
                        key_path=self.key,
                        command_timeout_s=self.config.command_timeout_s * 2,
                        read_as_system=rig.read_as_system,
                    )
                except PhoneError as exc:
                    self.details["notes"].append(f"final reconcile of {rig.serial}: {exc}")
                    continue
                # the ledger's name of the phone answering there now (see _bound)
                await _bound(ledger, phone)
                try:
                    for _ in range(4):
                        report = await reconcile_device(
                            ledger, phone, void_after=timedelta(seconds=self.config.void_after_s)
                        )
                        self.counts["final_reconcile_passes"] += 1
                        if not report.changes:
                            break
                        await asyncio.sleep(0.3)
                finally:
                    await phone.close()

    async def _summaries(self) -> dict[str, ActionSummary]:
        from starebrain_actions.ledger.store import Ledger

        summaries: dict[str, ActionSummary] = {}
        if not self.db.exists():
            return summaries
        async with Ledger.open(self.db) as ledger:
            for spec in self.actions:
                try:
                    summaries[spec.action_id] = await ledger.summary(spec.action_id)
                except Exception as exc:  # NotFound for a never-created action is fine
                    if type(exc).__name__ != "NotFound":
                        self.details["invariant violations"].append(
                            f"summary of {spec.action_id} fails: {type(exc).__name__}: {exc}"
                        )
        return summaries

    async def _measure(self) -> ChaosReport:
        ledger = self.config.agent in LEDGER_AGENTS
        groups: dict[Intent, list[ActionSpec]] = defaultdict(list)
        for spec in self.actions:
            groups[spec.intent_key].append(spec)
        outcomes = [o for rig in self.rigs for o in send_outcomes(rig, groups)]
        attempts = self._attempt_rows() if ledger and self.db.exists() else []
        owner_of = {row["dispatch_id"]: row["action_id"] for row in attempts}
        intent_of = {spec.action_id: spec.intent_key for spec in self.actions}
        tally = tally_sends(outcomes, owner_of, intent_of)
        self._write_ground_truth(outcomes, owner_of)
        tracker_duplicates, explained = tracker_duplicates_of(groups, tally)
        self.details["tracker duplicates"] += explained
        counts = self.counts
        counts["actions"] = len(self.actions)
        counts["twin_pairs"] = self.config.twins
        counts["app_sends"] = len(outcomes)
        counts["framework_sends"] = sum(1 for o in outcomes if o.send.path == "framework")
        counts["ui_sends"] = counts["app_sends"] - counts["framework_sends"]
        counts["framework_sends_out"] = sum(
            1 for o in outcomes if o.send.path == "framework" and o.out
        )
        counts["app_sends_of_unknown_attempts"] = sum(1 for o in outcomes if not o.dispatch_id)
        # long texts the radio failed on their last part, the parts before it delivered
        counts["partial_sends"] = sum(
            1 for rig in self.rigs for t in rig.phone.transmissions if t.parts_out is not None
        )
        counts["sms_out"] = sum(tally.out.values())
        counts["app_doubled_sends"] = sum(1 for o in outcomes if o.doubled and o.out)
        counts["undelivered"] = sum(1 for key in groups if tally.out[key] == 0)
        counts["outages"] = sum(rig.outages for rig in self.rigs)
        counts["reboots"] = sum(rig.phone.reboots for rig in self.rigs)
        counts["screen_wakes"] = sum(rig.screen_wakes for rig in self.rigs)
        counts["radio_settled_stuck"] = sum(rig.radio_settled for rig in self.rigs)
        consumed: Counter[Fault] = Counter()
        for rig in self.rigs:
            consumed.update(rig.consumed())
        faults_consumed = {fault.value: consumed.get(fault, 0) for fault in Fault}
        if self.config.agent == "worker":
            self._count_phones(outcomes, owner_of, attempts)
        lost = invariants = lies = 0
        statuses: Counter[str] = Counter()
        if ledger:
            summaries = await self._summaries()
            lost = self._lost_receipts(outcomes, groups, tally, attempts)
            problems = ledger_invariant_violations(self.db) if self.db.exists() else []
            problems += self.details.get("invariant violations", [])
            self.details["invariant violations"] = problems
            invariants = len(problems)
            lies = self._lies(summaries, groups, tally)
            for spec in self.actions:
                summary = summaries.get(spec.action_id)
                status = summary.status.value if summary else "NOT CREATED"
                statuses[status] += 1
                if summary and spec.twin_of is not None and summary.attempts:
                    counts["twin_actions_attempted"] += 1
                if summary:
                    for reason in summary.review_reasons:
                        statuses[f"review {reason.value}"] += 1
                    statuses["attempts"] += len(summary.attempts)
                    statuses["duplicates recorded"] += summary.duplicates
        return ChaosReport(
            config=self.config,
            elapsed_s=time.monotonic() - self.started,
            counts=dict(counts),
            faults_consumed=faults_consumed,
            statuses=dict(statuses),
            tracker_duplicates=tracker_duplicates,
            lost_receipts=lost,
            invariant_violations=invariants,
            lies=lies,
            details={key: list(value) for key, value in self.details.items() if value},
            workdir=str(self.workdir),
        )

    def _count_phones(
        self,
        outcomes: Sequence[SendOutcome],
        owner_of: Mapping[str, str],
        attempts: Sequence[sqlite3.Row],
    ) -> None:
        """Worker mode: where the actions went: sends of an action's attempts that went out,
        per phone; the phones that sent any; actions with attempts on two phones."""
        phones_of: dict[str, set[int]] = defaultdict(set)
        for row in attempts:
            rig = self._rig_of(row["device"])
            if rig is not None:
                phones_of[row["action_id"]].add(rig.index)
        out_on: Counter[int] = Counter(
            o.phone for o in outcomes if o.out and owner_of.get(o.dispatch_id or "") is not None
        )
        for index, count in sorted(out_on.items()):
            self.counts[f"sends_out_phone_{index}"] = count
        self.counts["phones_sent_on"] = len(out_on)
        self.counts["actions_on_two_phones"] = sum(1 for s in phones_of.values() if len(s) > 1)

    def _write_ground_truth(
        self, outcomes: Sequence[SendOutcome], owner_of: Mapping[str, str]
    ) -> None:
        """``sends.jsonl`` and ``humans.json`` in the work folder: what each phone's app sent
        (asked text, attempt, faults, rows written, what went out) and the human rows, for
        reproductions."""
        with (self.workdir / "sends.jsonl").open("w", encoding="utf-8") as out:
            for outcome in outcomes:
                rig = self.rigs[outcome.phone]
                send = outcome.send
                record = {
                    "phone": rig.index,
                    "to": send.address,
                    "body": send.body,
                    "path": send.path,
                    "dispatch_id": send.dispatch_id,
                    "action": owner_of.get(send.dispatch_id or ""),
                    "faults": sorted(fault.value for fault in send.faults),
                    "sms_ids": list(outcome.sms_ids),
                    "out": outcome.out,
                    "sent": outcome.sent,
                    "intent_of": [
                        spec.action_id
                        for spec in self.actions
                        if outcome.intent is not None and spec.intent_key == outcome.intent
                    ],
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        humans = {rig.index: {str(k): v for k, v in sorted(rig.human.items())} for rig in self.rigs}
        (self.workdir / "humans.json").write_text(json.dumps(humans, indent=1), encoding="utf-8")
        with (self.workdir / "events.jsonl").open("w", encoding="utf-8") as out:
            for event in self.events:
                out.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")

    def _attempt_rows(self) -> list[sqlite3.Row]:
        with contextlib.closing(_connect_ro(self.db)) as connection:
            return connection.execute(
                "SELECT dispatch_id, action_id, device, provider_kind, provider_object_id,"
                " provider_row_date_ms FROM attempts"
            ).fetchall()

    def _lost_receipts(
        self,
        outcomes: Sequence[SendOutcome],
        groups: Mapping[Intent, Sequence[ActionSpec]],
        tally: SendTally,
        attempts: Sequence[sqlite3.Row],
    ) -> int:
        """Sends the ledger has no receipt for: a send script's fence claim (in a command
        the phone ran, or on its file system) naming a dispatch the ledger does not know;
        more sends of an intent on a phone than attempts of it there; a send of a text no
        action has."""
        known = {row["dispatch_id"] for row in attempts}
        # per phone and intent: in worker mode an intent may leave any phone, each of its
        # sends on a phone against the ledger's attempts there
        attempts_by: Counter[tuple[int, Intent]] = Counter()
        for row in attempts:
            spec = self.by_id.get(row["action_id"])
            rig = self._rig_of(row["device"])
            if spec is not None and rig is not None and spec.phone in (rig.index, ANY_PHONE):
                attempts_by[(rig.index, spec.intent_key)] += 1
        sends_by: Counter[tuple[int, Intent]] = Counter(
            (outcome.phone, outcome.intent) for outcome in outcomes if outcome.intent is not None
        )
        lost = 0
        for rig in self.rigs:
            for dispatch_id in sorted(fence_dispatch_ids(rig) - known):
                lost += 1
                self.details["lost receipts"].append(
                    f"phone {rig.index}: a send script ran for dispatch {dispatch_id}, unknown"
                    " to the ledger"
                )
        for (phone, key), sends in sends_by.items():
            if sends > attempts_by[(phone, key)]:
                lost += sends - attempts_by[(phone, key)]
                names = ", ".join(s.action_id for s in groups[key])
                self.details["lost receipts"].append(
                    f"{names}: {sends} sends on phone {phone}, {attempts_by[(phone, key)]} attempts"
                )
        for rig in self.rigs:
            missed = rig.unrecorded_framework_sends()
            lost += len(missed)
            self.details["lost receipts"] += missed
        for outcome in outcomes:
            if outcome.intent is None:
                lost += 1
                self.details["lost receipts"].append(
                    f"phone {outcome.phone}: a send of a text no action has"
                    f" (rows {outcome.sms_ids}, dispatch {outcome.dispatch_id})"
                )
        return lost

    def _lies(
        self,
        summaries: Mapping[str, ActionSummary],
        groups: Mapping[Intent, Sequence[ActionSpec]],
        tally: SendTally,
    ) -> int:
        """SUCCEEDED with nothing of the action out (its confirming row missing, not sent,
        not the intent, or no send of its attempts went out and no send of an unknown
        attempt is left to account for it); FAILED while a send of its attempts went out, or
        while more sends of unknown attempts went out than the other actions of the intent
        account for."""
        lies = 0
        for key, specs in groups.items():
            succeeded = [s for s in specs if _status(summaries, s) is Status.SUCCEEDED]
            failed = [s for s in specs if _status(summaries, s) is Status.FAILED]
            wrong_rows = 0
            for spec in succeeded:
                record = summaries[spec.action_id].latest
                assert record is not None
                # the phone its confirming attempt names (in worker mode, any of the pool)
                rig = self.rigs[key[0]] if key[0] != ANY_PHONE else self._rig_of(record.device)
                if rig is None:
                    wrong_rows += 1
                    self.details["lies"].append(
                        f"{spec.action_id} SUCCEEDED on {record.device}, no phone of the run"
                    )
                    continue
                problem = _confirming_row_problem(rig, record, key)
                if problem == "human":
                    self.counts["confirmed_on_a_human_row"] += 1
                    self.details["confirmed on a human row"].append(
                        f"{spec.action_id}: {record.dispatch_id} confirmed by the owner's sms"
                        f" _id {record.provider_object_id} on phone {rig.index}"
                    )
                elif problem:
                    wrong_rows += 1
                    self.details["lies"].append(f"{spec.action_id} SUCCEEDED but {problem}")
            empty = [s for s in succeeded if tally.sent_of[s.action_id] == 0]
            excess = len(empty) - tally.loose_sent[key]
            if excess > 0:
                self.details["lies"].append(
                    f"{', '.join(s.action_id for s in empty)} SUCCEEDED ({_on(key)}) but no"
                    f" send of their attempts went out ({tally.loose_sent[key]} sends of the"
                    " text by unknown attempts)"
                )
            lies += max(wrong_rows, excess, 0)
            for spec in failed:
                if tally.out_of[spec.action_id]:
                    lies += 1
                    self.details["lies"].append(
                        f"{spec.action_id} FAILED ({_on(key)}) while"
                        f" {tally.out_of[spec.action_id]} send(s) of its attempts went out"
                    )
            if failed and tally.loose_out[key]:
                others = sum(1 for s in specs if s not in failed and tally.out_of[s.action_id] == 0)
                unexplained = tally.loose_out[key] - others
                if unexplained > 0:
                    lies += min(unexplained, len(failed))
                    self.details["lies"].append(
                        f"{', '.join(s.action_id for s in failed)} FAILED ({_on(key)}) while"
                        f" {tally.loose_out[key]} sends of the text by unknown attempts went out"
                    )
        return lies


def _status(summaries: Mapping[str, ActionSummary], spec: ActionSpec) -> Status | None:
    summary = summaries.get(spec.action_id)
    return summary.status if summary else None


def _confirming_row_problem(rig: PhoneRig, record: Any, key: tuple[int, str, str]) -> str:
    """What is wrong with the row that confirms a SUCCEEDED attempt ("" nothing, "human":
    a row the phone's owner wrote)."""
    provider_id = record.provider_object_id
    if provider_id is None:
        return "" if record.resolved_by else "no provider row is named"
    dated = record.provider_row_date_ms
    if record.provider_kind is not None and record.provider_kind.value == "mms":
        found = (
            rig.mms_message(provider_id, dated // 1000)
            if dated is not None
            else {m.id: m for m in rig.phone.store.mms_messages()}.get(provider_id)
        )
        if found is None or found.msg_box != MMS_SENT:
            return f"mms _id {provider_id} is not a sent MMS on phone {rig.index}"
        address = found.addresses[0] if found.addresses else ""
        if not same_intent(rig.index, address, found.body, key):
            return f"mms _id {provider_id} carries another text"
        return ""
    row = rig.sms_row(provider_id, dated) if dated is not None else rig.phone.store.row(provider_id)
    if row is None or row.type != SENT:
        return f"sms _id {provider_id} is not a sent SMS on phone {rig.index}"
    if not same_intent(rig.index, row.address, row.body, key):
        return f"sms _id {provider_id} carries another text"
    if (provider_id, row.date) in rig.human:
        return "human"
    return ""


async def run_chaos(config: ChaosConfig, workdir: Path, *, say: Any = None) -> ChaosReport:
    """Run one chaos workload in ``workdir`` (which keeps the ledger, stores and logs)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return await ChaosRun(config, workdir, say=say).run()


def metric_rows(reports: Sequence[ChaosReport]) -> list[tuple[str, list[str]]]:
    """The report's figures as table rows, one column per report."""

    def counted(name: str) -> list[str]:
        return [str(report.counts.get(name, 0)) for report in reports]

    rows: list[tuple[str, list[str]]] = [
        ("tracker-caused duplicate SMS", [str(r.tracker_duplicates) for r in reports]),
        (
            "lost receipts",
            [str(r.lost_receipts) if r.config.agent in LEDGER_AGENTS else "n/a" for r in reports],
        ),
        (
            "invariant violations",
            [
                str(r.invariant_violations) if r.config.agent in LEDGER_AGENTS else "n/a"
                for r in reports
            ],
        ),
        ("lies", [str(r.lies) if r.config.agent in LEDGER_AGENTS else "n/a" for r in reports]),
        ("actions (twins included)", counted("actions")),
        ("sends the phones made (app and framework)", counted("app_sends")),
        ("... through the framework (service call isms)", counted("framework_sends")),
        ("sends whose text went out", counted("sms_out")),
        ("sends the app itself doubled", counted("app_doubled_sends")),
        ("intents never delivered", counted("undelivered")),
        ("processes killed (kill -9)", counted("kills")),
        ("human rows, same text", counted("human_same_text")),
        ("human rows, other text", counted("human_other_text")),
        ("confirmed on a human's row", counted("confirmed_on_a_human_row")),
        (
            "outages / reboots",
            [f"{r.counts.get('outages', 0)} / {r.counts.get('reboots', 0)}" for r in reports],
        ),
        (
            "conversations deleted / wipes",
            [f"{r.counts.get('threads_deleted', 0)} / {r.counts.get('wipes', 0)}" for r in reports],
        ),
        ("senders by the other address", counted("alias_senders")),
        ("faults consumed", [str(sum(r.faults_consumed.values())) for r in reports]),
        ("reconcile passes (child)", counted("reconcile_passes")),
        (
            "operator rulings sent / not-sent",
            [
                f"{r.counts.get('operator_sent', 0)} / {r.counts.get('operator_not_sent', 0)}"
                for r in reports
            ],
        ),
        ("agent errors (exceptions)", counted("agent_errors")),
        ("elapsed (s)", [f"{r.elapsed_s:.1f}" for r in reports]),
    ]
    return rows


def format_table(reports: Sequence[ChaosReport]) -> str:
    """A plain-text table of the reports, side by side."""
    headers = ["", *(f"{r.config.agent} agent" for r in reports)]
    rows = [[name, *values] for name, values in metric_rows(reports)]
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    for row in rows:
        lines.append("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- children


def _emit(**data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def _policy(spec: Mapping[str, Any]) -> RetryPolicy:
    policy = spec["policy"]
    return RetryPolicy(
        settle_after=timedelta(seconds=policy["settle_after_s"]),
        framework_settle_after=timedelta(seconds=policy["framework_settle_after_s"]),
        app_send_timeout=timedelta(seconds=policy["app_send_timeout_s"]),
        maximum_attempts=int(policy["maximum_attempts"]),
        initial_interval=timedelta(seconds=policy["initial_interval_s"]),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=policy["maximum_interval_s"]),
        grace_window=timedelta(seconds=policy["grace_s"]),
        unverified_after=timedelta(seconds=policy["unverified_after_s"]),
    )


def settled(summary: ActionSummary) -> bool:
    """Nothing more a sender can do: SUCCEEDED, waiting for a person, or FAILED/MISMATCH with
    no new attempt allowed (other than after a backoff)."""
    if summary.needs_review or summary.status is Status.SUCCEEDED:
        return True
    if summary.status not in (Status.FAILED, Status.MISMATCH):
        return False
    decision = _decisions.should_redispatch(summary.action, summary.attempts, datetime.now(UTC))
    return not decision.redispatch and decision.reason is not RedispatchReason.BACKOFF


async def _agent_child(spec: Mapping[str, Any]) -> int:
    """Send the actions through ``SmsAgent`` in a loop until each is settled."""
    from starebrain_actions.core.exceptions import PhoneError
    from starebrain_actions.orchestration.agent import SmsAgent

    phones = spec["phones"]
    agents: dict[int, Any] = {}
    opened: dict[int, Any] = {}
    policy = _policy(spec)
    deadline = float(spec["deadline"])
    pending = list(spec["actions"])

    async def drop(index: int) -> None:
        """Close the agent of phone ``index`` (another phone answers at its address now: a
        new agent names it by its own key)."""
        agents.pop(index, None)
        context = opened.pop(index, None)
        if context is not None:
            with contextlib.suppress(Exception):
                await context.__aexit__(None, None, None)

    try:

        async def agent_for(index: int) -> Any:
            if index not in agents:
                try:
                    context = SmsAgent.open(
                        db=spec["db"],
                        device=phones[index]["serial"],
                        policy=policy,
                        key_path=spec["key"],
                        poll_interval_s=spec["poll_s"],
                        connect_timeout_s=1.0,
                        command_timeout_s=spec["command_timeout_s"],
                        read_as_system=phones[index]["read_as_system"],
                        void_after=timedelta(seconds=spec["void_after_s"]),
                        rate_limit=1000,
                    )
                    agents[index] = await context.__aenter__()
                    opened[index] = context
                except PhoneError:
                    return None
            return agents[index]

        while pending and time.time() < deadline:
            for action in list(pending):
                left = deadline - time.time()
                if left <= 0:
                    break
                agent = await agent_for(action["phone"])
                if agent is None:
                    await asyncio.sleep(0.2)
                    continue
                try:
                    outcome = await agent.send(
                        action["action_id"],
                        action["to"],
                        action["body"],
                        wait=min(spec["send_wait_s"], left),
                    )
                except Exception as exc:
                    _emit(
                        event="error",
                        action_id=action["action_id"],
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    await asyncio.sleep(0.1)
                    continue
                latest = outcome.record
                if latest is not None and _REPLACED in (latest.last_error or ""):
                    await drop(action["phone"])
                done = settled(outcome.summary)
                _emit(
                    event="outcome",
                    action_id=action["action_id"],
                    status=outcome.status.value,
                    review=[reason.value for reason in outcome.summary.review_reasons],
                    done=done,
                )
                if done:
                    pending.remove(action)
    finally:
        for index in list(opened):
            await drop(index)
    return 0 if not pending else _UNSETTLED


#: What a connection says once another phone answers at its address (``android_bridge``).
_REPLACED: Final = "another phone answers here now"


async def _bound(ledger: Any, phone: Any) -> None:
    """Name ``phone`` (an ``AndroidPhone`` just connected) by the ledger's key for the phone
    answering there, as ``SmsAgent.open`` and ``starebrain reconcile`` do: one phone under two
    addresses is one device, and a wiped phone at the same address is a new one."""
    await phone.bind_in(ledger)


async def _naive_child(spec: Mapping[str, Any]) -> int:
    """Send each action through the dispatcher, again on any error, up to N times; no ledger."""
    devices: dict[int, Device] = {}
    phones = spec["phones"]
    tries = int(spec["naive_tries"])
    try:
        for action in spec["actions"]:
            for _ in range(tries):
                try:
                    index = action["phone"]
                    if index not in devices:
                        devices[index] = await Device.connect(
                            phones[index]["serial"],
                            key_path=spec["key"],
                            connect_timeout_s=1.0,
                            command_timeout_s=spec["command_timeout_s"],
                        )
                    await SmsDispatcher(devices[index]).send(action["to"], action["body"])
                except BridgeError as exc:
                    _emit(event="retry", action_id=action["action_id"], error=type(exc).__name__)
                    await asyncio.sleep(0.2)
                    continue
                break
            _emit(event="done", action_id=action["action_id"])
    finally:
        for device in devices.values():
            await device.close()
    return 0


async def _reconcile_child(spec: Mapping[str, Any]) -> int:
    """Reconcile passes over every phone in a loop until the deadline."""
    from starebrain_actions.core.exceptions import PhoneError
    from starebrain_actions.ledger.store import Ledger
    from starebrain_actions.orchestration.reconciler import reconcile_device
    from starebrain_actions.phone.android import AndroidPhone

    deadline = float(spec["deadline"])
    connected: dict[int, Any] = {}
    async with Ledger.open(spec["db"]) as ledger:
        try:
            while time.time() < deadline:
                for index, phone_spec in enumerate(spec["phones"]):
                    try:
                        if index not in connected:
                            connected[index] = await AndroidPhone.connect(
                                phone_spec["serial"],
                                key_path=spec["key"],
                                connect_timeout_s=1.0,
                                command_timeout_s=spec["command_timeout_s"],
                                read_as_system=phone_spec["read_as_system"],
                            )
                            await _bound(ledger, connected[index])
                        report = await reconcile_device(
                            ledger,
                            connected[index],
                            void_after=timedelta(seconds=spec["void_after_s"]),
                        )
                    except PhoneError as exc:
                        if _REPLACED in str(exc) and index in connected:
                            await connected.pop(index).close()
                        continue
                    except Exception as exc:
                        _emit(event="error", action_id=None, error=f"{type(exc).__name__}: {exc}")
                        continue
                    if report.error and _REPLACED in report.error:
                        await connected.pop(index).close()
                    _emit(
                        event="pass",
                        device=phone_spec["serial"],
                        changes=len(report.changes),
                        duplicates=report.duplicates_recorded,
                        reachable=report.reachable,
                    )
                await asyncio.sleep(spec["reconcile_every_s"])
        finally:
            for phone in connected.values():
                await phone.close()
    return 0


async def _queue_child(spec: Mapping[str, Any]) -> int:
    """Worker mode: queue the actions for the pool one after another, as an agent would
    (``send --queue``); an id already queued is kept as it is."""
    from starebrain_actions.core.model import SmsIntent
    from starebrain_actions.ledger.store import Ledger

    policy = _policy(spec)
    deadline = float(spec["deadline"])
    async with Ledger.open(spec["db"]) as ledger:
        for action in spec["actions"]:
            if time.time() >= deadline:
                return _UNSETTLED
            intent = SmsIntent(recipient=action["to"], body=action["body"])
            queued = await ledger.enqueue(action["action_id"], intent, policy, pool=spec["pool"])
            _emit(event="queued", action_id=action["action_id"], created=queued.created)
            await asyncio.sleep(spec["queue_every_s"])
    return 0


def child_main(argv: Sequence[str]) -> int:
    """``python -m tests.chaos.harness agent|naive|reconcile|queue SPEC.json``."""
    from starebrain_actions._logging import configure_logging

    mode, path = argv
    configure_logging(level=logging.WARNING, json=True)
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    runner = {
        "agent": _agent_child,
        "naive": _naive_child,
        "reconcile": _reconcile_child,
        "queue": _queue_child,
    }[mode]
    return asyncio.run(runner(spec))


def iter_details(report: ChaosReport, limit: int = 20) -> Iterator[str]:
    """The report's explanations, a few per metric."""
    for name, lines in report.details.items():
        yield f"{name}:"
        for line in list(lines)[:limit]:
            yield f"  {line}"
        if len(lines) > limit:
            yield f"  ... {len(lines) - limit} more"


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
