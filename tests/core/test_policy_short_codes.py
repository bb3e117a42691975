"""Short codes in the policy gate (``core.policy``): short-code patterns in ``allow`` and
``deny``, ``recipients.short_codes``, each command's default, and the kept policy document."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starebrain_actions import InvalidInput
from starebrain_actions.cli.mcp_command import _gates
from starebrain_actions.cli.options import policy_for, typed_command_gate
from starebrain_actions.core.model import SmsIntent
from starebrain_actions.core.policy import (
    GateCounts,
    GateDecision,
    Policy,
    Verdict,
    judge,
    load_policy,
    parse_policy,
    policy_document,
    policy_pin,
)
from starebrain_actions.mcp.auth import McpClient

NOON_UTC = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
US = "+12025550100"
SHORT_CODE_DETAIL = (
    "the recipient is a short code (premium-rate and carrier services use them) and no list"
    ' names it; short_codes = "deny"'
)


def verdict_of(policy: Policy, to: str, counts: GateCounts | None = None) -> GateDecision:
    return judge(policy, SmsIntent(recipient=to, body="x"), counts or GateCounts(), now=NOON_UTC)


def parsed(**recipients: object) -> Policy:
    return parse_policy({"recipients": recipients}, digest="sha256:x")


def write(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("pattern", ["611", "87654", "12345678", "876*", "12345678*"])
def test_short_code_patterns_are_accepted_in_both_lists(pattern: str) -> None:
    """3 to 8 digits with no +, then an optional *, read as written in allow and deny."""
    policy = parsed(allow=[pattern], deny=[pattern])
    assert ((pattern,), (pattern,)) == (policy.allow, policy.deny)


@pytest.mark.parametrize(
    "pattern", ["61", "123456789", "+611x", "61*", "abc", "6*11", "*611", "611**", "٦١١", " 611"]
)
@pytest.mark.parametrize("key", ["allow", "deny"])
def test_a_bad_pattern_is_refused_naming_both_forms(key: str, pattern: str) -> None:
    """Too few or too many digits, fewer than 3 before the *, letters or non-ASCII digits:
    refused, naming the key and both pattern forms."""
    with pytest.raises(InvalidInput) as raised:
        parsed(**{key: [pattern]})
    message = str(raised.value)
    assert f"recipients.{key}" in message
    assert "E.164 pattern" in message and "short-code pattern" in message
    assert "at least 3 digits before the *" in message


@pytest.mark.parametrize("value", ["maybe", True, 1, ["deny"]])
def test_short_codes_must_be_allow_or_deny(value: object) -> None:
    """Any other value of recipients.short_codes is refused naming the key."""
    with pytest.raises(InvalidInput, match=r"recipients\.short_codes must be one of allow, deny"):
        parsed(short_codes=value)


def test_short_codes_is_read_from_a_file(tmp_path: Path) -> None:
    """``short_codes`` reads as written; a file without it says nothing (None)."""
    given_deny = load_policy(write(tmp_path, '[recipients]\nshort_codes = "deny"\n'))
    silent = load_policy(write(tmp_path, '[recipients]\ndeny = ["611"]\n', "other.toml"))
    assert ("deny", None) == (given_deny.short_codes, silent.short_codes)


def test_a_denied_short_code_is_denied() -> None:
    """A short code that a deny pattern names, exactly or by prefix, is DENY by
    recipients.deny, whatever short_codes says."""
    for pattern in ("87654", "876*"):
        for short_codes in (None, "allow", "deny"):
            decision = verdict_of(Policy(deny=(pattern,), short_codes=short_codes), "87654")
            assert (Verdict.DENY, "recipients.deny", f"the recipient matches {pattern}") == (
                decision.verdict,
                decision.rule,
                decision.detail,
            )


def test_an_allow_list_names_short_codes() -> None:
    """An allow list with a short code lets it through, even with short_codes = "deny", and
    still refuses the short codes and numbers it does not name."""
    policy = Policy(allow=("611", "+1202555*"), short_codes="deny")
    assert Verdict.ALLOW == verdict_of(policy, "611").verdict
    assert Verdict.ALLOW == verdict_of(policy, US).verdict
    assert (Verdict.DENY, "recipients.allow") == (
        verdict_of(policy, "612").verdict,
        verdict_of(policy, "612").rule,
    )


def test_an_allowed_short_code_still_meets_the_other_rules() -> None:
    """Passing the short-code rule by name is no approval: approve = "always" still holds it."""
    policy = Policy(allow=("611",), short_codes="deny", approve="always")
    assert (Verdict.HOLD, "recipients.approve") == (
        verdict_of(policy, "611").verdict,
        verdict_of(policy, "611").rule,
    )


def test_short_codes_deny_refuses_an_unnamed_short_code() -> None:
    """short_codes = "deny": a short code no list names is DENY by recipients.short_codes, with
    the sentence that says why; a number is not concerned."""
    decision = verdict_of(Policy(short_codes="deny", deny=("+1900*",)), "87654")
    assert (Verdict.DENY, "recipients.short_codes", SHORT_CODE_DETAIL) == (
        decision.verdict,
        decision.rule,
        decision.detail,
    )
    assert Verdict.ALLOW == verdict_of(Policy(short_codes="deny"), US).verdict


def test_short_codes_deny_wins_over_an_approval() -> None:
    """A person's approval of the action does not lift the short-code rule (it is a DENY)."""
    decision = verdict_of(Policy(short_codes="deny"), "611", GateCounts(approved=True))
    assert (Verdict.DENY, "recipients.short_codes") == (decision.verdict, decision.rule)


@pytest.mark.parametrize("short_codes", ["allow", None])
def test_short_codes_allow_or_unsaid_sends_a_short_code(short_codes: str | None) -> None:
    """short_codes = "allow", or no word on it (a Python caller's own Policy), sends it."""
    assert Verdict.ALLOW == verdict_of(Policy(short_codes=short_codes), "611").verdict


def test_the_short_code_rule_comes_before_max_segments() -> None:
    """Both apply: the short-code rule decides, as it is tried first."""
    policy = Policy(short_codes="deny", max_segments=1)
    decision = judge(policy, SmsIntent(recipient="611", body="x" * 161), GateCounts(), now=NOON_UTC)
    assert "recipients.short_codes" == decision.rule


def test_an_e164_pattern_never_names_a_short_code() -> None:
    """allow ["+1*"] does not allow 611 (DENY by the allow list); deny ["+*"]-like prefixes
    and an E.164 pattern with the same digits do not deny it."""
    denied = verdict_of(Policy(allow=("+1*",)), "611")
    assert (Verdict.DENY, "recipients.allow") == (denied.verdict, denied.rule)
    assert Verdict.ALLOW == verdict_of(Policy(deny=("+611", "+6*", "+611*")), "611").verdict


def test_a_short_code_pattern_never_names_a_number() -> None:
    """deny ["1202*"] does not deny +12025550100; allow ["1202*"] does not allow it."""
    assert Verdict.ALLOW == verdict_of(Policy(deny=("1202*", "120*")), US).verdict
    assert Verdict.DENY == verdict_of(Policy(allow=("1202*",)), US).verdict


#: 3 to 8 ASCII digits, as a short code is normalised (a leading 00 reads as +, no short code)
SHORT_CODES = st.text(alphabet="0123456789", min_size=3, max_size=8).filter(
    lambda digits: not digits.startswith("00")
)
E164_PATTERNS = st.builds(
    lambda digits, star: "+" + digits + star,
    st.text(alphabet="0123456789", min_size=1, max_size=15),
    st.sampled_from(["", "*"]),
)


@settings(max_examples=200, deadline=None)
@given(short_code=SHORT_CODES, e164=E164_PATTERNS, cut=st.integers(min_value=3, max_value=8))
def test_any_short_code_matches_its_own_patterns_and_no_e164_pattern(
    short_code: str, e164: str, cut: int
) -> None:
    """A short code is named by its own digits and by any prefix of 3 or more of them with *,
    both valid patterns; an E.164 pattern never names it, in allow or in deny."""
    prefix = short_code[: min(cut, len(short_code))] + "*"
    policy = parsed(allow=[short_code, prefix], short_codes="deny")
    assert (
        Verdict.ALLOW
        == verdict_of(Policy(allow=(short_code,), short_codes="deny"), short_code).verdict
    )
    assert (
        Verdict.ALLOW == verdict_of(Policy(allow=(prefix,), short_codes="deny"), short_code).verdict
    )
    assert (short_code, prefix) == policy.allow
    assert Verdict.ALLOW == verdict_of(Policy(deny=(e164,)), short_code).verdict
    assert "recipients.allow" == verdict_of(Policy(allow=(e164,)), short_code).rule


def test_the_command_line_default_allows_short_codes(tmp_path: Path) -> None:
    """A file without short_codes, as the command line reads it: "allow" (and approve
    "never"); a file that says "deny" keeps it."""
    silent = write(tmp_path, '[recipients]\ndeny = ["+1900*"]\n')
    gate = typed_command_gate(silent)
    assert gate is not None
    assert ("allow", "never") == (gate.short_codes, gate.approve)
    assert Verdict.ALLOW == verdict_of(gate, "611").verdict
    strict = write(tmp_path, '[recipients]\nshort_codes = "deny"\n', "strict.toml")
    told = policy_for(strict, approve="never", short_codes="allow")
    assert told is not None and "deny" == told.short_codes


def test_the_mcp_server_default_denies_short_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP server's gate with no policy file, with a file that says nothing, and a
    client's file that says nothing: short codes denied, approval "new"; a client's file
    that says "allow" keeps it."""
    monkeypatch.setenv("STAREBRAIN_ADB_KEY", str(tmp_path / "config" / "adbkey"))
    silent = write(tmp_path, '[recipients]\ndeny = ["+1900*"]\n')
    loose = write(tmp_path, '[recipients]\nshort_codes = "allow"\n', "loose.toml")
    http = SimpleNamespace(
        clients=SimpleNamespace(
            clients=(
                McpClient(name="alice", token="a" * 32, policy=silent),
                McpClient(name="bob", token="b" * 32, policy=loose),
                McpClient(name="carol", token="c" * 32),
            )
        )
    )
    fallback, _ = _gates(None, None)
    assert ("deny", "new") == (fallback.short_codes, fallback.approve)
    gate, client_gates = _gates(silent, http)
    assert ("deny", "new") == (gate.short_codes, gate.approve)
    assert ["alice", "bob"] == sorted(client_gates)
    alice, bob = client_gates["alice"], client_gates["bob"]
    assert alice is not None and bob is not None
    assert ("deny", "allow") == (alice.short_codes, bob.short_codes)
    decision = verdict_of(gate, "611", GateCounts(approved=True))
    assert (Verdict.DENY, "recipients.short_codes") == (decision.verdict, decision.rule)


@pytest.mark.parametrize(
    "policy",
    [
        Policy(),
        Policy(short_codes="deny"),
        Policy(short_codes="allow", allow=("611", "+1202555*"), approve="new"),
        Policy(short_codes="deny", deny=("876*",), approve="always", max_segments=2),
    ],
)
def test_the_kept_document_judges_short_codes_as_the_policy_does(policy: Policy) -> None:
    """``policy_document`` always writes short_codes (None as "allow"), and reading it back
    judges every recipient as the policy does, with the same pin."""
    document = policy_document(policy)
    assert (policy.short_codes or "allow") == document["recipients"]["short_codes"]
    again = parse_policy(document, digest=policy.digest)
    assert policy_pin(policy) == policy_pin(again)
    for to in ("611", "87654", "87699", US, "+19005550100"):
        for counts in (GateCounts(), GateCounts(known_recipient=True)):
            expected = verdict_of(policy, to, counts)
            assert (expected.verdict, expected.rule) == (
                verdict_of(again, to, counts).verdict,
                verdict_of(again, to, counts).rule,
            )


def test_a_document_from_before_short_codes_still_reads() -> None:
    """A kept document without the key reads as before: no word (None), short codes sent."""
    old = {"recipients": {"deny": [], "approve": "never"}, "limits": {}}
    policy = parse_policy(old, digest="sha256:old")
    assert None is policy.short_codes
    assert Verdict.ALLOW == verdict_of(policy, "611").verdict


def test_with_defaults_fills_only_what_the_file_leaves_unsaid() -> None:
    """``with_defaults`` keeps the file's own words and fills the rest; a default that is not
    a mode is refused."""
    assert ("new", "deny") == (
        Policy().with_defaults(approve="new", short_codes="deny").approve,
        Policy().with_defaults(approve="new", short_codes="deny").short_codes,
    )
    own = Policy(approve="always", short_codes="allow").with_defaults(
        approve="new", short_codes="deny"
    )
    assert ("always", "allow") == (own.approve, own.short_codes)
    with pytest.raises(InvalidInput, match="short_codes"):
        Policy().with_defaults(approve="new", short_codes="sometimes")
