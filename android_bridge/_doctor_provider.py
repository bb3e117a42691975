"""Doctor's checks of what the SMS provider shows the shell: the view, ``SqlQueryChecker``,
the subscriptions, and the delivery evidence of sent rows.

Each is a pure function of what five ``content query`` commands printed (:func:`commands`,
run in the doctor's probe round trip, through ``su 1000`` when reads go that way). They read
rows, never write one, and each answer is judged so that the product stays safe whichever
way a phone differs from AOSP: a wider view than AOSP's, a provider without the checker, or
a subscription filter the shell cannot see, each changes what a verdict says, never a proof.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

from android_bridge._check import Check, checker
from android_bridge._device import Device, DeviceFacts
from android_bridge._parser import content_query, parse_int_rows, parse_text_column
from android_bridge._reader import SHELL_VISIBLE_TYPES
from android_bridge._shell import StepOutput
from android_bridge.exceptions import ReadFailed

__all__ = [
    "FRAMEWORK_SUB_ID",
    "SENT_ROWS",
    "commands",
    "delivery_status",
    "query_checker",
    "sms_view",
    "subscriptions",
]

#: The subscription the framework path sends on (``FrameworkDispatcher``'s ``sub_id``).
FRAMEWORK_SUB_ID: Final = 1
#: The package the framework writes as ``creator`` of a row sent through ``service call``.
SHELL_PACKAGE: Final = "com.android.shell"
#: How many of the latest sent rows the delivery-evidence check reads.
SENT_ROWS: Final = 20
#: How many of the latest rows (any visible type) the subscription check reads.
LATEST_ROWS: Final = 50
#: ``sdk`` from which the provider filters rows by subscription (Android 14).
SUB_ID_FILTER_SDK: Final = 34
#: The sort order a ``SqlQueryChecker`` refuses (a ``SELECT`` token) and SQLite runs.
CHECKER_PROBE_SORT: Final = "_id DESC LIMIT (SELECT 1)"

_SMS: Final = "content://sms"
_HIDDEN_COLUMNS: Final = ("_id", "type")
_SENT_COLUMNS: Final = ("_id", "status", "sub_id")
_LATEST_COLUMNS: Final = ("_id", "sub_id")
_VIEW_SOURCE: Final = (
    "TelephonyProvider ProviderUtil.isAccessRestricted and MmsSmsDatabaseHelper (view"
    " sms_restricted: type=1 OR type=2), SmsProvider.query, android-10.0.0_r30 to 15.0.0_r1"
)
_CHECKER_SOURCE: Final = (
    "TelephonyProvider SqlQueryChecker.checkQueryParametersForSubqueries, called by"
    " SmsProvider.query for restricted callers (a rejection returns no cursor), from"
    " android-10.0.0_r30 to 15.0.0_r1 (absent before 10.0.0_r30)"
)
_SUB_SOURCE: Final = (
    "TelephonyProvider ProviderUtil.getSelectionBySubIds (sub_id IN (the user's"
    " subscriptions, -1), every caller), SmsProvider.query, from android-14.0.0_r1; absent up"
    " to android-13.0.0_r30; frameworks/opt/telephony SmsController (a send on a subscription"
    " the phone lacks); SubscriptionManagerService.dump (dumpsys isub), Android 14 SDK"
    " sources (android-34)"
)
_STATUS_SOURCE: Final = (
    "frameworks/base Telephony.Sms (status -1 none, 0 complete, 32 pending, 64 failed;"
    " addMessageToUri writes 32 only when a delivery report is asked, read in untagged copies);"
    " TelephonyProvider ProviderUtil.shouldSetCreator (creator: the writing package),"
    " android-14.0.0_r1; service call cannot pass the delivery PendingIntent"
)


def commands(prefix: str = "") -> list[str]:
    """The five queries, in the order the checks read them: a row of a type the restricted
    view hides; the latest sent rows' integers, then their ``creator``; the latest rows'
    ``sub_id``; and the latest ``_id`` asked with a sort that ``SqlQueryChecker`` refuses."""
    sent_where, sent_sort = "type=2", f"_id DESC LIMIT {SENT_ROWS}"
    hidden = ",".join(str(t) for t in SHELL_VISIBLE_TYPES)
    return [
        content_query(
            _SMS, _HIDDEN_COLUMNS, f"type NOT IN ({hidden})", "_id DESC LIMIT 1", prefix=prefix
        ),
        content_query(_SMS, _SENT_COLUMNS, sent_where, sent_sort, prefix=prefix),
        content_query(_SMS, ("_id", "creator"), sent_where, sent_sort, prefix=prefix)
        + " 2>/dev/null",
        latest_rows_query(prefix),
        content_query(_SMS, ("_id",), "_id > 0", CHECKER_PROBE_SORT, prefix=prefix),
    ]


def latest_rows_query(prefix: str = "") -> str:
    """The latest rows' ``_id`` and ``sub_id``, newest first."""
    return content_query(
        _SMS, _LATEST_COLUMNS, "_id > 0", f"_id DESC LIMIT {LATEST_ROWS}", prefix=prefix
    )


def _rows(step: StepOutput, columns: Sequence[str]) -> list[tuple[int | None, ...]] | str:
    """The integer rows, or why they could not be read."""
    try:
        return parse_int_rows(step.output, columns)
    except ReadFailed as exc:
        return f"{exc} ({step.output.strip()[:60]!r})"


def sms_view(facts: DeviceFacts, hidden: StepOutput, sent: StepOutput) -> Check:
    """Which types the view shows: AOSP's restricted view shows 1 and 2 only; ``su 1000``
    (the system uid) sees every type."""
    hidden_rows, sent_rows = _rows(hidden, _HIDDEN_COLUMNS), _rows(sent, _SENT_COLUMNS)

    check = checker(name="sms-view", title="which SMS types the shell sees", source=_VIEW_SOURCE)

    if isinstance(hidden_rows, str) or isinstance(sent_rows, str):
        problem = hidden_rows if isinstance(hidden_rows, str) else sent_rows
        return check("warn", f"unreadable: {problem}", "see reading content://sms")
    other = f"a type {hidden_rows[0][1]} row (_id {hidden_rows[0][0]})" if hidden_rows else None
    sent_seen = f"{len(sent_rows)} sent row(s)" if sent_rows else "no sent row"
    if facts.full_view:
        return check(
            "ok",
            f"through su 1000: {sent_seen}; {other or 'no row of types 3 to 6'} visible",
            "the system uid's view is not restricted: outbox, failed and queued rows are"
            " read too, and an attempt's fate can be proven from them",
        )
    if other is not None:
        return check(
            "warn",
            f"{other} is visible to the shell, beside {sent_seen}",
            "this phone shows the shell more than AOSP's restricted view (types 1 and 2);"
            " the product still reads types 1 and 2 only and takes no missing row as proof",
        )
    if not sent_rows:
        return check(
            "warn",
            "types 1 and 2 only, and no sent row: a phone that never sent, or a view that"
            " hides sent rows too",
            "the first send tells: its attempt stays pending (never failed) until its row is found",
        )
    return check(
        "ok",
        f"types 1 and 2 only ({sent_seen} visible), as AOSP's restricted view",
        "a send is confirmed by its type-2 row; outbox, failed and queued rows are hidden, so"
        " a missing row proves nothing and absence is proven by the fence",
    )


def query_checker(facts: DeviceFacts, latest: StepOutput, probe: StepOutput) -> Check:
    """Whether ``SqlQueryChecker`` guards the shell's queries: the latest row asked with a
    ``SELECT`` token in the sort order, against the same row asked plainly (``latest``, the
    sms-read check's query)."""
    reference = _rows(latest, ("_id", "date"))
    probed = _rows(probe, ("_id",))
    refused = isinstance(probed, str) or not probed

    check = checker(
        name="query-checker", title="SqlQueryChecker on the shell's queries", source=_CHECKER_SOURCE
    )

    said = "answered" if not refused else "refused"
    evidence = f"a sort with SELECT: {said}"
    if isinstance(reference, str) or not reference:
        return check(
            "warn",
            f"{evidence}; no row to compare with",
            "cannot tell: the product's queries carry no SELECT, `;` or open quote, so they"
            " pass either way, and a refused read proves nothing",
        )
    if facts.full_view:
        if refused:
            return check(
                "warn",
                evidence + " through su 1000",
                "this provider checks the system uid's queries too, unlike AOSP; the"
                " product's queries pass either way",
            )
        return check(
            "ok",
            evidence + " through su 1000",
            "not applied to the system uid, as in AOSP; the product's queries pass either way",
        )
    if refused:
        return check(
            "ok",
            evidence + ", while the same row asked plainly came back: the checker is there",
            "as modelled: the product's queries pass it, and a refused one prints `No result"
            " found.`, which a read never takes for an empty box (it needs its anchor row)",
        )
    return check(
        "warn",
        evidence + ": no checker (a security patch older than 10 r30, or an OEM provider)",
        "this provider is not the one modelled; the product's queries and proofs are the same"
        " with or without it",
    )


#: The phone's own subscriptions, from 14 (``dumpsys isub``: frameworks/opt/telephony
#: ``SubscriptionManagerService.dump``, read in the Android 14 SDK's sources (android-34),
#: not at an AOSP tag): ``Logical SIM slot N: subId=S`` per active SIM, and
#: ``defaultSmsSubId=S``. Before 14 ``isub`` is ``SubscriptionController``, whose dump was not
#: read: its output is not used.
ISUB_SDK: Final = 34
ISUB_COMMAND: Final = (
    "dumpsys isub 2>&1 | grep -E"
    " '^ *(Logical SIM slot [0-9]+: subId=-?[0-9]+|defaultSmsSubId=-?[0-9]+)$'"
)
_ISUB_SLOT = re.compile(r"^ *Logical SIM slot (\d+): subId=(-?\d+)$", re.MULTILINE)
_ISUB_SMS = re.compile(r"^ *defaultSmsSubId=(-?\d+)$", re.MULTILINE)


def isub_subscriptions(output: str) -> tuple[dict[int, int], int | None]:
    """``dumpsys isub``'s slot to subscription mapping, and its default SMS subscription."""
    slots = {int(slot): int(sub) for slot, sub in _ISUB_SLOT.findall(output)}
    default = _ISUB_SMS.search(output)
    return slots, int(default.group(1)) if default is not None else None


def subscriptions(facts: DeviceFacts, latest: StepOutput, isub: StepOutput | None = None) -> Check:
    """The phone's own subscriptions (``dumpsys isub``, 14+), those the latest rows carry, and
    the provider's subscription filter (14+). Before 14 the rows' ``sub_id`` stand for the
    phone's list."""
    rows = _rows(latest, _LATEST_COLUMNS)
    filtered = facts.sdk is not None and facts.sdk >= SUB_ID_FILTER_SDK
    view = (
        "the provider shows rows of this phone's subscriptions and of -1 only, to every reader"
        " (su 1000 too): a row sent from a SIM since removed is hidden"
        if filtered
        else "no subscription filter before Android 14: rows of every SIM ever used are seen"
    )

    check = checker(
        name="subscriptions",
        title="the subscriptions and the provider's filter",
        source=_SUB_SOURCE,
    )

    if isinstance(rows, str):
        return check("warn", f"unreadable: {rows}", view)
    counts = Counter(row[1] for row in rows)
    seen = ", ".join(
        f"{'NULL' if sub_id is None else sub_id} ({count})"
        for sub_id, count in sorted(counts.items(), key=lambda item: (item[0] is None, item[0]))
    )
    evidence = (
        f"filter {'on' if filtered else 'off'} (sdk {facts.sdk}); sub_id of the latest"
        f" {len(rows)} row(s): {seen or 'none'}"
    )
    sims = {sub_id for sub_id in counts if sub_id is not None and sub_id > 0}
    slots: dict[int, int] = {}
    if filtered and isub is not None:
        slots, default_sms = isub_subscriptions(isub.output)
        mapping = ", ".join(f"slot {slot}: {sub}" for slot, sub in sorted(slots.items()))
        evidence += (
            f"; the phone's SIMs (dumpsys isub): {mapping or 'none printed'}, default SMS"
            f" {'?' if default_sms is None else default_sms}"
        )
    active = {sub for sub in slots.values() if sub > 0}
    if active and FRAMEWORK_SUB_ID not in active:
        return check(
            "warn",
            evidence,
            f"the framework path sends on subscription {FRAMEWORK_SUB_ID}, which this phone"
            " does not have: the framework sends nothing and writes no row, and the attempt"
            " can only go to review; send through the app (`--send-path ui`)."
            f" {view[0].upper()}{view[1:]}",
        )
    if not active and sims and FRAMEWORK_SUB_ID not in sims:
        return check(
            "warn",
            evidence,
            f"the framework path sends on subscription {FRAMEWORK_SUB_ID}, which no recent"
            " row carries: on a phone without it the framework sends nothing and writes no"
            " row (some releases fall back to the default SIM), and the attempt can only go to"
            f" review; send through the app (`--send-path ui`). {view[0].upper()}{view[1:]}",
        )
    return check("ok", evidence, f"{view[0].upper()}{view[1:]}; absence alone proves nothing")


def delivery_status(sent: StepOutput, creators: StepOutput) -> Check:
    """What delivery evidence the latest sent rows carry (``status``), per writing path
    (``creator``: ``com.android.shell`` for the framework path, the app's package else)."""
    rows = _rows(sent, _SENT_COLUMNS)

    check = checker(
        name="delivery-status", title="delivery evidence in sent rows", source=_STATUS_SOURCE
    )

    if isinstance(rows, str):
        return check("warn", f"unreadable: {rows}", "see reading content://sms")
    if not rows:
        return check(
            "ok",
            "no sent row visible yet",
            "unknown until a send: a send is confirmed by its type-2 row, never by `status`",
        )
    ids = [row[0] for row in rows if row[0] is not None]
    try:
        by_id = parse_text_column(creators.output, "creator", ids)
    except ReadFailed as exc:
        return check(
            "warn",
            f"{len(rows)} sent row(s); their creator could not be read ({exc})",
            "the rows changed while read, or the provider refused: run doctor again",
        )
    paths: dict[str, Counter[int | None]] = {}
    for row_id, status, _sub_id in rows:
        creator = by_id.get(row_id, "NULL") if row_id is not None else "NULL"
        paths.setdefault(creator, Counter())[status] += 1
    parts = []
    writes = []
    for creator, statuses in sorted(paths.items()):
        path = "framework" if creator == SHELL_PACKAGE else "app"
        shown = ", ".join(
            f"{'NULL' if status is None else status} ({count})"
            for status, count in sorted(statuses.items(), key=lambda i: (i[0] is None, i[0]))
        )
        parts.append(f"{creator} ({path}): status {shown}")
        if any(status in (0, 32, 64) for status in statuses):
            writes.append(f"{creator} writes it (delivery reports on)")
    return check(
        "ok",
        "; ".join(parts),
        (
            ", ".join(writes)
            if writes
            else "no path writes `status` (-1: no delivery report"
            " asked; the framework path never asks one)"
        )
        + "; a send is confirmed by its type-2 row, never by `status`",
    )


async def framework_subscription(device: Device) -> tuple[bool | None, str]:
    """Is subscription :data:`FRAMEWORK_SUB_ID`, the one the framework path sends on, this
    phone's own? One round trip. True or False with the evidence, None when nothing tells.

    From 14 the phone's own list answers (``dumpsys isub``: :data:`ISUB_COMMAND`). Before 14
    no list is read (``SubscriptionController``'s dump was not read), so the rows stand for
    it, an inference: the newest row that names a subscription (received or sent lately,
    through the SIM in use) must name 1.

    Raises:
        BridgeError: transport failures (the read changes nothing on the phone).
    """
    facts = await device.facts()
    if facts.sdk is not None and facts.sdk >= ISUB_SDK:
        (step,) = await device.run([ISUB_COMMAND])
        slots, _default = isub_subscriptions(step.output)
        active = sorted({sub for sub in slots.values() if sub > 0})
        if not active:
            return None, "dumpsys isub printed no SIM of this phone"
        shown = ", ".join(str(sub) for sub in active)
        return FRAMEWORK_SUB_ID in active, f"the phone's SIMs (dumpsys isub): {shown}"
    (step,) = await device.run([latest_rows_query(device.content_prefix)])
    rows = _rows(step, _LATEST_COLUMNS)
    if isinstance(rows, str):
        return None, f"the latest rows could not be read: {rows}"
    newest = next((row[1] for row in rows if row[1] is not None and row[1] > 0), None)
    if newest is None:
        return None, "no recent row names a subscription (no list is read before Android 14)"
    return newest == FRAMEWORK_SUB_ID, f"the newest row's subscription: {newest}"
