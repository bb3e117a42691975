"""The policy gate's rules (``core.policy``): the file, each rule's verdict, their order, and quiet
hours in the recipient's local time across time-zone boundaries (``phonenumbers``' data)."""

from __future__ import annotations

from datetime import UTC, datetime, time
from pathlib import Path

import pytest

from starebrain_actions import InvalidInput, SmsIntent
from starebrain_actions.core.policy import (
    GateCounts,
    Policy,
    Verdict,
    judge,
    load_policy,
    quiet_until,
)

NOON_UTC = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
US = "+12025550100"  # Washington, America/New_York
AU = "+61412345678"  # an Australian mobile: eight zones, Perth to Lord Howe
FULL = """
[recipients]
allow = ["+1202555*", "+61*"]
deny  = ["+1202555019*"]
approve = "new"

[limits]
per_recipient_per_day = 5
per_hour = 60
quiet_hours = "21:00-08:00"
max_segments = 3
"""


def intent(to: str = US, body: str = "Your code is 4821") -> SmsIntent:
    return SmsIntent(recipient=to, body=body)


def test_a_policy_file_reads_every_key_and_its_digest(tmp_path: Path) -> None:
    """The example of the issue reads as written; the digest is the file's sha256."""
    path = tmp_path / "policy.toml"
    path.write_text(FULL, encoding="utf-8")
    policy = load_policy(path)
    assert (("+1202555*", "+61*"), ("+1202555019*",), "new") == (
        policy.allow,
        policy.deny,
        policy.approve,
    )
    assert (5, 60, (time(21), time(8)), 3) == (
        policy.per_recipient_per_day,
        policy.per_hour,
        policy.quiet_hours,
        policy.max_segments,
    )
    assert policy.digest.startswith("sha256:") and str(path) == policy.source


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[recipients]\nallow = '+1*'\n", "recipients.allow"),
        ("[recipients]\ndeny = ['19*']\n", "recipients.deny"),
        ("[recipients]\napprove = 'sometimes'\n", "recipients.approve"),
        ("[limits]\nper_hour = 0\n", "per_hour"),
        ("[limits]\nquiet_hours = '21-08'\n", "quiet_hours"),
        ("[limits]\nquiet_hours = '25:00-08:00'\n", "quiet_hours"),
        ("[limits]\nper_minute = 3\n", "limits.per_minute"),
        ("[senders]\n", "senders"),
        ("not toml = = 3\n", "not valid TOML"),
    ],
)
def test_a_bad_policy_file_names_the_key(tmp_path: Path, text: str, names: str) -> None:
    """A value a rule refuses, or an unknown key, is refused naming it."""
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput, match=names):
        load_policy(path)


def test_a_missing_policy_file_is_refused(tmp_path: Path) -> None:
    """A path that names no file is a clear error, never the permissive default."""
    with pytest.raises(InvalidInput, match="cannot read the policy file"):
        load_policy(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("rules", "to", "body", "counts", "verdict", "rule"),
    [
        ({}, US, "hi", GateCounts(), Verdict.ALLOW, ""),
        ({"deny": ("+1202*",)}, US, "hi", GateCounts(), Verdict.DENY, "recipients.deny"),
        ({"allow": ("+44*",)}, US, "hi", GateCounts(), Verdict.DENY, "recipients.allow"),
        ({"allow": ("+1202555*",)}, US, "hi", GateCounts(), Verdict.ALLOW, ""),
        ({"max_segments": 1}, US, "x" * 161, GateCounts(), Verdict.DENY, "limits.max_segments"),
        ({"approve": "always"}, US, "hi", GateCounts(), Verdict.HOLD, "recipients.approve"),
        (
            {"approve": "always"},
            US,
            "hi",
            GateCounts(approved=True),
            Verdict.ALLOW,
            "",
        ),
        ({"approve": "new"}, US, "hi", GateCounts(), Verdict.HOLD, "recipients.approve"),
        (
            {"approve": "new"},
            US,
            "hi",
            GateCounts(known_recipient=True),
            Verdict.ALLOW,
            "",
        ),
        ({}, US, "hi", GateCounts(denied=True), Verdict.DENY, "approval"),
        ({"per_hour": 2}, US, "hi", GateCounts(last_hour=2), Verdict.OVER_LIMIT, "limits.per_hour"),
        ({"per_hour": 2}, US, "hi", GateCounts(last_hour=1), Verdict.ALLOW, ""),
        (
            {"per_recipient_per_day": 1},
            US,
            "hi",
            GateCounts(to_recipient_today=1),
            Verdict.OVER_LIMIT,
            "limits.per_recipient_per_day",
        ),
        (
            {"quiet_hours": (time(6), time(8))},
            US,
            "hi",
            GateCounts(),
            Verdict.WAIT,
            "limits.quiet_hours",
        ),
        ({"quiet_hours": (time(9), time(10))}, US, "hi", GateCounts(), Verdict.ALLOW, ""),
    ],
)
def test_each_rule_decides(
    rules: dict[str, object],
    to: str,
    body: str,
    counts: GateCounts,
    verdict: Verdict,
    rule: str,
) -> None:
    """Each rule alone gives its verdict, named (noon UTC is 07:00 in Washington)."""
    rules_policy = Policy(digest="sha256:x", **rules)  # type: ignore[arg-type]
    decision = judge(rules_policy, intent(to, body), counts, now=NOON_UTC)
    assert (verdict, rule, "sha256:x") == (decision.verdict, decision.rule, decision.digest)


def test_a_denial_wins_over_every_other_rule() -> None:
    """A denied recipient is DENY even when approved, in quiet hours and over a limit."""
    strict = Policy(
        deny=(US,),
        approve="always",
        quiet_hours=(time(0), time(23, 59)),
        per_hour=1,
    )
    counts = GateCounts(approved=True, last_hour=5)
    assert Verdict.DENY == judge(strict, intent(), counts, now=NOON_UTC).verdict


def test_quiet_hours_follow_the_recipients_clock_across_midnight() -> None:
    """21:00-08:00 at the recipient: 07:00 in Washington (noon UTC) is quiet until 08:00
    local (13:00 UTC); 02:00 UTC is 21:00 there the evening before: quiet until the next
    morning's 08:00, across the date boundary; 14:00 UTC (09:00 there) is not quiet."""
    hours = (time(21), time(8))
    assert datetime(2026, 12, 1, 13, 0, tzinfo=UTC) == quiet_until(US, hours, NOON_UTC)
    evening = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    assert datetime(2026, 12, 2, 13, 0, tzinfo=UTC) == quiet_until(US, hours, evening)
    assert None is quiet_until(US, hours, datetime(2026, 12, 1, 14, 0, tzinfo=UTC))


def test_a_number_in_several_zones_is_quiet_while_any_of_them_is() -> None:
    """An Australian mobile may be anywhere from Lord Howe (UTC+11 in December) to the Cocos
    Islands (UTC+6:30), by ``phonenumbers``' data: at 11:00 UTC it is 22:00 in Lord Howe,
    quiet; the zones' quiet spans from 21:00 chain westwards, so the number is quiet until
    08:00 on the Cocos Islands (01:30 UTC), the strictest reading. At 02:00 UTC it is
    08:30 there and later everywhere else: not quiet."""
    at = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    assert datetime(2026, 12, 2, 1, 30, tzinfo=UTC) == quiet_until(AU, (time(21), time(8)), at)
    assert None is quiet_until(AU, (time(21), time(8)), datetime(2026, 12, 2, 2, 0, tzinfo=UTC))


def test_a_wait_says_until_when() -> None:
    """A WAIT verdict carries the end of the quiet hours and says it."""
    decision = judge(Policy(quiet_hours=(time(21), time(8))), intent(), GateCounts(), now=NOON_UTC)
    assert (Verdict.WAIT, datetime(2026, 12, 1, 13, 0, tzinfo=UTC)) == (
        decision.verdict,
        decision.until,
    )
    assert "21:00-08:00" in decision.detail
