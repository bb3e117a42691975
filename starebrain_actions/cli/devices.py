"""``starebrain devices``: every phone the ledger or the user names, whether it answers, its
identity and the ledger's name for it with the addresses it was reached at, its Android
release, its default SMS app, which attempt holds its lease, which worker holds it (with its
heartbeat's age, and what it is doing), the path a send with ``--send-path auto`` would take,
and ``doctor``'s checks of it in a line. A phone a worker holds is listed even before its
first attempt.

Each phone is asked in one connection and two round trips after the handshake (the handle's
facts: uid, region, release, build, ``service check isms``; then ``getprop`` and the SMS role
holder, read exactly as the send script's ``role`` check reads it:
``android_bridge._role.ROLE_HOLDER_READ``), all phones at once, each within its own
timeout. The ``auto`` path is chosen as a send chooses it (``phone.android.choose_send_path``),
from the ledger's framework attempts on the phone (``Ledger.framework_attempts``), and shown
with how the framework path stands there (proven, doubted since when by which action,
restored at when by what: ``phone.send_path.FrameworkStanding``). ``doctor``'s checks
(``android_bridge._doctor.examine``) take one more round trip in the same connection, with a
budget of their own. A phone that does not answer is a row saying why, not a failure of the
command.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import click

from starebrain_actions.cli.options import (
    DEVICE_ENV,
    Seconds,
    device_option,
    json_option,
    key_option,
)
from starebrain_actions.core.model import LEASE_RELEASING_REVIEWS, ActionRecord
from starebrain_actions.ledger.phones import (
    FrameworkAttempts,
    FrameworkCodes,
    PhoneInfo,
    phone_for,
)

if TYPE_CHECKING:
    from android_bridge import Device
    from starebrain_actions.ledger.queue import PhoneWorker
    from starebrain_actions.phone.send_path import FrameworkStanding

#: Review reasons with which an unresolved attempt no longer holds its device's lease (the
#: ledger's ``attempts_device_lease`` index).
_LEASE_RELEASED: Final = LEASE_RELEASING_REVIEWS


@attrs.frozen(kw_only=True)
class Lease:
    """The unresolved attempt that holds a phone (no other action may send through it)."""

    #: the attempt's action
    action_id: str
    #: the attempt
    dispatch_id: str
    #: its number within its action
    attempt: int
    #: when it was dispatched
    since: datetime


@attrs.frozen(kw_only=True)
class WorkerHold:
    """The worker holding a phone (``Ledger.phone_workers``), as ``devices`` reports it."""

    #: the worker's name (``host:pid``)
    worker: str
    #: the host it runs on and its process id there
    host: str
    pid: int
    #: the pool it serves
    pool: str
    #: the address it reaches the phone at
    address: str
    #: since when it holds the phone
    claimed_at: datetime
    #: its latest heartbeat
    heartbeat_at: datetime
    #: seconds since then
    heartbeat_age: float
    #: its heartbeat is older than the queue's ``STALE_AFTER``: another worker may take the
    #: phone and its claims over
    stale: bool
    #: what it was doing at its latest heartbeat
    doing: str


def worker_holds(workers: Sequence[PhoneWorker], now: datetime) -> dict[str, WorkerHold]:
    """Phone key -> the worker holding it, from ``Ledger.phone_workers``' rows at ``now``."""
    return {
        held.device: WorkerHold(
            worker=held.worker,
            host=held.host,
            pid=held.pid,
            pool=held.pool,
            address=held.address,
            claimed_at=held.claimed_at,
            heartbeat_at=held.heartbeat_at,
            heartbeat_age=max(0.0, round((now - held.heartbeat_at).total_seconds(), 3)),
            stale=held.stale(now),
            doing=held.doing,
        )
        for held in workers
    }


def worker_text(hold: WorkerHold | None, now: datetime) -> str:
    """``devices``' ``worker`` cell: ``host:pid [pool] beat 3s ago: idle`` (``STALE (beat
    45s ago)`` once the heartbeat stopped), ``-`` for none."""
    from starebrain_actions.render.values import heartbeat_text

    if hold is None:
        return "-"
    beat = heartbeat_text(hold.heartbeat_at, now, stale=hold.stale)
    return f"{hold.worker} [{hold.pool}] {beat}" + (f": {hold.doing}" if hold.doing else "")


@attrs.frozen(kw_only=True)
class CheckVerdict:
    """One of ``starebrain doctor``'s checks, as ``devices`` reports it."""

    #: the check's name, as ``doctor`` prints it (``screen``, ``sms-role``…)
    name: str
    #: ``ok``, ``warn`` or ``fail``
    verdict: str


@attrs.frozen(kw_only=True)
class AttemptRef:
    """An attempt that proves or doubts the framework path, and when it came to it."""

    #: its action
    action_id: str
    #: the attempt
    dispatch_id: str
    #: when it came to prove or doubt (its confirmation, its review, the ruling); None: not
    #: known
    at: datetime | None = None
    #: the person whose ruling made it so (None: a read of the phone did)
    ruled_by: str | None = None
    #: the review it waits in, if any (``UNVERIFIED``…)
    review_reason: str | None = None


@attrs.frozen(kw_only=True)
class FrameworkReport:
    """Where the framework path stands for ``auto`` on a phone
    (``phone.send_path.FrameworkStanding``)."""

    #: ``proven``, ``restored``, ``doubted``, ``unproven`` or ``shut``
    state: str
    #: the attempt that decides (None: none does: the jar, or nothing yet)
    decided_by: AttemptRef | None = None
    #: with ``restored``, the doubt the proof answered; with ``doubted``, the doubt
    doubt: AttemptRef | None = None


def framework_report(standing: FrameworkStanding) -> FrameworkReport:
    """The standing as ``devices`` reports it."""

    def ref(record: ActionRecord | None, at: datetime | None) -> AttemptRef | None:
        if record is None:
            return None
        return AttemptRef(
            action_id=record.action_id,
            dispatch_id=record.dispatch_id,
            at=at,
            ruled_by=record.resolved_by,
            review_reason=record.review_reason.value if record.review_reason else None,
        )

    return FrameworkReport(
        state=standing.state,
        decided_by=ref(standing.decided_by, standing.decided_at),
        doubt=ref(standing.doubt, standing.doubt_at),
    )


def auto_path_text(report: DeviceReport) -> str:
    """``devices``' ``auto path`` cell: the path and how the framework path stands on the
    phone (``ui: doubted since T by ACTION``, ``framework: restored at T by a ruling on
    ACTION``, ``framework: proven by ACTION``, ``ui: unproven``); the path alone where the
    ledger's record did not come into it (the framework is not open on the phone, no
    ledger). ``--json`` has the whole reason (``auto_send_path_why``)."""
    path = report.auto_send_path or "-"
    standing = report.framework
    if standing is None:
        return path
    decided = standing.decided_by
    if decided is None:
        return f"{path}: {standing.state}"
    by = f"a ruling on {decided.action_id}" if decided.ruled_by else decided.action_id
    if standing.state == "proven":
        return f"{path}: proven by {by}"
    at = "" if decided.at is None else f" {'since' if standing.state == 'doubted' else 'at'}"
    at += "" if decided.at is None else f" {_when(decided.at)}"
    return f"{path}: {standing.state}{at} by {by}"


def _when(value: datetime | None) -> str:
    from starebrain_actions.render.values import when

    return when(value)


@attrs.frozen(kw_only=True)
class DeviceReport:
    """One row of ``starebrain devices``."""

    #: the device name (``host:port`` or ``usb:SERIAL``)
    device: str
    #: named with ``--device`` or ``$STAREBRAIN_DEVICE``
    named: bool
    #: named in the ledger's attempts
    in_ledger: bool
    #: it connected, authenticated and answered the shell
    answers: bool
    #: why it did not answer (None when it did)
    error: str | None = None
    #: ``ro.build.version.release``, e.g. "14"
    android_release: str | None = None
    #: ``ro.build.version.sdk``, e.g. 34
    sdk: int | None = None
    #: the holder of the SMS role (the default SMS app), None when none is set or not read
    sms_app: str | None = None
    #: how the role was read: "cmd role" (``cmd role get-role-holders``) or "dumpsys role"
    #: (user 0's holder parsed from ``dumpsys role``); None when neither answered
    sms_app_source: str | None = None
    #: what the role read printed when it is not one package (several, or unreadable)
    sms_app_note: str | None = None
    #: the shell's uid on the phone (2000 shell, 0 root)
    shell_uid: int | None = None
    #: the ledger's unresolved attempt holding this phone, if any
    lease: Lease | None = None
    #: the worker holding this phone (``starebrain worker``), if any
    worker: WorkerHold | None = None
    #: ``ro.build.fingerprint`` (None when not read)
    build: str | None = None
    #: the path a send with ``--send-path auto`` would take now: "framework" or "ui" (None
    #: when the phone did not answer)
    auto_send_path: str | None = None
    #: why (``starebrain_actions.phone.send_path``)
    auto_send_path_why: str | None = None
    #: where the framework path stands on this phone's build, when ``auto``'s choice came to
    #: the ledger's record (None: it did not: the framework is not open on the phone, the
    #: body, no ledger)
    framework: FrameworkReport | None = None
    #: the phone's own identity as it answered (``android_id:<hex>``; None: not read)
    identity: str | None = None
    #: the phone's name in the ledger (what its attempts say), None when the ledger has not
    #: met it; one phone has one name whatever address reaches it
    phone: str | None = None
    #: every address the ledger has reached this phone at, latest first
    aliases: tuple[str, ...] = ()
    #: something to know about the phone at this address (another phone than the ledger met
    #: there before)
    note: str | None = None
    #: ``doctor``'s checks in a line: ``ok``, ``N warn`` or ``FAIL: name, …``; ``? why`` when
    #: they could not run; None when the phone did not answer
    doctor: str | None = None
    #: each of ``doctor``'s checks on the phone with its verdict, in ``doctor``'s order
    checks: tuple[CheckVerdict, ...] = ()


def lease_holders(in_flight: Sequence[ActionRecord]) -> dict[str, Lease]:
    """Device -> the unresolved attempt holding its lease (UNVERIFIED and RCS_SUSPECTED
    attempts are unresolved but have released it)."""
    holders: dict[str, Lease] = {}
    for record in in_flight:
        if record.review_reason in _LEASE_RELEASED:
            continue
        holders.setdefault(
            record.device,
            Lease(
                action_id=record.action_id,
                dispatch_id=record.dispatch_id,
                attempt=record.attempt,
                since=record.dispatched_at,
            ),
        )
    return holders


def role_fields(output: str) -> dict[str, str | None]:
    """``sms_app``, ``sms_app_source`` and ``sms_app_note`` from the role read's output
    (``android_bridge._role.ROLE_REPORT``): the package, or None when no app holds the role
    (no note) or the read gave no single package (the note says why)."""
    from android_bridge._role import parse_role_read

    role = parse_role_read(output.strip("\n"))
    note = None if role.package is not None or role.no_holder else role.problem()[:200]
    return {"sms_app": role.package, "sms_app_source": role.source, "sms_app_note": note}


async def probe(
    device: str,
    *,
    key_path: Path | None,
    timeout_s: float,
    records: dict[str, FrameworkAttempts] | None,
    phones: Sequence[PhoneInfo] = (),
    codes: Mapping[str, FrameworkCodes] | None = None,
) -> tuple[bool, dict[str, Any]]:
    """Connect to ``device`` and read its release, its SMS role holder, its identity and the
    path a send with ``--send-path auto`` would take (``records``: the ledger's framework
    attempts on each phone that came to an end, by its key (``Ledger.framework_attempts``);
    None without a ledger; ``phones``: the phones the
    ledger knows, to name the one that answers; ``codes``: the framework codes the ledger
    keeps, by build: a build with none is shown as not read yet, since the first send reads
    its jar and ``devices`` writes nothing).

    Returns (answered, fields of :class:`DeviceReport`); a failure is (False, {"error": …}).
    """
    from android_bridge import BridgeError, Device
    from android_bridge._role import ROLE_HOLDER_READ, ROLE_REPORT
    from starebrain_actions.phone.android import choose_send_path
    from starebrain_actions.phone.send_path import kept_proof

    stood: list[FrameworkStanding] = []
    proof = kept_proof(records or {}, codes or {}, stood)

    async with contextlib.AsyncExitStack() as stack:
        try:
            async with asyncio.timeout(timeout_s * 4):
                handle = await Device.connect(
                    device,
                    key_path=key_path,
                    connect_timeout_s=timeout_s,
                    command_timeout_s=timeout_s,
                )
                await stack.enter_async_context(handle)
                facts = await handle.facts()
                release, role = await handle.run(
                    [
                        "getprop ro.build.version.release",
                        f"{ROLE_HOLDER_READ}; {ROLE_REPORT}",
                    ]
                )
                known = phone_for(device, facts.identity, phones)
                # the choice a send makes (the same probe, the same proof)
                path, why = await choose_send_path(
                    handle,
                    proof if records is not None else None,
                    known.key if known is not None else device,
                )
        except TimeoutError:
            return False, {"error": f"{device}: no answer within {timeout_s * 4:g} s"}
        except (BridgeError, ValueError, OSError) as exc:
            message = str(exc) or type(exc).__name__
            return False, {"error": message if device in message else f"{device}: {message}"}
        # doctor's checks, in the same connection, with a budget of their own: a phone too
        # slow for them still answers, with a `?`
        checks = await doctor_checks(handle, timeout_s)
    here = next((phone for phone in phones if device in phone.addresses), None)
    moved = None
    if here is not None and (known is None or known.key != here.key) and here.identity:
        moved = (
            f"another phone than the ledger met here before ({here.key}): its evidence is"
            " kept apart"
        )
    return True, {
        "identity": facts.identity,
        "phone": known.key if known is not None else None,
        "aliases": known.addresses if known is not None else (),
        "note": moved,
        "android_release": release.output.strip() or None,
        "sdk": facts.sdk,
        **role_fields(role.output),
        "shell_uid": facts.uid,
        "build": facts.build or None,
        "auto_send_path": path,
        "auto_send_path_why": why,
        "framework": framework_report(stood[-1]) if stood else None,
        **checks,
    }


async def doctor_checks(handle: Device, timeout_s: float) -> dict[str, Any]:
    """``doctor``'s checks on an open ``handle`` (one more round trip, within ``timeout_s``
    and twice that in all): the ``doctor`` line and ``checks`` of :class:`DeviceReport`."""
    from android_bridge import BridgeError
    from android_bridge._doctor import examine

    try:
        async with asyncio.timeout(timeout_s * 2):
            found = await examine(handle)
    except TimeoutError:
        return {"doctor": f"? no answer within {timeout_s * 2:g} s"}
    except BridgeError as exc:
        return {"doctor": f"? {str(exc)[:80] or type(exc).__name__}"}
    verdicts = tuple(CheckVerdict(name=check.name, verdict=check.verdict) for check in found)
    return {"doctor": doctor_line(verdicts), "checks": verdicts}


def doctor_line(verdicts: Sequence[CheckVerdict]) -> str:
    """``ok``; ``N warn``; or ``FAIL: `` and the failing checks' names."""
    failed = [check.name for check in verdicts if check.verdict == "fail"]
    if failed:
        return "FAIL: " + ", ".join(failed)
    warned = sum(check.verdict == "warn" for check in verdicts)
    return f"{warned} warn" if warned else "ok"


async def gather_reports(
    ledger_path: Path | str | None,
    named: Sequence[str],
    *,
    key_path: Path | None,
    timeout_s: float,
    now: datetime | None = None,
) -> list[DeviceReport]:
    """The phones named, in the order given, or with none named every phone in the ledger
    (those its attempts name and those a worker holds, each at the address it was reached at
    last), sorted; probed concurrently, each with the lease and the worker holding it at
    ``now`` (default: the time of the ledger's read)."""
    from starebrain_actions.ledger.store import Ledger
    from starebrain_actions.phone.send_path import PROOF_WINDOW

    known: dict[str, str] = {}  # address to ask -> the ledger's name of the phone there
    holders: dict[str, Lease] = {}
    workers: dict[str, WorkerHold] = {}
    records: dict[str, FrameworkAttempts] | None = None
    phones: list[PhoneInfo] = []
    codes: dict[str, FrameworkCodes] = {}
    if ledger_path is not None:
        from starebrain_actions.ledger.postgres import NoLedger

        try:
            async with Ledger.open(ledger_path, read_only=True) as ledger:
                phones = await ledger.phones()
                held = {worker.device: worker for worker in await ledger.phone_workers()}
                workers = worker_holds(list(held.values()), now or ledger.now())
                for key in sorted({*await ledger.devices(), *held}):
                    address = await ledger.phone_address(key)
                    if address == key and key in held:  # no address kept: the worker's
                        address = held[key].address
                    known.setdefault(address, key)
                holders = lease_holders(await ledger.in_flight())
                keys = {phone.key for phone in phones} | set(known.values())
                keys |= {await ledger.phone_key_for(name) for name in named}
                records = {
                    key: await ledger.framework_attempts(key, PROOF_WINDOW) for key in sorted(keys)
                }
                codes = await ledger.all_framework_codes()
        except NoLedger:
            pass  # an empty PostgreSQL schema: no ledger yet, as a missing file on SQLite
    # the phones named, and only those (a phone named is not a reason to reach every other
    # phone the ledger knows); else every phone the ledger knows
    order = list(dict.fromkeys(named)) if named else sorted(known)
    probes = await asyncio.gather(
        *(
            probe(
                device,
                key_path=key_path,
                timeout_s=timeout_s,
                records=records,
                phones=phones,
                codes=codes,
            )
            for device in order
        )
    )
    reports = []
    for device, (answered, fields) in zip(order, probes, strict=True):
        name: str | None = fields.get("phone") or known.get(device)
        if not answered and name is not None:
            info = next((phone for phone in phones if phone.key == name), None)
            fields = {**fields, "phone": name, "aliases": info.addresses if info else ()}
        reports.append(
            DeviceReport(
                device=device,
                named=device in named,
                in_ledger=name is not None,
                answers=answered,
                lease=holders.get(name) if name is not None else None,
                worker=workers.get(name) if name is not None else None,
                **fields,
            )
        )
    return reports


def exit_code(reports: Sequence[DeviceReport]) -> int:
    """0 when at least one phone answered and every phone named explicitly answered; else 1
    (no phone known, none answered, or a named one did not)."""
    if not any(report.answers for report in reports):
        return 1
    return 0 if all(report.answers for report in reports if report.named) else 1


def report_data(reports: Sequence[DeviceReport]) -> dict[str, Any]:
    """The ``--json`` document."""
    from starebrain_actions.core.convert import converter

    return {
        "devices": [converter.unstructure(report) for report in reports],
        "answered": sum(report.answers for report in reports),
        "exit_code": exit_code(reports),
    }


def render(reports: Sequence[DeviceReport], now: datetime | None = None) -> None:
    """The text table: one row per phone (heartbeats' ages at ``now``, default: now)."""
    from starebrain_actions.render import output as _render
    from starebrain_actions.render import values as _render_values

    at = now or datetime.now(UTC)
    rows = []
    for report in reports:
        android = "-"
        if report.android_release or report.sdk is not None:
            android = f"{report.android_release or '?'} (API {report.sdk or '?'})"
        sms_app = report.sms_app or (
            f"? {report.sms_app_note}"
            if report.sms_app_note
            else ("none" if report.answers else "-")
        )
        lease = "free"
        if report.lease is not None:
            lease = (
                f"{report.lease.action_id} attempt {report.lease.attempt}"
                f" ({report.lease.dispatch_id}) since {_render_values.when(report.lease.since)}"
            )
        phone = report.phone or "-"
        others = [alias for alias in report.aliases if alias != report.device]
        if others:
            phone += f" (also {', '.join(others)})"
        rows.append(
            [
                report.device,
                phone,
                report.identity or "-",
                "yes" if report.answers else "NO",
                android,
                sms_app,
                report.sms_app_source or "-",
                auto_path_text(report),
                report.doctor or "-",
                lease,
                worker_text(report.worker, at),
                report.error or report.note or "-",
            ]
        )
    _render.Output().table(
        [
            "device",
            "phone",
            "identity",
            "answers",
            "android",
            "sms app",
            "sms app from",
            "auto path",
            "doctor",
            "lease",
            "worker",
            "error",
        ],
        rows,
        wrap=("auto path", "worker", "error"),
    )


@click.command("devices")
@device_option(
    "devices",
    multiple=True,
    help="A phone to ask, as HOST:PORT (ADB over TCP) or usb:SERIAL; repeatable: only these"
    f" are asked. Also read from ${DEVICE_ENV} (several separated by spaces). [default: every"
    " phone in the ledger]",
)
@key_option
@click.option(
    "--timeout",
    "timeout_s",
    type=Seconds(0.1, 60),
    default=3.0,
    show_default=True,
    help="Seconds each phone gets for each step (the handshake, each round trip), four"
    " times that in all; one that takes longer is reported as not answering.",
)
@json_option
@click.pass_context
def devices_command(
    ctx: click.Context,
    devices: tuple[str, ...],
    key_path: Path | None,
    timeout_s: float,
    as_json: bool,
) -> None:
    """List the phones: those --device gives, or without it each one the ledger's attempts
    name or a worker holds; whether it answers, its Android release, its default SMS app,
    the path a send with --send-path auto would take and how the framework path stands there
    (`framework: proven by ID`, `ui: doubted since T by ID`, `framework: restored at T by
    ID`), the attempt holding it, the worker holding it (its heartbeat's age, `STALE` once
    it stopped, and what it is doing) and `doctor`'s checks of it in a line (`ok`, `N
    warn`, `FAIL: name`).

    Never sends and never writes. Exit status: 0 when at least one phone answered and every
    phone given with --device (or $STAREBRAIN_DEVICE) did; 1 otherwise (no phone known, none
    answered, or one you named did not).
    """
    from starebrain_actions.cli.context import CliError, run, settings_of
    from starebrain_actions.cli.db import describe, is_url
    from starebrain_actions.render import json_output as _render_json

    settings = settings_of(ctx)
    # a URL is always opened (its schema may hold no ledger yet: the ledger says so)
    known = is_url(settings.db) or Path(settings.db).exists()
    ledger_path = settings.db if known else None
    now = datetime.now(UTC)
    reports = run(
        gather_reports(ledger_path, devices, key_path=key_path, timeout_s=timeout_s, now=now)
    )
    if not reports:
        where = (
            "the ledger names none" if ledger_path else f"no ledger at {describe(settings.db)} yet"
        )
        raise CliError(
            f"no phone known ({where}): give one with --device HOST:PORT (or usb:SERIAL) or"
            f" set {DEVICE_ENV}"
        )
    if as_json:
        _render_json.emit_json(report_data(reports))
    else:
        render(reports, now)
    ctx.exit(exit_code(reports))
