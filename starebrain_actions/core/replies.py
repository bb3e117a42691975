"""Replies and opt-outs, pure: what a reply's text says (an opt-out or opt-in keyword), and
which action a reply answers.

A reply *is* a keyword when its whole text, trimmed (Unicode whitespace) and case-folded,
equals one: ``" Stop "`` opts out, ``"STOP please"`` does not (CTIA's keywords, and the
carriers' own handling, match the whole message). The keywords are the policy file's
(``[replies]``, ``core.policy``), by default CTIA's: STOP, STOPALL, UNSUBSCRIBE, CANCEL,
END, QUIT opt out; START, UNSTOP, YES opt back in.

A reply is linked to the latest action to its number sent through the phone it came to
before the reply's ``date`` (:func:`link_reply`). No I/O here: the ledger reads the
candidates (``ledger.replies``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final

import attrs

#: CTIA's opt-out keywords (the policy file's ``replies.opt_out`` by default).
DEFAULT_OPT_OUT: Final = ("STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT")
#: CTIA's opt-in keywords (the policy file's ``replies.opt_in`` by default).
DEFAULT_OPT_IN: Final = ("START", "UNSTOP", "YES")


class OptOutChange(enum.StrEnum):
    """A change of a number's opt-out, as stored (``opt_out_changes.change``)."""

    OPT_OUT = "opt_out"
    OPT_IN = "opt_in"


def keyword_form(text: str) -> str:
    """The form a reply and a keyword are compared in: trimmed, case-folded."""
    return text.strip().casefold()


@attrs.frozen(kw_only=True)
class ReplyKeywords:
    """The keywords a reply's whole text is compared with."""

    #: texts that opt a number out (compared trimmed and case-folded)
    opt_out: tuple[str, ...] = DEFAULT_OPT_OUT
    #: texts that opt it back in
    opt_in: tuple[str, ...] = DEFAULT_OPT_IN

    def classify(self, body: str | None) -> OptOutChange | None:
        """What a reply's text asks for: an opt-out, an opt-in, or nothing (None)."""
        if body is None:
            return None
        text = keyword_form(body)
        if not text:
            return None
        if text in {keyword_form(k) for k in self.opt_out}:
            return OptOutChange.OPT_OUT
        if text in {keyword_form(k) for k in self.opt_in}:
            return OptOutChange.OPT_IN
        return None

    @property
    def is_default(self) -> bool:
        """Whether these are CTIA's keywords (a policy document leaves them out then)."""
        return (self.opt_out, self.opt_in) == (DEFAULT_OPT_OUT, DEFAULT_OPT_IN)


DEFAULT_KEYWORDS: Final = ReplyKeywords()


@attrs.frozen(kw_only=True)
class SentBefore:
    """An attempt that may have carried an action's text to the number (delivery CONFIRMED
    or PENDING: not FAILED), as :func:`link_reply` weighs it."""

    action_id: str
    #: when it went out, on the phone's clock (ms): the ``date`` of the row that confirmed
    #: it, else the phone's clock read just before its send, else its dispatch time
    sent_ms: int
    #: when its action was created (the tie-break after the time)
    created_at: datetime
    attempt: int


def link_reply(reply_ms: int, candidates: Iterable[SentBefore]) -> str | None:
    """The action a reply dated ``reply_ms`` (phone clock) answers: of the attempts sent to
    its number through its phone at or before that time, the latest; on equal times the
    later-created action, then the higher action id (so the choice never depends on the
    order the ledger lists them in). None: nothing was sent to it before the reply."""
    best: tuple[int, datetime, str, int] | None = None
    for item in candidates:
        if item.sent_ms > reply_ms:
            continue
        key = (item.sent_ms, item.created_at, item.action_id, item.attempt)
        if best is None or key > best:
            best = key
    return None if best is None else best[2]


@attrs.frozen(kw_only=True)
class Reply:
    """A reply as the ledger keeps it (``body`` and ``number`` unredacted: see ``data``)."""

    #: its id in the ledger (1, 2, ...)
    reply_id: int
    #: the phone (its key) it came to
    device: str
    #: the SMS provider's ``_id`` of its row
    provider_object_id: int
    #: the row's ``date`` (phone clock, ms): with the ``_id``, which message it is
    row_date_ms: int
    #: the sender, normalised as recipients are (E.164, or a short code's digits)
    number: str
    body: str
    #: the row's ``date`` as a time (the phone's clock)
    received_at: datetime
    #: when the ledger recorded it
    recorded_at: datetime
    #: the action it answers (None: nothing was sent to the number before it)
    action_id: str | None
    #: "opt_out" or "opt_in" when its text was a keyword
    keyword: str | None

    def data(self) -> dict[str, Any]:
        """JSON-able, unredacted: its ``number`` and ``body`` keys are the ones output
        redacts (``render.sanitize.redact_data``)."""
        from starebrain_actions.core.convert import format_time

        return {
            "reply_id": self.reply_id,
            "action_id": self.action_id,
            "device": self.device,
            "number": self.number,
            "body": self.body,
            "received_at": format_time(self.received_at),
            "recorded_at": format_time(self.recorded_at),
            "provider_object_id": self.provider_object_id,
            "keyword": self.keyword,
        }


@attrs.frozen(kw_only=True)
class OptOut:
    """One change of a number's opt-out, kept for good."""

    change_id: int
    number: str
    #: "opt_out" or "opt_in"
    change: str
    at: datetime
    #: "reply" (a keyword the number sent), or the person or client that changed it
    actor: str
    reason: str
    #: the reply that asked for it (None: a person's change)
    reply_id: int | None

    @property
    def opted_out(self) -> bool:
        return self.change == OptOutChange.OPT_OUT.value

    def data(self) -> dict[str, Any]:
        """JSON-able, unredacted (its ``number`` key is one output redacts)."""
        from starebrain_actions.core.convert import format_time

        return {
            "change_id": self.change_id,
            "number": self.number,
            "change": self.change,
            "at": format_time(self.at),
            "actor": self.actor,
            "reason": self.reason,
            "reply_id": self.reply_id,
        }


def check_keywords(value: Any, key: str) -> tuple[str, ...]:
    """A policy file's keyword list: non-empty texts without surrounding whitespace.

    Raises:
        ValueError: anything else (the caller names the key).
    """
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'{key} must be a list of words such as "STOP"')
    words: Sequence[str] = value
    for word in words:
        if not keyword_form(word) or word != word.strip():
            raise ValueError(f"{key}: {word!r} is not a keyword (empty, or spaces around it)")
    return tuple(words)
