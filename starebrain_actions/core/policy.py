"""The policy gate's rules: a TOML file read into a frozen ``Policy``, and ``judge``, the pure
verdict on one action before anything is sent.

A policy file (``policy.toml`` in the config dir, or ``--policy FILE``)::

    [recipients]
    allow = ["+1202555*", "611"]   # E.164 patterns ("+" and digits) or short codes (3 to 8
                                   # digits, no "+"); ``*`` ends a prefix; absent: any number
    deny  = ["+1900*", "876*"]
    approve = "new"          # "never" | "new" | "always"
    short_codes = "deny"     # "allow" | "deny": a short code that no list names

    [limits]
    per_recipient_per_day = 5
    per_hour = 60
    quiet_hours = "21:00-08:00"   # in the recipient's local time, from the number
    max_segments = 3

    [replies]
    opt_out = ["STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"]   # the defaults
    opt_in = ["START", "UNSTOP", "YES"]                                     # (CTIA's)

The verdicts, in the order the rules are tried (the first that applies decides):
``DENY`` (a person's denial, then ``recipients.deny``, ``recipients.allow``,
``recipients.short_codes`` and ``max_segments``: nothing is ever sent for that action),
``HOLD`` (a person must approve it first), ``WAIT`` (quiet hours: it waits until they end),
``OVER_LIMIT`` (refused now; a later call may pass) and ``ALLOW``.

Patterns are judged against the recipient as the product normalises it (``SmsIntent``): E.164
(``+12025550143``) for a number, the bare digits (``611``) for a short code. A pattern with
``+`` names numbers only, one without names short codes only: ``"+1*"`` never matches
``611``, and ``"1900*"`` never matches ``+19005550100``. A short code that no allow or deny
pattern names is sent only when ``short_codes`` is "allow" (premium-rate and carrier
services use short codes); None (the file does not say) is read as "allow" here, and each
command fills in its own default (``Policy.with_defaults``). A number's local time is
read from ``phonenumbers``' time-zone data; a number in several zones is quiet while any of
them is (never kinder than the strictest reading). No I/O here: the ledger counts, the
caller reads the file (``load_policy``).
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from starebrain_actions.core.exceptions import InvalidInput
from starebrain_actions.core.model import SmsIntent
from starebrain_actions.core.replies import (
    DEFAULT_KEYWORDS,
    DEFAULT_OPT_IN,
    DEFAULT_OPT_OUT,
    ReplyKeywords,
    check_keywords,
    keyword_form,
)
from starebrain_actions.core.segments import count_segments

#: How a person takes part: "never" (the caller's word is the approval: the CLI's default),
#: "new" (the first SMS to a number: the MCP server's default), "always" (every SMS).
APPROVALS: Final = ("never", "new", "always")
#: What happens to a short code that no allow or deny pattern names: "allow" (sent, as the
#: command line's default: the person typing it names the recipient) or "deny" (the MCP
#: server's default: a model's call is no person's word).
SHORT_CODES: Final = ("allow", "deny")
#: A number's time zone when ``phonenumbers`` knows none.
UNKNOWN_ZONE: Final = "UTC"

#: E.164 patterns: "+", 1 to 15 ASCII digits, an optional "*" (any digits, or none)
_PATTERN = re.compile(r"\+[0-9]{1,15}\*?")
#: short-code patterns: 3 to 8 ASCII digits with no "+", an optional "*"
_SHORT_CODE_PATTERN = re.compile(r"[0-9]{3,8}\*?")
_QUIET = re.compile(r"(\d{2}):(\d{2})-(\d{2}):(\d{2})")


class Verdict(enum.StrEnum):
    """What the gate decided."""

    ALLOW = "ALLOW"
    DENY = "DENY"  #: never sent, whatever comes later
    HOLD = "HOLD"  #: waits for a person's approval
    WAIT = "WAIT"  #: quiet hours: waits until they end
    OVER_LIMIT = "OVER_LIMIT"  #: refused now (a count in the ledger); a later call may pass


@attrs.frozen(kw_only=True)
class Policy:
    """The rules of one policy file (or the built-in defaults: everything allowed)."""

    #: E.164 or short-code patterns a recipient must match (None: any valid number)
    allow: tuple[str, ...] | None = None
    #: E.164 or short-code patterns no recipient may match
    deny: tuple[str, ...] = ()
    #: "never", "new" or "always" (None: the file does not say; the command's default
    #: applies, see ``with_defaults``; "never" when none is given)
    approve: str | None = None
    #: "allow" or "deny": a short code that no allow or deny pattern names (None: the file
    #: does not say; the command's default applies, see ``with_defaults``; "allow" when none
    #: is given)
    short_codes: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(SHORT_CODES))
    )
    per_recipient_per_day: int | None = None
    per_hour: int | None = None
    #: (start, end) in the recipient's local time; end before start spans midnight
    quiet_hours: tuple[time, time] | None = None
    max_segments: int | None = None
    #: the replies whose whole text (trimmed, case-folded) opts a number out or back in
    #: (``[replies]``; CTIA's by default). A number opted out is refused by the gate with or
    #: without a policy (``ledger.gate.opted_out_refusal``): these only say which replies
    #: count.
    reply_keywords: ReplyKeywords = DEFAULT_KEYWORDS
    #: ``sha256:<hex>`` of the file's bytes ("default" for the built-in policy)
    digest: str = "default"
    #: where it was read from ("" for the built-in policy)
    source: str = ""

    def with_defaults(self, *, approve: str, short_codes: str) -> Policy:
        """The same rules, with ``approve`` and ``short_codes`` where the file says nothing.

        The command line's defaults are "never" and "allow" (the person typing the command
        names the recipient: their word is the approval); the MCP server's are "new" and
        "deny" (a model's call is no person's word, and short codes include premium-rate
        services).

        Raises:
            InvalidInput: a default that is not one of the modes.
        """
        return attrs.evolve(
            self,
            approve=(self.approve if self.approve is not None else _approval(approve, "approve")),
            short_codes=(
                self.short_codes
                if self.short_codes is not None
                else _short_codes(short_codes, "short_codes")
            ),
        )

    def with_default_approval(self, approve: str) -> Policy:
        """The same rules, with ``approve`` when the file says nothing (``short_codes`` as
        the file says); see ``with_defaults``."""
        if self.approve is not None:
            return self
        return attrs.evolve(self, approve=_approval(approve, "approve"))


@attrs.frozen(kw_only=True)
class GateCounts:
    """What the ledger knows that the rules need, counted by the caller."""

    #: other actions to this recipient with an attempt started in the last 24 hours
    to_recipient_today: int = 0
    #: other actions with an attempt started in the last hour
    last_hour: int = 0
    #: has an SMS to this number been sent before (a confirmed attempt of any action)?
    known_recipient: bool = False
    #: a person approved this action (``starebrain approve``)
    approved: bool = False
    #: a person denied this action (``starebrain deny``)
    denied: bool = False


@attrs.frozen(kw_only=True)
class GateDecision:
    """The gate's verdict on one action, with the rule that decided."""

    verdict: Verdict
    #: the rule, as the file names it ("recipients.deny", "limits.per_hour"...; "" for ALLOW)
    rule: str = ""
    #: in a sentence, for people and models
    detail: str = ""
    #: WAIT: when the quiet hours end (UTC)
    until: datetime | None = None
    #: the policy file's digest
    digest: str = "default"

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


def load_policy(path: str | Path) -> Policy:
    """Read a policy file.

    Raises:
        InvalidInput: unreadable, not TOML, an unknown key, or a value a rule refuses (the
            message names the key).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read the policy file {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
        parsed = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"policy file {path}: not valid TOML: {exc}") from exc
    return parse_policy(
        parsed, digest="sha256:" + hashlib.sha256(data).hexdigest(), source=str(path)
    )


def parse_policy(data: Mapping[str, Any], *, digest: str, source: str = "") -> Policy:
    """A ``Policy`` from parsed TOML (see the module docstring for the keys).

    Raises:
        InvalidInput: an unknown table or key, or a value a rule refuses.
    """
    _only(data, {"recipients", "limits", "replies"}, "")
    recipients = _table(data, "recipients")
    limits = _table(data, "limits")
    replies = _table(data, "replies")
    _only(replies, {"opt_out", "opt_in"}, "replies.")
    _only(recipients, {"allow", "deny", "approve", "short_codes"}, "recipients.")
    _only(limits, {"per_recipient_per_day", "per_hour", "quiet_hours", "max_segments"}, "limits.")
    allow = recipients.get("allow")
    return Policy(
        allow=_patterns(allow, "recipients.allow") if allow is not None else None,
        deny=_patterns(recipients.get("deny", []), "recipients.deny"),
        approve=(
            _approval(recipients["approve"], "recipients.approve")
            if "approve" in recipients
            else None
        ),
        short_codes=(
            _short_codes(recipients["short_codes"], "recipients.short_codes")
            if "short_codes" in recipients
            else None
        ),
        per_recipient_per_day=_count(limits.get("per_recipient_per_day"), "per_recipient_per_day"),
        per_hour=_count(limits.get("per_hour"), "per_hour"),
        quiet_hours=_quiet(limits.get("quiet_hours")),
        max_segments=_count(limits.get("max_segments"), "max_segments"),
        reply_keywords=_keywords(replies),
        digest=digest,
        source=source,
    )


def policy_document(policy: Policy) -> dict[str, Any]:
    """The rules of ``policy`` as the TOML file's tables (what ``parse_policy`` reads back to
    the same rules), with the approval mode and the short-code rule it runs with (None
    written as "never" and "allow", what ``judge`` reads it as): the form the ledger keeps
    of the policy that judged an action (``gate_policies``), so that every later path can
    judge it again by the same rules."""
    recipients: dict[str, Any] = {"deny": list(policy.deny)}
    if policy.allow is not None:
        recipients["allow"] = list(policy.allow)
    recipients["approve"] = policy.approve if policy.approve is not None else "never"
    recipients["short_codes"] = policy.short_codes if policy.short_codes is not None else "allow"
    limits: dict[str, Any] = {}
    for key in ("per_recipient_per_day", "per_hour", "max_segments"):
        value = getattr(policy, key)
        if value is not None:
            limits[key] = value
    if policy.quiet_hours is not None:
        start, end = policy.quiet_hours
        limits["quiet_hours"] = f"{start:%H:%M}-{end:%H:%M}"
    document: dict[str, Any] = {"recipients": recipients, "limits": limits}
    keywords = policy.reply_keywords
    if not keywords.is_default:  # left out when CTIA's: the pins of older policies hold
        document["replies"] = {"opt_out": list(keywords.opt_out), "opt_in": list(keywords.opt_in)}
    return document


def policy_pin(policy: Policy) -> str:
    """``sha256:<hex>`` of ``policy_document``'s canonical JSON: the name under which the
    ledger keeps these rules (two files with the same rules, comments aside, share it)."""
    text = json.dumps(policy_document(policy), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def judge(policy: Policy, intent: SmsIntent, counts: GateCounts, *, now: datetime) -> GateDecision:
    """The gate's verdict on sending ``intent`` now (pure: the caller counts)."""
    recipient = intent.recipient
    digest = policy.digest

    def decided(
        verdict: Verdict, rule: str, detail: str, until: datetime | None = None
    ) -> GateDecision:
        return GateDecision(verdict=verdict, rule=rule, detail=detail, until=until, digest=digest)

    if counts.denied:
        return decided(Verdict.DENY, "approval", "a person denied this action")
    for pattern in policy.deny:
        if _matches(recipient, pattern):
            return decided(Verdict.DENY, "recipients.deny", f"the recipient matches {pattern}")
    named = policy.allow is not None and any(_matches(recipient, p) for p in policy.allow)
    if policy.allow is not None and not named:
        return decided(Verdict.DENY, "recipients.allow", "the recipient matches no allowed pattern")
    if policy.short_codes == "deny" and not named and is_short_code(recipient):
        return decided(
            Verdict.DENY,
            "recipients.short_codes",
            "the recipient is a short code (premium-rate and carrier services use them) and"
            ' no list names it; short_codes = "deny"',
        )
    if policy.max_segments is not None:
        segments = count_segments(intent.body).segments
        if segments > policy.max_segments:
            return decided(
                Verdict.DENY,
                "limits.max_segments",
                f"the text is {segments} SMS segments, more than {policy.max_segments}",
            )
    if not counts.approved:
        if policy.approve == "always":
            return decided(
                Verdict.HOLD, "recipients.approve", "every SMS needs a person's approval"
            )
        if policy.approve == "new" and not counts.known_recipient:
            return decided(
                Verdict.HOLD,
                "recipients.approve",
                "the first SMS to this number needs a person's approval",
            )
    if policy.quiet_hours is not None:
        until = quiet_until(recipient, policy.quiet_hours, now)
        if until is not None:
            start, end = policy.quiet_hours
            return decided(
                Verdict.WAIT,
                "limits.quiet_hours",
                f"quiet hours ({start:%H:%M}-{end:%H:%M} at the recipient) until"
                f" {until.isoformat()}",
                until,
            )
    if policy.per_hour is not None and counts.last_hour >= policy.per_hour:
        return decided(
            Verdict.OVER_LIMIT,
            "limits.per_hour",
            f"{counts.last_hour} actions were sent in the last hour (limit {policy.per_hour})",
        )
    limit = policy.per_recipient_per_day
    if limit is not None and counts.to_recipient_today >= limit:
        return decided(
            Verdict.OVER_LIMIT,
            "limits.per_recipient_per_day",
            f"{counts.to_recipient_today} actions to this number in the last 24 hours"
            f" (limit {limit})",
        )
    return decided(Verdict.ALLOW, "", "")


def is_short_code(recipient: str) -> bool:
    """Is the recipient, as the product normalises it, a short code (ASCII digits, no
    ``+``)? A number's normalised form is E.164 and starts with ``+``."""
    return recipient.isascii() and recipient.isdigit()


def zones_of(recipient: str) -> tuple[ZoneInfo, ...]:
    """The time zones ``phonenumbers`` gives the number (UTC when it knows none)."""
    import phonenumbers
    from phonenumbers import timezone as number_zones

    try:
        names: Sequence[str] = number_zones.time_zones_for_number(phonenumbers.parse(recipient))
    except phonenumbers.NumberParseException:
        names = ()
    zones = []
    for name in names:
        try:
            zones.append(ZoneInfo(name))
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return tuple(zones) or (ZoneInfo(UNKNOWN_ZONE),)


def quiet_until(recipient: str, hours: tuple[time, time], now: datetime) -> datetime | None:
    """When the quiet hours end for the number (UTC), if they hold now in any of its time
    zones; None if none of its zones is quiet now. A number in several zones is quiet until
    none of them is (their quiet spans chained: one zone's end may fall in another's)."""
    zones = zones_of(recipient)
    until: datetime | None = None
    at = now
    for _ in range(len(zones) + 1):
        ends = [end for zone in zones if (end := _quiet_end(zone, hours, at)) is not None]
        if not ends or (until is not None and max(ends) <= until):
            break
        until = at = max(ends)
    return until


def _quiet_end(zone: ZoneInfo, hours: tuple[time, time], now: datetime) -> datetime | None:
    """The end (UTC) of the quiet span holding at ``now`` in ``zone``, or None."""
    start, end = hours
    local = now.astimezone(zone)
    at = local.time().replace(tzinfo=None)
    spans_midnight = end <= start
    quiet = (start <= at or at < end) if spans_midnight else (start <= at < end)
    if not quiet:
        return None
    day = local.date()
    if spans_midnight and at >= start:
        day = day + timedelta(days=1)  # quiet since this evening: until tomorrow's end
    return datetime.combine(day, end, tzinfo=zone).astimezone(UTC)


# --------------------------------------------------------------------------- parsing


def _matches(recipient: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(recipient, pattern)


def _only(data: Mapping[str, Any], known: set[str], prefix: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidInput(
            f"policy: unknown key {prefix}{unknown[0]} (known: {', '.join(sorted(known))})"
        )


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, Mapping):
        raise InvalidInput(f"policy: [{name}] must be a table")
    return table


def _patterns(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidInput(
            f'policy: {key} must be a list of patterns: E.164 such as "+1202555*", or short'
            ' codes such as "611"'
        )
    for item in value:
        if not (_PATTERN.fullmatch(item) or _SHORT_CODE_PATTERN.fullmatch(item)):
            raise InvalidInput(
                f"policy: {key}: {item!r} is neither an E.164 pattern (+ and 1 to 15 digits,"
                " then an optional *) nor a short-code pattern (3 to 8 digits with no +, then"
                " an optional *: at least 3 digits before the *)"
            )
    return tuple(value)


def _keywords(replies: Mapping[str, Any]) -> ReplyKeywords:
    try:
        opt_out = check_keywords(replies.get("opt_out", list(DEFAULT_OPT_OUT)), "replies.opt_out")
        opt_in = check_keywords(replies.get("opt_in", list(DEFAULT_OPT_IN)), "replies.opt_in")
    except ValueError as exc:
        raise InvalidInput(f"policy: {exc}") from exc
    both = {keyword_form(k) for k in opt_out} & {keyword_form(k) for k in opt_in}
    if both:
        raise InvalidInput(
            f"policy: replies.opt_out and replies.opt_in both name {sorted(both)[0]!r}"
        )
    return ReplyKeywords(opt_out=opt_out, opt_in=opt_in)


def _approval(value: Any, key: str) -> str:
    if value not in APPROVALS:
        raise InvalidInput(f"policy: {key} must be one of {', '.join(APPROVALS)}; got {value!r}")
    return str(value)


def _short_codes(value: Any, key: str) -> str:
    if value not in SHORT_CODES:
        raise InvalidInput(f"policy: {key} must be one of {', '.join(SHORT_CODES)}; got {value!r}")
    return str(value)


def _count(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"policy: limits.{key} must be a whole number >= 1; got {value!r}")
    return value


def _quiet(value: Any) -> tuple[time, time] | None:
    if value is None:
        return None
    match = _QUIET.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInput(
            f'policy: limits.quiet_hours must be "HH:MM-HH:MM" such as "21:00-08:00"; got {value!r}'
        )
    hours = [int(part) for part in match.groups()]
    if hours[0] > 23 or hours[2] > 23 or hours[1] > 59 or hours[3] > 59:
        raise InvalidInput(f"policy: limits.quiet_hours: {value!r} is not a time of day")
    start, end = time(hours[0], hours[1]), time(hours[2], hours[3])
    if start == end:
        raise InvalidInput("policy: limits.quiet_hours must not start and end at the same time")
    return start, end
